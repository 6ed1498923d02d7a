//! Batched matrix products `op(a) · op(b)`, where `op` transposes the last two axes when asked.
//!
//! `a` is `[..batch, m, k]` (`[..batch, k, m]` with `trans_a`), `b` is `[..batch, k, n]`
//! (`[..batch, n, k]` with `trans_b`), the result `[..batch, m, n]`. Either operand may instead be
//! a plain matrix shared by the whole batch: `x[B, T, D] · w[D, F]` is the linear layer.

use rayon::prelude::*;

use super::par::PAR_CHUNK;
use super::unary::{Activation, UnaryBackward, UnaryKind};
use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::arithmetic::Arithmetic;
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::product::{Strides, product};
use crate::tensor::{DType, TensorMeta};
use crate::vector::vectorised_fn;

mod kernels;

pub use kernels::{BLOCK_TILES, KernelChoice};
use kernels::{Epilogue, Kernel, kernel_for, same_sums};

uniform! {
    pub struct MatMulUniform = MATMUL "Dims" {
        m: u32, n: u32, k: u32, a_batch: u32, b_batch: u32, trans_a: u32, trans_b: u32,
        splits: u32, k_split: u32, batch: u32, _pad0: u32, _pad1: u32,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatMul {
    pub trans_a: bool,
    pub trans_b: bool,
    /// A kernel named by hand (`bench matmul --kernels`); `None` lets the op choose.
    pub kernel: Option<KernelChoice>,
    /// A third input, a bias `[n]` added to every row of the product as it is written (a linear
    /// layer's), where an add after the product read and wrote the whole output again.
    pub bias: bool,
    /// A second output, an activation of the first written beside it (a feed-forward's
    /// up-projection): the activation's own kernel read and wrote the whole output again. Its
    /// backward reads the first output, so that one is still written.
    pub activation: Option<Activation>,
}

/// A product as the kernels see it: `batch` products `[m, k] · [k, n]`, the matrices of each
/// operand `a_batch` / `b_batch` elements apart (0 for a matrix shared by the batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    a_batch: usize,
    b_batch: usize,
}

impl MatMul {
    /// The kernel the op runs: the one named by hand, or the adapter kind's choice.
    fn kernel_for(&self, adapter: AdapterKind, l: &Layout) -> Kernel {
        match self.kernel {
            Some(choice) => choice.kernel(adapter, l).expect("checked by infer"),
            None => kernel_for(adapter, l),
        }
    }

    /// The dispatches that compute the product `l` with `kernel`.
    fn kernels(&self, l: &Layout, kernel: &Kernel) -> GpuKernels {
        let tile = kernel.tile;
        let uniform = MatMulUniform {
            m: word(l.m),
            n: word(l.n),
            k: word(l.k),
            a_batch: word(l.a_batch),
            b_batch: word(l.b_batch),
            trans_a: self.trans_a.into(),
            trans_b: self.trans_b.into(),
            splits: word(kernel.splits),
            k_split: word(kernel.k_split(l.k)),
            batch: word(l.batch),
            _pad0: 0,
            _pad1: 0,
        };
        let groups = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        let workgroups = [
            groups(l.n.div_ceil(tile)),
            groups(l.m.div_ceil(tile)),
            groups(l.batch * kernel.splits),
        ];
        let epilogue = Epilogue {
            bias: self.bias,
            activation: self.activation,
        };
        // Binding 4 is the bias; a product without one binds `a` there (read, never used).
        // Binding 5 is the activation's output; a product without one binds a word of scratch there (never
        // written): WebGPU refuses a writable binding that overlaps another of the same buffer,
        // so C cannot stand in as `a` does for the bias.
        let bias = if self.bias { Arg::In(2) } else { Arg::In(0) };
        if kernel.splits == 1 {
            let (activated, scratch) = match self.activation {
                Some(_) => (Arg::Out(1), vec![]),
                None => (Arg::Scratch(0), vec![1]),
            };
            let args = vec![Arg::In(0), Arg::In(1), Arg::Out(0), bias, activated];
            let dispatch = Dispatch::new(kernel.entry, &uniform, args, workgroups);
            return GpuKernels {
                scratch,
                dispatches: vec![dispatch.with_constants(kernel.constants(epilogue))],
            };
        }
        // The partial products into a scratch [batch, splits, m, n], then their sums and the
        // epilogue.
        let activated = match self.activation {
            Some(_) => Arg::Out(1),
            None => Arg::Scratch(1),
        };
        let args = vec![
            Arg::In(0),
            Arg::In(1),
            Arg::Scratch(0),
            Arg::In(0),
            Arg::Scratch(1),
        ];
        let product = Dispatch::new(kernel.entry, &uniform, args, workgroups);
        let sum = Dispatch::new(
            "matmul_sum_splits",
            &uniform,
            vec![Arg::Scratch(0), Arg::Out(0), bias, activated],
            grid(l.batch * l.m * l.n, 64),
        );
        GpuKernels {
            scratch: vec![l.batch * kernel.splits * l.m * l.n, 1],
            dispatches: vec![
                product.with_constants(kernel.constants(Epilogue::default())),
                sum.with_constants(epilogue.constants().to_vec()),
            ],
        }
    }

    fn err<T>(&self, a: &TensorMeta, b: &TensorMeta, why: &str) -> Result<T> {
        shape_err(
            self.name(),
            format!(
                "{why}: a {a} (trans_a {}), b {b} (trans_b {})",
                self.trans_a, self.trans_b
            ),
        )
    }

    /// The output shape and the layout of the product, or an error naming both shapes.
    fn plan(&self, a: &TensorMeta, b: &TensorMeta) -> Result<(Vec<usize>, Layout)> {
        if a.dtype != DType::F32 || b.dtype != DType::F32 {
            return self.err(a, b, "needs f32 tensors");
        }
        if a.rank() < 2 || b.rank() < 2 {
            return self.err(a, b, "needs matrices (rank 2 or more)");
        }
        let (a_batch, a_mat) = a.shape.split_at(a.rank() - 2);
        let (b_batch, b_mat) = b.shape.split_at(b.rank() - 2);
        let batch_shape = match (a_batch.is_empty(), b_batch.is_empty()) {
            (_, true) => a_batch,
            (true, false) => b_batch,
            (false, false) if a_batch == b_batch => a_batch,
            _ => return self.err(a, b, "batch dimensions differ"),
        };
        let (m, ka) = if self.trans_a {
            (a_mat[1], a_mat[0])
        } else {
            (a_mat[0], a_mat[1])
        };
        let (kb, n) = if self.trans_b {
            (b_mat[1], b_mat[0])
        } else {
            (b_mat[0], b_mat[1])
        };
        if ka != kb {
            return self.err(a, b, &format!("inner dimensions differ ({ka} vs {kb})"));
        }
        let k = ka;
        let batch: usize = batch_shape.iter().product();
        let mut out = batch_shape.to_vec();
        out.extend([m, n]);
        let mut layout = Layout {
            batch,
            m,
            n,
            k,
            a_batch: if a_batch.is_empty() { 0 } else { m * k },
            b_batch: if b_batch.is_empty() { 0 } else { k * n },
        };
        // A weight shared by a batch of row-major inputs: the batch is just more rows.
        if layout.b_batch == 0 && layout.a_batch != 0 && !self.trans_a {
            layout = Layout {
                batch: 1,
                m: batch * m,
                a_batch: 0,
                ..layout
            };
        }
        Ok((out, layout))
    }
}

/// Below this many multiply-adds a product runs on one thread: a batch of small products is
/// split across threads by product instead.
const SMALL_PRODUCT: usize = 1 << 18;

impl MatMul {
    /// One product of the batch into `dst`, with strides for the transposes.
    #[allow(clippy::too_many_arguments)]
    fn product(
        &self,
        l: &Layout,
        a: &[f32],
        b: &[f32],
        index: usize,
        dst: &mut [f32],
        threaded: bool,
        arithmetic: Arithmetic,
    ) {
        let a = &a[index * l.a_batch..][..l.m * l.k];
        let b = &b[index * l.b_batch..][..l.k * l.n];
        let sa = if self.trans_a {
            Strides { rows: 1, cols: l.m }
        } else {
            Strides { rows: l.k, cols: 1 }
        };
        let sb = if self.trans_b {
            Strides { rows: 1, cols: l.k }
        } else {
            Strides { rows: l.n, cols: 1 }
        };
        product(l.m, l.n, l.k, a, sa, b, sb, dst, threaded, arithmetic);
    }

    /// d loss / d a for this product (batched like the product, before any sum over a batch).
    fn grad_a(&self, g: &mut Graph, grad: TensorId, b: TensorId) -> Result<TensorId> {
        if self.trans_a {
            g.matmul_t(b, grad, self.trans_b, true)
        } else {
            g.matmul_t(grad, b, false, !self.trans_b)
        }
    }

    /// d loss / d b for this product (batched like the product, before any sum over a batch).
    fn grad_b(&self, g: &mut Graph, a: TensorId, grad: TensorId) -> Result<TensorId> {
        if self.trans_b {
            g.matmul_t(grad, a, true, self.trans_a)
        } else {
            g.matmul_t(a, grad, !self.trans_a, false)
        }
    }
}

/// Sums a batch of matrices `[..batch, r, c]` into one `[r, c]`: the gradient of an operand
/// shared by the batch.
fn sum_batch(g: &mut Graph, x: TensorId) -> Result<TensorId> {
    let shape = g.shape(x).to_vec();
    let (r, c) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let batch: usize = shape[..shape.len() - 2].iter().product();
    let flat = g.reshape(x, &[batch, r * c])?;
    let summed = g.sum(flat, 0, false)?;
    g.reshape(summed, &[r, c])
}

/// Adds `bias` to every row of `out` and, with `activated`, writes f of each sum there: the
/// product's epilogue in one pass over its rows while they are in cache.
fn add_bias(out: &mut [f32], bias: &[f32], activated: Option<&mut [f32]>, f: impl Fn(f32) -> f32 + Sync) {
    let chunk = (PAR_CHUNK / bias.len()).max(1) * bias.len();
    match activated {
        Some(activated) => out
            .par_chunks_mut(chunk)
            .zip(activated.par_chunks_mut(chunk))
            .for_each(|(out, activated)| bias_rows(out, bias, activated, &f)),
        None => out
            .par_chunks_mut(chunk)
            .for_each(|out| bias_rows(out, bias, &mut [], &f)),
    }
}

vectorised_fn! {
    /// [`add_bias`] of whole rows; `activated` is empty or as long as `out`.
    fn bias_rows(out: &mut [f32], bias: &[f32], activated: &mut [f32], f: &impl Fn(f32) -> f32) {
        let n = bias.len();
        for (r, row) in out.chunks_exact_mut(n).enumerate() {
            for (o, b) in row.iter_mut().zip(bias) {
                *o += b;
            }
            if let Some(activated) = activated.get_mut(r * n..(r + 1) * n) {
                for (a, &o) in activated.iter_mut().zip(row.iter()) {
                    *a = f(o);
                }
            }
        }
    }
}

impl Op for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (out, l) = self.plan(inputs[0], inputs[1])?;
        if self.bias {
            let bias = inputs[2];
            if bias.dtype != DType::F32 || bias.shape != [l.n] {
                let why = format!("the bias must be an f32 [{}], got {bias}", l.n);
                return self.err(inputs[0], inputs[1], &why);
            }
        }
        if let Some(choice) = self.kernel {
            // Checked for either kind: only the entry point differs between them.
            if let Err(why) = choice.kernel(AdapterKind::Gpu, &l) {
                return self.err(inputs[0], inputs[1], &why);
            }
        }
        Ok(vec![
            TensorMeta::f32(&out);
            1 + usize::from(self.activation.is_some())
        ])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        self.cpu_in(Arithmetic::Native, inputs, outputs);
    }

    fn cpu_in(&self, arithmetic: Arithmetic, inputs: &[In], outputs: &mut [Out]) {
        let (_, l) = self
            .plan(inputs[0].meta, inputs[1].meta)
            .expect("shapes checked by infer");
        let (a, b) = (inputs[0].data, inputs[1].data);
        let out = &mut *outputs[0].data;
        let per = l.m * l.n;
        if per == 0 {
            return;
        }
        if l.batch > 1 && per * l.k < SMALL_PRODUCT {
            out.par_chunks_mut(per)
                .enumerate()
                .for_each(|(i, dst)| self.product(&l, a, b, i, dst, false, arithmetic));
        } else {
            for (i, dst) in out.chunks_mut(per).enumerate() {
                self.product(&l, a, b, i, dst, true, arithmetic);
            }
        }
        if !self.bias {
            return;
        }
        let bias = inputs[2].data;
        // One loop per activation, each with its function known: a kind chosen per element
        // kept GELU's loop from vectorising (the CPU step was 1.2–1.5× slower).
        match (outputs, self.activation) {
            ([out, activated], Some(Activation::Gelu)) => {
                add_bias(out.data, bias, Some(activated.data), |x| UnaryKind::Gelu.apply(x))
            }
            ([out, activated], Some(Activation::Relu)) => {
                add_bias(out.data, bias, Some(activated.data), |x| UnaryKind::Relu.apply(x))
            }
            (outputs, _) => add_bias(outputs[0].data, bias, None, |x| x),
        }
    }

    fn flops(&self, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> Option<u64> {
        let (_, l) = self.plan(inputs[0], inputs[1]).ok()?;
        Some(
            2 * [l.batch, l.m, l.n, l.k]
                .iter()
                .map(|&x| x as u64)
                .product::<u64>(),
        )
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let (_, l) = self.plan(inputs[0], inputs[1]).expect("shapes checked by infer");
        self.kernels(&l, &self.kernel_for(adapter, &l))
    }

    /// The products that give the same bits as `gpu`'s in other tiles, blocks and K-steps (none
    /// for a kernel named by hand).
    fn gpu_alternatives(
        &self,
        adapter: AdapterKind,
        inputs: &[&TensorMeta],
        _outputs: &[&TensorMeta],
    ) -> Vec<GpuKernels> {
        if self.kernel.is_some() {
            return Vec::new();
        }
        let (_, l) = self.plan(inputs[0], inputs[1]).expect("shapes checked by infer");
        same_sums(adapter, &l, &self.kernel_for(adapter, &l))
            .iter()
            .map(|kernel| self.kernels(&l, kernel))
            .collect()
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        // Through the activation to its input, the first output, adding what that output got
        // directly.
        let through_activation = match (self.activation, args.grads.get(1).copied().flatten()) {
            (Some(activation), Some(grad)) => {
                Some(g.apply1(UnaryBackward(activation.kind()), &[args.outputs[0], grad])?)
            }
            _ => None,
        };
        let grad = match (args.grads[0], through_activation) {
            (Some(a), Some(b)) => g.add(a, b)?,
            (Some(grad), None) | (None, Some(grad)) => grad,
            (None, None) => return Ok(vec![None; args.inputs.len()]),
        };
        let (a, b) = (args.inputs[0], args.inputs[1]);
        let (rank_a, rank_b) = (g.shape(a).len(), g.shape(b).len());
        let ga = self.grad_a(g, grad, b)?;
        let ga = if rank_a == 2 && rank_b > 2 {
            sum_batch(g, ga)?
        } else {
            ga
        };
        let gb = if rank_b == 2 && rank_a > 2 {
            if self.trans_a {
                let gb = self.grad_b(g, a, grad)?;
                sum_batch(g, gb)?
            } else {
                // The batch is just more rows of a: one product sums over it.
                let (k, n) = (g.shape(a)[rank_a - 1], g.shape(grad)[rank_a - 1]);
                let rows = g.meta(a).numel() / k.max(1);
                let a2 = g.reshape(a, &[rows, k])?;
                let grad2 = g.reshape(grad, &[rows, n])?;
                self.grad_b(g, a2, grad2)?
            }
        } else {
            self.grad_b(g, a, grad)?
        };
        let mut grads = vec![Some(ga), Some(gb)];
        if self.bias {
            // Every row of the output got the bias: its gradient is the sum over rows.
            let n = g.shape(args.inputs[2])[0];
            let rows = g.meta(grad).numel() / n.max(1);
            let flat = g.reshape(grad, &[rows, n])?;
            grads.push(Some(g.sum(flat, 0, false)?));
        }
        Ok(grads)
    }
}

impl Graph {
    /// `a · b` over the last two axes; see [`MatMul`] for the shapes.
    pub fn matmul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.matmul_t(a, b, false, false)
    }

    /// `op(a) · op(b)`, each operand transposed (its last two axes swapped) when asked.
    pub fn matmul_t(&mut self, a: TensorId, b: TensorId, trans_a: bool, trans_b: bool) -> Result<TensorId> {
        let op = MatMul {
            trans_a,
            trans_b,
            kernel: None,
            bias: false,
            activation: None,
        };
        self.apply1(op, &[a, b])
    }

    /// `x · w + bias`, the bias `[n]` added to every row as the product is written: a linear layer.
    pub fn matmul_bias(&mut self, x: TensorId, w: TensorId, bias: TensorId) -> Result<TensorId> {
        self.matmul_t_bias(x, w, false, false, bias)
    }

    /// `op(a) · op(b) + bias`, as [`Graph::matmul_t`] with a bias `[n]` added to every row (a
    /// tied output layer reads the token table transposed).
    pub fn matmul_t_bias(
        &mut self,
        a: TensorId,
        b: TensorId,
        trans_a: bool,
        trans_b: bool,
        bias: TensorId,
    ) -> Result<TensorId> {
        let op = MatMul {
            trans_a,
            trans_b,
            kernel: None,
            bias: true,
            activation: None,
        };
        self.apply1(op, &[a, b, bias])
    }

    /// `act(x · w + bias)` with its input: `(x · w + bias, act(x · w + bias))`, both written by
    /// the product (a feed-forward's up-projection; the activation's backward reads the input).
    pub fn matmul_bias_activated(
        &mut self,
        x: TensorId,
        w: TensorId,
        bias: TensorId,
        activation: Activation,
    ) -> Result<(TensorId, TensorId)> {
        let op = MatMul {
            trans_a: false,
            trans_b: false,
            kernel: None,
            bias: true,
            activation: Some(activation),
        };
        let outputs = self.apply(op, &[x, w, bias])?;
        Ok((outputs[0], outputs[1]))
    }

    /// `a · b` computed by the kernel named: for measuring each kernel on an adapter.
    pub fn matmul_with_kernel(&mut self, a: TensorId, b: TensorId, kernel: KernelChoice) -> Result<TensorId> {
        let op = MatMul {
            trans_a: false,
            trans_b: false,
            kernel: Some(kernel),
            bias: false,
            activation: None,
        };
        self.apply1(op, &[a, b])
    }
}

#[cfg(test)]
mod tests;
