//! The trainer: one run of a [`RunConfig`] on one backend. Each step draws the step's batch,
//! sets the learning rate and runs forward, backward, clipping and AdamW as one program; the
//! loss is read back every step, so a non-finite loss stops the run at once.

use std::rc::Rc;

use super::config::{RunConfig, VOCAB_FROM_DATA};
use super::data_task::DataTask;
use super::eval::{EvalReport, Evaluator};
use super::program::{BatchShape, TrainGraph, TrainingProgram};
use super::saved::{RUN_KEY, check_same_tokenizer, saved_run};
use super::task::{Task, TrainBatch};
use crate::backend::{Backend, in_arithmetic};
use crate::checkpoint::{Checkpoint, Metadata, TrainingState};
use crate::data::TaskTokenizer;
use crate::error::{Error, Result};
use crate::model::posenc::{QKV_INITIAL_NAME, qkv_initial_from_static_biases};
use crate::model::{Model, ModelConfig};
use crate::params::ParamStore;

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepStats {
    /// The step's index, from 0.
    pub step: usize,
    pub loss: f32,
    pub lr: f32,
    /// The global gradient norm before clipping.
    pub grad_norm: f32,
}

/// Where a warm start's parameters came from, beyond those loaded by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WarmStart {
    /// Parameters the checkpoint does not hold: they keep their initialisation.
    pub fresh: Vec<String>,
    /// Parameters computed from other tensors of the checkpoint, each with where from.
    pub derived: Vec<String>,
}

pub struct Trainer {
    run: RunConfig,
    task: Box<dyn Task>,
    model: Model,
    program: TrainingProgram,
    evaluator: Evaluator,
    /// Steps completed.
    step: usize,
}

impl Trainer {
    /// A fresh run: parameters initialised from the config's seed. The data is loaded here, and
    /// with it the vocabulary settled ([`RunConfig::settle_vocab`]).
    pub fn new(backend: Rc<dyn Backend>, run: RunConfig) -> Result<Self> {
        let (run, task) = load_task(run)?;
        Self::with_task(backend, run, Box::new(task))
    }

    /// A fresh run of `run`'s model and training settings on a task of your own: `task`'s
    /// batches and evaluation sets in place of those `run`'s `[data]` would load. The vocabulary
    /// is `task`'s tokenizer's (a `[model] vocab` left out is set to it, one given must be it).
    /// A checkpoint records `run`'s `[data]` as the run's data: posflow's CLI resumes it by
    /// loading that, and refuses a tokenizer other than the checkpoint's.
    pub fn with_task(backend: Rc<dyn Backend>, mut run: RunConfig, task: Box<dyn Task>) -> Result<Self> {
        // Checks the whole config, with the vocabulary the task says.
        run.settle_vocab(task.tokenizer().vocab_size())?;
        let model = Model::new(run.model.clone())?;
        let batch = run.train.batch;
        let shape = match task.pair_shape() {
            Some([source_len, target_len]) => BatchShape::Pairs {
                batch,
                source_len,
                target_len,
            },
            None => BatchShape::Tokens {
                batch,
                len: task.train_len(),
            },
        };
        let program = TrainingProgram::new(
            &model,
            in_arithmetic(backend, run.train.arithmetic)?,
            shape,
            run.train.seed,
            run.adamw(),
            &run.train.trainable,
        )?;
        let evaluator = Evaluator::new(model.clone());
        Ok(Self {
            run,
            task,
            model,
            program,
            evaluator,
            step: 0,
        })
    }

    /// Continues the run saved in `checkpoint`: parameters, AdamW's moments and step count, and
    /// FLOATER's cached encodings when the checkpoint was taken between two solves. The run's data,
    /// model and seed must be the checkpoint's; its length, schedule and outputs may change (e.g.
    /// more steps). With them unchanged, the run continues exactly as the uninterrupted one on the
    /// CPU: the batch, learning rate and dropout mask of a step are functions of the seed and the
    /// step alone, and AdamW's bias correction follows its restored step count.
    pub fn resume(backend: Rc<dyn Backend>, mut run: RunConfig, checkpoint: &Checkpoint) -> Result<Self> {
        let saved = saved_run(checkpoint.metadata())?;
        if run.model.vocab == VOCAB_FROM_DATA {
            // A config that leaves it out takes the checkpoint's; the data's tokenizer is checked
            // against the checkpoint's below, before anything is built.
            run.model.vocab = saved.model.vocab;
        }
        let differs = |what: &str| {
            Error::Input(format!(
                "cannot resume: the config's {what} differs from the checkpoint's (run without --config to \
                 continue the checkpoint's own run)"
            ))
        };
        if saved.model != run.model {
            return Err(differs("[model]"));
        }
        if saved.data != run.data.clone().without_file() {
            return Err(differs("[data]"));
        }
        if saved.train.seed != run.train.seed || saved.train.batch != run.train.batch {
            return Err(differs("seed or batch"));
        }
        run.validate()?;
        let task = DataTask::load(&run)?;
        // Before the model is built, which would only say that the vocabulary sizes differ.
        check_same_tokenizer(checkpoint.metadata(), &task.tokenizer())?;
        // Before the program allocates what the config claims (see `Checkpoint::check_parameters`).
        let g = Model::new(run.model.clone())?.declare_params()?;
        checkpoint.check_parameters(g.params())?;
        let mut trainer = Self::with_task(backend, run, Box::new(task))?;
        trainer.program.restore_run_state(checkpoint)?;
        let (params, optimizer) = trainer.program.state_mut();
        checkpoint.restore(params, Some(optimizer))?;
        // Converted, not cast: a step past the machine's usize (a 32-bit page) is refused too.
        let saved_step = checkpoint.metadata().training.step;
        trainer.step = usize::try_from(saved_step)
            .ok()
            .filter(|&step| step <= trainer.run.train.steps)
            .ok_or_else(|| {
                Error::Input(format!(
                    "cannot resume: the checkpoint is at step {saved_step}, past the run's {} steps",
                    trainer.run.train.steps
                ))
            })?;
        Ok(trainer)
    }

    /// A fresh run whose parameters start from those of `checkpoint` with the same names (e.g. a
    /// trained sinusoidal model for FLOATER's compatible form); the others keep their
    /// initialisation. FLOATER's initial q/k/v biases, when the checkpoint has none but has every
    /// layer's static `attn.qkv.bias`, start from those (as the authors warm-start).
    ///
    /// A checkpoint of another vocabulary or width is refused, naming what differs: its ids would
    /// mean other characters, its matrices would not fit.
    pub fn warm_start(
        backend: Rc<dyn Backend>,
        run: RunConfig,
        checkpoint: &Checkpoint,
    ) -> Result<(Self, WarmStart)> {
        let (run, task) = load_task(run)?;
        check_warm_start(checkpoint, &run)?;
        check_same_tokenizer(checkpoint.metadata(), &task.tokenizer())?;
        let trainer = Self::with_task(backend, run, Box::new(task))?;
        let params = trainer.program.params();
        let mut fresh = checkpoint.restore_shared(params)?;
        let mut derived = Vec::new();
        if fresh.iter().any(|name| name == QKV_INITIAL_NAME) {
            let (d, layers) = (trainer.run.model.d_model, trainer.run.model.layers);
            let biases: Option<Vec<Vec<f32>>> = (0..layers)
                .map(|n| {
                    checkpoint
                        .f32_tensor(&format!("blocks.{n}.attn.qkv.bias"))
                        .filter(|(shape, _)| *shape == [3 * d])
                        .map(|(_, values)| values)
                })
                .collect();
            if let Some(biases) = biases {
                params.set(QKV_INITIAL_NAME, &qkv_initial_from_static_biases(&biases, d))?;
                fresh.retain(|name| name != QKV_INITIAL_NAME);
                derived.push(format!(
                    "{QKV_INITIAL_NAME} from the checkpoint's q/k/v biases (FLOATER's b(0))"
                ));
            }
        }
        Ok((trainer, WarmStart { fresh, derived }))
    }

    pub fn run(&self) -> &RunConfig {
        &self.run
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn params(&self) -> &ParamStore {
        self.program.params()
    }

    pub fn tokenizer(&self) -> TaskTokenizer {
        self.task.tokenizer()
    }

    /// The run's data.
    pub fn task(&self) -> &dyn Task {
        self.task.as_ref()
    }

    /// Steps completed.
    pub fn steps_done(&self) -> usize {
        self.step
    }

    /// One training step, waiting for it: natively, what a program of one's own calls in a loop
    /// (the page, which cannot wait, awaits [`Trainer::train_step`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn step(&mut self) -> Result<StepStats> {
        pollster::block_on(self.train_step())
    }

    pub fn is_done(&self) -> bool {
        self.step >= self.run.train.steps
    }

    /// Tokens per training batch, padding included: what the engine computes on.
    pub fn tokens_per_step(&self) -> usize {
        self.program.graph().tokens()
    }

    /// One training step. A non-finite loss or gradient is an error naming the step; checkpoints
    /// already written are untouched.
    pub async fn train_step(&mut self) -> Result<StepStats> {
        let step = self.step;
        let t = &self.run.train;
        let batch = self.task.train_batch(t.seed, step, t.batch)?;
        let lr = self.run.schedule().lr(step);
        // A new mask every step, the same on resume: a function of the seed and the step alone.
        let dropout_seed = (t.seed as u32) ^ (step as u32).wrapping_mul(0x9E37_79B9);
        let positions_seed = positions_seed(t.seed, step);
        self.program
            .launch(step, lr, |graph, exec| match (graph, &batch) {
                (TrainGraph::Tokens(graph), TrainBatch::Tokens(batch)) => {
                    graph.draw_positions(exec, positions_seed)?;
                    graph.feed_batch(exec, batch)?;
                    graph.set_dropout_seed(exec, dropout_seed)
                }
                (TrainGraph::Tokens(graph), TrainBatch::Classes(batch)) => {
                    let rows = &batch.batch;
                    graph.draw_positions(exec, positions_seed)?;
                    graph.feed(exec, rows.tokens(), &batch.classes, rows.mask())?;
                    graph.set_dropout_seed(exec, dropout_seed)
                }
                (TrainGraph::Pairs(graph), TrainBatch::Pairs(batch)) => {
                    graph.feed(exec, batch)?;
                    graph.set_dropout_seed(exec, dropout_seed)
                }
                _ => Err(Error::Input(
                    "the task's batches do not fit the model: a seq2seq model trains on pairs, the others \
                 on token sequences"
                        .into(),
                )),
            })?;
        if let Err(e) = self.program.check().await {
            // The solver's own message, without its "training:" (the wrapper below adds it).
            let e = match e {
                Error::Training(message) => message,
                other => other.to_string(),
            };
            // Its non-finite encodings made every gradient non-finite, so AdamW skipped the step.
            return Err(Error::Training(format!(
                "{e}, at step {step}; the update was skipped, so the parameters are those before this \
                 step"
            )));
        }
        let loss = self.program.loss().await?;
        let grad_norm = self.program.optimizer().last_grad_norm().await?;
        if !(loss.is_finite() && grad_norm.is_finite()) {
            // AdamW skips a step whose gradient norm is not finite; a non-finite loss with finite
            // gradients (rare) has been applied.
            let parameters = if grad_norm.is_finite() {
                "this step's update was applied, so do not save these parameters"
            } else {
                "the update was skipped, so the parameters are those before this step"
            };
            return Err(Error::Training(format!(
                "the loss is {loss} at step {step} (learning rate {lr:.3e}, gradient norm {grad_norm}); \
                 {parameters}. Lower [train] lr, raise warmup, or keep clip_grad_norm on; resume from \
                 the last checkpoint"
            )));
        }
        self.step += 1;
        Ok(StepStats {
            step,
            loss,
            lr,
            grad_norm,
        })
    }

    /// Whether [`Trainer::evaluate`] has anything to score: evaluation lengths, or a pair or
    /// classification task (scored on their own bins of length).
    pub fn evaluates(&self) -> bool {
        !self.run.train.eval_lengths.is_empty()
            || self.task.pair_data().is_some()
            || self.task.class_data().is_some()
    }

    /// Whether the run evaluates now, after the steps completed: every `eval_every` steps and
    /// after the last.
    pub fn evaluation_due(&self) -> bool {
        let every = self.run.train.eval_every;
        ((every > 0 && self.step.is_multiple_of(every)) || self.is_done()) && self.step > 0
    }

    /// Loss and accuracy on the validation data at the config's evaluation lengths: at most
    /// `eval_batches` batches of each, or `final_eval_batches` once training is done.
    pub async fn evaluate(&mut self) -> EvalReport {
        let t = &self.run.train;
        let batches = t.eval_batches_at(self.is_done());
        if let Some(data) = self.task.class_data() {
            return self
                .evaluator
                .evaluate_classes(self.program.params(), data, t.batch, batches)
                .await;
        }
        if let Some(data) = self.task.pair_data() {
            return self
                .evaluator
                .evaluate_pairs(self.program.params(), data, t.batch, batches)
                .await;
        }
        let sets = self.task.eval_sets(&t.eval_lengths, t.batch, batches);
        self.evaluator
            .evaluate(
                self.program.params(),
                sets,
                self.task.eval_bins(),
                self.task.train_len(),
            )
            .await
    }

    /// The run as a checkpoint: parameters, optimizer state, model config, tokenizer, the whole run
    /// config, and the run state the next step needs (FLOATER's cached encodings), for `--resume`.
    pub async fn checkpoint(&self) -> Result<Checkpoint> {
        let mut extra = serde_json::Map::new();
        extra.insert(
            RUN_KEY.into(),
            serde_json::to_value(&self.run).expect("a run config serializes"),
        );
        let metadata = Metadata {
            config: serde_json::to_string(&self.run.model).expect("a model config serializes"),
            training: TrainingState {
                step: self.step as u64,
                seed: self.run.train.seed,
                extra,
            },
            tokenizer: Some(self.tokenizer().to_json()),
        };
        let checkpoint =
            Checkpoint::gather(self.program.params(), Some(self.program.optimizer()), metadata).await?;
        self.program.with_run_state(checkpoint, self.step)
    }
}

/// `run`'s data, and `run` with the vocabulary the data's tokenizer has.
fn load_task(mut run: RunConfig) -> Result<(RunConfig, DataTask)> {
    run.validate()?;
    let task = DataTask::load(&run)?;
    run.settle_vocab(task.tokenizer().vocab_size())?;
    Ok((run, task))
}

/// Refuses a warm start from a model of another vocabulary size or width than `run`'s.
fn check_warm_start(checkpoint: &Checkpoint, run: &RunConfig) -> Result<()> {
    let saved = ModelConfig::from_json(&checkpoint.metadata().config)?;
    let mine = &run.model;
    for (what, theirs, ours) in [
        ("vocab", saved.vocab, mine.vocab),
        ("d_model", saved.d_model, mine.d_model),
        ("ffn", saved.ffn, mine.ffn),
    ] {
        if theirs == ours {
            continue;
        }
        let why = if what == "vocab" {
            ", so its token ids would mean other characters"
        } else {
            ", so its matrices do not fit this model"
        };
        let hint = if what == "vocab" && run.data.classes().is_some() {
            "; a classifier fine-tuned from configs/moby_mlm.toml's model reads its texts with that \
             model's characters: set [data] vocabulary = \"moby_dick\""
        } else {
            ""
        };
        return Err(Error::Input(format!(
            "cannot warm-start: the checkpoint's model has {what} {theirs}, this run's has {ours}{why}{hint}"
        )));
    }
    Ok(())
}

/// The seed of step `step`'s randomized positions in a run seeded `seed`: like the dropout mask, a
/// function of the seed and the step alone (so once per batch, and the same on resume).
pub fn positions_seed(seed: u64, step: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ step as u64
}
