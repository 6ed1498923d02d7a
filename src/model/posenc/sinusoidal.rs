//! The fixed sinusoidal encoding of Vaswani et al. (2017), fed to the graph as a constant input.

use crate::graph::{Graph, TensorId};
use crate::tensor::TensorMeta;

/// The graph input that holds the table.
pub const INPUT_NAME: &str = "posenc.sinusoidal";

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
