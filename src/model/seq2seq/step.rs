//! Incremental decoding's graphs: the encoder once per batch of sources ([`SourceMemory`]), then
//! one graph per target position t ([`DecoderStep`]) that reads the keys and values the earlier
//! steps computed instead of recomputing them: a decoding step costs one position's work.
//!
//! A step graph is the teacher-forced decoder's code on one position: its blocks put the cached
//! keys and values `[B, H, t, Dh]` of each block and stage before the step's own, its one query
//! sees all of them (causal attention aligned at the end), and its position terms are position
//! t's ([`crate::model::Encoding::step_terms`]). So its logits equal the full decoder's at position t (tested in
//! `tests.rs`), and a beam search reorders the cache rows on the host between steps.

use super::{Sides, attention_terms, cross_memory, embed, encode, output_logits, stack, token_table};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::model::block::{BlockInputs, CrossInputs};
use crate::model::posenc::Constant;
use crate::model::transformer::Model;
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
    /// FLOATER: row `position` `[1, rows, D]` of [`Model::build_decoder_flow`]'s trajectory.
    pub encodings: Option<TensorId>,
    constants: Vec<(TensorId, Constant)>,
}

impl Model {
    /// The encoder of a seq2seq model for `batch` sources of `source_len` tokens, with every
    /// decoder block's cross-attention keys and values as outputs.
    pub fn build_source_memory(
        &self,
        g: &mut Graph,
        batch: usize,
        source_len: usize,
    ) -> Result<SourceMemory> {
        let c = self.config();
        let sides = Sides::of(c)?;
        if batch == 0 || source_len == 0 {
            return Err(Error::Input(format!(
                "decoding needs at least one source of at least one token, got {batch} of length {source_len}"
            )));
        }
        let tok_emb = token_table(g, c)?;
        let encoded = encode(g, c, batch, source_len, tok_emb, None, false)?;
        let keys_values = cross_memory(g, c, &sides, encoded.memory, source_len)?;
        Ok(SourceMemory {
            batch,
            source_len,
            source: encoded.source,
            source_mask: encoded.source_mask,
            keys_values,
            constants: encoded.positions.constants,
        })
    }

    /// FLOATER: the decoder's flow solved through `len` target positions, `[len, rows, D]`, whose
    /// row t each [`DecoderStep`] at t takes; `None` for every other encoding.
    pub fn build_decoder_flow(&self, g: &mut Graph, len: usize) -> Result<Option<TensorId>> {
        let c = self.config();
        let sides = Sides::of(c)?;
        let terms = g.with_param_prefix("decoder.", |g| c.posenc.decoder_terms(g, sides.decoder, len))?;
        Ok(terms.encodings)
    }

    /// The decoding step at target position `position` for `batch` rows of sources of
    /// `source_len` tokens.
    pub fn build_decoder_step(
        &self,
        g: &mut Graph,
        batch: usize,
        source_len: usize,
        position: usize,
    ) -> Result<DecoderStep> {
        let c = self.config();
        let sides = Sides::of(c)?;
        if batch == 0 || source_len == 0 {
            return Err(Error::Input(format!(
                "a decoding step needs at least one row and one source token, got {batch} rows of \
                 sources of length {source_len}"
            )));
        }
        let (heads, dh) = (c.heads, c.head_dim());
        let tok_emb = token_table(g, c)?;
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
            let y = embed(g, c, tok_emb, token, &positions, None, 0)?;
            let (attention_bias, attention_scale) = attention_terms(c, &positions);
            let shared = BlockInputs {
                step: sides.decoder_block,
                layers: sides.decoder.layers,
                causal: true,
                key_mask: None,
                attention_bias,
                attention_scale,
                dropout: None,
                rk_stage: c.rk_stage,
                salt_base: 0,
                qkv_bias: positions.qkv_bias.clone(),
                rope: None,
                probed: false,
                cross: Some(CrossInputs {
                    keys_values: memory.clone(),
                    key_mask: source_mask,
                    q_bias: positions.cross_q_bias.clone(),
                }),
                cache: cache.clone(),
            };
            let (y, blocks) = stack(g, c, y, &positions, &shared)?;
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
            encodings: positions.encodings,
            constants: positions.constants,
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
