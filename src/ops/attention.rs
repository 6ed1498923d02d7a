//! Fused multi-head softmax attention, its gradient, and its probabilities for inspection.
//!
//! `out = softmax(q·kᵀ·scale + bias + hidden)·v` per batch entry and head, where
//! - q, k, v and out are `[B, H, L, Dh]` (batch, heads, length, head dimension, `Dh ≤ 128`);
//! - `bias` (optional) is an additive `[H, L, L]` term shared by the batch: `bias[h, i, j]` is
//!   added to the score of query i and key j (TUPE's positional term, T5's relative bias, built
//!   densely by the model);
//! - `key_mask` (optional) is i32 `[B, L]`: 1 for a real token, 0 for padding. A padded key is
//!   hidden from every query of its batch entry, as is every key after the query when `causal`.
//!
//! The forward also outputs `lse [B, H, L]`, each query row's log Σ exp(score) over its visible
//! keys, which the backward reads to recompute the probabilities instead of storing them. A row
//! with no visible key at all (every key padded) outputs 0, has lse = −∞ (the log of an empty
//! sum) and gets zero gradients; it never produces a NaN.
//!
//! On the GPU the forward is one FlashAttention-2 kernel with an online softmax, and the backward
//! is four deterministic passes; see `shaders/attention.wgsl`.

use rayon::prelude::*;

use super::unary::exp;
use super::vector::vectorised_fn;
use super::{Arg, Dispatch, GpuKernels, In, Op, Out, Params, VjpArgs, grid};
use crate::error::{Error, Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::shaders;
use crate::tensor::{DType, TensorMeta};

/// The largest head dimension the GPU kernels hold (eight vec4 registers per thread, four
/// threads per row).
pub const MAX_HEAD_DIM: usize = 128;

/// Query rows (and key rows, in the backward) per GPU workgroup; `ROWS` in the shader.
const ROWS: usize = 16;

/// Attention as a graph op. Inputs: q, k, v, then `bias` if `has_bias`, then `key_mask` if
/// `has_key_mask` (see the module doc for shapes and meaning). Outputs: out `[B, H, L, Dh]` and
/// lse `[B, H, L]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    /// Query i sees keys 0..=i only.
    pub causal: bool,
    /// Multiplies q·kᵀ before the bias is added; usually 1/√Dh.
    pub scale: f32,
    pub has_bias: bool,
    pub has_key_mask: bool,
}

/// The options of [`Graph::attention`].
#[derive(Clone, Copy, Debug)]
pub struct AttentionOpts {
    pub causal: bool,
    pub scale: f32,
    /// An additive `[H, L, L]` bias shared by the batch.
    pub bias: Option<TensorId>,
    /// i32 `[B, L]`, 1 for real tokens and 0 for padded keys.
    pub key_mask: Option<TensorId>,
}

/// (batch, heads, length, head dimension).
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    h: usize,
    l: usize,
    dh: usize,
}

impl Dims {
    fn of(q: &TensorMeta) -> Self {
        let s = &q.shape;
        Self {
            b: s[0],
            h: s[1],
            l: s[2],
            dh: s[3],
        }
    }

    fn rows(&self) -> usize {
        self.b * self.h * self.l
    }
}

impl Attention {
    fn optional_count(&self) -> usize {
        self.has_bias as usize + self.has_key_mask as usize
    }

    /// Indices of the bias and the key mask among the inputs, given where the optional ones start.
    fn optional_indices(&self, first: usize) -> (Option<usize>, Option<usize>) {
        let bias = self.has_bias.then_some(first);
        let mask = self.has_key_mask.then_some(first + self.has_bias as usize);
        (bias, mask)
    }

    /// The bias and mask slots of a dispatch: the inputs, or q (input 0) as a placeholder that the
    /// kernels never read because the uniform says the input is absent.
    fn optional_args(&self, first: usize) -> [Arg; 2] {
        let (bias, mask) = self.optional_indices(first);
        [bias, mask].map(|i| Arg::In(i.unwrap_or(0)))
    }

    fn params(&self, d: Dims) -> Vec<u32> {
        Params::new()
            .u(d.b)
            .u(d.h)
            .u(d.l)
            .u(d.dh)
            .f(self.scale)
            .u(self.causal as usize)
            .u(self.has_bias as usize)
            .u(self.has_key_mask as usize)
            .words()
    }

    /// Checks q and k (and v when given) and the optional inputs that start at `first`; returns
    /// the dimensions, or an error that names the op and every shape.
    fn check(&self, op: &'static str, inputs: &[&TensorMeta], with_v: bool) -> Result<Dims> {
        let first = if with_v { 3 } else { 2 };
        let expected = first + self.optional_count();
        let names = ["q", "k", "v"];
        let listed = |inputs: &[&TensorMeta]| {
            let (bias, mask) = self.optional_indices(first);
            let mut parts: Vec<String> = inputs[..first.min(inputs.len())]
                .iter()
                .zip(names)
                .map(|(m, n)| format!("{n} {m}"))
                .collect();
            for (name, i) in [("bias", bias), ("key_mask", mask)] {
                if let Some(m) = i.and_then(|i| inputs.get(i)) {
                    parts.push(format!("{name} {m}"));
                }
            }
            parts.join(", ")
        };
        if inputs.len() != expected {
            return shape_err(
                op,
                format!(
                    "needs {expected} inputs, got {}: {}",
                    inputs.len(),
                    listed(inputs)
                ),
            );
        }
        let q = inputs[0];
        let same = inputs[..first].iter().all(|m| *m == q);
        let fits = q.dtype == DType::F32
            && q.rank() == 4
            && same
            && q.shape.iter().all(|&d| d > 0)
            && q.shape[3] <= MAX_HEAD_DIM;
        if !fits {
            return shape_err(
                op,
                format!(
                    "needs q, k{} as f32 [B, H, L, Dh] of one shape, non-empty, with Dh ≤ {MAX_HEAD_DIM}; got {}",
                    if with_v { ", v" } else { "" },
                    listed(inputs)
                ),
            );
        }
        let d = Dims::of(q);
        let (bias, mask) = self.optional_indices(first);
        if let Some(i) = bias
            && *inputs[i] != TensorMeta::f32(&[d.h, d.l, d.l])
        {
            return shape_err(
                op,
                format!(
                    "needs bias f32 [H, L, L] = [{}, {}, {}]; got {}",
                    d.h,
                    d.l,
                    d.l,
                    listed(inputs)
                ),
            );
        }
        if let Some(i) = mask
            && *inputs[i] != TensorMeta::i32(&[d.b, d.l])
        {
            return shape_err(
                op,
                format!(
                    "needs key_mask i32 [B, L] = [{}, {}]; got {}",
                    d.b,
                    d.l,
                    listed(inputs)
                ),
            );
        }
        if !self.scale.is_finite() {
            return shape_err(op, format!("needs a finite scale, got {}", self.scale));
        }
        Ok(d)
    }
}

/// The CPU view of one attention problem: scores, visibility and probabilities row by row.
struct Problem<'a> {
    op: Attention,
    d: Dims,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    bias: Option<&'a [f32]>,
    mask: Option<&'a [i32]>,
}

impl<'a> Problem<'a> {
    /// From the inputs q, k, v (or q, k when `with_v` is false) and the optional ones.
    fn new(op: Attention, inputs: &'a [In], with_v: bool) -> Self {
        let first = if with_v { 3 } else { 2 };
        let (bias, mask) = op.optional_indices(first);
        Self {
            op,
            d: Dims::of(inputs[0].meta),
            q: inputs[0].data,
            k: inputs[1].data,
            v: if with_v { inputs[2].data } else { &[] },
            bias: bias.map(|i| inputs[i].data),
            mask: mask.map(|i| inputs[i].ints()),
        }
    }

    fn visible(&self, b: usize, i: usize, j: usize) -> bool {
        !(self.op.causal && j > i) && self.mask.is_none_or(|m| m[b * self.d.l + j] != 0)
    }

    /// Row `row` (= (b·H + h)·L + i) of a [.., L, Dh] tensor.
    fn at<'x>(&self, x: &'x [f32], row: usize) -> &'x [f32] {
        &x[row * self.d.dh..][..self.d.dh]
    }

    /// Rows `bh·L ..` of a `[.., L, Dh]` tensor transposed into `t` (`[Dh, L]`), so that the
    /// dot products of one row with every key are vectorised over the keys.
    #[inline(always)]
    fn transposed(&self, x: &[f32], bh: usize, t: &mut [f32]) {
        let Dims { l, dh, .. } = self.d;
        for (j, row) in x[bh * l * dh..][..l * dh].chunks_exact(dh).enumerate() {
            for (d, &v) in row.iter().enumerate() {
                t[d * l + j] = v;
            }
        }
    }

    /// How many keys row `i` may see at most: keys from there on are hidden whatever the mask.
    fn key_end(&self, i: usize) -> usize {
        if self.op.causal { i + 1 } else { self.d.l }
    }

    /// `dots[j] = x · keys_t[.., j]` for the keys `j < dots.len()`, summed over the head
    /// dimension in order; `keys_t` is one (b, h)'s `[Dh, L]` transpose.
    #[inline(always)]
    fn dots(&self, x: &[f32], keys_t: &[f32], dots: &mut [f32]) {
        let (l, n) = (self.d.l, dots.len());
        dots.fill(0.0);
        for (d, &xd) in x.iter().enumerate() {
            axpy(dots, xd, &keys_t[d * l..][..n]);
        }
    }

    /// The scores of query row `row` against every key of its (b, h); −∞ where hidden. `k_t`
    /// is the (b, h)'s keys transposed ([`Problem::transposed`]).
    #[inline(always)]
    fn scores(&self, row: usize, k_t: &[f32], s: &mut [f32]) {
        let Dims { h: heads, l, .. } = self.d;
        let (bh, i) = (row / l, row % l);
        let (b, h) = (bh / heads, bh % heads);
        let end = self.key_end(i);
        let (seen, hidden) = s.split_at_mut(end);
        hidden.fill(f32::NEG_INFINITY);
        self.dots(self.at(self.q, row), k_t, seen);
        let scale = self.op.scale;
        if self.bias.is_none() && self.mask.is_none() {
            // Every key before `end` is visible.
            for s in seen.iter_mut() {
                *s = *s * scale + 0.0;
            }
            return;
        }
        for (j, s) in seen.iter_mut().enumerate() {
            *s = if self.visible(b, i, j) {
                *s * scale + self.bias.map_or(0.0, |bias| bias[(h * l + i) * l + j])
            } else {
                f32::NEG_INFINITY
            };
        }
    }

    /// Row `row`'s probabilities into `p` (0 where hidden); returns its lse. A row with no
    /// visible key gets all zeros and lse = −∞.
    #[inline(always)]
    fn probs(&self, row: usize, k_t: &[f32], p: &mut [f32]) -> f32 {
        self.scores(row, k_t, p);
        // Keys from `end` on are hidden: their probabilities are 0 and add nothing to the sum.
        let (p, hidden) = p.split_at_mut(self.key_end(row % self.d.l));
        hidden.fill(0.0);
        let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            p.fill(0.0);
            return f32::NEG_INFINITY;
        }
        for s in p.iter_mut() {
            *s = exp(*s - max);
        }
        let total: f32 = p.iter().sum();
        for s in p.iter_mut() {
            *s /= total;
        }
        max + total.ln()
    }

    /// Row `row`'s probabilities recomputed from its lse, and dS = P ∘ (dout·vᵀ − D) with
    /// D = dout · out of the row. `k_t` and `v_t` are the (b, h)'s keys and values transposed;
    /// `dp` is scratch of length L.
    #[inline(always)]
    fn p_and_ds(
        &self,
        row: usize,
        (k_t, v_t): (&[f32], &[f32]),
        (lse, out, dout): (&[f32], &[f32], &[f32]),
        p: &mut [f32],
        ds: &mut [f32],
        dp: &mut [f32],
    ) {
        let end = self.key_end(row % self.d.l);
        self.scores(row, k_t, p);
        let go = self.at(dout, row);
        let delta: f32 = go.iter().zip(self.at(out, row)).map(|(a, b)| a * b).sum();
        self.dots(go, v_t, &mut dp[..end]);
        let lse = lse[row];
        let (p, hidden_p) = p.split_at_mut(end);
        let (ds, hidden_ds) = ds.split_at_mut(end);
        hidden_p.fill(0.0);
        hidden_ds.fill(0.0);
        for ((p, ds), &dp) in p.iter_mut().zip(ds.iter_mut()).zip(&dp[..end]) {
            // Hidden keys have score −∞; select them explicitly so that lse = −∞ gives no NaN
            // (a select, not a branch, so that the loop is vectorised).
            let hidden = *p == f32::NEG_INFINITY;
            let prob = exp(*p - lse);
            *p = if hidden { 0.0 } else { prob };
            *ds = if hidden { 0.0 } else { prob * (dp - delta) };
        }
    }
}

vectorised_fn! {
    /// The forward of one (b, h): `out` and `lse` are its `[L, Dh]` and `[L]` parts; `k_t`
    /// (L·Dh) and `p` (L) are scratch.
    fn forward_head(pr: &Problem<'_>, bh: usize, k_t: &mut [f32], p: &mut [f32], out: &mut [f32], lse: &mut [f32]) {
        let Dims { l, dh, .. } = pr.d;
        pr.transposed(pr.k, bh, k_t);
        for (i, (o, lse)) in out.chunks_exact_mut(dh).zip(lse).enumerate() {
            *lse = pr.probs(bh * l + i, k_t, p);
            weighted_sum(o, 0..pr.key_end(i), |j| Some(p[j]), |j| pr.at(pr.v, bh * l + j));
        }
    }
}

/// Scratch of one backward task: keys and values transposed (`[Dh, L]`), one query row's P,
/// dS and dP (L each), and P and dS transposed (`[L, L]`, key-major).
struct BackwardScratch {
    k_t: Vec<f32>,
    v_t: Vec<f32>,
    p: Vec<f32>,
    ds: Vec<f32>,
    dp: Vec<f32>,
    p_t: Vec<f32>,
    ds_t: Vec<f32>,
}

impl BackwardScratch {
    fn new(d: Dims) -> Self {
        let (row, square, t) = (vec![0.0; d.l], vec![0.0; d.l * d.l], vec![0.0; d.l * d.dh]);
        Self {
            k_t: t.clone(),
            v_t: t,
            p: row.clone(),
            ds: row.clone(),
            dp: row,
            p_t: square.clone(),
            ds_t: square,
        }
    }
}

vectorised_fn! {
    /// dq, dk, dv of one (b, h), whose `[L, Dh]` parts are `grads`; `saved` is (lse, out, dout).
    /// Each gradient row is one weighted sum, added up in the order of the query loop that
    /// defines it (dq over keys, dk and dv over queries, ascending).
    fn backward_head(
        pr: &Problem<'_>,
        bh: usize,
        saved: (&[f32], &[f32], &[f32]),
        s: &mut BackwardScratch,
        grads: ((&mut [f32], &mut [f32]), &mut [f32]),
    ) {
        let Dims { l, dh, .. } = pr.d;
        let ((dq, dk), dv) = grads;
        let scale = pr.op.scale;
        pr.transposed(pr.k, bh, &mut s.k_t);
        pr.transposed(pr.v, bh, &mut s.v_t);
        for (i, dq) in dq.chunks_exact_mut(dh).enumerate() {
            let row = bh * l + i;
            pr.p_and_ds(row, (&s.k_t, &s.v_t), saved, &mut s.p, &mut s.ds, &mut s.dp);
            let (p, ds) = (&s.p, &s.ds);
            // Hidden keys (and underflowed ones) add nothing.
            let seen = |j: usize| !(p[j] == 0.0 && ds[j] == 0.0);
            let end = pr.key_end(i);
            weighted_sum(dq, 0..end, |j| seen(j).then(|| ds[j] * scale), |j| pr.at(pr.k, bh * l + j));
            for j in 0..end {
                s.p_t[j * l + i] = p[j];
                s.ds_t[j * l + i] = ds[j];
            }
        }
        let (p_t, ds_t) = (&s.p_t, &s.ds_t);
        for (j, (dk, dv)) in dk.chunks_exact_mut(dh).zip(dv.chunks_exact_mut(dh)).enumerate() {
            // The queries that may see key j.
            let queries = if pr.op.causal { j..l } else { 0..l };
            let (p, ds) = (&p_t[j * l..][..l], &ds_t[j * l..][..l]);
            let seen = |i: usize| !(p[i] == 0.0 && ds[i] == 0.0);
            weighted_sum(dk, queries.clone(), |i| seen(i).then(|| ds[i] * scale), |i| pr.at(pr.q, bh * l + i));
            weighted_sum(dv, queries, |i| seen(i).then_some(p[i]), |i| pr.at(saved.2, bh * l + i));
        }
    }
}

/// out = Σ weight(t) · row(t) over `terms` in order, skipping terms whose weight is `None`;
/// sixteen columns at a time, so that the partial sums stay in registers.
#[inline(always)]
fn weighted_sum<'r>(
    out: &mut [f32],
    terms: std::ops::Range<usize>,
    weight: impl Fn(usize) -> Option<f32>,
    row: impl Fn(usize) -> &'r [f32],
) {
    const LANES: usize = 16;
    let first = out.len() / LANES * LANES;
    let mut blocks = out.chunks_exact_mut(LANES);
    for (c, o) in (&mut blocks).enumerate() {
        let mut acc = [0.0f32; LANES];
        for t in terms.clone() {
            if let Some(w) = weight(t) {
                let r: &[f32; LANES] = row(t)[c * LANES..][..LANES].try_into().expect("16 columns");
                for (a, &x) in acc.iter_mut().zip(r) {
                    *a += w * x;
                }
            }
        }
        o.copy_from_slice(&acc);
    }
    let rest = blocks.into_remainder();
    rest.fill(0.0);
    for t in terms {
        if let Some(w) = weight(t) {
            axpy(rest, w, &row(t)[first..]);
        }
    }
}

/// x += w · y over a row.
#[inline(always)]
fn axpy(x: &mut [f32], w: f32, y: &[f32]) {
    for (x, y) in x.iter_mut().zip(y) {
        *x += w * y;
    }
}

impl Op for Attention {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let d = self.check(self.name(), inputs, true)?;
        Ok(vec![inputs[0].clone(), TensorMeta::f32(&[d.b, d.h, d.l])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let pr = Problem::new(*self, inputs, true);
        let Dims { l, dh, .. } = pr.d;
        let [out, lse] = outputs else {
            unreachable!("attention has two outputs")
        };
        // One task per (b, h): its keys are transposed once for all its queries.
        out.data
            .par_chunks_mut(l * dh)
            .zip(lse.data.par_chunks_mut(l))
            .enumerate()
            .for_each_init(
                || (vec![0.0; l * dh], vec![0.0; l]),
                |(k_t, p), (bh, (out, lse))| forward_head(&pr, bh, k_t, p, out, lse),
            );
    }

    fn gpu(&self, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let d = Dims::of(inputs[0]);
        let [bias, mask] = self.optional_args(3);
        GpuKernels::single(Dispatch {
            shader: &shaders::ATTENTION,
            entry: "attention_forward",
            params: self.params(d),
            args: vec![
                Arg::In(0),
                Arg::In(1),
                Arg::In(2),
                bias,
                mask,
                Arg::Out(0),
                Arg::Out(1),
            ],
            workgroups: grid(d.b * d.h * d.l.div_ceil(ROWS), 1),
        })
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        if args.grads[1].is_some() {
            return Err(Error::Graph(
                "attention: lse is a cache for the backward and has no gradient".into(),
            ));
        }
        let Some(dout) = args.grads[0] else {
            return Ok(vec![None; args.inputs.len()]);
        };
        let mut inputs = args.inputs.to_vec();
        inputs.extend([args.outputs[0], args.outputs[1], dout]);
        let grads = g.apply(AttentionBackward(*self), &inputs)?;
        let mut result: Vec<Option<TensorId>> = grads.into_iter().map(Some).collect();
        if self.has_key_mask {
            result.push(None);
        }
        Ok(result)
    }
}

/// The gradient of [`Attention`]. Inputs: the forward's inputs (q, k, v, bias?, key_mask?), then
/// out, lse and dout. Outputs: dq, dk, dv, and dbias `[H, L, L]` (summed over the batch) when
/// the forward has a bias. With P = exp(s − lse) recomputed and D = rowsum(dout ∘ out):
/// dV = Pᵀ dout, dS = P ∘ (dout·vᵀ − D), dq = dS k · scale, dk = dSᵀ q · scale, dbias = Σ_b dS.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionBackward(pub Attention);

impl Op for AttentionBackward {
    fn name(&self) -> &'static str {
        "attention_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let fwd = 3 + self.0.optional_count();
        if inputs.len() != fwd + 3 {
            let shapes: Vec<String> = inputs.iter().map(|m| m.to_string()).collect();
            return shape_err(
                self.name(),
                format!(
                    "needs {} inputs, got {}: {}",
                    fwd + 3,
                    inputs.len(),
                    shapes.join(", ")
                ),
            );
        }
        let d = self.0.check(self.name(), &inputs[..fwd], true)?;
        let (out, lse, dout) = (inputs[fwd], inputs[fwd + 1], inputs[fwd + 2]);
        if out != inputs[0] || dout != inputs[0] || *lse != TensorMeta::f32(&[d.b, d.h, d.l]) {
            return shape_err(
                self.name(),
                format!(
                    "needs out and dout like q {} and lse [B, H, L]; got out {out}, lse {lse}, dout {dout}",
                    inputs[0]
                ),
            );
        }
        let mut metas = vec![inputs[0].clone(); 3];
        if self.0.has_bias {
            metas.push(TensorMeta::f32(&[d.h, d.l, d.l]));
        }
        Ok(metas)
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let pr = Problem::new(self.0, inputs, true);
        let fwd = 3 + self.0.optional_count();
        let (out, lse, dout) = (inputs[fwd].data, inputs[fwd + 1].data, inputs[fwd + 2].data);
        let Dims { l, dh, .. } = pr.d;
        let slice = l * dh;
        let (grads, dbias) = outputs.split_at_mut(3);
        let [dq, dk, dv] = grads else {
            unreachable!("attention_backward has dq, dk, dv")
        };
        let saved = (lse, out, dout);
        let scratch = || BackwardScratch::new(pr.d);
        // dq, dk and dv of one (b, h) depend only on that (b, h).
        dq.data
            .par_chunks_mut(slice)
            .zip(dk.data.par_chunks_mut(slice))
            .zip(dv.data.par_chunks_mut(slice))
            .enumerate()
            .for_each_init(scratch, |s, (bh, grads)| backward_head(&pr, bh, saved, s, grads));
        if let [dbias] = dbias {
            let Dims {
                b: batch, h: heads, ..
            } = pr.d;
            // Each head sums dS over the batch in order.
            dbias
                .data
                .par_chunks_mut(l * l)
                .enumerate()
                .for_each_init(scratch, |s, (h, db)| {
                    db.fill(0.0);
                    for b in 0..batch {
                        let bh = b * heads + h;
                        pr.transposed(pr.k, bh, &mut s.k_t);
                        pr.transposed(pr.v, bh, &mut s.v_t);
                        for i in 0..l {
                            let (p, ds, dp) = (&mut s.p, &mut s.ds, &mut s.dp);
                            pr.p_and_ds(bh * l + i, (&s.k_t, &s.v_t), saved, p, ds, dp);
                            for (d, s) in db[i * l..][..l].iter_mut().zip(ds.iter()) {
                                *d += s;
                            }
                        }
                    }
                });
        }
    }

    fn gpu(&self, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let d = Dims::of(inputs[0]);
        let fwd = 3 + self.0.optional_count();
        let [bias, mask] = self.0.optional_args(3);
        let (out, lse, dout) = (Arg::In(fwd), Arg::In(fwd + 1), Arg::In(fwd + 2));
        let params = self.0.params(d);
        let dispatch = |entry, args, workgroups| Dispatch {
            shader: &shaders::ATTENTION,
            entry,
            params: params.clone(),
            args,
            workgroups,
        };
        let shared = [Arg::In(0), Arg::In(1), Arg::In(2), bias, Arg::Scratch(0), dout];
        let blocks = d.b * d.h * d.l.div_ceil(ROWS);
        let mut dispatches = vec![
            dispatch(
                "attention_backward_stats",
                vec![out, lse, dout, mask, Arg::Scratch(0)],
                grid(d.rows().max(d.b * d.l), 64),
            ),
            dispatch(
                "attention_backward_dkdv",
                [&shared[..], &[Arg::Out(1), Arg::Out(2)]].concat(),
                grid(blocks, 1),
            ),
            dispatch(
                "attention_backward_dq",
                [&shared[..], &[Arg::Out(0)]].concat(),
                grid(blocks, 1),
            ),
        ];
        if self.0.has_bias {
            dispatches.push(dispatch(
                "attention_backward_dbias",
                [&shared[..], &[Arg::Out(3)]].concat(),
                grid(d.h * d.l * d.l, 64),
            ));
        }
        GpuKernels {
            // lse and D per row, then 1/0 visibility per key.
            scratch: vec![2 * d.rows() + d.b * d.l],
            dispatches,
        }
    }
}

/// The attention probabilities `[B, H, L, L]` for inspection (the visualizer): the same
/// softmax as [`Attention`], 0 for hidden keys and for rows with no visible key. Inputs: q, k,
/// then bias and key_mask as the flags of the wrapped [`Attention`] say (no v). No gradient.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionProbs(pub Attention);

impl Op for AttentionProbs {
    fn name(&self) -> &'static str {
        "attention_probs"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let d = self.0.check(self.name(), inputs, false)?;
        Ok(vec![TensorMeta::f32(&[d.b, d.h, d.l, d.l])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let pr = Problem::new(self.0, inputs, false);
        let Dims { l, dh, .. } = pr.d;
        outputs[0].data.par_chunks_mut(l * l).enumerate().for_each_init(
            || vec![0.0; l * dh],
            |k_t, (bh, probs)| {
                pr.transposed(pr.k, bh, k_t);
                for (i, p) in probs.chunks_exact_mut(l).enumerate() {
                    pr.probs(bh * l + i, k_t, p);
                }
            },
        );
    }

    fn gpu(&self, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let d = Dims::of(inputs[0]);
        let [bias, mask] = self.0.optional_args(2);
        GpuKernels::single(Dispatch {
            shader: &shaders::ATTENTION,
            entry: "attention_probs",
            params: self.0.params(d),
            // q stands in for v, which the probabilities do not need.
            args: vec![Arg::In(0), Arg::In(1), Arg::In(0), bias, mask, Arg::Out(0)],
            workgroups: grid(d.rows(), 64),
        })
    }
}

impl AttentionOpts {
    fn op(&self) -> Attention {
        Attention {
            causal: self.causal,
            scale: self.scale,
            has_bias: self.bias.is_some(),
            has_key_mask: self.key_mask.is_some(),
        }
    }

    fn optional_inputs(&self) -> impl Iterator<Item = TensorId> {
        self.bias.into_iter().chain(self.key_mask)
    }
}

impl Graph {
    /// Multi-head attention of q, k, v `[B, H, L, Dh]`; returns out `[B, H, L, Dh]`. See
    /// [`Attention`] and the module doc for the options.
    pub fn attention(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        opts: AttentionOpts,
    ) -> Result<TensorId> {
        let inputs: Vec<TensorId> = [q, k, v].into_iter().chain(opts.optional_inputs()).collect();
        Ok(self.apply(opts.op(), &inputs)?[0])
    }

    /// The probabilities `[B, H, L, L]` that [`Graph::attention`] with the same options would
    /// use; for inspection, with no gradient.
    pub fn attention_probs(&mut self, q: TensorId, k: TensorId, opts: AttentionOpts) -> Result<TensorId> {
        let inputs: Vec<TensorId> = [q, k].into_iter().chain(opts.optional_inputs()).collect();
        self.apply1(AttentionProbs(opts.op()), &inputs)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::rc::Rc;

    use super::AttentionOpts;
    use crate::backend::Backend;
    use crate::graph::{Executor, Graph};
    use crate::params::ParamStore;
    use crate::testing::*;

    /// One attention problem: q, k, v (and bias) are parameters, the key mask an input.
    #[derive(Clone)]
    struct Case {
        shape: [usize; 4],
        causal: bool,
        bias: bool,
        /// Real tokens per batch entry; the rest of each row of the key mask is padding.
        lengths: Option<Vec<usize>>,
        scale: f32,
    }

    impl Case {
        fn new(shape: [usize; 4]) -> Self {
            Self {
                shape,
                causal: false,
                bias: false,
                lengths: None,
                scale: 1.0 / (shape[3] as f32).sqrt(),
            }
        }

        fn causal(self) -> Self {
            Self { causal: true, ..self }
        }

        fn bias(self) -> Self {
            Self { bias: true, ..self }
        }

        fn lengths(self, lengths: &[usize]) -> Self {
            Self {
                lengths: Some(lengths.to_vec()),
                ..self
            }
        }

        fn scale(self, scale: f32) -> Self {
            Self { scale, ..self }
        }

        fn key_mask(&self) -> Option<Vec<i32>> {
            let l = self.shape[2];
            let lengths = self.lengths.as_ref()?;
            Some(
                lengths
                    .iter()
                    .flat_map(|&n| (0..l).map(move |j| (j < n) as i32))
                    .collect(),
            )
        }

        /// The optional inputs, and the options that name them.
        fn opts(&self, g: &mut Graph, feeds: &mut Vec<(crate::graph::TensorId, Feed)>) -> AttentionOpts {
            let [b, h, l, _] = self.shape;
            let bias = self.bias.then(|| param(g, "bias", &[h, l, l]));
            let key_mask = self.key_mask().map(|values| {
                let (t, feed) = int_input(g, "key_mask", &[b, l], values);
                feeds.push(feed);
                t
            });
            AttentionOpts {
                causal: self.causal,
                scale: self.scale,
                bias,
                key_mask,
            }
        }

        fn attention(&self) -> impl Fn(&mut Graph) -> Built + 'static {
            let case = self.clone();
            move |g| {
                let [q, k, v] = ["q", "k", "v"].map(|n| param(g, n, &case.shape));
                let mut feeds = vec![];
                let opts = case.opts(g, &mut feeds);
                Built {
                    out: g.attention(q, k, v, opts).unwrap(),
                    feeds,
                }
            }
        }

        fn probs(&self) -> impl Fn(&mut Graph) -> Built + 'static {
            let case = self.clone();
            move |g| {
                let [q, k] = ["q", "k"].map(|n| param(g, n, &case.shape));
                let mut feeds = vec![];
                let opts = case.opts(g, &mut feeds);
                Built {
                    out: g.attention_probs(q, k, opts).unwrap(),
                    feeds,
                }
            }
        }
    }

    /// Runs a graph forward only (the probabilities have no gradient), with parameters from
    /// seed 7 unless `params` names them.
    fn forward(backend: Rc<dyn Backend>, build: &dyn Fn(&mut Graph) -> Built, over: &Overrides) -> Vec<f32> {
        let mut g = Graph::new();
        let built = build(&mut g);
        let store = ParamStore::init(backend, &g, 7).unwrap();
        for (name, v) in &over.params {
            store.set(name, v).unwrap();
        }
        let exec = Executor::new(&g, &[built.out], &store).unwrap();
        for (t, f) in &built.feeds {
            match over.inputs.get(&g.info(*t).name).unwrap_or(f) {
                Feed::F32(v) => exec.set_f32(*t, v),
                Feed::I32(v) => exec.set_i32(*t, v),
            }
            .unwrap();
        }
        exec.run().unwrap();
        exec.read_blocking(built.out).unwrap()
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        let cases = [
            Case::new([2, 3, 37, 16]),
            Case::new([2, 3, 37, 16]).causal().bias(),
            // Some padded keys, and a batch entry whose every key is padded.
            Case::new([3, 2, 37, 16]).bias().lengths(&[37, 20, 0]),
            Case::new([3, 2, 37, 16]).causal().lengths(&[5, 37, 0]),
            // Longer than one workgroup's 16 rows and one block of 8 keys.
            Case::new([1, 2, 130, 16]).causal().bias(),
            Case::new([1, 2, 130, 8]).lengths(&[77]),
            Case::new([2, 1, 1, 8]),
            Case::new([2, 1, 1, 8]).causal().bias(),
            // Head dimensions that are not a multiple of 4.
            Case::new([1, 2, 19, 5]).causal().bias().lengths(&[11]),
        ];
        for case in cases {
            check_gpu_matches_cpu(&case.attention(), 1e-5, 1e-4);
        }
    }

    #[test]
    fn gpu_matches_cpu_on_wide_heads() {
        for dh in [64, 128] {
            check_gpu_matches_cpu(
                &Case::new([1, 2, 29, dh]).bias().lengths(&[23]).attention(),
                1e-5,
                1e-4,
            );
            check_gpu_matches_cpu(&Case::new([1, 1, 41, dh]).causal().attention(), 1e-5, 1e-4);
        }
    }

    #[test]
    fn fully_padded_rows_give_zeros_and_no_nan() {
        let case = Case::new([2, 2, 9, 4]).bias().lengths(&[6, 0]);
        let mut backends = vec![cpu()];
        backends.extend(gpu());
        for backend in backends {
            let on = backend.describe();
            let r = run(backend, &case.attention(), 3, &Overrides::default());
            let half = r.out.len() / 2;
            assert!(r.out.iter().all(|v| v.is_finite()), "{on}");
            assert!(r.out[..half].iter().any(|&v| v != 0.0), "{on}");
            assert!(r.out[half..].iter().all(|&v| v == 0.0), "{on}: padded entry");
            for (name, grad) in &r.grads {
                assert!(grad.iter().all(|v| v.is_finite()), "{on}: grad {name}");
                if name != "bias" {
                    assert!(grad[half..].iter().all(|&v| v == 0.0), "{on}: grad {name}");
                }
            }
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        let cases = [
            Case::new([2, 2, 5, 3]),
            Case::new([2, 2, 5, 3]).causal().bias().lengths(&[5, 3]),
            Case::new([1, 2, 6, 4]).bias().scale(0.7),
        ];
        for case in cases {
            check_gradients(&case.attention(), 1e-2, 1e-2, 20);
        }
    }

    #[test]
    fn matches_pytorch() {
        let base = Case::new([2, 2, 7, 6]).scale(0.4);
        let cases = [
            ("plain", base.clone()),
            ("causal", base.clone().causal()),
            ("bias", base.clone().bias()),
            ("mask", base.clone().lengths(&[7, 4])),
            ("causal_bias_mask", base.clone().causal().bias().lengths(&[7, 4])),
        ];
        for (name, case) in cases {
            check_reference("attention", name, &case.attention(), 1e-5, 1e-4);
        }
    }

    /// The probabilities against `torch.softmax` of the masked scores (`probs` in
    /// `gen_attention.py`), on the CPU and the GPU.
    #[test]
    fn probabilities_match_pytorch() {
        let path = format!(
            "{}/tests/reference/attention.safetensors",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let data = |name: &str| file.tensor(&format!("probs/{name}")).unwrap().data().to_vec();
        let floats = |name: &str| -> Vec<f32> { bytemuck::pod_collect_to_vec(&data(name)) };
        let over = Overrides {
            params: ["q", "k", "bias"].map(|n| (n.to_string(), floats(n))).into(),
            inputs: BTreeMap::from([(
                "key_mask".to_string(),
                Feed::I32(bytemuck::pod_collect_to_vec(&data("key_mask"))),
            )]),
            upstream: None,
        };
        let case = Case::new([2, 2, 7, 6])
            .scale(0.4)
            .causal()
            .bias()
            .lengths(&[7, 4]);
        let mut backends = vec![cpu()];
        backends.extend(gpu());
        for backend in backends {
            let on = backend.describe();
            let got = forward(backend, &case.probs(), &over);
            assert_close(&format!("probs on {on}"), &got, &floats("out"), 1e-6, 1e-4);
        }
    }

    #[test]
    fn gpu_probabilities_match_cpu() {
        let Some(gpu) = gpu() else { return };
        let cases = [
            Case::new([2, 3, 37, 16]).causal().bias().lengths(&[37, 0]),
            Case::new([1, 2, 70, 128]).lengths(&[50]),
        ];
        for case in cases {
            let want = forward(cpu(), &case.probs(), &Overrides::default());
            let got = forward(gpu.clone(), &case.probs(), &Overrides::default());
            assert_close("probs", &got, &want, 1e-6, 1e-4);
            // Rows sum to 1, or to 0 for a batch entry with every key padded.
            let l = case.shape[2];
            for (r, row) in want.chunks(l).enumerate() {
                let total: f32 = row.iter().sum();
                let padded = case
                    .lengths
                    .as_ref()
                    .is_some_and(|n| n[r / (case.shape[1] * l)] == 0);
                let expected = if padded { 0.0 } else { 1.0 };
                assert!((total - expected).abs() < 1e-5, "row {r} sums to {total}");
            }
        }
    }

    #[test]
    fn probabilities_have_no_gradient() {
        let case = Case::new([1, 1, 3, 2]);
        let mut g = Graph::new();
        let built = case.probs()(&mut g);
        let loss = g.sum_all(built.out).unwrap();
        let err = g.backward(loss).unwrap_err().to_string();
        assert!(err.contains("attention_probs has no gradient"), "{err}");
    }

    #[test]
    fn bad_shapes_name_the_op_and_every_shape() {
        let mut g = Graph::new();
        let q = param(&mut g, "q", &[2, 3, 5, 8]);
        let k = param(&mut g, "k", &[2, 3, 5, 8]);
        let v_short = param(&mut g, "v", &[2, 3, 4, 8]);
        let wide = param(&mut g, "wide", &[1, 1, 2, 129]);
        let bias = param(&mut g, "bias", &[3, 5, 4]);
        let mask = g.input("key_mask", crate::tensor::TensorMeta::i32(&[2, 4]));
        let plain = AttentionOpts {
            causal: false,
            scale: 1.0,
            bias: None,
            key_mask: None,
        };
        let err = g.attention(q, k, v_short, plain).unwrap_err().to_string();
        assert!(
            err.starts_with("attention: ") && err.contains("[2, 3, 5, 8]") && err.contains("[2, 3, 4, 8]"),
            "{err}"
        );
        let err = g.attention(wide, wide, wide, plain).unwrap_err().to_string();
        assert!(
            err.starts_with("attention: ") && err.contains("[1, 1, 2, 129]"),
            "{err}"
        );
        let with_bias = AttentionOpts {
            bias: Some(bias),
            ..plain
        };
        let err = g.attention(q, k, q, with_bias).unwrap_err().to_string();
        assert!(
            err.contains("bias [3, 5, 4]") && err.contains("[3, 5, 5]"),
            "{err}"
        );
        let with_mask = AttentionOpts {
            key_mask: Some(mask),
            ..plain
        };
        let err = g.attention_probs(q, k, with_mask).unwrap_err().to_string();
        assert!(
            err.starts_with("attention_probs: ")
                && err.contains("key_mask [2, 4] i32")
                && err.contains("[2, 5]"),
            "{err}"
        );
    }
}
