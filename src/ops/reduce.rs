//! Sums over an axis and their adjoint, broadcasting. Means are sums scaled by 1/n.

use rayon::prelude::*;

use super::par::par_fill;
use super::shape::strided_gather;
use super::strided::par_gather;
use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::tensor::{DType, MAX_RANK, TensorMeta, broadcast_shapes, broadcast_strides, split_at_axis};
use crate::vector::vectorised_fn;

uniform! {
    pub struct AxisUniform = REDUCE "Axis" { outer: u32, len: u32, inner: u32, n_out: u32 }
}

/// Sum over one axis.
#[derive(Debug)]
pub struct Sum {
    pub axis: usize,
    pub keepdim: bool,
}

vectorised_fn! {
    /// o += rows 1..len of `x`, rows `stride` apart.
    fn add_rows(o: &mut [f32], x: &[f32], stride: usize, len: usize) {
        for k in 1..len {
            for (o, &v) in o.iter_mut().zip(&x[k * stride..]) {
                *o += v;
            }
        }
    }
}

/// Output columns one CPU task of a sum over a non-innermost axis adds up.
const SUM_COLUMNS: usize = 64;

/// Axes at least this long get a whole workgroup per output element.
const WORKGROUP_AXIS: usize = 64;
/// On software adapters, at least this many outputs take one invocation each whatever the axis.
const SOFTWARE_THREAD_OUTPUTS: usize = 64;

impl Op for Sum {
    fn name(&self) -> &'static str {
        "sum"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let x = inputs[0];
        if x.dtype != DType::F32 || self.axis >= x.rank() {
            return shape_err(self.name(), format!("cannot sum axis {} of {x}", self.axis));
        }
        let mut shape = x.shape.clone();
        if self.keepdim {
            shape[self.axis] = 1;
        } else {
            shape.remove(self.axis);
        }
        Ok(vec![TensorMeta::f32(&shape)])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let x = inputs[0].data;
        let (_, len, inner) = split_at_axis(inputs[0].shape(), self.axis);
        let out = &mut *outputs[0].data;
        if inner == 1 {
            par_fill(out, |o| x[o * len..][..len].iter().sum());
            return;
        }
        // Whole rows of `inner` values are added at once (the same order per element: k = 0,
        // 1, ..), in column blocks so that long axes still split across threads.
        let block = inner.min(SUM_COLUMNS);
        out.par_chunks_mut(inner).enumerate().for_each(|(outer, o)| {
            let x = &x[outer * len * inner..][..len * inner];
            o.par_chunks_mut(block).enumerate().for_each(|(c, o)| {
                let first = c * block;
                o.copy_from_slice(&x[first..first + o.len()]);
                add_rows(o, &x[first..], inner, len);
            });
        });
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let (outer, len, inner) = split_at_axis(&inputs[0].shape, self.axis);
        let n = outputs[0].numel();
        let uniform = AxisUniform {
            outer: word(outer),
            len: word(len),
            inner: word(inner),
            n_out: word(n),
        };
        // A software adapter has lanes for every output once there are a few dozen, and its
        // workgroup's tree of barriers costs more than one invocation's walk down the axis.
        let workgroup_per_output = match adapter {
            AdapterKind::Gpu => len >= WORKGROUP_AXIS,
            AdapterKind::Software => len >= WORKGROUP_AXIS && n < SOFTWARE_THREAD_OUTPUTS,
        };
        let (entry, workgroups) = if workgroup_per_output {
            ("sum_axis_workgroup", grid(n, 1))
        } else {
            ("sum_axis", grid(n, 256))
        };
        GpuKernels::single(Dispatch::new(
            entry,
            &uniform,
            vec![Arg::In(0), Arg::Out(0)],
            workgroups,
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        let in_shape = g.shape(args.inputs[0]).to_vec();
        let mut kept = in_shape.clone();
        kept[self.axis] = 1;
        let grad = g.reshape(grad, &kept)?;
        Ok(vec![Some(g.broadcast_to(grad, &in_shape)?)])
    }
}

/// Repeats a tensor along its size-1 (or missing leading) axes, NumPy style.
#[derive(Debug)]
pub struct BroadcastTo {
    pub shape: Vec<usize>,
}

impl Op for BroadcastTo {
    fn name(&self) -> &'static str {
        "broadcast_to"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let x = inputs[0];
        let out = broadcast_shapes(self.name(), &x.shape, &self.shape)?;
        if out != self.shape || x.dtype != DType::F32 {
            return shape_err(self.name(), format!("cannot broadcast {x} to {:?}", self.shape));
        }
        if out.len() > MAX_RANK {
            return shape_err(
                self.name(),
                format!("rank {} is over the limit of {MAX_RANK}", out.len()),
            );
        }
        Ok(vec![TensorMeta::f32(&out)])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let strides = broadcast_strides(inputs[0].shape(), &self.shape);
        par_gather(outputs[0].data, inputs[0].data, &self.shape, &strides);
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        strided_gather(&self.shape, &broadcast_strides(&inputs[0].shape, &self.shape))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        let in_shape = g.shape(args.inputs[0]).to_vec();
        Ok(vec![Some(g.sum_to(grad, &in_shape)?)])
    }
}

impl Graph {
    pub fn sum(&mut self, x: TensorId, axis: usize, keepdim: bool) -> Result<TensorId> {
        self.apply1(Sum { axis, keepdim }, &[x])
    }

    pub fn mean(&mut self, x: TensorId, axis: usize, keepdim: bool) -> Result<TensorId> {
        let n = self.shape(x).get(axis).copied().unwrap_or(1);
        let s = self.sum(x, axis, keepdim)?;
        self.scale(s, 1.0 / n as f32)
    }

    /// Sum of every element, as a tensor of shape `[1]`.
    pub fn sum_all(&mut self, x: TensorId) -> Result<TensorId> {
        let n = self.meta(x).numel();
        let flat = self.reshape(x, &[n])?;
        self.sum(flat, 0, true)
    }

    pub fn broadcast_to(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        if self.shape(x) == shape {
            return Ok(x);
        }
        self.apply1(
            BroadcastTo {
                shape: shape.to_vec(),
            },
            &[x],
        )
    }

    /// Sums a broadcast result back to `shape`: the gradient rule of every broadcasting op.
    pub fn sum_to(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        let from = self.shape(x).to_vec();
        if from == shape {
            return Ok(x);
        }
        if from.len() < shape.len() {
            return shape_err(
                "sum_to",
                format!("cannot sum {from:?} to the larger rank {shape:?}"),
            );
        }
        let extra = from.len() - shape.len();
        let mut y = x;
        for axis in extra..from.len() {
            if shape[axis - extra] == 1 && from[axis] != 1 {
                y = self.sum(y, axis, true)?;
            }
        }
        for _ in 0..extra {
            y = self.sum(y, 0, false)?;
        }
        self.reshape(y, shape)
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::testing::*;

    fn sum(shape: &'static [usize], axis: usize, keepdim: bool) -> impl Fn(&mut Graph) -> Built {
        on_param(shape, move |g, x| g.sum(x, axis, keepdim))
    }

    fn mean(shape: &'static [usize], axis: usize, keepdim: bool) -> impl Fn(&mut Graph) -> Built {
        on_param(shape, move |g, x| g.mean(x, axis, keepdim))
    }

    fn broadcast_to(from: &'static [usize], to: &'static [usize]) -> impl Fn(&mut Graph) -> Built {
        on_param(from, move |g, x| g.broadcast_to(x, to))
    }

    fn sum_to(from: &'static [usize], to: &'static [usize]) -> impl Fn(&mut Graph) -> Built {
        on_param(from, move |g, x| g.sum_to(x, to))
    }

    #[test]
    fn gpu_matches_cpu_for_sums_along_short_and_long_axes() {
        // On GPUs axes of 37 and 53 take the thread-per-output kernel, 91 the workgroup kernel;
        // 63 and 64 sit on either side of the switch. Software adapters take the workgroup kernel
        // only for fewer than 64 outputs of a long axis ([64, 5] and [5, 64] summed over the 64),
        // not for [100, 70] summed over its 100 (70 outputs). Backward passes run broadcast_to.
        for axis in 0..3 {
            for keepdim in [false, true] {
                check_each_kind_matches_cpu(&sum(&[37, 91, 53], axis, keepdim), 1e-5, 1e-4);
            }
        }
        for (shape, axis) in [(&[63, 5][..], 0), (&[64, 5], 0), (&[5, 64], 1), (&[100, 70], 0)] {
            check_each_kind_matches_cpu(&sum(shape, axis, false), 1e-5, 1e-4);
        }
        // 70001 outputs of a short axis; and sums of 70001 terms, whose rounding depends on the order.
        check_each_kind_matches_cpu(&sum(&[3, 70001], 0, true), 1e-5, 1e-4);
        check_each_kind_matches_cpu(&sum(&[3, 70001], 1, false), 1e-3, 1e-4);
    }

    #[test]
    fn gpu_matches_cpu_for_mean_broadcast_and_sum_to() {
        check_gpu_matches_cpu(&mean(&[37, 91, 53], 1, true), 1e-5, 1e-4);
        check_gpu_matches_cpu(&mean(&[37, 91, 53], 2, false), 1e-5, 1e-4);
        check_gpu_matches_cpu(&broadcast_to(&[37, 1, 53], &[4, 37, 91, 53]), 1e-5, 1e-4);
        check_gpu_matches_cpu(&broadcast_to(&[1], &[3, 70001]), 1e-3, 1e-4);
        check_gpu_matches_cpu(&sum_to(&[2, 37, 91, 53], &[91, 1]), 1e-4, 1e-4);
        check_gpu_matches_cpu(&sum_to(&[37, 91, 53], &[37, 1, 53]), 1e-5, 1e-4);
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_gradients(&sum(&[3, 70, 2], 1, false), 1e-2, 1e-2, 8);
        check_gradients(&sum(&[4, 5], 1, true), 1e-2, 1e-2, 8);
        check_gradients(&mean(&[5, 4], 0, true), 1e-2, 1e-2, 8);
        check_gradients(&broadcast_to(&[3, 1], &[2, 3, 4]), 1e-2, 1e-2, 3);
        check_gradients(&sum_to(&[2, 3, 4], &[3, 1]), 1e-2, 1e-2, 8);
    }

    #[test]
    fn matches_pytorch() {
        check_reference("elementwise", "sum", &sum(&[3, 70, 2], 1, false), 1e-5, 1e-5);
        check_reference("elementwise", "mean_keepdim", &mean(&[5, 4], 0, true), 1e-5, 1e-5);
        check_reference(
            "elementwise",
            "broadcast_to",
            &broadcast_to(&[3, 1], &[2, 3, 4]),
            1e-5,
            1e-5,
        );
    }

    #[test]
    fn bad_shapes_name_the_op_and_the_shapes() {
        let mut g = Graph::new();
        let x = param(&mut g, "x", &[2, 3]);
        let err = g.sum(x, 2, false).unwrap_err().to_string();
        assert!(
            err.starts_with("sum:") && err.contains("axis 2") && err.contains("[2, 3]"),
            "{err}"
        );
        let err = g.broadcast_to(x, &[4, 3, 3]).unwrap_err().to_string();
        assert!(
            err.starts_with("broadcast_to:") && err.contains("[2, 3]") && err.contains("[4, 3, 3]"),
            "{err}"
        );
        let err = g.broadcast_to(x, &[3]).unwrap_err().to_string();
        assert!(
            err.starts_with("broadcast_to:") && err.contains("[2, 3]") && err.contains("[3]"),
            "{err}"
        );
        let err = g.sum_to(x, &[1, 2, 3]).unwrap_err().to_string();
        assert!(
            err.starts_with("sum_to:") && err.contains("[2, 3]") && err.contains("[1, 2, 3]"),
            "{err}"
        );
    }
}
