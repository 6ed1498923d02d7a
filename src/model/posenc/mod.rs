//! Position encodings: what each one adds to the graph of one sequence length.
//!
//! An encoding contributes terms at fixed places in the Transformer: an additive `[L, d_model]`
//! term at the input or at every block's input, or an additive `[H, L, L]` attention bias shared
//! by every layer (T5); the encodings still to come (TUPE, FLOATER) add theirs as new fields here.

mod learned;
mod relative;
mod sinusoidal;

pub use relative::{bucket_matrix, relative_bucket};
pub use sinusoidal::sinusoidal_table;

use super::config::{ModelConfig, ModelKind, PosEnc};
use crate::error::Result;
use crate::graph::{Graph, TensorId};

/// The position terms of one graph.
#[derive(Clone, Debug, Default)]
pub struct PositionTerms {
    /// `[L, d_model]`, added to the token embeddings (broadcast over the batch).
    pub at_input: Option<TensorId>,
    /// `[L, d_model]`, added to the input of every block.
    pub at_every_block: Option<TensorId>,
    /// `[heads, L, L]`, added to every layer's attention logits (shared by the batch).
    pub attention_bias: Option<TensorId>,
    /// Constant inputs and their values, written before each run.
    pub constants: Vec<(TensorId, Constant)>,
}

/// The values of a constant graph input.
#[derive(Clone, Debug)]
pub enum Constant {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// Declares `config`'s position encoding for sequences of length `len` in `g`.
pub fn build(g: &mut Graph, config: &ModelConfig, len: usize) -> Result<PositionTerms> {
    match config.posenc {
        PosEnc::None => Ok(PositionTerms::default()),
        PosEnc::Sinusoidal { every_block } => {
            let (table, values) = sinusoidal::build(g, len, config.d_model);
            let mut terms = PositionTerms {
                constants: vec![(table, Constant::F32(values))],
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
        PosEnc::Relative {
            buckets,
            max_distance,
        } => {
            let bidirectional = matches!(config.kind, ModelKind::Encoder { .. });
            let (bias, ids, values) =
                relative::build(g, len, config.heads, bidirectional, buckets, max_distance)?;
            Ok(PositionTerms {
                attention_bias: Some(bias),
                constants: vec![(ids, Constant::I32(values))],
                ..PositionTerms::default()
            })
        }
    }
}
