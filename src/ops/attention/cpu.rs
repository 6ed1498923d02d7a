//! The CPU reference of attention, one task per (batch entry, head): its query rows in blocks
//! held in vector lanes (`lanes.rs`) for the scores, probabilities, out and dq; dk and dv in
//! register tiles of key rows (`tiles.rs`).

use super::{Attention, Dims, In};
use std::ops::Range;

use crate::math;
use crate::ops::dropout::DropMask;
use crate::ops::unary::exp;
use crate::vector::vectorised_fn;

use super::lanes::{self, LANES};
use super::tiles;

/// Query rows `first .. first + n` of one (b, h) in the lanes of a block; the lanes from `n` on
/// hold no query and see no key.
#[derive(Clone, Copy)]
pub(super) struct Block {
    pub bh: usize,
    pub first: usize,
    pub n: usize,
}

/// Work done on a block of `W` lanes, for [`Problem::for_each_block`]: the lane count is a
/// constant of the code, so that each lane loop is one vector operation.
pub(super) trait OnBlock {
    fn run<const W: usize>(&mut self, pr: &Problem<'_>, block: Block);
}

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

/// The CPU view of one attention problem: scores, visibility and probabilities block by block.
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

    /// Row `row` (= (b·H + h)·L + i, L the tensor's length) of a [.., L, Dh] tensor.
    pub fn at<'x>(&self, x: &'x [f32], row: usize) -> &'x [f32] {
        &x[row * self.d.dh..][..self.d.dh]
    }

    /// The `[len, Dh]` part of (b, h) `bh` in a `[B, H, len, Dh]` tensor.
    pub fn head<'x>(&self, x: &'x [f32], bh: usize, len: usize) -> &'x [f32] {
        &x[bh * len * self.d.dh..][..len * self.d.dh]
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

    /// Runs `work` on (b, h) `bh`'s query rows in blocks of [`lanes::block_lanes`]'s full count,
    /// the last block of at most half as many rows in a block of half as many lanes.
    #[inline(always)]
    pub fn for_each_block(&self, bh: usize, work: &mut impl OnBlock) {
        let lq = self.d.lq;
        let (full, half) = lanes::block_lanes();
        for first in (0..lq).step_by(full) {
            let block = Block {
                bh,
                first,
                n: full.min(lq - first),
            };
            // Each arm a constant lane count, so that each lane loop is whole vectors.
            match (full, block.n <= half) {
                (16, false) => work.run::<16>(self, block),
                (16, true) | (8, false) => work.run::<8>(self, block),
                _ => work.run::<4>(self, block),
            }
        }
    }

    /// How many keys the block's queries may see at most: the last query's [`Problem::key_end`].
    pub fn keys(&self, block: Block) -> usize {
        self.key_end(block.first + block.n - 1)
    }

    /// The block's rows of a `[B, H, Lq, Dh]` tensor transposed into `x_t` (`[Dh][W]`), 0 in the
    /// lanes past its queries.
    #[inline(always)]
    fn transposed<const W: usize>(&self, x: &[f32], block: Block, x_t: &mut [[f32; W]]) {
        let first_row = block.bh * self.d.lq + block.first;
        for (d, x_t) in x_t.iter_mut().enumerate() {
            for (l, v) in x_t.iter_mut().enumerate() {
                *v = if l < block.n {
                    x[(first_row + l) * self.d.dh + d]
                } else {
                    0.0
                };
            }
        }
    }

    /// The block's scores over its first `s.len()` keys (`s[j][l]`: key j, query `first + l`):
    /// q·k scaled, the bias added, −∞ where hidden. `x_t` is scratch `[Dh][W]`.
    #[inline(always)]
    fn scores<const W: usize>(&self, block: Block, x_t: &mut [[f32; W]], s: &mut [[f32; W]]) {
        let Dims { h: heads, lq, lk, .. } = self.d;
        let (b, h) = (block.bh / heads, block.bh % heads);
        self.transposed(self.q, block, x_t);
        lanes::dots(x_t, self.head(self.k, block.bh, lk), s);
        let ends: [usize; W] = std::array::from_fn(|l| {
            if l < block.n {
                self.key_end(block.first + l)
            } else {
                0
            }
        });
        let query = |l: usize| block.first + l.min(block.n - 1);
        let scale = self.op.scale;
        for (j, s) in s.iter_mut().enumerate() {
            let key_seen = self.mask.is_none_or(|m| m[b * lk + j] != 0);
            let bias: [f32; W] = match self.bias {
                Bias::None => [0.0; W],
                Bias::Dense(bias) => std::array::from_fn(|l| bias[(h * lq + query(l)) * lk + j]),
                Bias::Bucketed { table, buckets } => std::array::from_fn(|l| {
                    table[buckets[self.d.bucket_row(query(l)) + j] as usize * heads + h]
                }),
            };
            // One select per lane, without branches: s·scale + bias where visible, −∞ where not.
            for l in 0..W {
                let v = s[l] * scale + bias[l];
                s[l] = if key_seen && j < ends[l] {
                    v
                } else {
                    f32::NEG_INFINITY
                };
            }
        }
    }

    /// The dropout factors Z of key `j` for the block's queries: the mask's factor at
    /// `row·Lk + j`, row = (b·H + h)·Lq + i; 1 without dropout.
    #[inline(always)]
    fn factors<const W: usize>(&self, block: Block, j: usize) -> [f32; W] {
        match self.dropout {
            None => [1.0; W],
            Some((mask, stream)) => {
                // A lane loop (not `array::from_fn`), so that the hashes are vector operations and
                // the factors one vector store.
                let first = (block.bh * self.d.lq + block.first) * self.d.lk + j;
                let mut z = [0.0; W];
                for (l, z) in z.iter_mut().enumerate() {
                    *z = mask.factor(stream, first + l * self.d.lk);
                }
                z
            }
        }
    }

    /// The block's probabilities over its first `p.len()` keys into `p` (0 where hidden), each
    /// query's lse into `lse` (its `n` entries; −∞ for a query that sees no key).
    #[inline(always)]
    pub fn probs<const W: usize>(
        &self,
        block: Block,
        x_t: &mut [[f32; W]],
        p: &mut [[f32; W]],
        lse: &mut [f32],
    ) {
        self.scores(block, x_t, p);
        let (max, total) = lanes::softmax(p);
        for (l, lse) in lse.iter_mut().enumerate() {
            *lse = if max[l] == f32::NEG_INFINITY {
                f32::NEG_INFINITY
            } else {
                max[l] + math::ln(total[l])
            };
        }
    }

    /// The forward of a block: its `[n, Dh]` rows of out and its `n` lses. `scratch` holds at
    /// least (Lk + 2·Dh)·W floats.
    #[inline(always)]
    pub fn forward_block<const W: usize>(
        &self,
        block: Block,
        scratch: &mut [f32],
        out: &mut [f32],
        lse: &mut [f32],
    ) {
        let Dims { lk, dh, .. } = self.d;
        let keys = self.keys(block);
        let chunks = scratch.as_chunks_mut::<W>().0;
        let (p, rest) = chunks.split_at_mut(lk);
        let (x_t, sums) = rest.split_at_mut(dh);
        let p = &mut p[..keys];
        self.probs(block, x_t, p, lse);
        // What multiplies v: P ∘ Z (hidden keys' 0 stay 0).
        if self.dropout.is_some() {
            for (j, p) in p.iter_mut().enumerate() {
                let z: [f32; W] = self.factors(block, j);
                for l in 0..W {
                    p[l] *= z[l];
                }
            }
        }
        let sums = &mut sums[..dh];
        lanes::weighted_sums(p, self.head(self.v, block.bh, lk), sums);
        for (l, out) in out.chunks_exact_mut(dh).enumerate() {
            for (d, o) in out.iter_mut().enumerate() {
                *o = sums[d][l];
            }
        }
    }

    /// For a block (and `keys = self.keys(block)`): the probabilities recomputed from the lse,
    /// times the dropout mask Z (what dv reads), into `p[..keys]`, and dS = P ∘ (Z ∘ dout·vᵀ − D),
    /// D = dout · out of each row, into `ds[..keys]`; `x_t` is scratch `[Dh][W]`.
    #[inline(always)]
    pub fn p_and_ds<const W: usize>(
        &self,
        block: Block,
        (lse, out, dout): (&[f32], &[f32], &[f32]),
        x_t: &mut [[f32; W]],
        (p, ds): (&mut [[f32; W]], &mut [[f32; W]]),
    ) {
        let Dims { lq, lk, .. } = self.d;
        self.scores(block, x_t, p);
        self.transposed(dout, block, x_t);
        // dP = dout·vᵀ in ds's place.
        lanes::dots(x_t, self.head(self.v, block.bh, lk), ds);
        let first_row = block.bh * lq + block.first;
        let row = |l: usize| first_row + l.min(block.n - 1);
        let lse: [f32; W] = std::array::from_fn(|l| lse[row(l)]);
        let delta: [f32; W] = std::array::from_fn(|l| {
            let (go, o) = (self.at(dout, row(l)), self.at(out, row(l)));
            go.iter().zip(o).map(|(a, b)| a * b).sum()
        });
        for (j, (p, ds)) in p.iter_mut().zip(ds.iter_mut()).enumerate() {
            let z: [f32; W] = self.factors(block, j);
            // Local copies, which nothing else can alias, so that the lane loop is vectorised.
            let (s, dp) = (*p, *ds);
            let (mut pz, mut g) = ([0.0f32; W], [0.0f32; W]);
            let mut x = [0.0f32; W];
            for l in 0..W {
                x[l] = s[l] - lse[l];
            }
            lanes::zero_where_hidden(&s, &mut x);
            for l in 0..W {
                // Hidden keys have score −∞; select them explicitly so that lse = −∞ gives no
                // NaN (a select, not a branch).
                let hidden = s[l] == f32::NEG_INFINITY;
                let prob = exp(x[l]);
                pz[l] = if hidden { 0.0 } else { prob * z[l] };
                g[l] = if hidden {
                    0.0
                } else {
                    prob * (z[l] * dp[l] - delta[l])
                };
            }
            (*p, *ds) = (pz, g);
        }
    }

    /// The block's dS (`ds[j][l]`) summed per bucket of the relative bias into `sums` (the
    /// block's `[n, buckets]` rows), key by key in ascending order: each row's share of the
    /// table's gradient.
    #[inline(always)]
    fn sum_by_bucket<const W: usize>(&self, block: Block, ds: &[[f32; W]], sums: &mut [f32]) {
        let Bias::Bucketed { buckets, .. } = self.bias else {
            unreachable!("only the relative bias has buckets")
        };
        for (l, sums) in sums.chunks_exact_mut(self.d.buckets).enumerate() {
            let i = block.first + l;
            sums.fill(0.0);
            let end = self.key_end(i);
            for (&bucket, ds) in buckets[self.d.bucket_row(i)..][..end].iter().zip(ds) {
                sums[bucket as usize] += ds[l];
            }
        }
    }
}

/// The forward of one (b, h) block by block.
struct Forward<'s> {
    scratch: &'s mut [f32],
    out: &'s mut [f32],
    lse: &'s mut [f32],
}

impl OnBlock for Forward<'_> {
    #[inline(always)]
    fn run<const W: usize>(&mut self, pr: &Problem<'_>, block: Block) {
        let dh = pr.d.dh;
        let out = &mut self.out[block.first * dh..][..block.n * dh];
        let lse = &mut self.lse[block.first..][..block.n];
        pr.forward_block::<W>(block, self.scratch, out, lse);
    }
}

/// Scratch of one forward task: a block's probabilities, its rows transposed and its sums.
pub(super) fn forward_scratch(d: Dims) -> Vec<f32> {
    vec![0.0; (d.lk + 2 * d.dh) * LANES]
}

vectorised_fn! {
    /// The forward of one (b, h): `out` and `lse` are its `[Lq, Dh]` and `[Lq]` parts;
    /// `scratch` is [`forward_scratch`]'s.
    pub fn forward_head(pr: &Problem<'_>, bh: usize, scratch: &mut [f32], out: &mut [f32], lse: &mut [f32]) {
        pr.for_each_block(bh, &mut Forward { scratch, out, lse });
    }
}

/// Scratch of one backward task: a block's P ∘ Z and dS (`[Lk][W]` each), its rows transposed
/// and its sums (`[Dh][W]` each), and dS·scale and P ∘ Z of every query key-major
/// (`[Lk, Lq]`), what dk's and dv's sums read.
pub(super) struct BackwardScratch {
    block: Vec<f32>,
    w_t: Vec<f32>,
    p_t: Vec<f32>,
}

impl BackwardScratch {
    pub fn new(d: Dims) -> Self {
        Self {
            block: vec![0.0; (2 * d.lk + 2 * d.dh) * LANES],
            w_t: vec![0.0; d.lk * d.lq],
            p_t: vec![0.0; d.lk * d.lq],
        }
    }
}

/// A block's P ∘ Z and dS (`[Lk][W]`), its transposed rows and its sums (`[Dh][W]`), from
/// [`BackwardScratch`]'s `block`.
#[allow(clippy::type_complexity)]
#[inline(always)]
fn block_parts<const W: usize>(block: &mut [f32], d: Dims) -> ([&mut [[f32; W]]; 2], [&mut [[f32; W]]; 2]) {
    let chunks = block.as_chunks_mut::<W>().0;
    let (p, rest) = chunks.split_at_mut(d.lk);
    let (ds, rest) = rest.split_at_mut(d.lk);
    let (x_t, sums) = rest.split_at_mut(d.dh);
    ([p, ds], [x_t, &mut sums[..d.dh]])
}

/// dq of one (b, h) block by block, each block's weights kept key-major for dk and dv.
struct Backward<'s, 'a> {
    saved: (&'a [f32], &'a [f32], &'a [f32]),
    scratch: &'s mut BackwardScratch,
    dq: &'s mut [f32],
    by_bucket: Option<&'s mut [f32]>,
}

impl OnBlock for Backward<'_, '_> {
    #[inline(always)]
    fn run<const W: usize>(&mut self, pr: &Problem<'_>, block: Block) {
        let Dims {
            lq, lk, dh, buckets, ..
        } = pr.d;
        let keys = pr.keys(block);
        let BackwardScratch {
            block: scratch,
            w_t,
            p_t,
        } = &mut *self.scratch;
        let ([p, ds], [x_t, sums]) = block_parts::<W>(scratch, pr.d);
        let (p, ds) = (&mut p[..keys], &mut ds[..keys]);
        pr.p_and_ds(block, self.saved, x_t, (p, ds));
        if let Some(by_bucket) = &mut self.by_bucket {
            pr.sum_by_bucket(
                block,
                ds,
                &mut by_bucket[block.first * buckets..][..block.n * buckets],
            );
        }
        // dq's weights dS·scale, in dS's place.
        let scale = pr.op.scale;
        for w in ds.iter_mut().flatten() {
            *w *= scale;
        }
        lanes::weighted_sums(ds, pr.head(pr.k, block.bh, lk), sums);
        for (l, dq) in self.dq[block.first * dh..][..block.n * dh]
            .chunks_exact_mut(dh)
            .enumerate()
        {
            for (d, g) in dq.iter_mut().enumerate() {
                *g = sums[d][l];
            }
        }
        // Key-major copies for dk and dv (what a key's sums read: queries from `query_start`
        // on, never a key a row hides).
        for (j, (p, w)) in p.iter().zip(ds.iter()).enumerate() {
            let at = j * lq + block.first;
            p_t[at..][..block.n].copy_from_slice(&p[..block.n]);
            w_t[at..][..block.n].copy_from_slice(&w[..block.n]);
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
        let Dims { lq, dh, .. } = pr.d;
        let ((dq, dk), dv) = grads;
        pr.for_each_block(bh, &mut Backward { saved, scratch: s, dq, by_bucket });
        for (g, (dk, dv)) in dk.chunks_mut(tiles::GROUP * dh).zip(dv.chunks_mut(tiles::GROUP * dh)).enumerate() {
            let (first, rows) = (g * tiles::GROUP, dk.len() / dh);
            // The queries that may see each key.
            let mut ranges = <[Range<usize>; tiles::GROUP]>::default();
            for (r, range) in ranges.iter_mut().take(rows).enumerate() {
                *range = pr.query_start(first + r)..lq;
            }
            let (p_t, w_t) = (&s.p_t[first * lq..], &s.w_t[first * lq..]);
            tiles::weighted_sums(dk, &ranges[..rows], w_t, lq, pr.head(pr.q, bh, lq));
            tiles::weighted_sums(dv, &ranges[..rows], p_t, lq, pr.head(saved.2, bh, lq));
        }
    }
}

/// The dense bias's gradient of one head: dS summed over the batch in order.
pub(super) struct BiasGradient<'s, 'a> {
    pub saved: (&'a [f32], &'a [f32], &'a [f32]),
    pub scratch: &'s mut BackwardScratch,
    /// The head's `[Lq, Lk]` sums so far.
    pub dbias: &'s mut [f32],
}

impl OnBlock for BiasGradient<'_, '_> {
    #[inline(always)]
    fn run<const W: usize>(&mut self, pr: &Problem<'_>, block: Block) {
        let lk = pr.d.lk;
        let keys = pr.keys(block);
        let ([p, ds], [x_t, _]) = block_parts::<W>(&mut self.scratch.block, pr.d);
        let (p, ds) = (&mut p[..keys], &mut ds[..keys]);
        pr.p_and_ds(block, self.saved, x_t, (p, ds));
        for (l, db) in self.dbias[block.first * lk..][..block.n * lk]
            .chunks_exact_mut(lk)
            .enumerate()
        {
            for (db, ds) in db.iter_mut().zip(ds.iter()) {
                *db += ds[l];
            }
        }
    }
}
