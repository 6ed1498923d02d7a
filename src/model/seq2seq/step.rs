//! Incremental decoding's graphs: the encoder once per batch of sources ([`SourceMemory`]), then
//! one graph per target position t ([`DecoderStep`]) that reads the keys and values the earlier
//! steps computed instead of recomputing them: a decoding step costs one position's work.
//!
//! A step graph is the teacher-forced decoder's code on one position: its blocks put the cached
//! keys and values `[B, H, t, Dh]` of each block and stage before the step's own, its one query
//! sees all of them (causal attention aligned at the end), and its position terms are position
//! t's ([`crate::model::Encoding::step_terms`]). So its logits equal the full decoder's at position t (tested in
//! `tests.rs`), and a beam search reorders the cache rows on the host between steps.

use super::{Sides, cross_memory, encode, output_logits};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::model::block::CrossInputs;
use crate::model::posenc::Constant;
use crate::model::stack::{self, Stack};
use crate::model::transformer::{GraphOptions, GraphShape, Model};
use crate::tensor::TensorMeta;

/// The encoder's graph for decoding: sources in, every decoder block's cross-attention keys and
/// values out.
#[derive(Clone, Debug)]
pub struct SourceMemory {
    pub batch: usize,
    pub source_len: usize,
    /// i32 `[B, S]`.
    pub source: TensorId,
    /// i32 `[B, S]`, 1 for a token and 0 for padding.
    pub source_mask: TensorId,
    /// Per decoder block, the keys and values `[B, H, S, Dh]`.
    pub keys_values: Vec<(TensorId, TensorId)>,
    constants: Vec<(TensorId, Constant)>,
}

/// The graph of one decoding step at target position `position`.
#[derive(Clone, Debug)]
pub struct DecoderStep {
    pub batch: usize,
    pub source_len: usize,
    pub position: usize,
    /// i32 `[B, 1]`: each row's token at `position` (BOS at 0).
    pub token: TensorId,
    /// i32 `[B, S]`.
    pub source_mask: TensorId,
    /// Per decoder block, [`SourceMemory::keys_values`]' values as inputs.
    pub memory: Vec<(TensorId, TensorId)>,
    /// `cache[block][stage]`: the keys and values `[B, H, position, Dh]` of the earlier positions,
    /// inputs; empty at position 0.
    pub cache: Vec<Vec<(TensorId, TensorId)>>,
    /// `[B, 1, vocab]`: the next token's logits.
    pub logits: TensorId,
    /// `keys_values[block][stage]`: this position's keys and values `[B, H, 1, Dh]`, for the
    /// next step's cache.
    pub keys_values: Vec<Vec<(TensorId, TensorId)>>,
    /// FLOATER: row `position` `[1, rows, D]` of the [`DecoderFlow`] graph's trajectory.
    pub encodings: Option<TensorId>,
    constants: Vec<(TensorId, Constant)>,
}

/// Decoding's shapes take no options: they do not train, pad or probe.
fn no_options(options: GraphOptions, shape: &str) -> Result<()> {
    if options == GraphOptions::default() {
        Ok(())
    } else {
        Err(Error::Input(format!(
            "a decoding graph ({shape}) is built without options, got {options:?}"
        )))
    }
}

/// A seq2seq model's encoder for decoding: `batch` sources of `source_len` tokens in, every
/// decoder block's cross-attention keys and values out ([`SourceMemory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sources {
    pub batch: usize,
    pub source_len: usize,
}

impl GraphShape for Sources {
    type Graph = SourceMemory;

    fn build(self, model: &Model, g: &mut Graph, options: GraphOptions) -> Result<SourceMemory> {
        no_options(options, "Sources")?;
        let Sources { batch, source_len } = self;
        let c = model.config();
        let sides = Sides::of(c)?;
        if batch == 0 || source_len == 0 {
            return Err(Error::Input(format!(
                "decoding needs at least one source of at least one token, got {batch} of length {source_len}"
            )));
        }
        let tok_emb = stack::token_table(g, c)?;
        let encoded = encode(g, c, batch, source_len, tok_emb, None, false)?;
        let keys_values = cross_memory(g, c, &sides, encoded.memory, source_len)?;
        Ok(SourceMemory {
            batch,
            source_len,
            source: encoded.source,
            source_mask: encoded.source_mask,
            keys_values,
            constants: encoded.positions.inputs.constants,
        })
    }
}

/// FLOATER: the decoder's flow solved through `len` target positions, `[len, rows, D]`, whose row
/// t each [`DecoderStep`] at t takes; the graph is `None` for every other encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderFlow {
    pub len: usize,
}

impl GraphShape for DecoderFlow {
    type Graph = Option<TensorId>;

    fn build(self, model: &Model, g: &mut Graph, options: GraphOptions) -> Result<Option<TensorId>> {
        no_options(options, "DecoderFlow")?;
        let len = self.len;
        let c = model.config();
        let sides = Sides::of(c)?;
        let terms = g.with_param_prefix("decoder.", |g| c.posenc.decoder_terms(g, sides.decoder, len))?;
        Ok(terms.inputs.encodings)
    }
}

/// The decoding step at target position `position` for `batch` rows of sources of `source_len`
/// tokens ([`DecoderStep`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodingStep {
    pub batch: usize,
    pub source_len: usize,
    pub position: usize,
}

impl GraphShape for DecodingStep {
    type Graph = DecoderStep;

    fn build(self, model: &Model, g: &mut Graph, options: GraphOptions) -> Result<DecoderStep> {
        no_options(options, "DecodingStep")?;
        let DecodingStep {
            batch,
            source_len,
            position,
        } = self;
        let c = model.config();
        let sides = Sides::of(c)?;
        if batch == 0 || source_len == 0 {
            return Err(Error::Input(format!(
                "a decoding step needs at least one row and one source token, got {batch} rows of \
                 sources of length {source_len}"
            )));
        }
        let (heads, dh) = (c.heads, c.head_dim());
        let tok_emb = stack::token_table(g, c)?;
        let token = g.input("token", TensorMeta::i32(&[batch, 1]));
        let source_mask = g.input("source_mask", TensorMeta::i32(&[batch, source_len]));
        let heads_input =
            |g: &mut Graph, name: &str, len: usize| g.input(name, TensorMeta::f32(&[batch, heads, len, dh]));
        let memory: Vec<(TensorId, TensorId)> = (0..sides.decoder.layers)
            .map(|_| {
                (
                    heads_input(g, "memory.k", source_len),
                    heads_input(g, "memory.v", source_len),
                )
            })
            .collect();
        let cache: Vec<Vec<(TensorId, TensorId)>> = if position == 0 {
            Vec::new()
        } else {
            (0..sides.decoder.layers)
                .map(|_| {
                    (0..sides.decoder_block.stages())
                        .map(|_| {
                            (
                                heads_input(g, "cache.k", position),
                                heads_input(g, "cache.v", position),
                            )
                        })
                        .collect()
                })
                .collect()
        };
        let (y, positions, blocks) = g.with_param_prefix("decoder.", |g| {
            let positions = c.posenc.step_terms(g, sides.decoder, position)?;
            let y = stack::embed(g, c, tok_emb, token, &positions, None, 0)?;
            let decoder = Stack {
                step: sides.decoder_block,
                layers: sides.decoder.layers,
                causal: true,
                key_mask: None,
                dropout: None,
                salt_base: 0,
                probed: false,
                cross: Some(CrossInputs {
                    keys_values: memory.clone(),
                    key_mask: source_mask,
                    q_bias: positions.attention.cross_q_bias.clone(),
                }),
                cache: cache.clone(),
            };
            let (y, blocks) = decoder.run(g, c, y, &positions)?;
            Ok((y, positions, blocks))
        })?;
        let logits = output_logits(g, c, tok_emb, sides.tied_head, y)?;
        Ok(DecoderStep {
            batch,
            source_len,
            position,
            token,
            source_mask,
            memory,
            cache,
            logits,
            keys_values: blocks.into_iter().map(|b| b.keys_values).collect(),
            encodings: positions.inputs.encodings,
            constants: positions.inputs.constants,
        })
    }
}

/// Writes graph constants.
fn feed_constants(exec: &Executor, constants: &[(TensorId, Constant)]) -> Result<()> {
    for (t, values) in constants {
        match values {
            Constant::F32(v) => exec.set_f32(*t, v)?,
            Constant::I32(v) => exec.set_i32(*t, v)?,
        }
    }
    Ok(())
}

impl SourceMemory {
    /// Writes `source` (i32 `[B, S]`), its mask (1 = token, 0 = padding) and the constants.
    pub fn feed(&self, exec: &Executor, source: &[i32], mask: &[i32]) -> Result<()> {
        exec.set_i32(self.source, source)?;
        exec.set_i32(self.source_mask, mask)?;
        feed_constants(exec, &self.constants)
    }
}

impl DecoderStep {
    /// Writes the step's constants (its position terms).
    pub fn feed_constants(&self, exec: &Executor) -> Result<()> {
        feed_constants(exec, &self.constants)
    }
}
