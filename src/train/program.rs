//! The compiled training step of one batch shape: forward, backward, clipping and AdamW, run as
//! one program per step.
//!
//! With FLOATER's `resolve_every = N > 1` there are two programs over the same parameters and
//! AdamW state: every N-th step runs the one that solves the ODE, trains everything and keeps the
//! encodings; the steps between run the one that takes those encodings as an input, so they cost
//! what a plain model's step does and leave the dynamics as they are (the paper's caching: "cache
//! the positional bias vectors for some iterations … update the weights of flow models less
//! frequently"). The encodings are run state: a checkpoint taken between two solves carries them
//! ([`crate::checkpoint::FLOATER_ENCODINGS_STATE`]) and a resumed run takes them back, so its
//! next steps are the uninterrupted run's; resumed without them (a checkpoint from before run
//! state), its first step solves.

use std::rc::Rc;

use crate::backend::Backend;
use crate::backend::profile::Profile;
use crate::checkpoint::{Checkpoint, FLOATER_ENCODINGS_STATE};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::model::GraphOptions;
use crate::model::{Model, ModelGraph, ModelKind, Seq2SeqGraph};
use crate::model::{Pairs, Tokens};
use crate::optim::{AdamW, Optimizer};
use crate::params::ParamStore;
use crate::tensor::TensorMeta;

/// The training graph of one batch shape: a causal LM's or encoder's, or a seq2seq model's.
#[derive(Clone, Debug)]
pub enum TrainGraph {
    Tokens(ModelGraph),
    Pairs(Seq2SeqGraph),
}

/// A training step's batch shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchShape {
    /// `batch` rows of `len` tokens.
    Tokens { batch: usize, len: usize },
    /// `batch` pairs of `source_len` source tokens and `target_len` target positions.
    Pairs {
        batch: usize,
        source_len: usize,
        target_len: usize,
    },
}

impl TrainGraph {
    fn loss(&self) -> TensorId {
        match self {
            Self::Tokens(g) => g.loss,
            Self::Pairs(g) => g.loss,
        }
    }

    /// A causal LM's or encoder's graph; an error naming the kind for a seq2seq graph.
    pub fn as_tokens(&self) -> Result<&ModelGraph> {
        match self {
            Self::Tokens(g) => Ok(g),
            Self::Pairs(_) => Err(Error::Input(
                "this is a seq2seq model's training step: it takes pairs, not token sequences".into(),
            )),
        }
    }

    /// Tokens the graph computes on per step, padding included.
    pub fn tokens(&self) -> usize {
        match self {
            Self::Tokens(g) => g.batch * g.len,
            Self::Pairs(g) => g.batch * (g.source_len + g.target_len),
        }
    }
}

/// One compiled graph and its executor, with the AdamW update appended.
struct Program {
    graph: TrainGraph,
    exec: Executor,
}

impl Program {
    /// `trainable`: name prefixes of the parameters to train, all when empty.
    fn new(
        g: &mut Graph,
        graph: TrainGraph,
        params: &ParamStore,
        optimizer: &Optimizer,
        keep: Option<TensorId>,
        trainable: &[String],
    ) -> Result<Self> {
        let mut grads = g.backward(graph.loss())?;
        if !trainable.is_empty() {
            grads.retain(|p| trainable.iter().any(|prefix| g.info(p).name.starts_with(prefix)));
        }
        let gradients: Vec<TensorId> = grads.iter().map(|(_, grad)| grad).collect();
        let mut outputs = vec![graph.loss()];
        outputs.extend(keep);
        outputs.extend(&gradients);
        let mut exec = Executor::packing(g, &outputs, &gradients, params)?;
        optimizer.attach(&mut exec, g, &grads, params)?;
        Ok(Self { graph, exec })
    }
}

/// The programs that reuse FLOATER's encodings between solves.
struct Cached {
    program: Program,
    every: usize,
    /// The encodings' shape (the cached graph's input).
    meta: TensorMeta,
    /// The last solve's encodings; `None` until a solving step has run or a checkpoint's are
    /// restored.
    encodings: Option<Vec<f32>>,
}

pub struct TrainingProgram {
    params: ParamStore,
    optimizer: Optimizer,
    solving: Program,
    cached: Option<Cached>,
    /// Whether the last launched step ran the solving program.
    last_solved: bool,
}

impl TrainingProgram {
    /// `model`'s training step for `batch` rows of `len` tokens (with dropout when the config has
    /// some), its parameters initialised from `seed`; `trainable` as in
    /// [`TrainingProgram::with_params`].
    pub fn new(
        model: &Model,
        backend: Rc<dyn Backend>,
        shape: BatchShape,
        seed: u64,
        adamw: AdamW,
        trainable: &[String],
    ) -> Result<Self> {
        let g = model.declare_params()?;
        let params = ParamStore::init(backend, &g, seed)?;
        Self::with_params(model, params, shape, adamw, trainable)
    }

    /// The training step over existing parameters (e.g. a checkpoint's, shared with a
    /// generator). `trainable` lists name prefixes of the parameters to train (e.g. `posenc.` for
    /// the position encoding alone); empty trains all. A prefix no parameter has is an error.
    pub fn with_params(
        model: &Model,
        params: ParamStore,
        shape: BatchShape,
        adamw: AdamW,
        trainable: &[String],
    ) -> Result<Self> {
        let is_seq2seq = matches!(model.config().kind, ModelKind::Seq2Seq { .. });
        let (batch, len) = match shape {
            BatchShape::Tokens { batch, len } if !is_seq2seq => (batch, len),
            BatchShape::Pairs {
                batch,
                source_len,
                target_len,
            } if is_seq2seq => {
                let optimizer = Optimizer::new(adamw, &params)?;
                let mut g = Graph::new();
                let graph = model.build(
                    &mut g,
                    Pairs {
                        batch,
                        source_len,
                        target_len,
                    },
                    GraphOptions::default().training(),
                )?;
                let solving = Program::new(
                    &mut g,
                    TrainGraph::Pairs(graph),
                    &params,
                    &optimizer,
                    None,
                    trainable,
                )?;
                return Ok(Self {
                    params,
                    optimizer,
                    solving,
                    cached: None,
                    last_solved: false,
                });
            }
            _ => {
                return Err(Error::Input(if is_seq2seq {
                    "a seq2seq model trains on pairs of sequences: use a pair task ([data] task = \
                     \"cmudict_pairs\", \"synthetic_pairs\" or \"text_pairs\")"
                        .into()
                } else {
                    "a pair task ([data] cmudict_pairs, synthetic_pairs, text_pairs) trains a seq2seq \
                     model: set [model] kind = { type = \"seq2seq\", decoder_layers = N }"
                        .into()
                }));
            }
        };
        if let Some(prefix) = trainable
            .iter()
            .find(|prefix| !params.iter().any(|(name, _)| name.starts_with(prefix.as_str())))
        {
            let names: Vec<&str> = params.iter().map(|(name, _)| name).collect();
            return Err(Error::Input(format!(
                "no parameter of this model starts with `{prefix}` (trainable); its parameters are {}",
                names.join(", ")
            )));
        }
        let mut g = Graph::new();
        // A classifier's texts and a token classifier's examples have many lengths: their
        // batches are padded, and padding is hidden.
        let options = match model.config().kind.pads_batches() {
            true => GraphOptions::default().training().padded(),
            false => GraphOptions::default().training(),
        };
        let graph = model.build(&mut g, Tokens { batch, len }, options)?;
        let optimizer = Optimizer::new(adamw, &params)?;
        let every = model.config().posenc.resolve_every();
        // The solving program keeps its encodings only when cached steps will take them.
        let keep = if every > 1 { graph.encodings } else { None };
        let solving = Program::new(
            &mut g,
            TrainGraph::Tokens(graph),
            &params,
            &optimizer,
            keep,
            trainable,
        )?;
        let cached = if every > 1 {
            let mut g = Graph::new();
            let graph = model.build(&mut g, Tokens { batch, len }, options.cached_encodings())?;
            let input = graph
                .encodings
                .expect("a cached FLOATER graph takes its encodings");
            let meta = g.info(input).meta.clone();
            Some(Cached {
                program: Program::new(
                    &mut g,
                    TrainGraph::Tokens(graph),
                    &params,
                    &optimizer,
                    None,
                    trainable,
                )?,
                every,
                meta,
                encodings: None,
            })
        } else {
            None
        };
        Ok(Self {
            params,
            optimizer,
            solving,
            cached,
            last_solved: false,
        })
    }

    pub fn params(&self) -> &ParamStore {
        &self.params
    }

    pub fn optimizer(&self) -> &Optimizer {
        &self.optimizer
    }

    /// The parameters and AdamW's state, to restore a checkpoint into.
    pub fn state_mut(&mut self) -> (&ParamStore, &mut Optimizer) {
        (&self.params, &mut self.optimizer)
    }

    /// The solving program's graph: its batch shape, and what `feed` writes.
    pub fn graph(&self) -> &TrainGraph {
        &self.solving.graph
    }

    /// Whether `step` runs the solving program.
    pub fn solves_at(&self, step: usize) -> bool {
        self.cached
            .as_ref()
            .is_none_or(|c| c.encodings.is_none() || step.is_multiple_of(c.every))
    }

    /// `checkpoint`, taken before step `step`, with the run state that step needs: the encodings
    /// it takes instead of solving, if it does not solve, so that a resumed run takes them too.
    pub fn with_run_state(&self, checkpoint: Checkpoint, step: usize) -> Result<Checkpoint> {
        match &self.cached {
            Some(Cached {
                meta,
                encodings: Some(encodings),
                ..
            }) if !self.solves_at(step) => {
                checkpoint.with_state(FLOATER_ENCODINGS_STATE, &meta.shape, encodings)
            }
            _ => Ok(checkpoint),
        }
    }

    /// Takes back the run state `checkpoint` carries ([`TrainingProgram::with_run_state`]), so the
    /// steps up to the next solve use the encodings the uninterrupted run would. State this
    /// program does not keep, or of another shape, is an error, and then nothing has changed.
    pub fn restore_run_state(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        let expected = self.cached.as_ref().map(|c| &c.meta);
        if let Some(values) = checkpoint.run_state(FLOATER_ENCODINGS_STATE, expected)? {
            let cached = self
                .cached
                .as_mut()
                .expect("a checkpoint's run state is returned only when the run keeps it");
            cached.encodings = Some(values);
        }
        Ok(())
    }

    /// Queues step `step` at learning rate `lr`: `feed` writes the batch (and the dropout seed)
    /// into the graph it is given. Then [`TrainingProgram::check`] and read the loss.
    pub fn launch(
        &mut self,
        step: usize,
        lr: f32,
        feed: impl FnOnce(&TrainGraph, &Executor) -> Result<()>,
    ) -> Result<()> {
        let solve = self.solves_at(step);
        let program = match &self.cached {
            Some(cached) if !solve => {
                let encodings = cached
                    .encodings
                    .as_deref()
                    .expect("solves_at solves without encodings");
                if let TrainGraph::Tokens(graph) = &cached.program.graph {
                    graph.feed_encodings(&cached.program.exec, encodings)?;
                }
                &cached.program
            }
            _ => &self.solving,
        };
        feed(&program.graph, &program.exec)?;
        self.optimizer.prepare_step(lr)?;
        program.exec.run()?;
        self.last_solved = solve;
        Ok(())
    }

    /// Where the time of the last launched step's program went over its runs, when it was
    /// compiled profiled ([`crate::backend::profile::requested`]).
    pub fn profile(&self) -> Option<Profile> {
        match &self.cached {
            Some(cached) if !self.last_solved => cached.program.exec.profile(),
            _ => self.solving.exec.profile(),
        }
    }

    /// Kernel dispatches of the last launched step on a GPU (`None` on the CPU).
    pub fn dispatches(&self) -> Option<usize> {
        match &self.cached {
            Some(cached) if !self.last_solved => cached.program.exec.dispatches(),
            _ => self.solving.exec.dispatches(),
        }
    }

    /// After a launch: an error if the solve failed (AdamW then skipped the update, as every
    /// gradient was non-finite); otherwise keeps a solving step's encodings for the next steps.
    pub async fn check(&mut self) -> Result<()> {
        if !self.last_solved {
            return Ok(());
        }
        self.solving.exec.check().await?;
        if let (Some(cached), TrainGraph::Tokens(graph)) = (&mut self.cached, &self.solving.graph) {
            let encodings = graph.encodings.expect("a FLOATER graph has encodings");
            cached.encodings = Some(self.solving.exec.read(encodings).await?);
        }
        Ok(())
    }

    /// The loss of the last launched step.
    pub async fn loss(&self) -> Result<f32> {
        let program = match &self.cached {
            Some(cached) if !self.last_solved => &cached.program,
            _ => &self.solving,
        };
        Ok(program.exec.read(program.graph.loss()).await?[0])
    }
}
