//! T5's relative position bias inside the attention kernels.
//!
//! The bias of query i and key j in head h is `table[bucket(j − (i + Lk − Lq)), h]` (query i sits
//! at key position i + Lk − Lq; in self-attention the offset is j − i). Built as a tensor it is
//! `[H, Lq, Lk]`: 2 GiB per copy for two heads at L = 16,384. The kernels instead look it up per
//! (i, j), exactly as they compute the causal mask per (i, j), from the table `[buckets, H]` and
//! the bucket of each offset, i32 `[Lq + Lk − 1]` (entry `j − i + Lq − 1`, the offset
//! `entry − Lk + 1`). The host computes the
//! buckets (`model::posenc::relative_bucket`), so the kernels use T5's bucket function bit for
//! bit instead of a GPU `log` that may round differently at a bucket's edge; the list is linear
//! in L like everything else per layer.
//!
//! The gradient is `dtable[c, h] = Σ_b Σ_i Σ_{j: bucket(j − i) = c} dS[b, h, i, j]`. WGSL has no
//! float atomics, so the backward's dq pass, which recomputes dS row by row anyway, writes each
//! query row's sums per bucket to its own slice of `[B, H, Lq, buckets]` (linear in L), and
//! [`table_gradient`] sums those over B and Lq with ordinary graph ops.
//!
//! ALiBi uses the same lookups with a constant table (a row per offset, each head's slope times
//! the distance) and `trained` false: the backward then writes no sums, and nothing in it is
//! `[L, L]` either.

use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::tensor::{DType, TensorMeta};

/// T5's relative bias as the attention op reads it (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct BucketedBias {
    /// f32 `[buckets, H]`: each head's bias for each bucket.
    pub table: TensorId,
    /// i32 `[Lq + Lk − 1]`: entry `j − i + Lq − 1` is the bucket of query i and key j (of the
    /// offset `entry − Lk + 1`), in `0..buckets`; or i32 `[Lq, Lk]`, the bucket of each pair
    /// (randomized positions, where the offset of query i and key j is `pos[j] − pos[i]`).
    pub buckets: TensorId,
    /// Whether the table is trained (T5). A constant table (ALiBi's distances times each head's
    /// slope, a bucket per offset) gets no gradient, so the backward writes no per-row sums.
    pub trained: bool,
}

/// Checks the table and the bucket list against `heads` and the lengths; the error says what it
/// needs.
pub(super) fn check(
    table: &TensorMeta,
    buckets: &TensorMeta,
    heads: usize,
    q_len: usize,
    k_len: usize,
) -> std::result::Result<(), String> {
    let table_fits =
        table.dtype == DType::F32 && table.rank() == 2 && table.shape[0] > 0 && table.shape[1] == heads;
    let offsets = q_len + k_len - 1;
    let listed = *buckets == TensorMeta::i32(&[offsets]) || *buckets == TensorMeta::i32(&[q_len, k_len]);
    if table_fits && listed {
        return Ok(());
    }
    Err(format!(
        "needs the relative bias's table f32 [buckets, H] with H = {heads} and buckets i32 [Lq + Lk − 1] = \
         [{offsets}] (one per offset) or [Lq, Lk] = [{q_len}, {k_len}] (one per pair)"
    ))
}

/// The table's gradient `[buckets, H]` from the backward's per-row sums `[B, H, Lq, buckets]`.
pub(super) fn table_gradient(g: &mut Graph, by_row: TensorId) -> Result<TensorId> {
    let per_head = g.sum(by_row, 2, false)?;
    let per_head = g.sum(per_head, 0, false)?;
    g.permute(per_head, &[1, 0])
}
