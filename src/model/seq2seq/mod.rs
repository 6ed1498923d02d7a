//! The encoder-decoder of a [`ModelKind::Seq2Seq`] config, built into a [`Graph`] for one
//! (batch, source length, target length): teacher-forced next-token logits and their loss.
//!
//! ```text
//! source:  x = Drop(tok_emb[source] (· √D) (+ position term))      encoder.* parameters
//!          encoder blocks (bidirectional, source padding masked; stepped as `block`)
//!          memory = LN_enc(x)
//! target:  y = Drop(tok_emb[BOS target] (· √D) (+ position term))  decoder.* parameters
//!          decoder blocks (stepped as `decoder_block`), F(y) = a + Drop(FFN(LN2(y + a))) with
//!              s = Drop(SelfAttn(LN1 y))                  causal, the decoder's position bias
//!              a = s + Drop(Cross(LN_cross(y + s), memory))  scale 1/√Dh, padded sources masked
//! logits = LN_dec(y) · tok_emb^T (tied, never scaled)  or  LN_dec(y) · lm_head.weight
//! loss   = cross_entropy(logits, target EOS, IGNORE_INDEX)
//! ```
//!
//! One token table `tok_emb.weight` serves both sides and the tied output layer (the shared
//! vocabulary of [`crate::data::PairTokenizer`]). Each side has its own position encoding
//! parameters under its prefix (`encoder.pos_emb.weight`, `decoder.posenc.relative.weight`, …):
//! T5's relative buckets are bidirectional in the encoder and look back in the decoder, TUPE
//! untied attention is in both self-attentions, and the cross-attention has no position bias.
//!
//! FLOATER's compatible form is the authors' translation model: the encoder's flow
//! (`encoder.posenc.floater.*`, `[3, layers, D]`) gives its q/k/v biases; one decoder flow over
//! target positions (`decoder.posenc.floater.*`, `[4, decoder_layers, D]`) gives the decoder's
//! self-attention q/k/v and cross-attention q biases; one over source positions
//! (`decoder.cross.posenc.floater.*`, `[2, decoder_layers, D]`) the cross-attention k/v biases.
//!
//! # Parameter names
//!
//! Each side's blocks are named as the causal LM's (`blocks.i.ln1.gain`, … in `model/mod.rs`)
//! under `encoder.` and `decoder.`; a decoder block adds:
//!
//! | name                              | shape   | init                  | present when            |
//! |-----------------------------------|---------|-----------------------|-------------------------|
//! | `decoder.blocks.i.ln_cross.gain`  | [D]     | 1                     | always                  |
//! | `decoder.blocks.i.ln_cross.bias`  | [D]     | 0                     | always                  |
//! | `decoder.blocks.i.cross.q.weight` | [D, D]  | N(0, 0.02)            | always                  |
//! | `decoder.blocks.i.cross.q.bias`   | [D]     | 0                     | not FLOATER compatible  |
//! | `decoder.blocks.i.cross.kv.weight`| [D, 2D] | N(0, 0.02)            | always (k columns, then v) |
//! | `decoder.blocks.i.cross.kv.bias`  | [2D]    | 0                     | not FLOATER compatible  |
//! | `decoder.blocks.i.cross.out.weight` | [D, D] | N(0, 0.02/√(2·decoder_layers)) | always       |
//! | `decoder.blocks.i.cross.out.bias` | [D]     | 0                     | always                  |
//!
//! and `encoder.ln_f.*`, `decoder.ln_f.*`, `tok_emb.weight`, `lm_head.weight` (untied head).

mod step;
#[cfg(test)]
mod tests;

pub use step::{DecoderFlow, DecoderStep, DecodingStep, SourceMemory, Sources};

use super::block::{self, CrossInputs, Dropouts, EMBEDDING_DROPOUT_SALT};
use super::config::{ModelConfig, ModelKind};
use super::posenc::{Constant, EncodingSource, ModelDims, PositionTerms, Positions};
use super::stack::{self, Stack};
use super::transformer::{GraphOptions, GraphShape, Model};
use crate::data::{IGNORE_INDEX, PairBatch};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::tensor::TensorMeta;

/// The decoder's dropout salts start here, far above any of the encoder's.
const DECODER_SALTS: u32 = 1 << 20;

/// The tensors of one built seq2seq graph, and what must be fed before each run.
#[derive(Clone, Debug)]
pub struct Seq2SeqGraph {
    pub batch: usize,
    pub source_len: usize,
    pub target_len: usize,
    /// i32 `[B, S]`.
    pub source: TensorId,
    /// i32 `[B, S]`, 1 for a source token and 0 for padding.
    pub source_mask: TensorId,
    /// i32 `[B, T]`: BOS, then the target (the decoder's input).
    pub target_in: TensorId,
    /// i32 `[B, T]`: the target, then EOS, `IGNORE_INDEX` on padding.
    pub targets: TensorId,
    /// `[B, T, vocab]`.
    pub logits: TensorId,
    /// The mean cross-entropy over counted targets, `[1]`.
    pub loss: TensorId,
    vocab: usize,
    constants: Vec<(TensorId, Constant)>,
    dropout_seed: Option<TensorId>,
    /// In probed graphs, each encoder layer's attention `[B, H, S, S]`; empty otherwise.
    pub encoder_probs: Vec<TensorId>,
    /// In probed graphs, each decoder layer's self-attention `[B, H, T, T]`.
    pub decoder_probs: Vec<TensorId>,
    /// In probed graphs, each decoder layer's cross-attention `[B, H, T, S]`.
    pub cross_probs: Vec<TensorId>,
}

/// A seq2seq model's decoder as its graphs read it (the encoder's are the config's `dims()`).
pub(super) struct Sides {
    pub decoder: ModelDims,
    pub decoder_block: super::Block,
    pub tied_head: bool,
}

impl Sides {
    pub fn of(c: &ModelConfig) -> Result<Self> {
        let (
            ModelKind::Seq2Seq {
                tied_head,
                decoder_block,
                ..
            },
            Some(decoder),
        ) = (c.kind, c.decoder_dims())
        else {
            return Err(Error::Input(
                "this model is not a seq2seq model; build it for Tokens".into(),
            ));
        };
        Ok(Self {
            decoder,
            decoder_block,
            tied_head,
        })
    }
}

/// The output layer: the decoder's final norm (a pre-LN decoder's; a post-LN decoder's output is
/// normalised already), then the token table transposed (tied) or `lm_head.weight`.
pub(super) fn output_logits(
    g: &mut Graph,
    c: &ModelConfig,
    tok_emb: TensorId,
    tied_head: bool,
    y: TensorId,
) -> Result<TensorId> {
    let y = g.with_param_prefix("decoder.", |g| stack::final_norm(g, c, y))?;
    // The tied head reads the table unscaled, whatever embed_scale (fairseq).
    if tied_head {
        g.matmul_t(y, tok_emb, false, true)
    } else {
        let head = g.param(
            "lm_head.weight",
            &[c.d_model, c.vocab],
            c.init_scheme().output_table(c.d_model),
        )?;
        g.matmul(y, head)
    }
}

/// The encoder's part of a graph: its inputs, position terms, blocks and output.
pub(super) struct Encoded {
    /// i32 `[B, S]`.
    pub source: TensorId,
    /// i32 `[B, S]`.
    pub source_mask: TensorId,
    pub positions: PositionTerms,
    pub blocks: Vec<block::BlockOutput>,
    /// The final norm of the last block's output, `[B, S, D]`.
    pub memory: TensorId,
}

/// The encoder over `batch` sources of `source_len` tokens.
pub(super) fn encode(
    g: &mut Graph,
    c: &ModelConfig,
    batch: usize,
    source_len: usize,
    tok_emb: TensorId,
    dropout: Option<Dropouts>,
    probed: bool,
) -> Result<Encoded> {
    let source = g.input("source", TensorMeta::i32(&[batch, source_len]));
    let source_mask = g.input("source_mask", TensorMeta::i32(&[batch, source_len]));
    g.with_param_prefix("encoder.", |g| {
        let positions = c.posenc.terms(
            g,
            c.dims(),
            Positions::contiguous(source_len),
            EncodingSource::Solve,
        )?;
        let x = stack::embed(g, c, tok_emb, source, &positions, dropout, EMBEDDING_DROPOUT_SALT)?;
        let encoder = Stack {
            step: c.block,
            layers: c.layers,
            causal: false,
            key_mask: Some(source_mask),
            dropout,
            salt_base: 0,
            probed,
            cross: None,
            cache: Vec::new(),
        };
        let (x, blocks) = encoder.run(g, c, x, &positions)?;
        let memory = stack::final_norm(g, c, x)?;
        Ok(Encoded {
            source,
            source_mask,
            positions,
            blocks,
            memory,
        })
    })
}

/// Every decoder block's cross-attention keys and values `[B, H, S, Dh]` of the encoder's output
/// `memory`, with FLOATER's source-position biases where the encoding has them.
pub(super) fn cross_memory(
    g: &mut Graph,
    c: &ModelConfig,
    sides: &Sides,
    memory: TensorId,
    source_len: usize,
) -> Result<Vec<(TensorId, TensorId)>> {
    g.with_param_prefix("decoder.", |g| {
        let kv_bias = g.with_param_prefix("cross.", |g| c.posenc.cross_kv(g, sides.decoder, source_len))?;
        (0..sides.decoder.layers)
            .map(|layer| block::cross_keys_values(g, c, layer, memory, kv_bias.get(layer).copied()))
            .collect()
    })
}

/// A seq2seq model's teacher-forced training shape: `batch` pairs of sources of `source_len` and
/// targets of `target_len` tokens (BOS included). Cached encodings are for the decoder-only models
/// and are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pairs {
    pub batch: usize,
    pub source_len: usize,
    pub target_len: usize,
}

impl GraphShape for Pairs {
    type Graph = Seq2SeqGraph;

    fn build(self, model: &Model, g: &mut Graph, options: GraphOptions) -> Result<Seq2SeqGraph> {
        let Pairs {
            batch,
            source_len,
            target_len,
        } = self;
        let c = model.config();
        let sides = Sides::of(c)?;
        if options.takes_cached_encodings() {
            return Err(Error::Input(
                "a seq2seq graph solves FLOATER's flows itself; cached encodings are for the \
                 decoder-only models"
                    .into(),
            ));
        }
        if batch == 0 || source_len == 0 || target_len == 0 {
            return Err(Error::Input(format!(
                "a seq2seq graph needs at least one row, one source token and one target position, \
                 got batch {batch}, source length {source_len}, target length {target_len}"
            )));
        }
        let dropout = Dropouts::declare(g, c, options.is_training());
        let probed = options.is_probed();
        let tok_emb = stack::token_table(g, c)?;

        let encoded = encode(g, c, batch, source_len, tok_emb, dropout, probed)?;
        let memory = cross_memory(g, c, &sides, encoded.memory, source_len)?;
        let source_mask = encoded.source_mask;
        // The decoder.
        let target_in = g.input("target_in", TensorMeta::i32(&[batch, target_len]));
        let (y, decoder_positions, decoder_blocks) = g.with_param_prefix("decoder.", |g| {
            let positions = c.posenc.decoder_terms(g, sides.decoder, target_len)?;
            let y = stack::embed(g, c, tok_emb, target_in, &positions, dropout, DECODER_SALTS)?;
            let decoder = Stack {
                step: sides.decoder_block,
                layers: sides.decoder.layers,
                causal: true,
                key_mask: None,
                dropout,
                salt_base: DECODER_SALTS,
                probed,
                cross: Some(CrossInputs {
                    keys_values: memory,
                    key_mask: source_mask,
                    q_bias: positions.attention.cross_q_bias.clone(),
                }),
                cache: Vec::new(),
            };
            let (y, blocks) = decoder.run(g, c, y, &positions)?;
            Ok((y, positions, blocks))
        })?;
        let logits = output_logits(g, c, tok_emb, sides.tied_head, y)?;
        g.name(logits, "logits");
        let targets = g.input("targets", TensorMeta::i32(&[batch, target_len]));
        let loss = g.cross_entropy(logits, targets, IGNORE_INDEX)?;
        g.name(loss, "loss");

        let mut constants = encoded.positions.inputs.constants;
        constants.extend(decoder_positions.inputs.constants);
        Ok(Seq2SeqGraph {
            batch,
            source_len,
            target_len,
            source: encoded.source,
            source_mask,
            target_in,
            targets,
            logits,
            loss,
            vocab: c.vocab,
            constants,
            dropout_seed: dropout.map(|d| d.seed),
            encoder_probs: encoded.blocks.iter().filter_map(|b| b.attention_probs).collect(),
            decoder_probs: decoder_blocks.iter().filter_map(|b| b.attention_probs).collect(),
            cross_probs: decoder_blocks.iter().filter_map(|b| b.cross_probs).collect(),
        })
    }
}

impl Seq2SeqGraph {
    /// Validates and writes one batch of pairs (of this graph's shape: pad it with
    /// [`PairBatch::new`]'s lengths) and the constants.
    pub fn feed(&self, exec: &Executor, batch: &PairBatch) -> Result<()> {
        let shape = [self.batch, self.source_len, self.target_len];
        let given = [batch.rows(), batch.source_len(), batch.target_len()];
        if shape != given {
            return Err(Error::Input(format!(
                "a seq2seq graph for [rows, source length, target length] {shape:?} got a batch of {given:?}"
            )));
        }
        self.check_ids("source", batch.source(), self.source_len, false)?;
        self.check_ids("target input", batch.target_in(), self.target_len, false)?;
        self.check_ids("target", batch.target_out(), self.target_len, true)?;
        let mask: Vec<i32> = batch.source_mask().iter().map(|&m| i32::from(m > 0.5)).collect();
        exec.set_i32(self.source, batch.source())?;
        exec.set_i32(self.source_mask, &mask)?;
        exec.set_i32(self.target_in, batch.target_in())?;
        exec.set_i32(self.targets, batch.target_out())?;
        for (t, values) in &self.constants {
            match values {
                Constant::F32(v) => exec.set_f32(*t, v)?,
                Constant::I32(v) => exec.set_i32(*t, v)?,
            }
        }
        Ok(())
    }

    /// Sets the dropout masks of the next run (see [`crate::model::ModelGraph::set_dropout_seed`]).
    pub fn set_dropout_seed(&self, exec: &Executor, seed: u32) -> Result<()> {
        match self.dropout_seed {
            Some(t) => exec.set_i32(t, &[seed as i32]),
            None => Ok(()),
        }
    }

    /// Every id of `ids` (rows of `len`) in the vocabulary (or `IGNORE_INDEX`, where `ignorable`).
    fn check_ids(&self, what: &str, ids: &[i32], len: usize, ignorable: bool) -> Result<()> {
        let vocab = self.vocab;
        let valid = |t: i32| (ignorable && t == IGNORE_INDEX) || usize::try_from(t).is_ok_and(|t| t < vocab);
        match ids.iter().position(|&t| !valid(t)) {
            Some(i) => Err(Error::Input(format!(
                "{what} id {} at row {}, position {} is outside the vocabulary [0, {vocab})",
                ids[i],
                i / len,
                i % len
            ))),
            None => Ok(()),
        }
    }
}
