//! Softmax over the last axis, and its gradient.

use super::par::par_rows;
use super::unary::exp;
use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, RowKernels, VjpArgs, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::tensor::{DType, TensorMeta};

uniform! {
    pub struct SoftmaxUniform = SOFTMAX "Rows" { rows: u32, len: u32 }
}

/// One workgroup per row: the dispatch grid and the uniform both kernels read.
fn row_dispatch(
    per_row: RowKernels,
    entries: [&'static str; 2],
    meta: &TensorMeta,
    args: Vec<Arg>,
) -> GpuKernels {
    let (rows, len) = meta.rows();
    let uniform = SoftmaxUniform {
        rows: word(rows),
        len: word(len),
    };
    let entry = per_row.entry(entries[0], entries[1]);
    GpuKernels::single(Dispatch::new(entry, &uniform, args, per_row.grid(rows)))
}

/// y = exp(x - max) / Σ exp(x - max) along the last axis; subtracting the row max keeps exp finite.
#[derive(Debug)]
pub struct Softmax;

impl Op for Softmax {
    fn name(&self) -> &'static str {
        "softmax"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let x = inputs[0];
        if x.dtype != DType::F32 || x.shape.last().is_none_or(|&d| d == 0) {
            return shape_err(
                self.name(),
                format!("needs an f32 tensor with a non-empty last axis, got {x}"),
            );
        }
        Ok(vec![x.clone()])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let x = inputs[0].data;
        let (_, len) = inputs[0].meta.rows();
        par_rows(outputs[0].data, len, |row, y| {
            let x = &x[row * len..][..len];
            let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for (o, &v) in y.iter_mut().zip(x) {
                *o = exp(v - max);
            }
            let total: f32 = y.iter().sum();
            for o in y.iter_mut() {
                *o /= total;
            }
        });
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let per_row = RowKernels::for_adapter(adapter);
        row_dispatch(
            per_row,
            ["softmax", "softmax_rows"],
            inputs[0],
            vec![Arg::In(0), Arg::Out(0)],
        )
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        Ok(vec![Some(g.apply1(SoftmaxBackward, &[args.outputs[0], grad])?)])
    }
}

/// gx = y·(gy − Σ gy·y) per row, from the softmax output y and the upstream gradient gy.
#[derive(Debug)]
pub struct SoftmaxBackward;

impl Op for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "softmax_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (y, gy) = (inputs[0], inputs[1]);
        if y.dtype != DType::F32 || y != gy || y.shape.last().is_none_or(|&d| d == 0) {
            return shape_err(
                self.name(),
                format!(
                    "needs y and gy as f32 tensors of one shape with a non-empty last axis, got {y} and {gy}"
                ),
            );
        }
        Ok(vec![y.clone()])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (y, gy) = (inputs[0].data, inputs[1].data);
        let (_, len) = inputs[0].meta.rows();
        par_rows(outputs[0].data, len, |row, gx| {
            let (y, gy) = (&y[row * len..][..len], &gy[row * len..][..len]);
            let dot: f32 = y.iter().zip(gy).map(|(a, b)| a * b).sum();
            for ((o, &yv), &gv) in gx.iter_mut().zip(y).zip(gy) {
                *o = yv * (gv - dot);
            }
        });
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        row_dispatch(
            RowKernels::for_adapter(adapter),
            ["softmax_backward", "softmax_backward_rows"],
            inputs[0],
            vec![Arg::In(0), Arg::In(1), Arg::Out(0)],
        )
    }
}

impl Graph {
    /// Softmax over the last axis.
    pub fn softmax(&mut self, x: TensorId) -> Result<TensorId> {
        self.apply1(Softmax, &[x])
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::testing::*;

    /// softmax(x * spread): parameters are uniform on [-1, 1]; `spread` sharpens the rows.
    fn softmax(shape: &'static [usize], spread: f32) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let mut x = param(g, "x", shape);
            if spread != 1.0 {
                x = g.scale(x, spread).unwrap();
            }
            Built {
                out: g.softmax(x).unwrap(),
                feeds: vec![],
            }
        }
    }

    #[test]
    fn gpu_matches_cpu_on_short_long_and_odd_rows() {
        // Rows of 1, of 7, of 53 (odd), and longer than the 64-thread workgroup (300, 5000).
        let shapes: [&'static [usize]; 5] = [&[37, 91, 53], &[11, 7], &[5, 1], &[4, 300], &[3, 5000]];
        for shape in shapes {
            check_each_kind_matches_cpu(&softmax(shape, 1.0), 1e-6, 1e-4);
        }
    }

    #[test]
    fn large_logits_stay_finite() {
        // exp(±200) overflows f32 unless the row max is subtracted first. Gradients are scaled by
        // 200, and so is the rounding of gy − Σ gy·y where one probability is near 1.
        check_each_kind_matches_cpu(&softmax(&[6, 129], 200.0), 1e-4, 1e-4);
        let out = run(cpu(), &softmax(&[6, 129], 200.0), 7, &Overrides::default()).out;
        assert!(out.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_gradients(&softmax(&[3, 5], 2.0), 1e-2, 1e-2, 15);
    }

    #[test]
    fn matches_pytorch() {
        check_reference("softmax", "short_rows", &softmax(&[2, 3, 7], 1.0), 1e-6, 1e-5);
        check_reference("softmax", "long_rows", &softmax(&[2, 1000], 1.0), 1e-6, 1e-5);
        check_reference("softmax", "large_logits", &softmax(&[3, 20], 1.0), 1e-6, 1e-5);
    }

    #[test]
    fn empty_last_axis_names_the_op_and_the_shape() {
        let mut g = Graph::new();
        let x = param(&mut g, "x", &[4, 0]);
        let err = g.softmax(x).unwrap_err().to_string();
        assert!(err.starts_with("softmax:") && err.contains("[4, 0]"), "{err}");
    }
}
