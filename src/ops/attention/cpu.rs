//! The CPU reference of attention: scores, probabilities and gradients row by row, one task per
//! (batch entry, head).

use super::{Attention, Dims, In};
use std::ops::Range;

use crate::math;
use crate::ops::dropout::DropMask;
use crate::ops::unary::exp;
use crate::vector::vectorised_fn;

use super::tiles::{self, GROUP};

/// The bias as the CPU reads it.
#[derive(Clone, Copy)]
enum Bias<'a> {
    None,
    /// `[H, Lq, Lk]`.
    Dense(&'a [f32]),
    /// The table `[buckets, H]` and the bucket of query i and key j at `Dims::bucket_row(i) + j`.
    Bucketed {
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
            (Some(i), Some(ids)) => Bias::Bucketed {
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

    /// Multiplies `p`, the rows from query row `first` on laid end to end (row r at `r·Lk`), by
    /// their dropout factors Z (query row `row` = (b·H + h)·Lq + i and key j: the mask's factor
    /// at `row·Lk + j`, 0 or 1/(1 − p)), in one loop over the span; nothing without dropout.
    #[inline(always)]
    fn keep_span(&self, first: usize, p: &mut [f32]) {
        let Some((mask, stream)) = self.dropout else {
            return;
        };
        let start = first * self.d.lk;
        for (i, p) in p.iter_mut().enumerate() {
            *p *= mask.factor(stream, start + i);
        }
    }

    /// `z` ← the dropout factors Z of the rows from query row `first` on, laid end to end as in
    /// [`Problem::keep_span`]; all 1 without dropout.
    #[inline(always)]
    fn factors(&self, first: usize, z: &mut [f32]) {
        z.fill(1.0);
        self.keep_span(first, z);
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
            Bias::Bucketed { table, buckets } => {
                table[buckets[self.d.bucket_row(i) + j] as usize * heads + h]
            }
        }
    }

    /// Row `row` (= (b·H + h)·L + i, L the tensor's length) of a [.., L, Dh] tensor.
    pub fn at<'x>(&self, x: &'x [f32], row: usize) -> &'x [f32] {
        &x[row * self.d.dh..][..self.d.dh]
    }

    /// The `[len, Dh]` part of (b, h) `bh` in a `[B, H, len, Dh]` tensor.
    pub fn head<'x>(&self, x: &'x [f32], bh: usize, len: usize) -> &'x [f32] {
        &x[bh * len * self.d.dh..][..len * self.d.dh]
    }

    /// Rows `first .. first + rows` of a tensor ([`Problem::at`]), `rows ≤ GROUP`; the entries
    /// past them repeat the last.
    #[inline(always)]
    fn group_rows<'x>(&self, x: &'x [f32], first: usize, rows: usize) -> [&'x [f32]; GROUP] {
        std::array::from_fn(|r| self.at(x, first + r.min(rows - 1)))
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

    /// Turns the dot products in `s[..key_end]` of query row `row` into its scores: scaled, the
    /// bias added, −∞ where hidden (and for every key from `key_end` on).
    #[inline(always)]
    fn finish_scores(&self, row: usize, s: &mut [f32]) {
        let Dims { h: heads, lq, .. } = self.d;
        let (bh, i) = (row / lq, row % lq);
        let (b, h) = (bh / heads, bh % heads);
        let (seen, hidden) = s.split_at_mut(self.key_end(i));
        hidden.fill(f32::NEG_INFINITY);
        let scale = self.op.scale;
        // Keys before `key_end` are hidden by the key mask alone (the causal bound is the end),
        // so each form below is one loop without branches, vectorised: the same value
        // s·scale + bias where visible as key by key, −∞ where hidden.
        let visible = self.mask.map(|m| &m[b * self.d.lk..][..seen.len()]);
        match (self.bias, visible) {
            (Bias::None, None) => {
                for s in seen.iter_mut() {
                    *s = *s * scale + 0.0;
                }
            }
            (Bias::None, Some(visible)) => {
                for (s, &m) in seen.iter_mut().zip(visible) {
                    let v = *s * scale + 0.0;
                    *s = if m != 0 { v } else { f32::NEG_INFINITY };
                }
            }
            (Bias::Dense(bias), visible) => {
                let bias = &bias[(h * lq + i) * self.d.lk..][..seen.len()];
                for (j, (s, &bias)) in seen.iter_mut().zip(bias).enumerate() {
                    let v = *s * scale + bias;
                    *s = if visible.is_none_or(|m| m[j] != 0) {
                        v
                    } else {
                        f32::NEG_INFINITY
                    };
                }
            }
            (Bias::Bucketed { .. }, _) => {
                for (j, s) in seen.iter_mut().enumerate() {
                    *s = if self.visible(b, i, j) {
                        *s * scale + self.bias(h, i, j)
                    } else {
                        f32::NEG_INFINITY
                    };
                }
            }
        }
    }

    /// The scores of `rows` consecutive query rows of one (b, h) from `first` on, row r in
    /// `s[r·Lk..][..Lk]`; −∞ where hidden. `k_t` is the (b, h)'s keys transposed
    /// ([`Problem::transposed`]).
    #[inline(always)]
    fn scores(&self, first: usize, rows: usize, k_t: &[f32], s: &mut [f32]) {
        let Dims { lq, lk, .. } = self.d;
        let xs = self.group_rows(self.q, first, rows);
        let end = self.key_end((first + rows - 1) % lq);
        tiles::dots(&xs[..rows], k_t, lk, end, s, lk);
        for (r, s) in s.chunks_exact_mut(lk).take(rows).enumerate() {
            self.finish_scores(first + r, s);
        }
    }

    /// The scores of `rows` consecutive query rows from `first` on (row r in `p[r·Lk..][..Lk]`)
    /// turned into their probabilities (0 where hidden), each row's lse into `lse`. A row with
    /// no visible key gets all zeros and lse = −∞. Each row's total is summed over its keys in
    /// order; a full group's four totals run side by side.
    #[inline(always)]
    fn softmax_rows(&self, first: usize, p: &mut [f32], lse: &mut [f32]) {
        let (lk, rows) = (self.d.lk, lse.len());
        let mut ends = [0; GROUP];
        let mut maxima = [f32::NEG_INFINITY; GROUP];
        for (r, p) in p.chunks_exact_mut(lk).take(rows).enumerate() {
            let end = self.key_end((first + r) % self.d.lq);
            maxima[r] = max_of(&p[..end]);
            for s in &mut p[..end] {
                *s -= maxima[r];
            }
        }
        // e^(s − max) over the group's rows as one span: a row of a few keys alone would leave
        // most of it to the vector loop's scalar remainder. The same e^x of the same differences.
        exp_in_place(&mut p[..rows * lk]);
        for (r, p) in p.chunks_exact_mut(lk).take(rows).enumerate() {
            // Keys from `end` on are hidden: their probabilities are 0 and add nothing to the sum.
            let end = self.key_end((first + r) % self.d.lq);
            if maxima[r] == f32::NEG_INFINITY {
                p.fill(0.0);
            } else {
                p[end..].fill(0.0);
                ends[r] = end;
            }
        }
        let mut totals = [0.0f32; GROUP];
        let mut summed = 0;
        if rows == GROUP {
            summed = ends.iter().copied().min().unwrap_or(0);
            for j in 0..summed {
                for (r, total) in totals.iter_mut().enumerate() {
                    *total += p[r * lk + j];
                }
            }
        }
        for (r, (p, lse)) in p.chunks_exact_mut(lk).zip(lse.iter_mut()).enumerate() {
            if maxima[r] == f32::NEG_INFINITY {
                *lse = f32::NEG_INFINITY;
                continue;
            }
            let p = &mut p[..ends[r]];
            let total = p[summed..].iter().fold(totals[r], |t, &v| t + v);
            for s in p.iter_mut() {
                *s /= total;
            }
            *lse = maxima[r] + math::ln(total);
        }
    }

    /// Row `row`'s probabilities into `p` (0 where hidden); returns its lse.
    #[inline(always)]
    pub fn probs(&self, row: usize, k_t: &[f32], p: &mut [f32]) -> f32 {
        self.scores(row, 1, k_t, p);
        let mut lse = [0.0];
        self.softmax_rows(row, p, &mut lse);
        lse[0]
    }

    /// For `rows` consecutive query rows of one (b, h) from `first` on (row r's part of each
    /// buffer at `r·Lk`): the probabilities recomputed from the lse, times the dropout mask Z
    /// (what dv reads), into `p`, and dS = P ∘ (Z ∘ dout·vᵀ − D) with D = dout · out of the row
    /// into `ds`. `k_t` and `v_t` are the (b, h)'s keys and values transposed; `dp` and `z` are
    /// scratch.
    #[inline(always)]
    pub fn p_and_ds(
        &self,
        (first, rows): (usize, usize),
        (k_t, v_t): (&[f32], &[f32]),
        (lse, out, dout): (&[f32], &[f32], &[f32]),
        p: &mut [f32],
        ds: &mut [f32],
        (dp, z): (&mut [f32], &mut [f32]),
    ) {
        let Dims { lq, lk, .. } = self.d;
        self.scores(first, rows, k_t, p);
        let gos = self.group_rows(dout, first, rows);
        tiles::dots(
            &gos[..rows],
            v_t,
            lk,
            self.key_end((first + rows - 1) % lq),
            dp,
            lk,
        );
        // e^(s − lse) into ds and the dropout factors into z, each over the group's rows as one
        // span (a row of a few keys alone would leave most of it to a vector loop's scalar
        // remainder); then P ∘ Z and dS row by row, from the same numbers as one loop would.
        let span = rows * lk;
        for (r, (s, x)) in p
            .chunks_exact(lk)
            .zip(ds.chunks_exact_mut(lk))
            .take(rows)
            .enumerate()
        {
            let end = self.key_end((first + r) % lq);
            for (x, &s) in x[..end].iter_mut().zip(&s[..end]) {
                *x = s - lse[first + r];
            }
        }
        exp_in_place(&mut ds[..span]);
        self.factors(first, &mut z[..span]);
        let rows_of = p
            .chunks_exact_mut(lk)
            .zip(ds.chunks_exact_mut(lk))
            .zip(dp.chunks_exact(lk).zip(z.chunks_exact(lk)));
        for (r, ((p, ds), (dp, z))) in rows_of.take(rows).enumerate() {
            let row = first + r;
            let end = self.key_end(row % lq);
            let go = gos[r];
            let delta: f32 = go.iter().zip(self.at(out, row)).map(|(a, b)| a * b).sum();
            let (p, hidden_p) = p.split_at_mut(end);
            let (ds, hidden_ds) = ds.split_at_mut(end);
            hidden_p.fill(0.0);
            hidden_ds.fill(0.0);
            for ((p, ds), (&dp, &z)) in p
                .iter_mut()
                .zip(ds.iter_mut())
                .zip(dp[..end].iter().zip(&z[..end]))
            {
                // Hidden keys have score −∞; select them explicitly so that lse = −∞ gives no
                // NaN (a select, not a branch, so that the loop is vectorised).
                let hidden = *p == f32::NEG_INFINITY;
                let prob = *ds;
                *p = if hidden { 0.0 } else { prob * z };
                *ds = if hidden { 0.0 } else { prob * (z * dp - delta) };
            }
        }
    }

    /// Query row i's dS summed per bucket of the relative bias into `sums` (`[buckets]`), key by
    /// key in ascending order: row i's share of the table's gradient.
    #[inline(always)]
    pub fn sum_by_bucket(&self, i: usize, ds: &[f32], sums: &mut [f32]) {
        let Bias::Bucketed { buckets, .. } = self.bias else {
            unreachable!("only the relative bias has buckets")
        };
        sums.fill(0.0);
        let end = self.key_end(i);
        for (&bucket, &ds) in buckets[self.d.bucket_row(i)..][..end].iter().zip(&ds[..end]) {
            sums[bucket as usize] += ds;
        }
    }
}

/// x ← e^x over a slice, vectorised.
#[inline(always)]
fn exp_in_place(x: &mut [f32]) {
    for x in x {
        *x = exp(*x);
    }
}

/// The largest of `x` (−∞ for none; NaNs passed over, as `f32::max` does), in sixteen running
/// maxima side by side rather than one chain that waits on every compare: a maximum is the same
/// whatever the order.
#[inline(always)]
fn max_of(x: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = m.max(v);
        }
    }
    let rest = chunks
        .remainder()
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    lanes.into_iter().fold(rest, f32::max)
}

vectorised_fn! {
    /// The forward of one (b, h): `out` and `lse` are its `[Lq, Dh]` and `[Lq]` parts; `k_t`
    /// (Lk·Dh) and `p` (GROUP·Lk) are scratch. Query rows [`GROUP`] at a time.
    pub fn forward_head(pr: &Problem<'_>, bh: usize, k_t: &mut [f32], p: &mut [f32], out: &mut [f32], lse: &mut [f32]) {
        let Dims { lq, lk, dh, .. } = pr.d;
        pr.transposed(pr.k, bh, k_t);
        for (g, (out, lse)) in out.chunks_mut(GROUP * dh).zip(lse.chunks_mut(GROUP)).enumerate() {
            let (first, rows) = (bh * lq + g * GROUP, lse.len());
            pr.scores(first, rows, k_t, p);
            pr.softmax_rows(first, p, lse);
            // What multiplies v: P ∘ Z (hidden keys' 0 stay 0).
            pr.keep_span(first, &mut p[..rows * lk]);
            let mut ranges = <[Range<usize>; GROUP]>::default();
            for (r, range) in ranges.iter_mut().take(rows).enumerate() {
                *range = 0..pr.key_end((first + r) % lq);
            }
            tiles::weighted_sums(out, &ranges[..rows], p, lk, pr.head(pr.v, bh, lk));
        }
    }
}

/// Scratch of one backward task: keys and values transposed (`[Dh, Lk]`), a group of query
/// rows' P, dS, dP and dropout factors (GROUP·Lk each), and P and dS·scale transposed (`[Lk, Lq]`, key-major).
pub(super) struct BackwardScratch {
    pub k_t: Vec<f32>,
    pub v_t: Vec<f32>,
    pub p: Vec<f32>,
    pub ds: Vec<f32>,
    pub dp: Vec<f32>,
    pub z: Vec<f32>,
    p_t: Vec<f32>,
    ds_t: Vec<f32>,
}

impl BackwardScratch {
    pub fn new(d: Dims) -> Self {
        let (rows, square, t) = (
            vec![0.0; GROUP * d.lk],
            vec![0.0; d.lq * d.lk],
            vec![0.0; d.lk * d.dh],
        );
        Self {
            k_t: t.clone(),
            v_t: t,
            p: rows.clone(),
            ds: rows.clone(),
            dp: rows.clone(),
            z: rows,
            p_t: square.clone(),
            ds_t: square,
        }
    }
}

vectorised_fn! {
    /// dq, dk, dv of one (b, h), whose `[Lq, Dh]`, `[Lk, Dh]` and `[Lk, Dh]` parts are `grads`;
    /// `saved` is (lse, out, dout).
    /// Each gradient row is one weighted sum, added up in the order of the query loop that
    /// defines it (dq over keys, dk and dv over queries, ascending), [`GROUP`] rows at a time.
    /// With a relative bias, `by_bucket` is the (b, h)'s `[Lq, buckets]` part of the per-row
    /// table gradient.
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
        for (g, dq) in dq.chunks_mut(GROUP * dh).enumerate() {
            let (first_i, rows) = (g * GROUP, dq.len() / dh);
            let first = bh * lq + first_i;
            pr.p_and_ds(
                (first, rows),
                (&s.k_t, &s.v_t),
                saved,
                &mut s.p,
                &mut s.ds,
                (&mut s.dp, &mut s.z),
            );
            let mut ranges = <[Range<usize>; GROUP]>::default();
            for (r, range) in ranges.iter_mut().take(rows).enumerate() {
                *range = 0..pr.key_end(first_i + r);
            }
            // dq's weights dS·scale, in dP's place (no longer needed).
            for ((w, ds), keys) in s.dp.chunks_exact_mut(lk).zip(s.ds.chunks_exact(lk)).zip(&ranges[..rows]) {
                for (w, &ds) in w[keys.clone()].iter_mut().zip(&ds[keys.clone()]) {
                    *w = ds * scale;
                }
            }
            tiles::weighted_sums(dq, &ranges[..rows], &s.dp, lk, pr.head(pr.k, bh, lk));
            if let Some(sums) = &mut by_bucket {
                for r in 0..rows {
                    let i = first_i + r;
                    pr.sum_by_bucket(i, &s.ds[r * lk..][..lk], &mut sums[i * pr.d.buckets..][..pr.d.buckets]);
                }
            }
            // Key-major copies for dk and dv, the group's rows side by side in each key's row
            // (what a key's sums read: queries from `query_start` on, never a key a row hides).
            let keys = ranges[rows - 1].end;
            for (j, (p_t, ds_t)) in s.p_t.chunks_exact_mut(lq).zip(s.ds_t.chunks_exact_mut(lq)).take(keys).enumerate() {
                for r in 0..rows {
                    p_t[first_i + r] = s.p[r * lk + j];
                    ds_t[first_i + r] = s.dp[r * lk + j];
                }
            }
        }
        for (g, (dk, dv)) in dk.chunks_mut(GROUP * dh).zip(dv.chunks_mut(GROUP * dh)).enumerate() {
            let (first, rows) = (g * GROUP, dk.len() / dh);
            // The queries that may see each key.
            let mut ranges = <[Range<usize>; GROUP]>::default();
            for (r, range) in ranges.iter_mut().take(rows).enumerate() {
                *range = pr.query_start(first + r)..lq;
            }
            let (p_t, ds_t) = (&s.p_t[first * lq..], &s.ds_t[first * lq..]);
            tiles::weighted_sums(dk, &ranges[..rows], ds_t, lq, pr.head(pr.q, bh, lq));
            tiles::weighted_sums(dv, &ranges[..rows], p_t, lq, pr.head(saved.2, bh, lq));
        }
    }
}
