//! Ops that move data without arithmetic: reshape (a view, no kernel), concat, slice (and its
//! gradient, a zero padding) and axis permutation. They work on f32 and i32 tensors alike.

use rayon::prelude::*;

use super::strided::par_gather;
use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::{eight_words, uniform};
use crate::tensor::{MAX_RANK, TensorMeta, list_metas, numel, split_at_axis, strides};

/// Same elements, new shape. The planner gives the output the input's buffer, so nothing runs.
#[derive(Debug)]
pub struct Reshape {
    pub shape: Vec<usize>,
}

impl Op for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let x = inputs[0];
        if x.numel() != numel(&self.shape) {
            return shape_err(self.name(), format!("cannot reshape {x} to {:?}", self.shape));
        }
        Ok(vec![TensorMeta {
            shape: self.shape.clone(),
            dtype: x.dtype,
        }])
    }

    /// Views run no kernel; the copy keeps the op usable on its own (and is what a view means).
    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        outputs[0].data.copy_from_slice(inputs[0].data);
    }

    fn gpu(&self, _adapter: AdapterKind, _inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        GpuKernels::default()
    }

    fn is_view(&self) -> bool {
        true
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        let in_shape = g.shape(args.inputs[0]).to_vec();
        Ok(vec![Some(g.reshape(grad, &in_shape)?)])
    }
}

/// Joins tensors along `axis`; every other axis must agree, and so must the dtypes.
#[derive(Debug)]
pub struct Concat {
    pub axis: usize,
}

impl Op for Concat {
    fn name(&self) -> &'static str {
        "concat"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let Some(first) = inputs.first() else {
            return shape_err(self.name(), "needs at least one input");
        };
        if self.axis >= first.rank() {
            return shape_err(
                self.name(),
                format!("axis {} is out of range for {}", self.axis, list_metas(inputs)),
            );
        }
        let mut shape = first.shape.clone();
        shape[self.axis] = 0;
        for m in inputs {
            let agrees = m.rank() == first.rank()
                && m.dtype == first.dtype
                && (0..m.rank()).all(|d| d == self.axis || m.shape[d] == first.shape[d]);
            if !agrees {
                return shape_err(
                    self.name(),
                    format!("cannot join {} along axis {}", list_metas(inputs), self.axis),
                );
            }
            shape[self.axis] += m.shape[self.axis];
        }
        Ok(vec![TensorMeta {
            shape,
            dtype: first.dtype,
        }])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (_, total, inner) = split_at_axis(outputs[0].shape(), self.axis);
        let out_row = total * inner;
        if out_row == 0 {
            return;
        }
        let runs: Vec<usize> = inputs.iter().map(|x| x.shape()[self.axis] * inner).collect();
        outputs[0]
            .data
            .par_chunks_mut(out_row)
            .enumerate()
            .for_each(|(outer, row)| {
                let mut at = 0;
                for (x, &run) in inputs.iter().zip(&runs) {
                    row[at..at + run].copy_from_slice(&x.data[outer * run..(outer + 1) * run]);
                    at += run;
                }
            });
    }

    /// One dispatch per input, each writing its slice of the output, so any number of inputs
    /// stays within the GPU's limit of storage buffers per dispatch.
    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let (_, total, inner) = split_at_axis(&outputs[0].shape, self.axis);
        let mut at = 0;
        let dispatches = inputs
            .iter()
            .enumerate()
            .map(|(k, x)| {
                let run = x.shape[self.axis] * inner;
                let dispatch = copy_rows(Arg::In(k), x.numel(), run, (run, 0), (total * inner, at));
                at += run;
                dispatch
            })
            .collect();
        GpuKernels {
            scratch: Vec::new(),
            dispatches,
        }
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None; args.inputs.len()]);
        };
        let mut start = 0;
        let mut grads = Vec::with_capacity(args.inputs.len());
        for &x in args.inputs {
            let len = g.shape(x)[self.axis];
            grads.push(Some(g.slice(grad, self.axis, start, start + len)?));
            start += len;
        }
        Ok(grads)
    }
}

/// The run `start..end` of `axis`.
#[derive(Debug)]
pub struct Slice {
    pub axis: usize,
    pub start: usize,
    pub end: usize,
}

impl Op for Slice {
    fn name(&self) -> &'static str {
        "slice"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let x = inputs[0];
        if self.axis >= x.rank() || self.start >= self.end || self.end > x.shape[self.axis] {
            return shape_err(
                self.name(),
                format!(
                    "cannot take {}..{} of axis {} of {x} (the range must be non-empty and inside the axis)",
                    self.start, self.end, self.axis
                ),
            );
        }
        let mut shape = x.shape.clone();
        shape[self.axis] = self.end - self.start;
        Ok(vec![TensorMeta {
            shape,
            dtype: x.dtype,
        }])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let x = inputs[0].data;
        let (_, len, inner) = split_at_axis(inputs[0].shape(), self.axis);
        let (run, offset) = ((self.end - self.start) * inner, self.start * inner);
        if run == 0 {
            return;
        }
        outputs[0]
            .data
            .par_chunks_mut(run)
            .enumerate()
            .for_each(|(outer, row)| {
                let from = outer * len * inner + offset;
                row.copy_from_slice(&x[from..from + run]);
            });
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let (_, len, inner) = split_at_axis(&inputs[0].shape, self.axis);
        let run = (self.end - self.start) * inner;
        GpuKernels::single(copy_rows(
            Arg::In(0),
            outputs[0].numel(),
            run,
            (len * inner, self.start * inner),
            (run, 0),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        let len = g.shape(args.inputs[0])[self.axis];
        let pad = SliceBackward {
            axis: self.axis,
            start: self.start,
            len,
        };
        Ok(vec![Some(g.apply1(pad, &[grad])?)])
    }
}

uniform! {
    /// `pad_rows`'s uniform.
    pub struct PadUniform = SHAPE "Pad" { n: u32, row: u32, dst_row: u32, dst_off: u32 }
}

/// The gradient of [`Slice`]: places its input at `start` along `axis` of a tensor whose axis is
/// `len` long, zeros elsewhere.
#[derive(Debug)]
pub struct SliceBackward {
    pub axis: usize,
    pub start: usize,
    pub len: usize,
}

impl Op for SliceBackward {
    fn name(&self) -> &'static str {
        "slice_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let x = inputs[0];
        if self.axis >= x.rank() || self.start + x.shape[self.axis] > self.len {
            return shape_err(
                self.name(),
                format!(
                    "cannot place {x} at {} of axis {} of length {}",
                    self.start, self.axis, self.len
                ),
            );
        }
        let mut shape = x.shape.clone();
        shape[self.axis] = self.len;
        Ok(vec![TensorMeta {
            shape,
            dtype: x.dtype,
        }])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let x = inputs[0].data;
        let (_, run_len, inner) = split_at_axis(inputs[0].shape(), self.axis);
        let (run, offset, out_row) = (run_len * inner, self.start * inner, self.len * inner);
        if out_row == 0 {
            return;
        }
        outputs[0]
            .data
            .par_chunks_mut(out_row)
            .enumerate()
            .for_each(|(outer, row)| {
                row.fill(0.0);
                row[offset..offset + run].copy_from_slice(&x[outer * run..(outer + 1) * run]);
            });
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let (_, run_len, inner) = split_at_axis(&inputs[0].shape, self.axis);
        let n = outputs[0].numel();
        let uniform = PadUniform {
            n: word(n),
            row: word(run_len * inner),
            dst_row: word(self.len * inner),
            dst_off: word(self.start * inner),
        };
        GpuKernels::single(Dispatch::new(
            "pad_rows",
            &uniform,
            vec![Arg::In(0), Arg::Out(0)],
            grid(n, 256),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        let len = g.shape(args.inputs[0])[self.axis];
        Ok(vec![Some(g.slice(
            grad,
            self.axis,
            self.start,
            self.start + len,
        )?)])
    }
}

uniform! {
    /// `copy_rows`'s uniform (`Rows` in `shape.wgsl`).
    pub struct CopyRowsUniform = SHAPE "Rows" {
        n: u32,
        row: u32,
        src_row: u32,
        src_off: u32,
        dst_row: u32,
        dst_off: u32,
    }
}

/// A `copy_rows` dispatch: `n` elements in runs of `run` words, read from rows of
/// `src.0` words at offset `src.1`, written to rows of `dst.0` words at offset `dst.1`.
fn copy_rows(input: Arg, n: usize, run: usize, src: (usize, usize), dst: (usize, usize)) -> Dispatch {
    let uniform = CopyRowsUniform {
        n: word(n),
        row: word(run),
        src_row: word(src.0),
        src_off: word(src.1),
        dst_row: word(dst.0),
        dst_off: word(dst.1),
    };
    Dispatch::new("copy_rows", &uniform, vec![input, Arg::Out(0)], grid(n, 256))
}

/// Output axis `i` is input axis `perm[i]` (NumPy's `transpose(x, perm)`).
#[derive(Debug)]
pub struct Permute {
    pub perm: Vec<usize>,
}

impl Permute {
    /// Input strides in output axis order: where one step along each output axis moves in `x`.
    fn src_strides(&self, in_shape: &[usize]) -> Vec<usize> {
        let own = strides(in_shape);
        self.perm.iter().map(|&p| own[p]).collect()
    }
}

impl Op for Permute {
    fn name(&self) -> &'static str {
        "permute"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let x = inputs[0];
        let mut seen = vec![false; x.rank()];
        let is_perm = self.perm.len() == x.rank()
            && self
                .perm
                .iter()
                .all(|&p| p < x.rank() && !std::mem::replace(&mut seen[p], true));
        if !is_perm || x.rank() > MAX_RANK {
            return shape_err(
                self.name(),
                format!(
                    "{:?} is not a permutation of the axes of {x} (rank at most {MAX_RANK})",
                    self.perm
                ),
            );
        }
        Ok(vec![TensorMeta {
            shape: self.perm.iter().map(|&p| x.shape[p]).collect(),
            dtype: x.dtype,
        }])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let src = self.src_strides(inputs[0].shape());
        let shape = outputs[0].shape().to_vec();
        par_gather(outputs[0].data, inputs[0].data, &shape, &src);
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        strided_gather(&outputs[0].shape, &self.src_strides(&inputs[0].shape))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        let mut inverse = vec![0; self.perm.len()];
        for (i, &p) in self.perm.iter().enumerate() {
            inverse[p] = i;
        }
        Ok(vec![Some(g.permute(grad, &inverse)?)])
    }
}

uniform! {
    /// `gather`'s uniform: shape and strides padded at the front to rank 8.
    pub struct GatherUniform = SHAPE "Gather" {
        n: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
        out_shape: [[u32; 4]; 2],
        out_strides: [[u32; 4]; 2],
        src_strides: [[u32; 4]; 2],
    }
}

/// out[i] = x[Σ coord_d · src_strides[d]] over the coordinates of i in `out_shape` (rank ≤ 8): one
/// kernel for permutes and for broadcasts (stride 0 on the repeated axes).
pub(crate) fn strided_gather(out_shape: &[usize], src_strides: &[usize]) -> GpuKernels {
    let n = numel(out_shape);
    // Pad at the front to rank 8: size 1 (coordinate 0), any nonzero stride.
    let front = |v: &[usize], fill: u32| eight_words(v, MAX_RANK - v.len(), fill);
    let uniform = GatherUniform {
        n: word(n),
        _pad0: 0,
        _pad1: 0,
        _pad2: 0,
        out_shape: front(out_shape, 1),
        out_strides: front(&strides(out_shape), 1),
        src_strides: front(src_strides, 0),
    };
    GpuKernels::single(Dispatch::new(
        "gather",
        &uniform,
        vec![Arg::In(0), Arg::Out(0)],
        grid(n, 256),
    ))
}

impl Graph {
    /// Joins `xs` along `axis` (at least one tensor; other axes and dtypes must agree).
    pub fn concat(&mut self, xs: &[TensorId], axis: usize) -> Result<TensorId> {
        if let [x] = xs {
            let rank = self.meta(*x).rank();
            if axis < rank {
                return Ok(*x);
            }
        }
        self.apply1(Concat { axis }, xs)
    }

    /// The elements `start..end` of `axis` (a non-empty range inside the axis).
    pub fn slice(&mut self, x: TensorId, axis: usize, start: usize, end: usize) -> Result<TensorId> {
        self.apply1(Slice { axis, start, end }, &[x])
    }

    /// Reorders axes: output axis `i` is input axis `perm[i]`.
    pub fn permute(&mut self, x: TensorId, perm: &[usize]) -> Result<TensorId> {
        let identity = perm.len() == self.meta(x).rank() && perm.iter().enumerate().all(|(i, &p)| i == p);
        if identity {
            return Ok(x);
        }
        self.apply1(Permute { perm: perm.to_vec() }, &[x])
    }

    /// Swaps axes `a` and `b`.
    pub fn transpose(&mut self, x: TensorId, a: usize, b: usize) -> Result<TensorId> {
        let rank = self.meta(x).rank();
        if a >= rank || b >= rank {
            return shape_err(
                "transpose",
                format!("cannot swap axes {a} and {b} of {}", self.meta(x)),
            );
        }
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(a, b);
        self.permute(x, &perm)
    }

    pub fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        if self.shape(x) == shape {
            return Ok(x);
        }
        self.apply1(
            Reshape {
                shape: shape.to_vec(),
            },
            &[x],
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::testing::*;

    fn concat(shapes: &'static [&'static [usize]], axis: usize) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let xs: Vec<_> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| param(g, &format!("x{i}"), s))
                .collect();
            Built {
                out: g.concat(&xs, axis).unwrap(),
                feeds: vec![],
            }
        }
    }

    fn slice(shape: &'static [usize], axis: usize, start: usize, end: usize) -> impl Fn(&mut Graph) -> Built {
        on_param(shape, move |g, x| g.slice(x, axis, start, end))
    }

    fn permute(shape: &'static [usize], perm: &'static [usize]) -> impl Fn(&mut Graph) -> Built {
        on_param(shape, move |g, x| g.permute(x, perm))
    }

    /// A reshape is a view: it is checked through the op that reads it.
    fn reshape_then_transpose(shape: &'static [usize], to: &'static [usize]) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let x = param(g, "x", shape);
            let y = g.reshape(x, to).unwrap();
            Built {
                out: g.transpose(y, 0, to.len() - 1).unwrap(),
                feeds: vec![],
            }
        }
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        // Copies are exact: the backends must agree bit for bit.
        check_gpu_matches_cpu(&concat(&[&[37, 91, 53], &[37, 91, 7]], 2), 0.0, 0.0);
        check_gpu_matches_cpu(&concat(&[&[37, 91, 53], &[5, 91, 53], &[1, 91, 53]], 0), 0.0, 0.0);
        check_gpu_matches_cpu(&concat(&[&[37, 3, 53], &[37, 91, 53]], 1), 0.0, 0.0);
        check_gpu_matches_cpu(&slice(&[37, 91, 53], 1, 10, 80), 0.0, 0.0);
        check_gpu_matches_cpu(&slice(&[37, 91, 53], 0, 36, 37), 0.0, 0.0);
        check_gpu_matches_cpu(&slice(&[37, 91, 53], 2, 0, 52), 0.0, 0.0);
        check_gpu_matches_cpu(&permute(&[37, 91, 53], &[2, 0, 1]), 0.0, 0.0);
        check_gpu_matches_cpu(&permute(&[70001, 3], &[1, 0]), 0.0, 0.0);
        check_gpu_matches_cpu(
            &permute(&[2, 3, 1, 2, 3, 2, 1, 3], &[7, 6, 5, 4, 3, 2, 1, 0]),
            0.0,
            0.0,
        );
        check_gpu_matches_cpu(&reshape_then_transpose(&[37, 91, 53], &[91, 37 * 53]), 0.0, 0.0);
    }

    #[test]
    fn concat_takes_more_inputs_than_a_dispatch_can_bind() {
        // Twelve inputs: over the 8 storage buffers a WebGPU shader stage may bind by default.
        const SHAPES: [&[usize]; 12] = [
            &[3, 1, 4],
            &[3, 2, 4],
            &[3, 3, 4],
            &[3, 1, 4],
            &[3, 5, 4],
            &[3, 1, 4],
            &[3, 2, 4],
            &[3, 1, 4],
            &[3, 7, 4],
            &[3, 1, 4],
            &[3, 1, 4],
            &[3, 2, 4],
        ];
        check_gpu_matches_cpu(&concat(&SHAPES, 1), 0.0, 0.0);
    }

    /// Integer tensors move bit-exactly: ids concatenated, transposed and sliced still pick the
    /// right embedding rows.
    #[test]
    fn integer_tensors_move_exactly() {
        let build = |g: &mut Graph| {
            let table = param(g, "table", &[50, 6]);
            let (a, fa) = int_input(g, "a", &[4, 3], random_ints(12, 50, 1));
            let (b, fb) = int_input(g, "b", &[4, 5], random_ints(20, 50, 2));
            let ids = g.concat(&[a, b], 1).unwrap();
            let ids = g.transpose(ids, 0, 1).unwrap();
            let ids = g.slice(ids, 0, 2, 7).unwrap();
            Built {
                out: g.embedding(table, ids).unwrap(),
                feeds: vec![fa, fb],
            }
        };
        check_gpu_matches_cpu(&build, 0.0, 0.0);
        let got = run(cpu(), &build, 3, &Overrides::default());
        let table = {
            let mut g = Graph::new();
            build(&mut g);
            let store = crate::params::ParamStore::init(cpu(), &g, 3).unwrap();
            pollster::block_on(store.read("table")).unwrap()
        };
        let (a, b) = (random_ints(12, 50, 1), random_ints(20, 50, 2));
        // Row r of the result is token (i, j) = (r % 4, 2 + r / 4) of concat([a, b], 1).
        for r in 0..20 {
            let (i, j) = (r % 4, 2 + r / 4);
            let id = if j < 3 { a[i * 3 + j] } else { b[i * 5 + j - 3] } as usize;
            assert_eq!(
                got.out[r * 6..(r + 1) * 6],
                table[id * 6..(id + 1) * 6],
                "row {r}"
            );
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_gradients(&concat(&[&[2, 3], &[2, 1], &[2, 2]], 1), 1e-2, 1e-2, 8);
        check_gradients(&slice(&[3, 5, 2], 1, 1, 4), 1e-2, 1e-2, 8);
        check_gradients(&permute(&[2, 3, 4], &[1, 2, 0]), 1e-2, 1e-2, 8);
        check_gradients(&reshape_then_transpose(&[2, 6], &[3, 4]), 1e-2, 1e-2, 8);
        // The slice's gradient op, through its own gradient (a slice).
        let slice_twice = |g: &mut Graph| {
            let x = param(g, "x", &[3, 4]);
            let y = g
                .apply1(
                    super::SliceBackward {
                        axis: 1,
                        start: 1,
                        len: 6,
                    },
                    &[x],
                )
                .unwrap();
            Built {
                out: y,
                feeds: vec![],
            }
        };
        check_gradients(&slice_twice, 1e-2, 1e-2, 8);
        check_gpu_matches_cpu(&slice_twice, 0.0, 0.0);
    }

    #[test]
    fn matches_pytorch() {
        check_reference(
            "shape",
            "concat",
            &concat(&[&[2, 3, 4], &[2, 1, 4], &[2, 2, 4]], 1),
            1e-6,
            1e-6,
        );
        check_reference("shape", "slice", &slice(&[4, 6, 3], 1, 2, 5), 1e-6, 1e-6);
        check_reference(
            "shape",
            "permute",
            &permute(&[2, 3, 4, 5], &[2, 0, 3, 1]),
            1e-6,
            1e-6,
        );
        let transpose = |g: &mut Graph| {
            let x = param(g, "x", &[3, 4, 5]);
            Built {
                out: g.transpose(x, 0, 2).unwrap(),
                feeds: vec![],
            }
        };
        check_reference("shape", "transpose", &transpose, 1e-6, 1e-6);
        let reshape_scale = |g: &mut Graph| {
            let x = param(g, "x", &[4, 6]);
            let y = g.reshape(x, &[2, 3, 4]).unwrap();
            Built {
                out: g.scale(y, 2.0).unwrap(),
                feeds: vec![],
            }
        };
        check_reference("shape", "reshape", &reshape_scale, 1e-6, 1e-6);
    }

    #[test]
    fn bad_shapes_name_the_op_and_the_shapes() {
        let mut g = Graph::new();
        let a = param(&mut g, "a", &[3, 2]);
        let b = param(&mut g, "b", &[4, 5]);
        let err = |r: crate::Result<crate::TensorId>| r.unwrap_err().to_string();

        let e = err(g.concat(&[a, b], 1));
        assert!(
            e.starts_with("concat:") && e.contains("[3, 2]") && e.contains("[4, 5]"),
            "{e}"
        );
        let e = err(g.concat(&[], 0));
        assert!(e.starts_with("concat:"), "{e}");
        let e = err(g.slice(a, 1, 1, 3));
        assert!(
            e.starts_with("slice:") && e.contains("[3, 2]") && e.contains("1..3"),
            "{e}"
        );
        let e = err(g.slice(a, 0, 2, 2));
        assert!(e.starts_with("slice:") && e.contains("[3, 2]"), "{e}");
        let e = err(g.permute(a, &[0, 0]));
        assert!(
            e.starts_with("permute:") && e.contains("[3, 2]") && e.contains("[0, 0]"),
            "{e}"
        );
        let e = err(g.transpose(a, 0, 2));
        assert!(e.starts_with("transpose:") && e.contains("[3, 2]"), "{e}");
        let e = err(g.reshape(b, &[3, 7]));
        assert!(
            e.starts_with("reshape:") && e.contains("[4, 5]") && e.contains("[3, 7]"),
            "{e}"
        );
    }
}
