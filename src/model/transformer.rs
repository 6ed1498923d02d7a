//! The pre-norm Transformer of a [`ModelConfig`], built into a [`Graph`] for one (batch, length).

use super::block::{Dropouts, EMBEDDING_DROPOUT_SALT, LayerNorm, Linear};
use super::config::{Activation, History, ModelConfig, ModelKind};
use super::init::INIT_STD;
use super::posenc::{Constant, EncodingSource, PairOffsets, Positions, sample_positions};
use super::stack::{self, Stack};
use crate::data::{BOS, Batch, IGNORE_INDEX};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Graph, Init, TensorId};
use crate::tensor::TensorMeta;
use std::cell::Cell;

/// A validated configuration, ready to be built into graphs of any shape. Graphs of different
/// shapes declare the same parameters, so one `ParamStore` serves them all.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    config: ModelConfig,
}

/// The tensors of one built model graph, and what must be fed before each run.
#[derive(Clone, Debug)]
pub struct ModelGraph {
    pub batch: usize,
    pub len: usize,
    /// i32 `[B, L]`.
    pub tokens: TensorId,
    /// i32: `[B, L]` next tokens (`IGNORE_INDEX` where no loss counts) for a causal LM, the
    /// hidden tokens (`IGNORE_INDEX` elsewhere) for a masked LM, `[B]` classes for an encoder.
    pub targets: TensorId,
    /// i32 `[B, L]`, 1 for a token and 0 for padding; present in graphs built
    /// [`GraphOptions::padded`].
    pub key_mask: Option<TensorId>,
    /// `[B, L, vocab]` for a causal or masked LM, `[B, n_classes]` for an encoder.
    pub logits: TensorId,
    /// The mean cross-entropy, shape `[1]`.
    pub loss: TensorId,
    kind: ModelKind,
    vocab: usize,
    /// Constant inputs (the sinusoidal table, relative buckets) and their values.
    constants: Vec<(TensorId, Constant)>,
    /// i32 `[1]`, in training graphs with dropout.
    dropout_seed: Option<TensorId>,
    /// FLOATER: every block's encodings in one tensor ([`crate::model::encodings_shape`]); an
    /// input to write with [`ModelGraph::feed_encodings`] in graphs built with cached encodings,
    /// the solve's result (to keep for them) otherwise.
    pub encodings: Option<TensorId>,
    encodings_source: EncodingSource,
    /// Each layer's attention probabilities `[B, H, L, L]`, in graphs built
    /// [`GraphOptions::probed`]; empty otherwise.
    pub attention_probs: Vec<TensorId>,
    /// Randomized positions, drawn before each run ([`ModelGraph::draw_positions`]).
    random: Option<RandomPositions>,
}

/// What a graph with randomized positions writes at each draw.
#[derive(Clone, Debug)]
struct RandomPositions {
    range: usize,
    /// i32 `[L]`; `None` when no encoding reads the positions themselves (T5's and ALiBi's read
    /// only their pairs' offsets).
    input: Option<TensorId>,
    pair_offsets: Vec<PairOffsets>,
    /// Whether positions were drawn since the last feed: every run needs its own.
    drawn: Cell<bool>,
}

/// What a model graph is built for, one flag each, set with the builder methods:
/// `GraphOptions::default()` is inference on unpadded rows.
///
/// ```
/// # use posflow::model::GraphOptions;
/// let step = GraphOptions::default().training().cached_encodings();
/// assert!(step.validate().is_ok());
/// assert!(GraphOptions::default().training().probed().validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphOptions {
    padded: bool,
    training: bool,
    cached_encodings: bool,
    probed: bool,
}

impl GraphOptions {
    /// For training: the config's dropout, its masks following the seed written by
    /// [`ModelGraph::set_dropout_seed`] before each step (without dropout, the same graph).
    pub fn training(mut self) -> Self {
        self.training = true;
        self
    }

    /// For padded batches: a key mask input hides padded keys ([`ModelGraph::key_mask`]). A
    /// causal LM's right-padded rows need none: no real token attends to a later position.
    pub fn padded(mut self) -> Self {
        self.padded = true;
        self
    }

    /// FLOATER's encodings as an input ([`ModelGraph::feed_encodings`]), solved once elsewhere
    /// (e.g. by [`crate::inference::EncodingCache`], or every `resolve_every` steps in training),
    /// so a run costs what a plain model's does. Other encodings ignore it.
    pub fn cached_encodings(mut self) -> Self {
        self.cached_encodings = true;
        self
    }

    /// Also outputs every layer's attention probabilities ([`ModelGraph::attention_probs`]), for
    /// inspecting what the model attends to.
    pub fn probed(mut self) -> Self {
        self.probed = true;
        self
    }

    /// Refuses the combinations that make no sense: probes are for looking at a model, and a
    /// training graph would keep every layer's `[B, H, L, L]` probabilities alive for nothing.
    pub fn validate(&self) -> Result<()> {
        if self.probed && self.training {
            return Err(Error::Input(
                "graph options: a probed graph is for inspecting a model; build training graphs \
                 without probes"
                    .into(),
            ));
        }
        Ok(())
    }

    pub(super) fn is_training(&self) -> bool {
        self.training
    }

    pub(super) fn is_probed(&self) -> bool {
        self.probed
    }

    pub(super) fn takes_cached_encodings(&self) -> bool {
        self.cached_encodings
    }

    fn encodings(&self) -> EncodingSource {
        if self.cached_encodings {
            EncodingSource::Input
        } else {
            EncodingSource::Solve
        }
    }
}

impl Model {
    pub fn new(config: ModelConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// A graph that declares every parameter of the model (the parameters do not depend on the
    /// shape or the options: a one-token graph holds them all), for a `ParamStore` to allocate and
    /// a checkpoint to be checked against before anything is.
    pub fn declare_params(&self) -> Result<Graph> {
        let mut g = Graph::new();
        let one = GraphOptions::default();
        if matches!(self.config.kind, ModelKind::Seq2Seq { .. }) {
            let pairs = super::Pairs {
                batch: 1,
                source_len: 1,
                target_len: 1,
            };
            self.build(&mut g, pairs, one)?;
        } else {
            self.build(&mut g, Tokens { batch: 1, len: 1 }, one)?;
        }
        Ok(g)
    }

    /// The graph of `shape` ([`Tokens`] for the causal LM, the masked LM and the classifier; a
    /// seq2seq model's [`super::Pairs`] to train, [`super::Sources`], [`super::DecoderFlow`] and
    /// [`super::DecodingStep`] to decode), built for what `options` say.
    pub fn build<S: GraphShape>(&self, g: &mut Graph, shape: S, options: GraphOptions) -> Result<S::Graph> {
        options.validate()?;
        shape.build(self, g, options)
    }
}

/// A shape a model's graph is built for, and what the built graph is: every model kind goes
/// through [`Model::build`].
pub trait GraphShape {
    type Graph;

    /// `model`'s graph of this shape in `g` (`options` already validated).
    fn build(self, model: &Model, g: &mut Graph, options: GraphOptions) -> Result<Self::Graph>;
}

/// `batch` rows of `len` tokens: the causal LM, the masked LM, the classifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens {
    pub batch: usize,
    pub len: usize,
}

impl GraphShape for Tokens {
    type Graph = ModelGraph;

    fn build(self, model: &Model, g: &mut Graph, options: GraphOptions) -> Result<ModelGraph> {
        let Tokens { batch, len } = self;
        if matches!(model.config.kind, ModelKind::Seq2Seq { .. }) {
            return Err(seq2seq_needs_pairs());
        }
        if batch == 0 || len == 0 {
            return Err(Error::Input(format!(
                "a model graph needs at least one row and one position, got batch {batch}, length {len}"
            )));
        }
        let c = &model.config;
        let d = c.d_model;
        let tokens = g.input("tokens", TensorMeta::i32(&[batch, len]));
        let key_mask = options
            .padded
            .then(|| g.input("key_mask", TensorMeta::i32(&[batch, len])));
        let dropout = Dropouts::declare(g, c, options.training);
        let at = match c.random_positions {
            Some(range) => Positions::sampled(g, len, range)?,
            None => Positions::contiguous(len),
        };
        let positions = c.posenc.terms(g, c.dims(), at, options.encodings())?;

        let tok_emb = stack::token_table(g, c)?;
        let x = stack::embed(g, c, tok_emb, tokens, &positions, dropout, EMBEDDING_DROPOUT_SALT)?;
        let model = Stack {
            step: c.block,
            layers: c.layers,
            causal: matches!(c.kind, ModelKind::CausalLm { .. }),
            key_mask,
            dropout,
            salt_base: 0,
            probed: options.probed,
            cross: None,
            cache: Vec::new(),
        };
        let (x, blocks) = model.run(g, c, x, &positions)?;
        let attention_probs = blocks.into_iter().flat_map(|b| b.attention_probs).collect();

        let (logits, targets) = match c.kind {
            ModelKind::CausalLm { tied_head } => {
                // The authors' LM with a layer history has no final layer norm.
                let x = match c.history {
                    History::None => stack::final_norm(g, c, x)?,
                    History::Dense | History::LearnableDense => x,
                };
                // The tied head reads the table unscaled, whatever embed_scale (fairseq).
                let logits = if tied_head {
                    g.matmul_t(x, tok_emb, false, true)?
                } else {
                    let init = c.init_scheme().output_table(d);
                    let head = g.param("lm_head.weight", &[d, c.vocab], init)?;
                    g.matmul(x, head)?
                };
                (logits, g.input("targets", TensorMeta::i32(&[batch, len])))
            }
            ModelKind::MaskedLm {} => {
                let x = stack::final_norm(g, c, x)?;
                // BERT's head: a transform, then the token table (unscaled) and a bias per token.
                let dense = Linear::declare(g, "mlm_head.dense", d, d, Init::Normal(INIT_STD))?;
                let x = dense.apply_activated(g, x, Activation::Gelu)?;
                let x = LayerNorm::declare(g, "mlm_head.ln", d)?.apply(g, x)?;
                let bias = g.param("mlm_head.bias", &[c.vocab], Init::Zeros)?;
                let logits = g.matmul_t_bias(x, tok_emb, false, true, bias)?;
                (logits, g.input("targets", TensorMeta::i32(&[batch, len])))
            }
            ModelKind::Seq2Seq { .. } => return Err(seq2seq_needs_pairs()),
            ModelKind::TokenClassifier { n_classes } => {
                let x = stack::final_norm(g, c, x)?;
                let head = Linear::declare(g, "token_head", d, n_classes, Init::Normal(INIT_STD))?;
                let logits = head.apply(g, x)?;
                (logits, g.input("targets", TensorMeta::i32(&[batch, len])))
            }
            ModelKind::Encoder { n_classes } => {
                let cls = g.slice(x, 1, 0, 1)?;
                let cls = g.reshape(cls, &[batch, d])?;
                let cls = stack::final_norm(g, c, cls)?;
                let head = Linear::declare(g, "cls_head", d, n_classes, Init::Normal(INIT_STD))?;
                let logits = head.apply(g, cls)?;
                (logits, g.input("targets", TensorMeta::i32(&[batch])))
            }
        };
        g.name(logits, "logits");
        let loss = g.cross_entropy(logits, targets, IGNORE_INDEX)?;
        g.name(loss, "loss");
        let random = at.sampled.map(|sampled| RandomPositions {
            range: sampled.range,
            input: g
                .nodes()
                .iter()
                .any(|node| node.inputs.contains(&sampled.input))
                .then_some(sampled.input),
            pair_offsets: positions.inputs.pair_offsets,
            drawn: Cell::new(false),
        });
        Ok(ModelGraph {
            batch,
            len,
            tokens,
            targets,
            key_mask,
            logits,
            loss,
            kind: c.kind,
            vocab: c.vocab,
            constants: positions.inputs.constants,
            encodings: positions.inputs.encodings,
            encodings_source: options.encodings(),
            dropout_seed: dropout.map(|d| d.seed),
            attention_probs,
            random,
        })
    }
}

/// What [`Model::build`] says of a seq2seq model asked for [`Tokens`].
pub(super) fn seq2seq_needs_pairs() -> Error {
    Error::Input(
        "a seq2seq model reads a source and a target; build it for Pairs (training) or the decoding shapes"
            .into(),
    )
}

impl ModelGraph {
    /// Validates and writes one batch: tokens and targets row-major (`[B, L]`, and targets `[B]`
    /// for an encoder), the key padding mask (1 = token, 0 = pad) if any, and the constants.
    ///
    /// A graph without a key mask takes a padded batch only for a causal LM, whose padding at
    /// the end of each row no real token sees; a graph with one takes `None` as "no padding".
    pub fn feed(&self, exec: &Executor, tokens: &[i32], targets: &[i32], mask: Option<&[f32]>) -> Result<()> {
        let (b, l) = (self.batch, self.len);
        let targets_len = match self.kind {
            ModelKind::CausalLm { .. }
            | ModelKind::MaskedLm {}
            | ModelKind::Seq2Seq { .. }
            | ModelKind::TokenClassifier { .. } => b * l,
            ModelKind::Encoder { .. } => b,
        };
        if tokens.len() != b * l || targets.len() != targets_len || mask.is_some_and(|m| m.len() != b * l) {
            return Err(Error::Input(format!(
                "a model graph for batch {b}, length {l} takes {} tokens, {targets_len} targets and \
                 a mask of {} values, got {} tokens, {} targets and {}",
                b * l,
                b * l,
                tokens.len(),
                targets.len(),
                mask.map_or("no mask".into(), |m| format!("a mask of {}", m.len()))
            )));
        }
        self.check_tokens(tokens)?;
        self.check_targets(targets)?;
        if let Some(random) = &self.random
            && !random.drawn.replace(false)
        {
            return Err(Error::Input(format!(
                "this model's tokens sit at randomized positions (random_positions = {}): draw them \
                 with ModelGraph::draw_positions before each run",
                random.range
            )));
        }
        exec.set_i32(self.tokens, tokens)?;
        exec.set_i32(self.targets, targets)?;
        match (self.key_mask, mask) {
            (Some(t), Some(m)) => {
                let ints: Vec<i32> = m.iter().map(|&v| i32::from(v > 0.5)).collect();
                exec.set_i32(t, &ints)?;
            }
            (Some(t), None) => exec.set_i32(t, &vec![1; b * l])?,
            (None, Some(m)) if self.kind.reads_cls() && m.iter().any(|&v| v < 0.5) => {
                return Err(Error::Input(
                    "this batch has padding, but the encoder's graph has no key mask to hide it \
                     (build it with GraphOptions::padded)"
                        .into(),
                ));
            }
            (None, _) => {}
        }
        for (t, values) in &self.constants {
            match values {
                Constant::F32(v) => exec.set_f32(*t, v)?,
                Constant::I32(v) => exec.set_i32(*t, v)?,
            }
        }
        Ok(())
    }

    /// Randomized positions: draws the next run's positions from `seed` (a sorted sample of the
    /// graph's length of distinct positions of 0..random_positions, [`sample_positions`]) and
    /// writes them and the pair inputs that read them; returns them. A graph with randomized
    /// positions needs a draw before every [`ModelGraph::feed`] (training: from the run's seed
    /// and the step; evaluation: from the set and the batch); other graphs draw nothing.
    pub fn draw_positions(&self, exec: &Executor, seed: u64) -> Result<Vec<i32>> {
        let Some(random) = &self.random else {
            return Ok(Vec::new());
        };
        let positions = sample_positions(seed, self.len, random.range);
        self.set_positions(exec, &positions)?;
        Ok(positions)
    }

    /// The range randomized positions are drawn from; `None` for tokens at 0..T.
    pub fn random_range(&self) -> Option<usize> {
        self.random.as_ref().map(|r| r.range)
    }

    /// Randomized positions given rather than drawn: the graph's length of them, each in
    /// 0..random_positions (generation draws for the context's length and pads the rest,
    /// [`crate::inference::Generator`]). An error for a graph without randomized positions.
    pub fn set_positions(&self, exec: &Executor, positions: &[i32]) -> Result<()> {
        let Some(random) = &self.random else {
            return Err(Error::Input(
                "this model's tokens sit at 0..T: it has no randomized positions to set".into(),
            ));
        };
        if positions.len() != self.len || positions.iter().any(|&p| !(0..random.range as i32).contains(&p)) {
            return Err(Error::Input(format!(
                "a graph of {} tokens takes {} positions in 0..{}, got {} ({:?}…)",
                self.len,
                self.len,
                random.range,
                positions.len(),
                &positions[..positions.len().min(8)]
            )));
        }
        if let Some(input) = random.input {
            exec.set_i32(input, positions)?;
        }
        for pairs in &random.pair_offsets {
            exec.set_i32(pairs.input, &pairs.values(positions))?;
        }
        random.drawn.set(true);
        Ok(())
    }

    /// Writes FLOATER's encodings (of [`crate::model::encodings_shape`]) into a graph built with
    /// cached encodings.
    pub fn feed_encodings(&self, exec: &Executor, values: &[f32]) -> Result<()> {
        match self.encodings {
            Some(t) if self.takes_encodings() => exec.set_f32(t, values),
            _ => Err(Error::Input(
                "this model graph solves its own position encodings; only a graph built with cached \
                 encodings (GraphOptions::cached_encodings) takes them"
                    .into(),
            )),
        }
    }

    /// Whether FLOATER's encodings are an input of this graph (to write before each run).
    pub fn takes_encodings(&self) -> bool {
        self.encodings.is_some() && self.encodings_source == EncodingSource::Input
    }

    /// Sets the dropout masks of the next run: a training loop writes a new seed every step (a
    /// function of its own seed and the step, so a resumed run draws the same masks). Graphs
    /// without dropout ignore it.
    pub fn set_dropout_seed(&self, exec: &Executor, seed: u32) -> Result<()> {
        match self.dropout_seed {
            Some(t) => exec.set_i32(t, &[seed as i32]),
            None => Ok(()),
        }
    }

    /// [`ModelGraph::feed`] for a causal or masked LM's batch from the data layer.
    pub fn feed_batch(&self, exec: &Executor, batch: &Batch) -> Result<()> {
        if self.is_encoder() {
            return Err(Error::Input(
                "an encoder takes one class per row, not a data-layer Batch of next tokens; use feed".into(),
            ));
        }
        if batch.shape() != [self.batch, self.len] {
            return Err(Error::Input(format!(
                "batch of shape {:?} for a model graph of batch {}, length {} (pad it with Batch::pad_to)",
                batch.shape(),
                self.batch,
                self.len
            )));
        }
        self.feed(exec, batch.tokens(), batch.targets(), batch.mask())
    }

    fn is_encoder(&self) -> bool {
        matches!(self.kind, ModelKind::Encoder { .. })
    }

    fn check_tokens(&self, tokens: &[i32]) -> Result<()> {
        let vocab = self.vocab;
        if let Some(i) = tokens
            .iter()
            .position(|&t| usize::try_from(t).map_or(true, |t| t >= vocab))
        {
            return Err(Error::Input(format!(
                "token id {} at row {}, position {} is outside the vocabulary [0, {vocab})",
                tokens[i],
                i / self.len,
                i % self.len
            )));
        }
        if self.kind.reads_cls()
            && let Some(row) = (0..self.batch).find(|&r| tokens[r * self.len] != BOS)
        {
            return Err(Error::Input(format!(
                "an encoder reads position 0 as [CLS], which must be the BOS token {BOS}; row {row} starts with {}",
                tokens[row * self.len]
            )));
        }
        Ok(())
    }

    fn check_targets(&self, targets: &[i32]) -> Result<()> {
        let (classes, what) = match self.kind {
            ModelKind::CausalLm { .. } | ModelKind::MaskedLm {} | ModelKind::Seq2Seq { .. } => {
                (self.vocab, "vocabulary")
            }
            ModelKind::Encoder { n_classes } | ModelKind::TokenClassifier { n_classes } => {
                (n_classes, "classes")
            }
        };
        let ignored = |t: i32| t == IGNORE_INDEX && !self.is_encoder();
        let valid = |t: i32| ignored(t) || usize::try_from(t).is_ok_and(|t| t < classes);
        match targets.iter().position(|&t| !valid(t)) {
            Some(i) => Err(Error::Input(format!(
                "target {} at index {i} is outside the {what} [0, {classes}){}",
                targets[i],
                if self.is_encoder() {
                    ""
                } else {
                    " and is not IGNORE_INDEX"
                }
            ))),
            None => Ok(()),
        }
    }
}
