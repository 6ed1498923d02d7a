//! RoPE, the rotary position encoding (Su et al., "RoFormer", 2021): each pair `(2i, 2i+1)` of a
//! query's or key's head vector at position `l` is turned by the angle `l·θ_i`, `θ_i =
//! base^(−2i/Dh)`, so that a query–key product depends on the two positions only through `j − l`.
//! This is the paper's interleaved pairing (eq. 34); GPT-NeoX and LLaMA pair `i` with `i + Dh/2`
//! instead, the same encoding up to a permutation of the head's coordinates.
//!
//! The op takes the head vectors `x [.., L, Dh]` and a table `[L, Dh]` (per position the Dh/2
//! cosines, then the sines, from [`rope_table`]); its backward is the inverse rotation.

use rayon::prelude::*;

use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::math;
use crate::tensor::{DType, TensorMeta};

uniform! {
    pub struct RopeUniform = ROPE "Params" { pairs: u32, len: u32, half: u32, inverse: u32 }
}

/// RoFormer's base of the angles' geometric progression.
pub const ROPE_BASE: f64 = 10_000.0;

/// The table [`Rope`] reads: for each position `l < len`, the cosines of `l·θ_i` for `i <
/// head_dim / 2`, then their sines; computed in f64, since the angles reach `len` radians.
pub fn rope_table(len: usize, head_dim: usize, base: f64) -> Vec<f32> {
    let half = head_dim / 2;
    let mut table = Vec::with_capacity(len * 2 * half);
    for l in 0..len {
        let angles: Vec<f64> = (0..half)
            .map(|i| l as f64 * math::powf(base, -2.0 * i as f64 / head_dim as f64))
            .collect();
        table.extend(angles.iter().map(|a| math::cos(*a) as f32));
        table.extend(angles.iter().map(|a| math::sin(*a) as f32));
    }
    table
}

/// Turns each pair of `x [.., L, Dh]` by its position's angles (by their negatives when
/// `inverse`), from a [`rope_table`] `[L, Dh]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rope {
    pub inverse: bool,
}

impl Op for Rope {
    fn name(&self) -> &'static str {
        "rope"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (x, table) = (inputs[0], inputs[1]);
        if x.dtype != DType::F32 || table.dtype != DType::F32 {
            return shape_err(
                self.name(),
                format!("needs f32 tensors, got x {x} and table {table}"),
            );
        }
        if x.rank() < 2 || table.rank() != 2 {
            return shape_err(
                self.name(),
                format!("needs x [.., L, Dh] and a table [L, Dh], got x {x} and table {table}"),
            );
        }
        let (len, dh) = (x.shape[x.rank() - 2], x.shape[x.rank() - 1]);
        if !dh.is_multiple_of(2) {
            return shape_err(
                self.name(),
                format!("turns pairs of coordinates: the head width must be even, got x {x}"),
            );
        }
        if table.shape != [len, dh] {
            return shape_err(
                self.name(),
                format!("the table must be [{len}, {dh}] for x {x}, got {table}"),
            );
        }
        Ok(vec![x.clone()])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let meta = inputs[0].meta;
        let (len, dh) = (meta.shape[meta.rank() - 2], meta.shape[meta.rank() - 1]);
        if dh == 0 {
            return;
        }
        let (x, table) = (inputs[0].data, inputs[1].data);
        let sign = if self.inverse { -1.0 } else { 1.0 };
        let half = dh / 2;
        outputs[0]
            .data
            .par_chunks_mut(dh)
            .zip(x.par_chunks(dh))
            .enumerate()
            .for_each(|(row, (out, x))| {
                let angles = &table[(row % len) * dh..][..dh];
                for i in 0..half {
                    let (c, s) = (angles[i], sign * angles[half + i]);
                    let (x0, x1) = (x[2 * i], x[2 * i + 1]);
                    out[2 * i] = x0 * c - x1 * s;
                    out[2 * i + 1] = x0 * s + x1 * c;
                }
            });
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let meta = inputs[0];
        let (len, dh) = (meta.shape[meta.rank() - 2], meta.shape[meta.rank() - 1]);
        let pairs = meta.numel() / 2;
        let uniform = RopeUniform {
            pairs: word(pairs),
            len: word(len),
            half: word(dh / 2),
            inverse: self.inverse.into(),
        };
        GpuKernels::single(Dispatch::new(
            "rope",
            &uniform,
            vec![Arg::In(0), Arg::In(1), Arg::Out(0)],
            grid(pairs, 256),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None, None]);
        };
        // A rotation's transpose is its inverse; the table is a constant.
        let back = Rope {
            inverse: !self.inverse,
        };
        Ok(vec![Some(g.apply1(back, &[grad, args.inputs[1]])?), None])
    }
}

impl Graph {
    /// `x [.., L, Dh]` with RoPE's rotation at each position, from a [`rope_table`] `[L, Dh]`.
    pub fn rope(&mut self, x: TensorId, table: TensorId) -> Result<TensorId> {
        self.apply1(Rope { inverse: false }, &[x, table])
    }
}

#[cfg(test)]
mod tests {
    use super::{ROPE_BASE, rope_table};
    use crate::graph::Graph;
    use crate::tensor::TensorMeta;
    use crate::testing::*;

    /// RoPE of a parameter `[.., L, Dh]` with the table of `base`.
    fn rotated(shape: &'static [usize], base: f64) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let (len, dh) = (shape[shape.len() - 2], shape[shape.len() - 1]);
            let x = param(g, "x", shape);
            let table = g.input("table", TensorMeta::f32(&[len, dh]));
            let out = g.rope(x, table).unwrap();
            Built {
                out,
                feeds: vec![(table, Feed::F32(rope_table(len, dh, base)))],
            }
        }
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        for shape in [&[1, 2][..], &[3, 5, 2], &[2, 3, 7, 6], &[2, 4, 33, 32]] {
            check_gpu_matches_cpu(&rotated(leak(shape), ROPE_BASE), 1e-5, 1e-5);
        }
    }

    fn leak(shape: &[usize]) -> &'static [usize] {
        Vec::leak(shape.to_vec())
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_gradients(&rotated(&[2, 5, 6], ROPE_BASE), 1e-2, 1e-3, 20);
        check_gradients(&rotated(&[3, 4], 100.0), 1e-2, 1e-3, 12);
    }

    /// Against RoFormer's formula in float64 PyTorch (`tests/reference/gen_rope.py`), positions
    /// up to 300: the table and the rotation, forward and backward, on both backends.
    #[test]
    fn matches_pytorch() {
        check_reference("rope", "short", &rotated(&[2, 3, 5, 8], ROPE_BASE), 1e-5, 1e-5);
        check_reference("rope", "long", &rotated(&[1, 300, 8], ROPE_BASE), 1e-4, 1e-4);
        check_reference("rope", "base_100", &rotated(&[2, 7, 4], 100.0), 1e-5, 1e-5);
    }

    /// A query turned to position l and a key to position j have the product of the unturned
    /// pair turned by j − l: the property RoPE is for.
    #[test]
    fn products_depend_on_the_offset_only() {
        let (len, dh) = (40, 8);
        let table = rope_table(len, dh, ROPE_BASE);
        let q: Vec<f32> = random_vec(dh, 1);
        let k: Vec<f32> = random_vec(dh, 2);
        let turn = |v: &[f32], l: usize| -> Vec<f32> {
            let (cos, sin) = table[l * dh..][..dh].split_at(dh / 2);
            (0..dh / 2)
                .flat_map(|i| {
                    let (x0, x1) = (v[2 * i], v[2 * i + 1]);
                    [x0 * cos[i] - x1 * sin[i], x0 * sin[i] + x1 * cos[i]]
                })
                .collect()
        };
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        for offset in [0, 3, 17] {
            let want = dot(&turn(&q, 0), &turn(&k, offset));
            for l in [1, 9, len - 1 - offset] {
                let got = dot(&turn(&q, l), &turn(&k, l + offset));
                assert!(
                    (got - want).abs() < 1e-4,
                    "offset {offset} at {l}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn bad_shapes_are_errors_naming_them() {
        let mut g = Graph::new();
        let x = g.input("x", TensorMeta::f32(&[2, 5, 7]));
        let table = g.input("table", TensorMeta::f32(&[5, 7]));
        let err = g.rope(x, table).unwrap_err().to_string();
        assert!(err.contains("the head width must be even"), "{err}");
        let x = g.input("x2", TensorMeta::f32(&[2, 5, 8]));
        let table = g.input("table2", TensorMeta::f32(&[4, 8]));
        let err = g.rope(x, table).unwrap_err().to_string();
        assert!(err.contains("the table must be [5, 8]"), "{err}");
    }
}
