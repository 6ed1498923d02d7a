//! The fixed sinusoidal encoding of Vaswani et al. (2017), fed to the graph as a constant input
//! and added to the embeddings, or to the input of every block (FLOATER's "inject at every layer"
//! baseline). In TOML: `posenc = { type = "sinusoidal", every_block = true }`.

use serde::{Deserialize, Serialize};

use super::encoding::{
    Constant, Description, Drawn, Encoding, EncodingSource, ModelDims, ModelFacts, PositionTerms,
};
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::tensor::TensorMeta;

/// The graph input that holds the table.
pub const INPUT_NAME: &str = "posenc.sinusoidal";

/// Where the table is added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sinusoidal {
    /// To the input of every block rather than to the embeddings. Default false.
    #[serde(default)]
    pub every_block: bool,
}

impl Sinusoidal {
    /// The table (or its one row) wherever these settings add it.
    fn placed(&self, table: TensorId, values: Vec<f32>, layers: usize) -> PositionTerms {
        let mut terms = PositionTerms {
            constants: vec![(table, Constant::F32(values))],
            ..PositionTerms::default()
        };
        if self.every_block {
            terms.at_block = vec![table; layers];
        } else {
            terms.at_input = Some(table);
        }
        terms
    }
}

impl Encoding for Sinusoidal {
    fn name(&self) -> String {
        if self.every_block {
            "sinusoidal (every block)".into()
        } else {
            "sinusoidal".into()
        }
    }

    fn check(&self, model: &ModelFacts) -> std::result::Result<(), String> {
        if !model.dims.d_model.is_multiple_of(2) {
            return Err(format!(
                "sinusoidal position encoding pairs sin and cos, so d_model must be even, got {}",
                model.dims.d_model
            ));
        }
        Ok(())
    }

    fn terms(&self, g: &mut Graph, dims: ModelDims, len: usize, _: EncodingSource) -> Result<PositionTerms> {
        let (table, values) = build(g, len, dims.d_model);
        Ok(self.placed(table, values, dims.layers))
    }

    fn step_terms(&self, g: &mut Graph, dims: ModelDims, t: usize) -> Result<PositionTerms> {
        let (row, values) = step_row(g, dims.d_model, t);
        Ok(self.placed(row, values, dims.layers))
    }

    fn adds_a_fixed_table(&self) -> bool {
        true
    }

    fn describe(&self, _: ModelDims, seq2seq: bool, _: usize) -> Description {
        let name = self.name();
        let note = if seq2seq {
            format!("{name}: the same fixed sin/cos table on both sides; any length.")
        } else {
            let place = if self.every_block {
                "input of every block"
            } else {
                "token embeddings"
            };
            format!("{name}: the fixed sin/cos table of Vaswani et al., added to the {place}; any length.")
        };
        Description {
            note,
            drawn: Drawn::Terms,
        }
    }
}

/// `[len, d]` row-major: `pe[p, 2i] = sin(p·ω_i)`, `pe[p, 2i+1] = cos(p·ω_i)`, with
/// `ω_i = 10000^(−2i/d)`; `d` is even. Computed in f64, so every backend gets the same table.
pub fn sinusoidal_table(len: usize, d: usize) -> Vec<f32> {
    let mut table = vec![0.0; len * d];
    for (p, row) in table.chunks_mut(d).enumerate() {
        for (i, pair) in row.chunks_mut(2).enumerate() {
            let angle = p as f64 * 10000f64.powf(-((2 * i) as f64) / d as f64);
            pair[0] = angle.sin() as f32;
            pair[1] = angle.cos() as f32;
        }
    }
    table
}

/// The table's graph input `[len, d]` and its values.
pub(super) fn build(g: &mut Graph, len: usize, d: usize) -> (TensorId, Vec<f32>) {
    let table = g.input(INPUT_NAME, TensorMeta::f32(&[len, d]));
    (table, sinusoidal_table(len, d))
}

/// Row `t` of the table as a graph input `[1, d]`, and its values: one decoding step's.
pub(super) fn step_row(g: &mut Graph, d: usize, t: usize) -> (TensorId, Vec<f32>) {
    let table = sinusoidal_table(t + 1, d);
    let row = g.input(INPUT_NAME, TensorMeta::f32(&[1, d]));
    (row, table[t * d..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::sinusoidal_table;

    #[test]
    fn table_matches_the_formula_at_a_few_points() {
        let d = 8;
        let t = sinusoidal_table(5, d);
        assert_eq!(t.len(), 40);
        // Position 0: sin 0 = 0, cos 0 = 1 in every pair.
        assert_eq!(&t[..d], &[0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
        // Position 3, pair 1: ω = 10000^(−2/8) = 0.1.
        let angle = 3.0f64 * 0.1;
        assert!((t[3 * d + 2] - angle.sin() as f32).abs() < 1e-7);
        assert!((t[3 * d + 3] - angle.cos() as f32).abs() < 1e-7);
    }
}
