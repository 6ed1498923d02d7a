//! The CPU reference of attention: scores, probabilities and gradients row by row, one task per
//! (batch entry, head).

use super::{Attention, Dims, In};
use crate::ops::dropout::DropMask;
use crate::ops::unary::exp;
use crate::ops::vector::vectorised_fn;

/// The bias as the CPU reads it.
#[derive(Clone, Copy)]
enum Bias<'a> {
    None,
    /// `[H, Lq, Lk]`.
    Dense(&'a [f32]),
    /// The table `[buckets, H]` and the bucket of query i and key j at `Dims::bucket_row(i) + j`.
    Relative {
        table: &'a [f32],
        buckets: &'a [i32],
    },
}

/// The CPU view of one attention problem: scores, visibility and probabilities row by row.
pub(super) struct Problem<'a> {
    pub op: Attention,
    pub d: Dims,
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    bias: Bias<'a>,
    mask: Option<&'a [i32]>,
    /// Dropout on the probabilities: its mask and this run's stream.
    dropout: Option<(DropMask, u32)>,
}

impl<'a> Problem<'a> {
    /// From the inputs q, k, v (or q, k when `with_v` is false) and the optional ones.
    pub fn new(op: Attention, inputs: &'a [In], with_v: bool) -> Self {
        let first = if with_v { 3 } else { 2 };
        let slots = op.slots(first);
        let metas: Vec<_> = inputs.iter().map(|x| x.meta).collect();
        let bias = match (slots.bias, slots.buckets) {
            (None, _) => Bias::None,
            (Some(i), None) => Bias::Dense(inputs[i].data),
            (Some(i), Some(ids)) => Bias::Relative {
                table: inputs[i].data,
                buckets: inputs[ids].ints(),
            },
        };
        Self {
            op,
            d: op.dims(&metas, first),
            q: inputs[0].data,
            k: inputs[1].data,
            v: if with_v { inputs[2].data } else { &[] },
            bias,
            mask: slots.mask.map(|i| inputs[i].ints()),
            dropout: op
                .dropout
                .zip(slots.seed)
                .map(|(mask, i)| (mask, mask.stream(inputs[i].ints()[0]))),
        }
    }

    /// Z of query row `row` (= (b·H + h)·Lq + i) and key j: 0 or 1/(1 − p) with dropout, 1
    /// without.
    #[inline(always)]
    pub fn kept(&self, row: usize, j: usize) -> f32 {
        match self.dropout {
            Some((mask, stream)) => mask.factor(stream, row * self.d.lk + j),
            None => 1.0,
        }
    }

    fn visible(&self, b: usize, i: usize, j: usize) -> bool {
        let Dims { lq, lk, .. } = self.d;
        // Query i sits at key position i + Lk − Lq.
        !(self.op.causal && j + lq > i + lk) && self.mask.is_none_or(|m| m[b * lk + j] != 0)
    }

    /// The bias of query i and key j in head h.
    #[inline(always)]
    fn bias(&self, h: usize, i: usize, j: usize) -> f32 {
        let Dims { h: heads, lq, lk, .. } = self.d;
        match self.bias {
            Bias::None => 0.0,
            Bias::Dense(bias) => bias[(h * lq + i) * lk + j],
            Bias::Relative { table, buckets } => {
                table[buckets[self.d.bucket_row(i) + j] as usize * heads + h]
            }
        }
    }

    /// Row `row` (= (b·H + h)·L + i, L the tensor's length) of a [.., L, Dh] tensor.
    pub fn at<'x>(&self, x: &'x [f32], row: usize) -> &'x [f32] {
        &x[row * self.d.dh..][..self.d.dh]
    }

    /// Key rows `bh·Lk ..` of a `[.., Lk, Dh]` tensor (k or v) transposed into `t`
    /// (`[Dh, Lk]`), so that the dot products of one row with every key are vectorised over the
    /// keys.
    #[inline(always)]
    pub fn transposed(&self, x: &[f32], bh: usize, t: &mut [f32]) {
        let Dims { lk, dh, .. } = self.d;
        for (j, row) in x[bh * lk * dh..][..lk * dh].chunks_exact(dh).enumerate() {
            for (d, &v) in row.iter().enumerate() {
                t[d * lk + j] = v;
            }
        }
    }

    /// How many keys query `i` may see at most: keys from there on are hidden whatever the mask.
    pub fn key_end(&self, i: usize) -> usize {
        let Dims { lq, lk, .. } = self.d;
        if self.op.causal {
            (i + 1 + lk).saturating_sub(lq).min(lk)
        } else {
            lk
        }
    }

    /// The first query that may see key `j`.
    pub fn query_start(&self, j: usize) -> usize {
        let Dims { lq, lk, .. } = self.d;
        if self.op.causal {
            (j + lq).saturating_sub(lk)
        } else {
            0
        }
    }

    /// `dots[j] = x · keys_t[.., j]` for the keys `j < dots.len()`, summed over the head
    /// dimension in order; `keys_t` is one (b, h)'s `[Dh, Lk]` transpose.
    #[inline(always)]
    fn dots(&self, x: &[f32], keys_t: &[f32], dots: &mut [f32]) {
        let (lk, n) = (self.d.lk, dots.len());
        dots.fill(0.0);
        for (d, &xd) in x.iter().enumerate() {
            axpy(dots, xd, &keys_t[d * lk..][..n]);
        }
    }

    /// The scores of query row `row` against every key of its (b, h); −∞ where hidden. `k_t`
    /// is the (b, h)'s keys transposed ([`Problem::transposed`]).
    #[inline(always)]
    fn scores(&self, row: usize, k_t: &[f32], s: &mut [f32]) {
        let Dims { h: heads, lq, .. } = self.d;
        let (bh, i) = (row / lq, row % lq);
        let (b, h) = (bh / heads, bh % heads);
        let end = self.key_end(i);
        let (seen, hidden) = s.split_at_mut(end);
        hidden.fill(f32::NEG_INFINITY);
        self.dots(self.at(self.q, row), k_t, seen);
        let scale = self.op.scale;
        if matches!(self.bias, Bias::None) && self.mask.is_none() {
            // Every key before `end` is visible.
            for s in seen.iter_mut() {
                *s = *s * scale + 0.0;
            }
            return;
        }
        for (j, s) in seen.iter_mut().enumerate() {
            *s = if self.visible(b, i, j) {
                *s * scale + self.bias(h, i, j)
            } else {
                f32::NEG_INFINITY
            };
        }
    }

    /// Row `row`'s probabilities into `p` (0 where hidden); returns its lse. A row with no
    /// visible key gets all zeros and lse = −∞.
    #[inline(always)]
    pub fn probs(&self, row: usize, k_t: &[f32], p: &mut [f32]) -> f32 {
        self.scores(row, k_t, p);
        // Keys from `end` on are hidden: their probabilities are 0 and add nothing to the sum.
        let (p, hidden) = p.split_at_mut(self.key_end(row % self.d.lq));
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

    /// Row `row`'s probabilities recomputed from its lse, times the dropout mask Z (what dv
    /// reads), and dS = P ∘ (Z ∘ dout·vᵀ − D) with D = dout · out of the row. `k_t` and `v_t` are the (b, h)'s keys and values transposed;
    /// `dp` is scratch of length Lk.
    #[inline(always)]
    pub fn p_and_ds(
        &self,
        row: usize,
        (k_t, v_t): (&[f32], &[f32]),
        (lse, out, dout): (&[f32], &[f32], &[f32]),
        p: &mut [f32],
        ds: &mut [f32],
        dp: &mut [f32],
    ) {
        let end = self.key_end(row % self.d.lq);
        self.scores(row, k_t, p);
        let go = self.at(dout, row);
        let delta: f32 = go.iter().zip(self.at(out, row)).map(|(a, b)| a * b).sum();
        self.dots(go, v_t, &mut dp[..end]);
        let lse = lse[row];
        let (p, hidden_p) = p.split_at_mut(end);
        let (ds, hidden_ds) = ds.split_at_mut(end);
        hidden_p.fill(0.0);
        hidden_ds.fill(0.0);
        for (j, ((p, ds), &dp)) in p.iter_mut().zip(ds.iter_mut()).zip(&dp[..end]).enumerate() {
            // Hidden keys have score −∞; select them explicitly so that lse = −∞ gives no NaN
            // (a select, not a branch, so that the loop is vectorised).
            let hidden = *p == f32::NEG_INFINITY;
            let prob = exp(*p - lse);
            let z = self.kept(row, j);
            *p = if hidden { 0.0 } else { prob * z };
            *ds = if hidden { 0.0 } else { prob * (z * dp - delta) };
        }
    }

    /// Query row i's dS summed per bucket of the relative bias into `sums` (`[buckets]`), key by
    /// key in ascending order: row i's share of the table's gradient.
    #[inline(always)]
    pub fn sum_by_bucket(&self, i: usize, ds: &[f32], sums: &mut [f32]) {
        let Bias::Relative { buckets, .. } = self.bias else {
            unreachable!("only the relative bias has buckets")
        };
        sums.fill(0.0);
        let end = self.key_end(i);
        for (&bucket, &ds) in buckets[self.d.bucket_row(i)..][..end].iter().zip(&ds[..end]) {
            sums[bucket as usize] += ds;
        }
    }
}

vectorised_fn! {
    /// The forward of one (b, h): `out` and `lse` are its `[Lq, Dh]` and `[Lq]` parts; `k_t`
    /// (Lk·Dh) and `p` (Lk) are scratch.
    pub fn forward_head(pr: &Problem<'_>, bh: usize, k_t: &mut [f32], p: &mut [f32], out: &mut [f32], lse: &mut [f32]) {
        let Dims { lq, lk, dh, .. } = pr.d;
        pr.transposed(pr.k, bh, k_t);
        for (i, (o, lse)) in out.chunks_exact_mut(dh).zip(lse).enumerate() {
            let row = bh * lq + i;
            *lse = pr.probs(row, k_t, p);
            weighted_sum(o, 0..pr.key_end(i), |j| Some(p[j] * pr.kept(row, j)), |j| pr.at(pr.v, bh * lk + j));
        }
    }
}

/// Scratch of one backward task: keys and values transposed (`[Dh, Lk]`), one query row's P,
/// dS and dP (Lk each), and P and dS transposed (`[Lk, Lq]`, key-major).
pub(super) struct BackwardScratch {
    pub k_t: Vec<f32>,
    pub v_t: Vec<f32>,
    pub p: Vec<f32>,
    pub ds: Vec<f32>,
    pub dp: Vec<f32>,
    p_t: Vec<f32>,
    ds_t: Vec<f32>,
}

impl BackwardScratch {
    pub fn new(d: Dims) -> Self {
        let (row, square, t) = (vec![0.0; d.lk], vec![0.0; d.lq * d.lk], vec![0.0; d.lk * d.dh]);
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
    /// dq, dk, dv of one (b, h), whose `[Lq, Dh]`, `[Lk, Dh]` and `[Lk, Dh]` parts are `grads`;
    /// `saved` is (lse, out, dout).
    /// Each gradient row is one weighted sum, added up in the order of the query loop that
    /// defines it (dq over keys, dk and dv over queries, ascending). With a relative bias,
    /// `by_bucket` is the (b, h)'s `[Lq, buckets]` part of the per-row table gradient.
    pub fn backward_head(
        pr: &Problem<'_>,
        bh: usize,
        saved: (&[f32], &[f32], &[f32]),
        s: &mut BackwardScratch,
        grads: ((&mut [f32], &mut [f32]), &mut [f32]),
        by_bucket: Option<&mut [f32]>,
    ) {
        let Dims { lq, lk, dh, .. } = pr.d;
        let ((dq, dk), dv) = grads;
        let mut by_bucket = by_bucket;
        let scale = pr.op.scale;
        pr.transposed(pr.k, bh, &mut s.k_t);
        pr.transposed(pr.v, bh, &mut s.v_t);
        for (i, dq) in dq.chunks_exact_mut(dh).enumerate() {
            let row = bh * lq + i;
            pr.p_and_ds(row, (&s.k_t, &s.v_t), saved, &mut s.p, &mut s.ds, &mut s.dp);
            let (p, ds) = (&s.p, &s.ds);
            // Hidden keys (and underflowed ones) add nothing.
            let seen = |j: usize| !(p[j] == 0.0 && ds[j] == 0.0);
            let end = pr.key_end(i);
            weighted_sum(dq, 0..end, |j| seen(j).then(|| ds[j] * scale), |j| pr.at(pr.k, bh * lk + j));
            if let Some(sums) = &mut by_bucket {
                pr.sum_by_bucket(i, ds, &mut sums[i * pr.d.buckets..][..pr.d.buckets]);
            }
            for j in 0..end {
                s.p_t[j * lq + i] = p[j];
                s.ds_t[j * lq + i] = ds[j];
            }
        }
        let (p_t, ds_t) = (&s.p_t, &s.ds_t);
        for (j, (dk, dv)) in dk.chunks_exact_mut(dh).zip(dv.chunks_exact_mut(dh)).enumerate() {
            // The queries that may see key j.
            let queries = pr.query_start(j)..lq;
            let (p, ds) = (&p_t[j * lq..][..lq], &ds_t[j * lq..][..lq]);
            let seen = |i: usize| !(p[i] == 0.0 && ds[i] == 0.0);
            weighted_sum(dk, queries.clone(), |i| seen(i).then(|| ds[i] * scale), |i| pr.at(pr.q, bh * lq + i));
            weighted_sum(dv, queries, |i| seen(i).then_some(p[i]), |i| pr.at(saved.2, bh * lq + i));
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
