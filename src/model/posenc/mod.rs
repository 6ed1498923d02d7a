//! Position encodings: what each one adds to the graph of one sequence length.
//!
//! An encoding contributes terms at fixed places in the Transformer. Today these are an additive
//! `[L, d_model]` term at the input or at every block's input; the encodings still to come add
//! attention biases (T5, TUPE) or per-block terms from an ODE (FLOATER) as new fields here.

mod learned;
mod sinusoidal;

pub use sinusoidal::sinusoidal_table;

use super::config::{ModelConfig, PosEnc};
use crate::error::Result;
use crate::graph::{Graph, TensorId};

/// The position terms of one graph.
#[derive(Clone, Debug, Default)]
pub struct PositionTerms {
    /// `[L, d_model]`, added to the token embeddings (broadcast over the batch).
    pub at_input: Option<TensorId>,
    /// `[L, d_model]`, added to the input of every block.
    pub at_every_block: Option<TensorId>,
    /// Constant inputs and their values, written before each run.
    pub constants: Vec<(TensorId, Vec<f32>)>,
}

/// Declares `config`'s position encoding for sequences of length `len` in `g`.
pub fn build(g: &mut Graph, config: &ModelConfig, len: usize) -> Result<PositionTerms> {
    match config.posenc {
        PosEnc::None => Ok(PositionTerms::default()),
        PosEnc::Sinusoidal { every_block } => {
            let (table, values) = sinusoidal::build(g, len, config.d_model);
            let mut terms = PositionTerms {
                constants: vec![(table, values)],
                ..PositionTerms::default()
            };
            if every_block {
                terms.at_every_block = Some(table);
            } else {
                terms.at_input = Some(table);
            }
            Ok(terms)
        }
        PosEnc::Learned => Ok(PositionTerms {
            at_input: Some(learned::build(g, len, config.max_len, config.d_model)?),
            ..PositionTerms::default()
        }),
    }
}
