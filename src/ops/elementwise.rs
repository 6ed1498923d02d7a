//! Elementwise arithmetic: add, sub, mul, div with NumPy broadcasting, and scaling by a constant.

use rayon::prelude::*;

use super::par::{PAR_CHUNK, par_map_indexed};
use super::strided::par_strided_rows;
use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::{eight_words, uniform};
use crate::tensor::{DType, MAX_RANK, TensorMeta, broadcast_shapes, broadcast_strides};
use crate::vector::vectorised_fn;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
}

uniform! {
    /// `elementwise.wgsl`'s uniform: shapes and strides padded with zeros to rank 8.
    pub struct BroadcastUniform = ELEMENTWISE "Broadcast" {
        n: u32,
        rank: u32,
        kind: u32,
        _pad: u32,
        shape: [[u32; 4]; 2],
        a_strides: [[u32; 4]; 2],
        b_strides: [[u32; 4]; 2],
    }
}

#[derive(Debug)]
pub struct Binary(pub BinaryKind);

impl Op for Binary {
    fn name(&self) -> &'static str {
        match self.0 {
            BinaryKind::Add => "add",
            BinaryKind::Sub => "sub",
            BinaryKind::Mul => "mul",
            BinaryKind::Div => "div",
        }
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (a, b) = (inputs[0], inputs[1]);
        if a.dtype != DType::F32 || b.dtype != DType::F32 {
            return shape_err(self.name(), format!("needs f32 tensors, got {a} and {b}"));
        }
        let out = broadcast_shapes(self.name(), &a.shape, &b.shape)?;
        if out.len() > MAX_RANK {
            return shape_err(
                self.name(),
                format!("rank {} is over the limit of {MAX_RANK}", out.len()),
            );
        }
        Ok(vec![TensorMeta::f32(&out)])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        match self.0 {
            BinaryKind::Add => binary_cpu(inputs, outputs, |x, y| x + y),
            BinaryKind::Sub => binary_cpu(inputs, outputs, |x, y| x - y),
            BinaryKind::Mul => binary_cpu(inputs, outputs, |x, y| x * y),
            BinaryKind::Div => binary_cpu(inputs, outputs, |x, y| x / y),
        }
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let out = &outputs[0].shape;
        let n = outputs[0].numel();
        let uniform = BroadcastUniform {
            n: word(n),
            rank: word(out.len()),
            kind: self.0 as u32,
            _pad: 0,
            // Padded with zeros to the eight words the kernel reads.
            shape: eight_words(out, 0, 0),
            a_strides: eight_words(&broadcast_strides(&inputs[0].shape, out), 0, 0),
            b_strides: eight_words(&broadcast_strides(&inputs[1].shape, out), 0, 0),
        };
        // Most binary ops in a step (residual adds, gradient sums) broadcast nothing.
        let same = inputs.iter().all(|m| &m.shape == out);
        GpuKernels::single(Dispatch::new(
            if same { "binary_same" } else { "binary" },
            &uniform,
            vec![Arg::In(0), Arg::In(1), Arg::Out(0)],
            grid(n, 256),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None, None]);
        };
        let (a, b) = (args.inputs[0], args.inputs[1]);
        let (sa, sb) = (g.shape(a).to_vec(), g.shape(b).to_vec());
        let (ga, gb) = match self.0 {
            BinaryKind::Add => (grad, grad),
            BinaryKind::Sub => (grad, g.scale(grad, -1.0)?),
            BinaryKind::Mul => (g.mul(grad, b)?, g.mul(grad, a)?),
            BinaryKind::Div => {
                // d(a/b)/db = -(a/b)/b, so gb = -(grad/b)*out.
                let ga = g.div(grad, b)?;
                let t = g.mul(ga, args.outputs[0])?;
                (ga, g.scale(t, -1.0)?)
            }
        };
        Ok(vec![Some(g.sum_to(ga, &sa)?), Some(g.sum_to(gb, &sb)?)])
    }
}

/// out = f(a, b) with broadcasting, one loop per kind so that the compiler vectorises it.
fn binary_cpu(inputs: &[In], outputs: &mut [Out], f: impl Fn(f32, f32) -> f32 + Sync) {
    let (a, b) = (inputs[0].data, inputs[1].data);
    let out_shape = outputs[0].meta.shape.clone();
    let out = &mut *outputs[0].data;
    if inputs[0].shape() == out_shape.as_slice() && inputs[1].shape() == out_shape.as_slice() {
        par_zip(out, a, b, f);
        return;
    }
    let sa = broadcast_strides(inputs[0].shape(), &out_shape);
    let sb = broadcast_strides(inputs[1].shape(), &out_shape);
    par_strided_rows(out, &out_shape, [&sa, &sb], |[ia, ib], steps, row| {
        let n = row.len();
        match steps {
            [1, 1] => {
                for ((o, &x), &y) in row.iter_mut().zip(&a[ia..ia + n]).zip(&b[ib..ib + n]) {
                    *o = f(x, y);
                }
            }
            [1, 0] => {
                let y = b[ib];
                for (o, &x) in row.iter_mut().zip(&a[ia..ia + n]) {
                    *o = f(x, y);
                }
            }
            [0, 1] => {
                let x = a[ia];
                for (o, &y) in row.iter_mut().zip(&b[ib..ib + n]) {
                    *o = f(x, y);
                }
            }
            [da, db] => {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = f(a[ia + j * da], b[ib + j * db]);
                }
            }
        }
    });
}

/// out[i] = f(a[i], b[i]), split across threads in chunks.
pub(crate) fn par_zip(out: &mut [f32], a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32 + Sync) {
    out.par_chunks_mut(PAR_CHUNK)
        .zip(a.par_chunks(PAR_CHUNK))
        .zip(b.par_chunks(PAR_CHUNK))
        .for_each(|((o, a), b)| zip_chunk(o, a, b, &f));
}

vectorised_fn! {
    fn zip_chunk(out: &mut [f32], a: &[f32], b: &[f32], f: &impl Fn(f32, f32) -> f32) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    }
}

/// out[i] = f(x[i]) for every element, split across threads in chunks.
pub(crate) fn par_map(out: &mut [f32], x: &[f32], f: impl Fn(f32) -> f32 + Sync) {
    par_map_indexed(out, x, |_, x| f(x));
}

/// The shape rule of ops that map one f32 tensor to another of the same shape.
pub(crate) fn same_f32_shape(op: &'static str, x: &TensorMeta) -> Result<Vec<TensorMeta>> {
    if x.dtype != DType::F32 {
        return shape_err(op, format!("needs an f32 tensor, got {x}"));
    }
    Ok(vec![x.clone()])
}

uniform! {
    /// `scale.wgsl`'s uniform.
    pub struct ScaleUniform = SCALE "Params" { n: u32, factor: f32 }
}

/// out = x * factor.
#[derive(Debug)]
pub struct Scale(pub f32);

impl Op for Scale {
    fn name(&self) -> &'static str {
        "scale"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        same_f32_shape(self.name(), inputs[0])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let factor = self.0;
        par_map(outputs[0].data, inputs[0].data, |x| x * factor);
    }

    fn gpu(&self, _adapter: AdapterKind, _inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let n = outputs[0].numel();
        let uniform = ScaleUniform {
            n: word(n),
            factor: self.0,
        };
        GpuKernels::single(Dispatch::new(
            "scale",
            &uniform,
            vec![Arg::In(0), Arg::Out(0)],
            grid(n, 256),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        Ok(vec![Some(g.scale(grad, self.0)?)])
    }
}

impl Graph {
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.apply1(Binary(BinaryKind::Add), &[a, b])
    }

    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.apply1(Binary(BinaryKind::Sub), &[a, b])
    }

    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.apply1(Binary(BinaryKind::Mul), &[a, b])
    }

    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.apply1(Binary(BinaryKind::Div), &[a, b])
    }

    pub fn scale(&mut self, x: TensorId, factor: f32) -> Result<TensorId> {
        self.apply1(Scale(factor), &[x])
    }
}

#[cfg(test)]
mod tests {
    use super::BinaryKind;
    use crate::graph::Graph;
    use crate::testing::*;

    fn binary(kind: BinaryKind, sa: &'static [usize], sb: &'static [usize]) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let a = param(g, "a", sa);
            let mut b = param(g, "b", sb);
            if kind == BinaryKind::Div {
                // Keep the divisor away from zero, as the PyTorch case does.
                let three = g.fill(&[1], 3.0).unwrap();
                b = g.add(b, three).unwrap();
            }
            let out = g.apply1(super::Binary(kind), &[a, b]).unwrap();
            Built { out, feeds: vec![] }
        }
    }

    const KINDS: [BinaryKind; 4] = [BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div];

    #[test]
    fn gpu_matches_cpu_on_odd_and_broadcast_shapes() {
        let shapes: [(&[usize], &[usize]); 4] = [
            (&[37, 91, 53], &[37, 91, 53]),
            (&[37, 1, 53], &[91, 1]),
            (&[5, 300], &[300]),
            (&[1], &[3, 70001]),
        ];
        for kind in KINDS {
            for (sa, sb) in shapes {
                // Broadcast gradients are sums whose order differs between backends.
                check_gpu_matches_cpu(&binary(kind, sa, sb), 1e-4, 1e-4);
            }
        }
    }

    /// Inputs of the output's shape take the kernel without index arithmetic; any broadcast
    /// takes the general one (both checked against the CPU above).
    #[test]
    fn same_shapes_choose_the_kernel_without_broadcasting() {
        use crate::graph::Op;
        use crate::tensor::TensorMeta;
        let entry = |sa: &[usize], sb: &[usize], so: &[usize]| {
            let (a, b, o) = (TensorMeta::f32(sa), TensorMeta::f32(sb), TensorMeta::f32(so));
            super::Binary(BinaryKind::Add)
                .gpu(super::AdapterKind::Gpu, &[&a, &b], &[&o])
                .dispatches[0]
                .entry
        };
        assert_eq!(entry(&[37, 91, 53], &[37, 91, 53], &[37, 91, 53]), "binary_same");
        assert_eq!(entry(&[5, 300], &[300], &[5, 300]), "binary");
        assert_eq!(entry(&[1], &[3, 70001], &[3, 70001]), "binary");
        assert_eq!(entry(&[300], &[5, 300], &[5, 300]), "binary");
    }

    #[test]
    fn gradients_match_finite_differences() {
        for kind in KINDS {
            check_gradients(&binary(kind, &[3, 1, 4], &[2, 1]), 1e-2, 1e-2, 8);
        }
    }

    #[test]
    fn matches_pytorch() {
        check_reference(
            "elementwise",
            "add",
            &binary(BinaryKind::Add, &[3, 4, 5], &[4, 1]),
            1e-5,
            1e-5,
        );
        check_reference(
            "elementwise",
            "sub",
            &binary(BinaryKind::Sub, &[2, 3], &[3]),
            1e-5,
            1e-5,
        );
        check_reference(
            "elementwise",
            "mul",
            &binary(BinaryKind::Mul, &[3, 1, 5], &[2, 1]),
            1e-5,
            1e-5,
        );
        check_reference(
            "elementwise",
            "div",
            &binary(BinaryKind::Div, &[4, 6], &[4, 1]),
            1e-5,
            1e-5,
        );
        let scale = |g: &mut Graph| {
            let x = param(g, "x", &[7, 3]);
            Built {
                out: g.scale(x, -2.5).unwrap(),
                feeds: vec![],
            }
        };
        check_reference("elementwise", "scale", &scale, 1e-5, 1e-5);
    }

    #[test]
    fn mismatched_shapes_name_the_op_and_both_shapes() {
        let mut g = Graph::new();
        let a = param(&mut g, "a", &[3, 2]);
        let b = param(&mut g, "b", &[4]);
        let err = g.mul(a, b).unwrap_err().to_string();
        assert!(
            err.starts_with("mul:") && err.contains("[3, 2]") && err.contains("[4]"),
            "{err}"
        );
    }
}
