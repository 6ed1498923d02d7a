//! The ODE Transformer authors' layer history (fairseq/modules/layer_history.py, pre-norm): how
//! each block's input is formed from the embeddings and the blocks before it ([`History`]).
//!
//! With `dense`, block i reads `(x_0 + LN_0(o_0) + … + LN_{i-1}(o_{i-1})) / (i + 1)`, where
//! `x_0` is the embeddings and `o_j` block j's output, and the stack's output is the same mean
//! over all blocks. `learnable_dense` weighs the same list by learned rows that start at the
//! mean. Every configuration of the authors' code has one; the paper does not mention it, and it
//! keeps the growth of the whole-layer stages ([`super::RkStage::Layer`]) in check.

use super::block::LayerNorm;
use super::config::History;
use crate::error::Result;
use crate::graph::{Graph, Init, TensorId};

/// The list a stack's blocks read from, as the authors' `add` and `pop`.
pub(super) struct LayerHistory {
    kind: History,
    d_model: usize,
    /// The embeddings, then each block's normalised output (with `none`: only the last output).
    entries: Vec<TensorId>,
    /// `dense`: the entries' running sum, added to once per block as the authors' `self.sum`.
    sum: TensorId,
}

impl LayerHistory {
    pub fn new(kind: History, d_model: usize, embeddings: TensorId) -> Self {
        Self {
            kind,
            d_model,
            entries: vec![embeddings],
            sum: embeddings,
        }
    }

    /// Adds block `entries − 1`'s output, through its own layer norm `history.ln.i`.
    pub fn add(&mut self, g: &mut Graph, output: TensorId) -> Result<()> {
        let block = self.entries.len() - 1;
        match self.kind {
            History::None => self.entries = vec![output],
            History::Dense | History::LearnableDense => {
                let ln = LayerNorm::declare(g, &format!("history.ln.{block}"), self.d_model)?;
                let normalised = ln.apply(g, output)?;
                self.entries.push(normalised);
                if self.kind == History::Dense {
                    self.sum = g.add(self.sum, normalised)?;
                }
            }
        }
        Ok(())
    }

    /// What the next block (or, after the last, the stack's output) reads.
    pub fn pop(&self, g: &mut Graph) -> Result<TensorId> {
        let n = self.entries.len();
        match self.kind {
            History::None => Ok(self.entries[0]),
            History::Dense => g.scale(self.sum, 1.0 / n as f32),
            History::LearnableDense => {
                // Row n − 1 of the authors' lower-triangular [layers + 1, layers + 1] weight,
                // initialised as theirs: each row sums to 1.
                let name = format!("history.mix.{}", n - 1);
                let mix = g.param(&name, &[n], Init::Constant(1.0 / n as f32))?;
                let weighted = |g: &mut Graph, j: usize| -> Result<TensorId> {
                    let weight = g.slice(mix, 0, j, j + 1)?;
                    g.mul(self.entries[j], weight)
                };
                let mut sum = weighted(g, 0)?;
                for j in 1..n {
                    let term = weighted(g, j)?;
                    sum = g.add(sum, term)?;
                }
                Ok(sum)
            }
        }
    }
}
