//! What a position encoding is to the rest of posflow: the [`Encoding`] trait, the terms it adds to
//! a graph ([`PositionTerms`]) and what the model around it is ([`ModelDims`], [`ModelFacts`]).
//! Each encoding's file implements the trait for its settings; the registry
//! ([`super::PosEnc`]) picks one by the config's `type`. Nothing else names an encoding.

use super::positions::{OffsetInput, OffsetValues, PairOffsets, Positions};
use crate::error::{Error, Result};
use crate::graph::{Graph, TensorId};
use crate::ops::attention::AttentionBias;

/// The sizes of the model an encoding is built for: all it reads of a model config
/// ([`crate::model::ModelConfig::dims`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelDims {
    pub d_model: usize,
    pub heads: usize,
    pub layers: usize,
    /// The longest sequence a learned position table holds.
    pub max_len: usize,
    /// An encoder: positions attend both ways (T5's buckets tell left from right).
    pub bidirectional: bool,
}

impl ModelDims {
    /// The width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.heads.max(1)
    }
}

/// What the model around an encoding is, as the encoding's checks read it
/// ([`crate::model::ModelConfig::facts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelFacts {
    pub dims: ModelDims,
    /// An encoder, a decoder and the decoder's cross-attention.
    pub seq2seq: bool,
    /// A `[CLS]` token at position 0 (a classifier or a masked LM).
    pub reads_cls: bool,
    /// A masked LM: it attends both ways, with no causal mask to learn order from.
    pub masked_lm: bool,
    /// Randomized positions drawn from 0..L (`posenc::positions`): a table must hold L rows.
    pub random_positions: Option<usize>,
}

/// Where a graph's FLOATER encodings come from (every other encoding has nothing to solve and
/// ignores it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EncodingSource {
    /// The graph solves the ODE (and trains its parameters).
    #[default]
    Solve,
    /// The graph takes the encodings of an earlier solve as the input
    /// [`super::ENCODINGS_INPUT`]: the caching the paper describes, between re-solves in training
    /// and once per length at inference. Such a graph declares no dynamics, so it trains
    /// everything else.
    Input,
}

/// The position terms of one graph, grouped by where each enters the model: the residual stream
/// (at the input, at each block's input), every block's attention ([`AttentionTerms`], which a
/// block reads whole), and the graph inputs they are read from ([`TermInputs`]). An encoding fills
/// what it has; a new kind of term extends one group.
#[derive(Clone, Debug, Default)]
pub struct PositionTerms {
    /// `[L, d_model]`, added to the token embeddings (broadcast over the batch).
    pub at_input: Option<TensorId>,
    /// `[L, d_model]` per block, added to the input of block i; empty when none.
    pub at_block: Vec<TensorId>,
    /// What every block's attention reads.
    pub attention: AttentionTerms,
    /// The graph inputs the terms are read from, and how each is written.
    pub inputs: TermInputs,
}

/// What position adds inside attention, for every block alike (the per-block lists indexed by
/// block): a bias on the logits, their scale, a rotation of queries and keys, and biases on the
/// projections.
#[derive(Clone, Debug, Default)]
pub struct AttentionTerms {
    /// Added to every layer's attention logits: TUPE's dense `[heads, L, L]` term (its length
    /// bounded by its table's `max_len`), or a table read by bucket inside the kernels (T5's
    /// trained one, ALiBi's fixed one), so that no `[heads, L, L]` tensor exists at any length.
    pub bias: Option<AttentionBias>,
    /// The factor on q·k when it is not the usual `1/√Dh` (TUPE: `1/√(2·Dh)`).
    pub scale: Option<f32>,
    /// RoPE: the `[L, Dh]` table ([`crate::ops::rope::rope_table`]) every layer's queries and
    /// keys are turned by.
    pub rope: Option<TensorId>,
    /// `[L, 3·d_model]` per block, added to its q|k|v projection (FLOATER's compatible form).
    pub qkv_bias: Vec<TensorId>,
    /// `[L, d_model]` per decoder block, added to its cross-attention's q projection (FLOATER's
    /// compatible form in a seq2seq decoder); empty elsewhere.
    pub cross_q_bias: Vec<TensorId>,
}

impl AttentionTerms {
    /// A bias on the logits, nothing else.
    pub fn biased(bias: AttentionBias) -> Self {
        Self {
            bias: Some(bias),
            ..Self::default()
        }
    }
}

/// The graph inputs position terms are read from, and how each is written.
#[derive(Clone, Debug, Default)]
pub struct TermInputs {
    /// Constant inputs and their values, written before each run.
    pub constants: Vec<(TensorId, Constant)>,
    /// Randomized positions: the inputs that hold a value per pair's offset, written each time
    /// positions are drawn.
    pub pair_offsets: Vec<PairOffsets>,
    /// FLOATER: every block's encodings in one tensor ([`super::encodings_shape`]), solved by the
    /// graph or its input ([`EncodingSource`]).
    pub encodings: Option<TensorId>,
}

impl TermInputs {
    /// Records how `offsets`' input is written and returns it.
    pub fn read(&mut self, offsets: OffsetInput) -> TensorId {
        let input = offsets.input;
        match offsets.values {
            OffsetValues::Fixed(values) => self.constants.push((input, Constant::I32(values))),
            OffsetValues::PerDraw(pairs) => self.pair_offsets.push(pairs),
        }
        input
    }
}

/// The values of a constant graph input.
#[derive(Clone, Debug)]
pub enum Constant {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// What the viewer draws of an encoding at one length, and what it says of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Description {
    /// What the encoding is and where it enters the model.
    pub note: String,
    pub drawn: Drawn,
}

/// What of an encoding there is to draw as a positions × columns map.
#[derive(Clone, Debug, PartialEq)]
pub enum Drawn {
    /// Nothing: no table, nothing added to the residual stream.
    Nothing,
    /// A trained `[max_len, d_model]` table: its parameter (each side's own, under `encoder.` and
    /// `decoder.`, in a seq2seq model) and the label of its map.
    Table {
        parameter: &'static str,
        label: &'static str,
    },
    /// What the encoding's graph adds to the residual stream or the q|k|v projections, computed
    /// at the length asked for.
    Terms,
    /// Values the settings fix, `[len, columns]` row-major, and their label.
    Fixed {
        label: &'static str,
        columns: usize,
        values: Vec<f32>,
    },
}

/// A ready-made setting of an encoding, under a name unique over the registry: what the Compare
/// tab offers, the benchmarks time and the studies' generators write.
#[derive(Debug, PartialEq, Eq)]
pub struct Preset {
    pub name: &'static str,
    pub label: &'static str,
    /// Its `posenc` as TOML, for a causal LM or a seq2seq model.
    pub posenc: &'static str,
    /// Its `posenc` in an encoder (a token classifier), where it differs.
    pub encoder_posenc: Option<&'static str>,
    /// Whether it reads where the tokens sit, so that randomized positions mean something.
    pub reads_positions: bool,
}

impl Preset {
    /// Its `posenc` for a model that is an encoder or not.
    pub fn posenc_for(&self, encoder: bool) -> &'static str {
        match self.encoder_posenc {
            Some(posenc) if encoder => posenc,
            _ => self.posenc,
        }
    }
}

/// An encoding's presets, listed beside its settings in its own file; the registry gathers them.
pub trait Presets {
    const PRESETS: &'static [Preset];
    /// Its forms besides the presets' that the tests build every model kind with (the
    /// sinusoidal table at every block, FLOATER's additive form), as `posenc` TOML.
    const OTHER_FORMS: &'static [&'static str] = &[];
}

/// A position encoding: its settings, checked against the model, and its terms for every model
/// shape (a batch of sequences, a seq2seq decoder and its cross-attention, one decoding step).
pub trait Encoding {
    /// The short name the viewer, the benchmarks and the reports show.
    fn name(&self) -> String;

    /// Whether these settings suit the model; the error says what does not.
    fn check(&self, _model: &ModelFacts) -> std::result::Result<(), String> {
        Ok(())
    }

    /// The terms of sequences of `at.len` tokens at `at`'s positions (a causal LM, an encoder, a
    /// seq2seq model's encoder), with FLOATER's encodings from `source`. Tables are read through
    /// [`Positions::rows`] and relative offsets through [`Positions::offset_buckets`], so that
    /// randomized positions need nothing of an encoding.
    fn terms(
        &self,
        g: &mut Graph,
        dims: ModelDims,
        at: Positions,
        source: EncodingSource,
    ) -> Result<PositionTerms>;

    /// A seq2seq decoder's terms over `len` target positions (`dims` the decoder's, not
    /// bidirectional), with the cross-attention's q biases where the encoding has them.
    fn decoder_terms(&self, g: &mut Graph, dims: ModelDims, len: usize) -> Result<PositionTerms> {
        self.terms(g, dims, Positions::contiguous(len), EncodingSource::Solve)
    }

    /// A seq2seq decoder's cross-attention k|v biases `[S, 2D]`, one per block, over `len` source
    /// positions; none for most encodings.
    fn cross_kv(&self, _g: &mut Graph, _dims: ModelDims, _len: usize) -> Result<Vec<TensorId>> {
        Ok(Vec::new())
    }

    /// One incremental decoding step's terms: the decoder's, for its one query at position `t`
    /// over the keys 0..=t. Everything is the step graph's own but FLOATER's flow, solved once
    /// for every position and read as the input [`TermInputs::encodings`].
    fn step_terms(&self, _g: &mut Graph, _dims: ModelDims, _t: usize) -> Result<PositionTerms> {
        Err(Error::Input(format!(
            "{} is for the causal LM and the encoder so far; a seq2seq decoder cannot have it yet",
            self.name()
        )))
    }

    /// Whether a learned table bounds the sequence length by `max_len`.
    fn has_table(&self) -> bool {
        false
    }

    /// Whether the `[CLS]` position's positional term is replaced by trained values (TUPE).
    fn unties_cls(&self) -> bool {
        false
    }

    /// Whether a fixed table of amplitude about 1 is added to the embeddings: scaled token
    /// embeddings (`embed_scale = "sqrt_d"`) are then the default, as in the papers' models,
    /// since embeddings of std 0.02 are drowned by it (a character LM stayed on the unigram
    /// plateau, 3.07 against 2.35 with √d).
    fn adds_a_fixed_table(&self) -> bool {
        false
    }

    /// Every how many training steps the encodings are solved again (FLOATER's caching; 1: every
    /// step, as every other encoding's terms are part of the step).
    fn resolve_every(&self) -> usize {
        1
    }

    /// What the viewer draws and says of this encoding in a model of `dims` (`seq2seq`: both
    /// sides of one) at `len` positions.
    fn describe(&self, dims: ModelDims, seq2seq: bool, len: usize) -> Description;

    /// A caution for settings that pass [`Encoding::check`] but take the encoding where its
    /// authors never ran it and where it is known to misbehave, for `posflow train` and
    /// `posflow study` to print beside the model; none for most.
    fn caution(&self, _model: &ModelFacts) -> Option<String> {
        None
    }
}

/// Whether a value is its type's default, so that the options added since a checkpoint format
/// was fixed are left out of its metadata when unset (older posflow versions read it unchanged).
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
