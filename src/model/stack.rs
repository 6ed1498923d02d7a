//! One stack of blocks, for every model shape: the token embedding with the position terms at the
//! input, then the blocks, each with its position term and every block's inputs. The causal LM,
//! the masked LM, the classifier, a seq2seq model's encoder and decoder and one decoding step are
//! each a [`Stack`]; this is the only code that builds a block's inputs ([`BlockInputs`]).

use super::block::{self, BlockInputs, BlockOutput, CrossInputs, Dropouts, LayerNorm};
use super::config::{Block, EmbedScale, ModelConfig, Norm};
use super::history::LayerHistory;
use super::posenc::PositionTerms;
use crate::error::Result;
use crate::graph::{Graph, TensorId};

/// What one stack is: its blocks, which way it attends, and what it reads besides its input and
/// its position terms.
pub(super) struct Stack {
    /// How each block steps (the config's `block`, or a decoder's `decoder_block`).
    pub step: Block,
    pub layers: usize,
    /// Each position attends only to itself and earlier ones (the causal LM, a decoder).
    pub causal: bool,
    /// i32 `[B, L]`: 1 for a token, 0 for padding; `None` when nothing is padded.
    pub key_mask: Option<TensorId>,
    pub dropout: Option<Dropouts>,
    /// The stack's dropout salts start here, so that no two stacks of a graph share a mask.
    pub salt_base: u32,
    /// Each block also outputs its attention probabilities.
    pub probed: bool,
    /// A decoder's attention to the encoder's output.
    pub cross: Option<CrossInputs>,
    /// Incremental decoding: the earlier positions' keys and values per block and stage.
    pub cache: Vec<Vec<(TensorId, TensorId)>>,
}

impl Stack {
    /// Runs `x` through the blocks, each block's position term added to its input, the blocks fed
    /// through the config's layer history (a chain without one); returns the stack's output and
    /// each block's outputs.
    pub fn run(
        self,
        g: &mut Graph,
        c: &ModelConfig,
        x: TensorId,
        positions: &PositionTerms,
    ) -> Result<(TensorId, Vec<BlockOutput>)> {
        let inputs = self.block_inputs(c, positions);
        let mut history = LayerHistory::new(c.history, c.d_model, x);
        let mut blocks = Vec::with_capacity(inputs.layers);
        for layer in 0..inputs.layers {
            let mut x = history.pop(g)?;
            if let Some(&p) = positions.at_block.get(layer) {
                x = g.add(x, p)?;
            }
            let out = block::block(g, c, x, layer, &inputs)?;
            history.add(g, out.out)?;
            blocks.push(out);
        }
        Ok((history.pop(g)?, blocks))
    }

    /// What every block reads: the stack's settings and the attention terms of `positions`.
    fn block_inputs(self, c: &ModelConfig, positions: &PositionTerms) -> BlockInputs {
        BlockInputs {
            step: self.step,
            layers: self.layers,
            causal: self.causal,
            key_mask: self.key_mask,
            attention: positions.attention.clone(),
            attention_scale: c.attention_scale(positions.attention.scale),
            dropout: self.dropout,
            rk_stage: c.rk_stage,
            salt_base: self.salt_base,
            probed: self.probed,
            cross: self.cross,
            cache: self.cache,
        }
    }
}

/// The token table every stack reads, initialised as the scheme and `embed_scale` ask.
pub(super) fn token_table(g: &mut Graph, c: &ModelConfig) -> Result<TensorId> {
    let init = c
        .init_scheme()
        .token_table(c.d_model, c.embed_scale == EmbedScale::SqrtD);
    g.param("tok_emb.weight", &[c.vocab, c.d_model], init)
}

/// A stack's input: `tok_emb[tokens]` (· √D), plus the position term at the input, through the
/// embedding layer norm where the model has one (BERT's) and through dropout in training.
pub(super) fn embed(
    g: &mut Graph,
    c: &ModelConfig,
    tok_emb: TensorId,
    tokens: TensorId,
    positions: &PositionTerms,
    dropout: Option<Dropouts>,
    salt: u32,
) -> Result<TensorId> {
    let mut x = g.embedding(tok_emb, tokens)?;
    if c.embed_scale == EmbedScale::SqrtD {
        x = g.scale(x, (c.d_model as f32).sqrt())?;
    }
    if let Some(p) = positions.at_input {
        x = g.add(x, p)?;
    }
    if c.has_embedding_norm() {
        x = LayerNorm::declare(g, "emb_ln", c.d_model)?.apply(g, x)?;
    }
    match dropout {
        Some(d) => d.apply(g, x, d.residual, salt),
        None => Ok(x),
    }
}

/// A stack's last layer norm `ln_f` in a pre-LN model; a post-LN stack's output is normalised
/// already.
pub(super) fn final_norm(g: &mut Graph, c: &ModelConfig, x: TensorId) -> Result<TensorId> {
    match c.norm {
        Norm::Pre => LayerNorm::declare(g, "ln_f", c.d_model)?.apply(g, x),
        Norm::Post => Ok(x),
    }
}
