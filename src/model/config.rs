//! The model's configuration: sizes, architecture kind and position encoding, read with serde
//! (unknown keys are errors) and validated before any graph is built.

use serde::{Deserialize, Serialize};

pub use super::init::InitScheme;
use super::posenc::{MAX_RANDOM_POSITIONS, ModelDims, ModelFacts, PosEnc, is_default};
use crate::error::{Error, Result};
use crate::ops::attention::MAX_HEAD_DIM;
pub use crate::ops::unary::Activation;

/// The largest size each field may hold. A config or checkpoint may come from anyone: a size is
/// checked against these before anything is built, so `ffn = 10¹⁰` is an error naming the field
/// rather than a failed allocation, and `layers = 10⁶` is refused in microseconds rather than
/// building a graph that grows with layers². Each is far above what posflow trains (the papers'
/// largest model: 24 layers, d_model 1024, ffn 4096, 512 positions).
pub const SIZE_LIMITS: [(&str, usize); 6] = [
    ("vocab", 1 << 20),
    ("d_model", 1 << 14),
    ("heads", 1 << 10),
    ("layers", 256),
    ("ffn", 1 << 17),
    ("max_len", 1 << 20),
];

/// At most this many parameters (16 GiB of f32 weights; AdamW triples it).
pub const MAX_PARAMETERS: u64 = 1 << 32;

/// A pre-norm Transformer's configuration. In JSON (TOML reads the same through serde):
///
/// ```json
/// { "vocab": 31, "d_model": 32, "heads": 2, "layers": 2, "ffn": 128, "max_len": 64,
///   "kind": { "type": "causal_lm", "tied_head": true },
///   "posenc": { "type": "sinusoidal", "every_block": false }, "embed_scale": "sqrt_d",
///   "block": { "type": "rk2", "gamma": [0.5, 0.5] } }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Token ids are in `[0, vocab)`.
    pub vocab: usize,
    pub d_model: usize,
    pub heads: usize,
    pub layers: usize,
    /// The feed-forward network's hidden size (usually 4·d_model).
    pub ffn: usize,
    /// The probability of dropping an element of the embeddings and of each sub-block's output
    /// during training (GPT-2's sites; `attention_dropout` and `activation_dropout` are the
    /// other two). In [0, 1); optional in a config file, default 0.
    #[serde(default)]
    pub dropout: f32,
    /// The longest sequence a position table holds (learned positions, TUPE's, a relative bias
    /// with `learned_absolute`: `PosEnc::has_table`); other encodings take any length.
    pub max_len: usize,
    pub kind: ModelKind,
    pub posenc: PosEnc,
    /// How the token embeddings are scaled. Optional in a config file; defaults to `sqrt_d` in a
    /// run config whose encoding adds a fixed table to them (sinusoidal, FLOATER), as the papers
    /// do, and to `none` otherwise (and in a checkpoint, which always says).
    #[serde(default)]
    pub embed_scale: EmbedScale,
    /// How each block steps its input: a residual (Euler) step or a Runge-Kutta one. Optional in
    /// a config file; defaults to `residual`.
    #[serde(default)]
    pub block: Block,
    /// What each Runge-Kutta stage returns: the sub-block `F(y)` (the paper's equations) or the
    /// whole layer `y + F(y)` (the authors' code). Optional; defaults to `sub_block`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub rk_stage: RkStage,
    /// How blocks feed one another: in a chain, or through the authors' layer history. Optional;
    /// defaults to `none`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub history: History,
    /// The FFN's nonlinearity, written by its up-projection: `gelu` (GPT-2, BERT) or `relu`
    /// (Vaswani et al.; fairseq, under FLOATER's and the ODE Transformer's authors' code).
    /// Optional; defaults to `gelu`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub activation: Activation,
    /// The probability of dropping an element of the FFN's activations (after the activation) in training,
    /// in [0, 1) (the ODE Transformer's and BERT's `relu_dropout` / `activation_dropout`).
    /// Optional; defaults to 0.
    #[serde(default, skip_serializing_if = "is_default")]
    pub activation_dropout: f32,
    /// The probability of dropping an attention probability in training, in [0, 1) (BERT's and
    /// fairseq's `attention_dropout`; inside the fused attention, so no `[H, L, L]` tensor is
    /// made). Optional; defaults to 0.
    #[serde(default, skip_serializing_if = "is_default")]
    pub attention_dropout: f32,
    /// Where each block's layer norms sit: before its sub-blocks (GPT-2, the default) or after
    /// each residual add (BERT, as the TUPE authors trained). Optional; defaults to `pre`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub norm: Norm,
    /// The factor on every attention's word term `q·k`. Optional: unset, the position
    /// encoding's own (TUPE's 1/√(2·Dh), every other's 1/√Dh); set, that factor for any encoding,
    /// e.g. `word_scale = "tupe"` on learned positions, to separate TUPE's cooler word logits from
    /// its position term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word_scale: Option<WordScale>,
    /// How the projections and token table start ([`InitScheme`]): `gpt2`, `bert` or `fairseq`
    /// (Xavier-uniform, the FLOATER and ODE Transformer authors' code). Optional: unset, the
    /// norm's own: `gpt2` for pre-LN, `bert` for post-LN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<InitScheme>,
    /// Whether a layer norm `emb_ln` reads the embeddings (after the input position term).
    /// Optional: unset, the norm's own: BERT's post-LN has one (the TUPE authors'
    /// `--embedding-normalize`), pre-LN none; fairseq's post-LN Transformer (FLOATER's) has none,
    /// `embedding_norm = false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding_norm: Option<bool>,
    /// Whether the attention projections (q|k|v and the output, a decoder's cross-attention's
    /// too) have static biases. Optional: unset, they do (GPT-2, BERT, fairseq);
    /// `attention_biases = false` is Delétang et al.'s and Ruoss et al.'s encoder (haiku's
    /// attention `with_bias = False`). FLOATER's compatible form supplies the q|k|v biases
    /// itself either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_biases: Option<bool>,
    /// Ruoss et al.'s randomized positions: each batch's T tokens sit at a sorted sample of T
    /// distinct positions of 0..random_positions (their L, 2048), drawn once per batch in training
    /// and in evaluation, for every encoding that reads positions (`model::posenc::Positions`).
    /// Unset: the tokens sit at 0..T. Not for a seq2seq model, so far. Generation and mask
    /// filling read the tokens at one fixed draw (`inference::INFERENCE_POSITIONS_SEED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_positions: Option<usize>,
}

impl Default for ModelConfig {
    /// The smallest model worth training: a 2-layer causal LM of width 32 over 32 tokens, no
    /// position encoding, every option at its default. Config files name every size; code that
    /// builds a config (tests, examples) starts here and sets what it needs.
    fn default() -> Self {
        Self {
            vocab: 32,
            d_model: 32,
            heads: 2,
            layers: 2,
            ffn: 128,
            dropout: 0.0,
            max_len: 64,
            kind: ModelKind::CausalLm { tied_head: true },
            posenc: PosEnc::default(),
            embed_scale: EmbedScale::None,
            block: Block::Residual,
            rk_stage: RkStage::SubBlock,
            history: History::None,
            activation: Activation::Gelu,
            activation_dropout: 0.0,
            attention_dropout: 0.0,
            norm: Norm::Pre,
            word_scale: None,
            init: None,
            embedding_norm: None,
            attention_biases: None,
            random_positions: None,
        }
    }
}

/// Where a block's layer norms sit. In TOML: `norm = "post"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// `y + F(y)` with `F`'s layer norms on its inputs (GPT-2), and a final `ln_f`.
    #[default]
    Pre,
    /// The post-LN block of Vaswani et al., BERT's and fairseq's (`encoder_normalize_before =
    /// False`): `m = LN1(y + Drop(Attn(y)))`, `y' = LN2(m + Drop(FFN(m)))`, a decoder's
    /// cross-attention between them as `LN_cross(m + Drop(Cross(m)))`; no `ln_f`, the last block's
    /// output being normalised already. Unless set otherwise, BERT's (the TUPE authors'
    /// `--embedding-normalize`): a layer norm `emb_ln` on the embeddings (`embedding_norm`) and
    /// N(0, 0.02) for every projection (`init = "bert"`). Residual blocks only: a Runge-Kutta
    /// stage is a pre-norm `F`.
    Post,
}

/// The factor on attention's word term. In TOML: `word_scale = "tupe"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WordScale {
    /// `1/√Dh`, Vaswani et al.'s.
    Standard,
    /// `1/√(2·Dh)`, TUPE's (its word and position terms share the factor): `"tupe"`.
    #[serde(rename = "tupe")]
    SqrtTwoDh,
}

impl WordScale {
    /// The factor for heads of `head_dim`.
    pub fn factor(self, head_dim: usize) -> f32 {
        match self {
            Self::Standard => 1.0 / (head_dim as f32).sqrt(),
            Self::SqrtTwoDh => 1.0 / (2.0 * head_dim as f32).sqrt(),
        }
    }
}

/// What each stage `k_i` of a Runge-Kutta block is (ODE Transformer; see
/// docs/fidelity.md §3). In TOML: `rk_stage = "layer"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RkStage {
    /// `F(y)`, the sub-block without its input, as the paper's equations: RK2 is
    /// `y + ½F1 + ½F(y + F1)`.
    #[default]
    SubBlock,
    /// `G(y) = y + F(y)`, the whole layer with its residual, as every released and compiled
    /// version of the authors' code (each stage calls the fairseq layer): RK2 is
    /// `y + ½(G1 + G2)` with stage 2 at `y + G1 = 2y + F1`, and the gate reads `[G1, G2]` and
    /// starts Xavier-uniform, as theirs. A residual block is `G(y)` in both forms. The stream
    /// grows ×2.5 (RK2) to ×4 (γ = 1) per block, which the authors' layer history
    /// ([`History::Dense`]) normalises away.
    Layer,
}

/// How each block's input is formed from the ones before it. In TOML: `history = "dense"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum History {
    /// A chain: each block reads the previous block's output, and a final layer norm (`ln_f`)
    /// reads the last.
    #[default]
    None,
    /// The authors' `dense` layer history (fairseq/modules/layer_history.py, pre-norm): each
    /// block's output goes through its own layer norm `history.ln.i`, each block reads the mean
    /// of the embeddings and the earlier blocks' normalised outputs, and the stack's output is
    /// the mean of all of them. A causal LM then has no `ln_f`, as their LM (`final_norm =
    /// False`); an encoder keeps it, as their encoder.
    Dense,
    /// `learnable_dense` (their translation configs): the mean replaced by learned weights,
    /// block i reading `Σ_j w_ij·x_j` over the embeddings and the i normalised outputs before it,
    /// each row `history.mix.i` `[i + 1]` starting at the mean.
    LearnableDense,
}

/// The step each block takes (ODE Transformer, Li et al. 2022). `F(y) = a + FFN(LN2(y + a))` with
/// `a = Attn(LN1(y))` is the pre-norm attention+FFN sub-block minus its input, each output through
/// dropout in training; every stage of a block evaluates `F` with the block's one set of
/// parameters. In TOML:
///
/// ```toml
/// block = { type = "residual" }                  # y + F(y), the default
/// block = { type = "rk2" }                       # γ = ½, ½ (Heun)
/// block = { type = "rk2", gamma = [1.0, 1.0] }   # the paper's RK2 with γ = 1, 1
/// block = { type = "rk2_gated" }                 # y + g·F1 + (1 − g)·F2, g learned per position
/// block = { type = "rk4" }
/// block = { type = "rk2", learned = "scalar" }  # γ learned, from [1, 1] (the authors' code)
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "BlockSpec", into = "BlockSpec")]
pub enum Block {
    /// `y' = y + F(y)`: the pre-norm Transformer block, one Euler step.
    #[default]
    Residual,
    /// `F1 = F(y)`, `F2 = F(y + F1)`, `y' = y + γ1·F1 + γ2·F2`; `gamma` defaults to `[0.5, 0.5]`.
    Rk2 { gamma: [f32; 2] },
    /// RK2's stages, combined by a learned gate: `g = sigmoid([F1, F2]·W + b)` for each position,
    /// `y' = y + g·F1 + (1 − g)·F2`, with `blocks.i.gate.weight` `[2·d_model, 1]` and
    /// `blocks.i.gate.bias` `[1]`, both initialised to 0 so that the block starts as RK2 with
    /// γ = ½, ½.
    Rk2Gated,
    /// RK2 with its two coefficients learned (the authors' `rk_type = "initialization"`):
    /// `y' = y + α1·F1 + α2·F2`, α starting at `gamma` (`[1, 1]` unless set, as theirs), one
    /// scalar each (`[1]`: their released code) or one per channel (`[d_model]`: their compiled
    /// 2021 encoder); `blocks.i.alpha1`, `alpha2`, or with `rk_stage = "layer"` the stack's
    /// one pair `rk.alpha1`, `rk.alpha2` shared by its blocks, as theirs.
    Rk2Learned {
        gamma: [f32; 2],
        coefficients: Coefficients,
    },
    /// `F1 = F(y)`, `F2 = F(y + ½F1)`, `F3 = F(y + ½F2)`, `F4 = F(y + F3)`,
    /// `y' = y + (F1 + 2F2 + 2F3 + F4)/6`.
    Rk4,
}

/// A [`Block`] as written in a config: its `type`, and `gamma` for `rk2` only. (Serde's tagged
/// enums would let a unit variant ignore a stray `gamma`.)
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockSpec {
    #[serde(rename = "type")]
    kind: BlockType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gamma: Option<Vec<f32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    learned: Option<Coefficients>,
}

/// The shape of RK2's learned coefficients ([`Block::Rk2Learned`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Coefficients {
    /// One scalar per coefficient.
    Scalar,
    /// One value per channel of the model.
    Channel,
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum BlockType {
    Residual,
    Rk2,
    Rk2Gated,
    Rk4,
}

impl TryFrom<BlockSpec> for Block {
    type Error = String;

    fn try_from(spec: BlockSpec) -> std::result::Result<Self, String> {
        if spec.kind != BlockType::Rk2 {
            if spec.gamma.is_some() {
                return Err("block.gamma is a setting of type rk2 only".into());
            }
            if spec.learned.is_some() {
                return Err("block.learned is a setting of type rk2 only".into());
            }
        }
        let gamma = |default: [f32; 2]| match spec.gamma.as_deref() {
            None => Ok(default),
            Some(&[g1, g2]) => Ok([g1, g2]),
            Some(other) => Err(format!(
                "block.gamma takes the 2 coefficients of F1 and F2, got {other:?}"
            )),
        };
        match (spec.kind, spec.learned) {
            (BlockType::Rk2, None) => Ok(Self::Rk2 {
                gamma: gamma([0.5, 0.5])?,
            }),
            (BlockType::Rk2, Some(coefficients)) => Ok(Self::Rk2Learned {
                gamma: gamma([1.0, 1.0])?,
                coefficients,
            }),
            (BlockType::Residual, _) => Ok(Self::Residual),
            (BlockType::Rk2Gated, _) => Ok(Self::Rk2Gated),
            (BlockType::Rk4, _) => Ok(Self::Rk4),
        }
    }
}

impl Block {
    /// RK2's coefficients (the starting ones, where they are learned).
    pub fn gamma(&self) -> Option<[f32; 2]> {
        match *self {
            Self::Rk2 { gamma } | Self::Rk2Learned { gamma, .. } => Some(gamma),
            _ => None,
        }
    }

    /// How many times a block of this kind evaluates `F`.
    pub fn stages(&self) -> usize {
        match self {
            Self::Residual => 1,
            Self::Rk2 { .. } | Self::Rk2Gated | Self::Rk2Learned { .. } => 2,
            Self::Rk4 => 4,
        }
    }
}

impl From<Block> for BlockSpec {
    fn from(block: Block) -> Self {
        let (kind, gamma, learned) = match block {
            Block::Residual => (BlockType::Residual, None, None),
            Block::Rk2 { gamma } => (BlockType::Rk2, Some(gamma.to_vec()), None),
            Block::Rk2Learned { gamma, coefficients } => {
                (BlockType::Rk2, Some(gamma.to_vec()), Some(coefficients))
            }
            Block::Rk2Gated => (BlockType::Rk2Gated, None, None),
            Block::Rk4 => (BlockType::Rk4, None, None),
        };
        Self { kind, gamma, learned }
    }
}

/// The factor on the token-embedding lookup, and the matching init of `tok_emb.weight`.
///
/// The default is `none` (GPT-2), whatever the position encoding: a default that depended on
/// another field would surprise, and `none` keeps earlier configs and checkpoints meaning what
/// they meant. Set `sqrt_d` with an additive fixed table (`sinusoidal`): that table has
/// amplitude 1, so GPT-2's N(0, 0.02) embeddings are drowned by it after the first layer norm and
/// the model barely learns which token is where (see the copy-task tests in `tests/suite/model.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbedScale {
    /// GPT-2: `tok_emb[tokens]`, the table initialised N(0, 0.02).
    #[default]
    None,
    /// Vaswani et al. / fairseq: `tok_emb[tokens] · √d_model`, the table initialised
    /// N(0, 1/√d_model), so the scaled embeddings start with std 1, as the sinusoidal table's
    /// entries. A tied LM head uses the same table unscaled, as fairseq does.
    SqrtD,
}

/// What the model predicts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ModelKind {
    /// Decoder-only: causal attention, next-token logits `[B, L, vocab]`.
    CausalLm {
        /// The output head is the token embedding table, transposed (GPT-2); otherwise its own
        /// `[d_model, vocab]` weight. Defaults to true.
        #[serde(default = "tied_by_default")]
        tied_head: bool,
    },
    /// Bidirectional encoder: position 0 holds the data layer's BOS token, used as `[CLS]`; its
    /// final state is classified into `n_classes`, logits `[B, n_classes]`.
    Encoder { n_classes: usize },
    /// Bidirectional encoder pretrained by masked-language modelling (BERT): position 0 holds the
    /// BOS token as `[CLS]`, hidden tokens are `<mask>` (a masked LM's tokenizer has it), and every
    /// position gets logits `[B, L, vocab]` from BERT's head: a dense layer, GELU and a layer norm,
    /// then the token table transposed (tied, as BERT's) plus a bias. An `encoder` classifier
    /// warm-starts from its checkpoint, leaving the head behind.
    MaskedLm {},
    /// Bidirectional encoder that classifies every position into `n_classes` with one linear
    /// layer (Delétang et al.'s readout for the Chomsky-hierarchy tasks): logits `[B, L,
    /// n_classes]`, a loss at the positions that have a target (the placeholders after the
    /// input). No `[CLS]`; batches are padded, padding hidden by a key mask.
    TokenClassifier { n_classes: usize },
    /// Encoder-decoder: the config's `layers` encoder blocks (stepped as `block`) read the source
    /// bidirectionally, source padding hidden by a key mask; `decoder_layers` decoder blocks
    /// (stepped as `decoder_block`) read the target causally and attend to the encoder's output.
    /// One token table serves the source, the target and (tied) the output layer; next-token
    /// logits `[B, T, vocab]`. In a config: `type = "seq2seq"`.
    #[serde(rename = "seq2seq")]
    Seq2Seq {
        /// The output layer is the token table, transposed (the ODE Transformer's shared
        /// embeddings); otherwise its own `[d_model, vocab]` weight. Defaults to true.
        #[serde(default = "tied_by_default")]
        tied_head: bool,
        decoder_layers: usize,
        /// How each decoder block steps; defaults to `residual` (the ODE Transformer puts its
        /// Runge-Kutta blocks in the encoder for translation).
        #[serde(default)]
        decoder_block: Block,
    },
}

fn tied_by_default() -> bool {
    true
}

impl ModelKind {
    /// Whether position 0 is a `[CLS]` the model reads: an encoder's (classifier or masked LM).
    pub fn reads_cls(&self) -> bool {
        matches!(self, Self::Encoder { .. } | Self::MaskedLm {})
    }

    /// Whether the model's batches are padded, so that its graphs take a key mask: a
    /// classifier's texts and a token classifier's examples have many lengths.
    pub fn pads_batches(&self) -> bool {
        matches!(self, Self::Encoder { .. } | Self::TokenClassifier { .. })
    }

    /// The number of classes of a classifier's or a token classifier's head.
    pub fn n_classes(&self) -> Option<usize> {
        match *self {
            Self::Encoder { n_classes } | Self::TokenClassifier { n_classes } => Some(n_classes),
            _ => None,
        }
    }
}

impl ModelConfig {
    /// [`ModelConfig::validate`] for a config whose `vocab` the data has not set yet (a run
    /// config's, before its trainer loads the data): every check but the vocabulary's. Those
    /// only ask for enough ids (the special tokens) and bound the parameter count, which a
    /// smaller vocabulary only lowers, so the checks run with the smallest vocabulary any kind
    /// accepts; the trainer checks the whole config again once the data says the vocabulary.
    pub fn validate_without_vocab(&self) -> Result<()> {
        let specials = [
            crate::data::BOS as usize,
            crate::data::EOS as usize,
            crate::data::MASKED_LM_TOKENS.len(),
        ];
        let smallest = 1 + specials.into_iter().max().unwrap_or(0);
        Self {
            vocab: smallest,
            ..self.clone()
        }
        .validate()
    }

    /// Checks every constraint the graph builder relies on; errors name the fields and values.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("vocab", self.vocab),
            ("d_model", self.d_model),
            ("heads", self.heads),
            ("layers", self.layers),
            ("ffn", self.ffn),
            ("max_len", self.max_len),
        ];
        for (field, value) in positive {
            if value == 0 {
                return config_err(format!("{field} must be positive, got 0"));
            }
        }
        for (field, value) in positive {
            let limit = size_limit(field);
            if value > limit {
                return config_err(format!("{field} is {value}, over posflow's limit of {limit}"));
            }
        }
        let parameters = self.estimated_parameters();
        if parameters > MAX_PARAMETERS {
            return config_err(format!(
                "the model would have about {parameters} parameters ({:.1} GiB of weights), over \
                 posflow's limit of {MAX_PARAMETERS}",
                parameters as f64 * 4.0 / (1u64 << 30) as f64
            ));
        }
        if !self.d_model.is_multiple_of(self.heads) {
            return config_err(format!(
                "d_model {} is not divisible by heads {}",
                self.d_model, self.heads
            ));
        }
        let head_dim = self.head_dim();
        if head_dim > MAX_HEAD_DIM {
            return config_err(format!(
                "head dimension d_model / heads = {} / {} = {head_dim} is over attention's limit of \
                 {MAX_HEAD_DIM}; use more heads",
                self.d_model, self.heads
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return config_err(format!("dropout must be in [0, 1), got {}", self.dropout));
        }
        if let Some(gamma) = self.block.gamma()
            && !gamma.iter().all(|c| c.is_finite())
        {
            return config_err(format!("block.gamma must be finite, got {gamma:?}"));
        }
        for (field, p) in [
            ("activation_dropout", self.activation_dropout),
            ("attention_dropout", self.attention_dropout),
        ] {
            if !(0.0..1.0).contains(&p) {
                return config_err(format!("{field} must be in [0, 1), got {p}"));
            }
        }
        if self.norm == Norm::Post {
            self.validate_post_norm()?;
        }
        if self.history != History::None && matches!(self.kind, ModelKind::Seq2Seq { .. }) {
            return config_err(
                "history is for the causal LM, the masked LM and the classifier so far; a seq2seq \
                 model cannot have one yet"
                    .into(),
            );
        }
        if let ModelKind::Seq2Seq {
            decoder_layers,
            decoder_block,
            ..
        } = self.kind
        {
            self.validate_decoder(decoder_layers, decoder_block)?;
        }
        if self.kind.n_classes() == Some(0) {
            return config_err("an encoder or token classifier needs n_classes ≥ 1, got 0".into());
        }
        if let ModelKind::Encoder { .. } = self.kind
            && self.vocab <= crate::data::BOS as usize
        {
            return config_err(format!(
                "an encoder reads the BOS token (id {}) as [CLS], but vocab is {}",
                crate::data::BOS,
                self.vocab
            ));
        }
        if matches!(self.kind, ModelKind::MaskedLm {}) {
            self.validate_masked_lm()?;
        }
        if let Some(range) = self.random_positions {
            self.validate_random_positions(range)?;
        }
        self.posenc
            .check(&self.facts())
            .map_err(|e| Error::Input(format!("model config: posenc: {e}")))?;
        Ok(())
    }

    /// Randomized positions: a range posflow holds, on the model kind that has them.
    fn validate_random_positions(&self, range: usize) -> Result<()> {
        if !(1..=MAX_RANDOM_POSITIONS).contains(&range) {
            return config_err(format!(
                "random_positions must be in 1..={MAX_RANDOM_POSITIONS}, got {range}"
            ));
        }
        // A seq2seq model reads positions in its encoder, its decoder and every decoding step's
        // cache: three places a draw would have to agree, which nobody has asked for yet.
        if matches!(self.kind, ModelKind::Seq2Seq { .. }) {
            return config_err(
                "random_positions is for models of one token sequence (causal LM, masked LM, \
                 encoder, token classifier); a seq2seq model cannot have it yet"
                    .into(),
            );
        }
        Ok(())
    }

    /// What a masked LM needs: its special tokens (its encoding's own check asks for one that
    /// works without a causal mask).
    fn validate_masked_lm(&self) -> Result<()> {
        let specials = crate::data::MASKED_LM_TOKENS.len();
        if self.vocab <= specials {
            return config_err(format!(
                "a masked LM's vocabulary starts with {specials} special tokens ({}), so vocab must \
                 be above {specials}, got {}",
                crate::data::MASKED_LM_TOKENS.join(" "),
                self.vocab
            ));
        }
        Ok(())
    }

    /// What a post-LN model cannot have: Runge-Kutta stages (an encoder's or a decoder's) and
    /// the layer history are pre-norm constructions.
    fn validate_post_norm(&self) -> Result<()> {
        if self.block != Block::Residual || self.rk_stage != RkStage::SubBlock {
            return config_err(
                "norm = \"post\" is BERT's residual block; a Runge-Kutta block (and rk_stage) \
                 steps a pre-norm sub-block: use norm = \"pre\" with it"
                    .into(),
            );
        }
        if self.history != History::None {
            return config_err(
                "norm = \"post\" and a layer history both normalise each block's output; the \
                 history is the ODE Transformer's pre-norm construction: use norm = \"pre\""
                    .into(),
            );
        }
        if let ModelKind::Seq2Seq { decoder_block, .. } = self.kind
            && decoder_block != Block::Residual
        {
            return config_err(
                "norm = \"post\" is a residual block; a Runge-Kutta decoder_block steps a \
                 pre-norm sub-block: use norm = \"pre\" with it"
                    .into(),
            );
        }
        Ok(())
    }

    /// The init scheme: the config's `init`, or the norm's own (GPT-2's for pre-LN, BERT's for
    /// post-LN).
    pub fn init_scheme(&self) -> InitScheme {
        self.init.unwrap_or(match self.norm {
            Norm::Pre => InitScheme::Gpt2,
            Norm::Post => InitScheme::Bert,
        })
    }

    /// Whether the attention projections have static biases: the config's
    /// `attention_biases`, or yes.
    pub fn has_attention_biases(&self) -> bool {
        self.attention_biases.unwrap_or(true)
    }

    /// Whether the embeddings go through a layer norm: the config's `embedding_norm`, or the
    /// norm's own (BERT's post-LN has one).
    pub fn has_embedding_norm(&self) -> bool {
        self.embedding_norm.unwrap_or(self.norm == Norm::Post)
    }

    /// The attention op's factor on `q·k`: the config's `word_scale`, or else the position
    /// encoding's (`encoding`, TUPE's), or else `1/√Dh`.
    pub fn attention_scale(&self, encoding: Option<f32>) -> f32 {
        match self.word_scale {
            Some(scale) => scale.factor(self.head_dim()),
            None => encoding.unwrap_or_else(|| WordScale::Standard.factor(self.head_dim())),
        }
    }

    /// What the model around its position encoding is, as the encoding's check reads it.
    pub fn facts(&self) -> ModelFacts {
        ModelFacts {
            dims: self.dims(),
            seq2seq: matches!(self.kind, ModelKind::Seq2Seq { .. }),
            reads_cls: self.kind.reads_cls(),
            masked_lm: matches!(self.kind, ModelKind::MaskedLm {}),
            random_positions: self.random_positions,
        }
    }

    /// The decoder's sizes, and what the seq2seq decoder can be built with.
    fn validate_decoder(&self, decoder_layers: usize, decoder_block: Block) -> Result<()> {
        let limit = size_limit("layers");
        if !(1..=limit).contains(&decoder_layers) {
            return config_err(format!(
                "decoder_layers must be in 1..={limit}, got {decoder_layers}"
            ));
        }
        if let Some(gamma) = decoder_block.gamma()
            && !gamma.iter().all(|c| c.is_finite())
        {
            return config_err(format!("decoder_block.gamma must be finite, got {gamma:?}"));
        }
        let specials = crate::data::BOS.max(crate::data::EOS) as usize;
        if self.vocab <= specials {
            return config_err(format!(
                "a seq2seq model starts each target with BOS (id {}) and ends it with EOS (id {}), \
                 but vocab is {}",
                crate::data::BOS,
                crate::data::EOS,
                self.vocab
            ));
        }
        Ok(())
    }

    /// The number of parameters, from the sizes alone (an upper estimate: every matrix and
    /// table the largest variant of each part has), so that a model too large to hold is refused
    /// before anything is built. Saturating: the sizes are untrusted.
    pub fn estimated_parameters(&self) -> u64 {
        let [vocab, d, layers, ffn, max_len] =
            [self.vocab, self.d_model, self.layers, self.ffn, self.max_len].map(|v| v as u64);
        let block = (4 * d)
            .saturating_mul(d)
            .saturating_add((2 * d).saturating_mul(ffn));
        // A decoder block has a cross-attention (4 d × d) on top of a block's parts.
        let decoder = match self.kind {
            ModelKind::Seq2Seq { decoder_layers, .. } => block
                .saturating_add((4 * d).saturating_mul(d))
                .saturating_mul(decoder_layers as u64)
                .saturating_add(max_len.saturating_mul(d)),
            _ => 0,
        };
        // Embedding, head, a position table of max_len rows, and FLOATER's or TUPE's own
        // matrices (a few d × d) on top.
        vocab
            .saturating_mul(d)
            .saturating_mul(2)
            .saturating_add(max_len.saturating_mul(d))
            .saturating_add(block.saturating_mul(layers))
            .saturating_add(d.saturating_mul(d).saturating_mul(8))
            .saturating_add(decoder)
    }

    /// What a position encoding reads of the model (of a seq2seq model: of its encoder).
    pub fn dims(&self) -> ModelDims {
        ModelDims {
            d_model: self.d_model,
            heads: self.heads,
            layers: self.layers,
            max_len: self.max_len,
            bidirectional: !matches!(self.kind, ModelKind::CausalLm { .. }),
        }
    }

    /// What a seq2seq model's decoder-side position encodings read (causal, `decoder_layers`
    /// blocks); `None` for the other kinds.
    pub fn decoder_dims(&self) -> Option<ModelDims> {
        match self.kind {
            ModelKind::Seq2Seq { decoder_layers, .. } => Some(ModelDims {
                layers: decoder_layers,
                bidirectional: false,
                ..self.dims()
            }),
            _ => None,
        }
    }

    pub fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }

    /// Parses and validates a JSON config.
    pub fn from_json(text: &str) -> Result<Self> {
        let config: Self =
            serde_json::from_str(text).map_err(|e| Error::Input(format!("model config: {e}")))?;
        config.validate()?;
        Ok(config)
    }
}

fn size_limit(field: &str) -> usize {
    SIZE_LIMITS
        .iter()
        .find_map(|&(name, limit)| (name == field).then_some(limit))
        .unwrap_or(usize::MAX)
}

fn config_err<T>(detail: String) -> Result<T> {
    Err(Error::Input(format!("model config: {detail}")))
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
