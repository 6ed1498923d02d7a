// Fused multi-head softmax attention, out = softmax(q kᵀ · scale + bias) v, and its gradient.
// q and out are [B, H, Lq, Dh], k and v [B, H, Lk, Dh], Dh ≤ 128 (Lq ≠ Lk: cross-attention, or
// new queries against cached keys); the key mask is i32 [B, Lk]. Query i sits at position
// i + Lk − Lq among the keys (the last query with the last key), which is where causal attention
// and the relative bias measure from. The bias is dense, [H, Lq, Lk], or T5's relative bias:
// `bias` then holds the table [buckets, H], and the bias of query i and key j in head h is
// bias[bucket · H + h], with the bucket of each offset given by the host (i32 [Lq + Lk − 1],
// entry j − i + Lq − 1) so that it is T5's function bit for bit. It is looked up per (i, j) like
// the causal mask, so nothing [Lq, Lk] is ever stored.
//
// Forward (FlashAttention-2): a 64-thread workgroup owns ROWS = 16 query rows of one (b, h), four
// threads ("lanes") per row. It walks the keys in blocks of BLOCK = 8, staging K and V in workgroup
// memory, and keeps an online softmax per row: running max m, running sum l and an output
// accumulator rescaled by exp(m_old − m_new) whenever the max grows. Lane t of a row owns the
// vec4 columns t, t + 4, .., t + 28 of the head dimension in eight named vec4 registers (o0..o7),
// so Dh ≤ 128 needs no runtime-indexed private array (slow on software Vulkan). Causal attention
// stops at the key block that holds the workgroup's last query.
//
// Hidden keys (causal, padded) get probability exactly 0 by a select, never through exp(−inf):
// WGSL does not promise infinities. A row with no visible key has l = 0; it outputs 0 and stores
// lse = −inf (written by bit pattern), which the backward never reads.
//
// Backward (FlashAttention-2): `attention_backward_stats` caches per row lse and
// D = rowsum(dout · out), and per key a 1/0 visibility, in one scratch buffer. Then probabilities
// are recomputed, P = exp(s − lse), dS = P (dout · v − D): `attention_backward_dkdv` gives each
// workgroup 16 keys and walks the query blocks (dv = Pᵀ dout, dk = dSᵀ q · scale),
// `attention_backward_dq` gives each workgroup 16 queries and walks the key blocks
// (dq = dS k · scale), and `attention_backward_dbias` gives each thread one (h, i, j) and sums
// dS over the batch. For the relative bias, the dq pass also sums each query row's dS per bucket
// into that row's slice of [B, H, Lq, buckets], which the graph sums over B and Lq. Every output
// element is written by one thread: deterministic, no atomics (WGSL has no float atomics).
//
// Optional inputs: the op binds q in the slot of an absent bias, mask or bucket list (and in v's
// slot for the probabilities kernel), and a one-word scratch in the dq pass's slot for the
// relative bias's sums; the flags in the uniform say what is present, so those are never touched.

struct Attn {
    batch: u32,
    heads: u32,
    q_len: u32,
    k_len: u32,
    dh: u32,
    scale: f32,
    causal: u32,
    // What `bias` holds: nothing (0), DENSE_BIAS or RELATIVE_BIAS.
    bias_kind: u32,
    has_mask: u32,
    // Rows of the relative bias's table; 0 without one.
    buckets: u32,
}

const DENSE_BIAS: u32 = 1u;
const RELATIVE_BIAS: u32 = 2u;

@group(0) @binding(0) var<uniform> p: Attn;

// attention_forward and attention_probs: q, k, v, bias, key_mask, rel_buckets -> out, lse.
// attention_probs writes the probabilities [B, H, Lq, Lk] to `out`; v is a placeholder there.
// The backward passes dkdv, dq and dbias share q, k, v and bias.
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read> key_mask: array<i32>;
@group(0) @binding(6) var<storage, read> rel_buckets: array<i32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;
@group(0) @binding(8) var<storage, read_write> lse_out: array<f32>;

// attention_backward_stats: out, lse, dout, key_mask, rel_buckets -> stats.
@group(0) @binding(1) var<storage, read> st_out: array<f32>;
@group(0) @binding(2) var<storage, read> st_lse: array<f32>;
@group(0) @binding(3) var<storage, read> st_dout: array<f32>;
@group(0) @binding(4) var<storage, read> st_mask: array<i32>;
@group(0) @binding(5) var<storage, read> st_buckets: array<i32>;
@group(0) @binding(6) var<storage, read_write> stats_out: array<f32>;

// attention_backward_dkdv / _dq / _dbias: q, k, v, bias, stats, dout -> grad_a (dk, dq or dbias)
// and grad_b (dkdv: dv; dq: the relative bias's per-row sums [B, H, Lq, buckets]).
// stats = [lse (rows) | D (rows) | key visible (B·Lk) | relative bias: bucket of each offset
// (Lq + Lk − 1), as f32, so that these passes bind eight storage buffers at most, WebGPU's default].
@group(0) @binding(5) var<storage, read_write> stats: array<f32>;
@group(0) @binding(6) var<storage, read> dout: array<f32>;
@group(0) @binding(7) var<storage, read_write> grad_a: array<f32>;
@group(0) @binding(8) var<storage, read_write> grad_b: array<f32>;

const WG: u32 = 64u;
const LANES: u32 = 4u;
// Rows (queries, or keys for dkdv) per workgroup, and keys (or queries) per staged block.
const ROWS: u32 = 16u;
const BLOCK: u32 = 8u;
// vec4s per staged row: Dh ≤ 128.
const STRIDE: u32 = 32u;
// The score of a hidden key: below any real score, and finite.
const HIDDEN: f32 = -1e30;

// Two staged blocks of BLOCK rows (K and V, or q and dout), zero beyond Dh and beyond L.
var<workgroup> tile_a: array<vec4<f32>, 256>;
var<workgroup> tile_b: array<vec4<f32>, 256>;
// Per (row, block entry): scores or probabilities, and dS.
var<workgroup> s_tile: array<f32, 128>;
var<workgroup> ds_tile: array<f32, 128>;

fn vec4s() -> u32 {
    return (p.dh + 3u) / 4u;
}

fn rows_total() -> u32 {
    return p.batch * p.heads * p.q_len;
}

// Query i sits at position i + Lk − Lq among the keys.
fn causal_hides(i: u32, j: u32) -> bool {
    return p.causal != 0u && j + p.q_len > i + p.k_len;
}

// The end of the keys that causal queries q0..q0 + ROWS see (all keys otherwise).
fn causal_key_end(q0: u32) -> u32 {
    if (p.causal == 0u) {
        return p.k_len;
    }
    let last = q0 + ROWS + p.k_len;
    return select(0u, min(p.k_len, last - p.q_len), last > p.q_len);
}

// The first query that sees key j0 under causal attention (0 otherwise).
fn causal_query_start(j0: u32) -> u32 {
    if (p.causal == 0u) {
        return 0u;
    }
    return select(0u, j0 + p.q_len - p.k_len, j0 + p.q_len > p.k_len);
}

// Key j is visible to query i of batch entry b (forward kernels read the mask itself).
fn visible_fwd(b: u32, i: u32, j: u32) -> bool {
    return !causal_hides(i, j) && (p.has_mask == 0u || key_mask[b * p.k_len + j] != 0);
}

// The same for the backward kernels, which read the visibility cached in stats.
fn visible_bwd(b: u32, i: u32, j: u32) -> bool {
    return !causal_hides(i, j) && stats[2u * rows_total() + b * p.k_len + j] != 0.0;
}

// Where stats holds the bucket of each offset.
fn buckets_at() -> u32 {
    return 2u * rows_total() + p.batch * p.k_len;
}

// The relative bias's bucket of offset j − i, for the forward kernels (which read the input
// itself); 0 without a relative bias, whose slot then holds a placeholder.
fn bucket_fwd(i: u32, j: u32) -> u32 {
    if (p.bias_kind != RELATIVE_BIAS) {
        return 0u;
    }
    return u32(rel_buckets[j + p.q_len - 1u - i]);
}

// The same for the backward kernels, which read the copy cached in stats.
fn bucket_bwd(i: u32, j: u32) -> u32 {
    if (p.bias_kind != RELATIVE_BIAS) {
        return 0u;
    }
    return u32(stats[buckets_at() + j + p.q_len - 1u - i]);
}

// The score of query i and key j in head h from their dot product, and the bucket of j − i
// (read only for a relative bias).
fn score(h: u32, i: u32, j: u32, qk: f32, bucket: u32) -> f32 {
    var s = qk * p.scale;
    if (p.bias_kind == DENSE_BIAS) {
        s += bias[(h * p.q_len + i) * p.k_len + j];
    } else if (p.bias_kind == RELATIVE_BIAS) {
        s += bias[bucket * p.heads + h];
    }
    return s;
}

fn neg_inf() -> f32 {
    // From a variable: Tint (Chrome's WebGPU) rejects a constant expression that evaluates to an
    // infinity, so `bitcast<f32>(0xff800000u)` would fail the whole module in the browser.
    var bits = 0xff800000u;
    return bitcast<f32>(bits);
}

// vec4 number c of the row starting at element `at`, zero beyond Dh.
fn q4(at: u32, c: u32) -> vec4<f32> {
    let e = at + c * 4u;
    if (c * 4u + 3u < p.dh) {
        return vec4<f32>(q[e], q[e + 1u], q[e + 2u], q[e + 3u]);
    }
    var r = vec4<f32>(0.0);
    for (var t = 0u; c * 4u + t < p.dh && t < 4u; t++) {
        r[t] = q[e + t];
    }
    return r;
}

fn k4(at: u32, c: u32) -> vec4<f32> {
    let e = at + c * 4u;
    if (c * 4u + 3u < p.dh) {
        return vec4<f32>(k[e], k[e + 1u], k[e + 2u], k[e + 3u]);
    }
    var r = vec4<f32>(0.0);
    for (var t = 0u; c * 4u + t < p.dh && t < 4u; t++) {
        r[t] = k[e + t];
    }
    return r;
}

fn v4(at: u32, c: u32) -> vec4<f32> {
    let e = at + c * 4u;
    if (c * 4u + 3u < p.dh) {
        return vec4<f32>(v[e], v[e + 1u], v[e + 2u], v[e + 3u]);
    }
    var r = vec4<f32>(0.0);
    for (var t = 0u; c * 4u + t < p.dh && t < 4u; t++) {
        r[t] = v[e + t];
    }
    return r;
}

fn dout4(at: u32, c: u32) -> vec4<f32> {
    let e = at + c * 4u;
    if (c * 4u + 3u < p.dh) {
        return vec4<f32>(dout[e], dout[e + 1u], dout[e + 2u], dout[e + 3u]);
    }
    var r = vec4<f32>(0.0);
    for (var t = 0u; c * 4u + t < p.dh && t < 4u; t++) {
        r[t] = dout[e + t];
    }
    return r;
}

// Dot products of a global row (at element `at`) with staged row `jj` of tile_a / tile_b.
fn q_dot_a(at: u32, jj: u32) -> f32 {
    var acc = 0.0;
    for (var c = 0u; c < vec4s(); c++) {
        acc += dot(q4(at, c), tile_a[jj * STRIDE + c]);
    }
    return acc;
}

fn dout_dot_b(at: u32, jj: u32) -> f32 {
    var acc = 0.0;
    for (var c = 0u; c < vec4s(); c++) {
        acc += dot(dout4(at, c), tile_b[jj * STRIDE + c]);
    }
    return acc;
}

fn k_dot_a(at: u32, jj: u32) -> f32 {
    var acc = 0.0;
    for (var c = 0u; c < vec4s(); c++) {
        acc += dot(k4(at, c), tile_a[jj * STRIDE + c]);
    }
    return acc;
}

fn v_dot_b(at: u32, jj: u32) -> f32 {
    var acc = 0.0;
    for (var c = 0u; c < vec4s(); c++) {
        acc += dot(v4(at, c), tile_b[jj * STRIDE + c]);
    }
    return acc;
}

// Σ over the block's eight staged rows of weight · row, at vec4 column c; weights wa (rows 0..3)
// and wb (rows 4..7).
fn mix_a(c: u32, wa: vec4<f32>, wb: vec4<f32>) -> vec4<f32> {
    return wa.x * tile_a[c] + wa.y * tile_a[STRIDE + c] + wa.z * tile_a[2u * STRIDE + c]
        + wa.w * tile_a[3u * STRIDE + c] + wb.x * tile_a[4u * STRIDE + c] + wb.y * tile_a[5u * STRIDE + c]
        + wb.z * tile_a[6u * STRIDE + c] + wb.w * tile_a[7u * STRIDE + c];
}

fn mix_b(c: u32, wa: vec4<f32>, wb: vec4<f32>) -> vec4<f32> {
    return wa.x * tile_b[c] + wa.y * tile_b[STRIDE + c] + wa.z * tile_b[2u * STRIDE + c]
        + wa.w * tile_b[3u * STRIDE + c] + wb.x * tile_b[4u * STRIDE + c] + wb.y * tile_b[5u * STRIDE + c]
        + wb.z * tile_b[6u * STRIDE + c] + wb.w * tile_b[7u * STRIDE + c];
}

// Stages rows r0..r0+BLOCK of the (b, h) slice starting at element `base` of k and v into
// tile_a and tile_b (the forward and dq kernels).
fn stage_kv(lid: u32, base: u32, r0: u32) {
    for (var g = lid; g < BLOCK * STRIDE; g += WG) {
        let rr = g / STRIDE;
        let c = g % STRIDE;
        var a = vec4<f32>(0.0);
        var b = vec4<f32>(0.0);
        if (c < vec4s() && r0 + rr < p.k_len) {
            a = k4(base + (r0 + rr) * p.dh, c);
            b = v4(base + (r0 + rr) * p.dh, c);
        }
        tile_a[g] = a;
        tile_b[g] = b;
    }
}

// The same for q and dout (the dkdv kernel).
fn stage_q_dout(lid: u32, base: u32, r0: u32) {
    for (var g = lid; g < BLOCK * STRIDE; g += WG) {
        let rr = g / STRIDE;
        let c = g % STRIDE;
        var a = vec4<f32>(0.0);
        var b = vec4<f32>(0.0);
        if (c < vec4s() && r0 + rr < p.q_len) {
            a = q4(base + (r0 + rr) * p.dh, c);
            b = dout4(base + (r0 + rr) * p.dh, c);
        }
        tile_a[g] = a;
        tile_b[g] = b;
    }
}

// The workgroup's (b·H + h, block of ROWS of `len` rows), or false past the end (uniform per
// workgroup).
fn group_rows(wid: vec3<u32>, groups: vec3<u32>, len: u32) -> vec3<u32> {
    let linear = wid.x + wid.y * groups.x;
    let blocks = (len + ROWS - 1u) / ROWS;
    return vec3<u32>(linear / blocks, linear % blocks, u32(linear < p.batch * p.heads * blocks));
}

// Writes vec4 column c of a row (at element `at`) of a [.., Dh] output, within Dh.
fn store4_out(at: u32, c: u32, x: vec4<f32>) {
    for (var t = 0u; t < 4u; t++) {
        if (c * 4u + t < p.dh) {
            out[at + c * 4u + t] = x[t];
        }
    }
}

fn store4_a(at: u32, c: u32, x: vec4<f32>) {
    for (var t = 0u; t < 4u; t++) {
        if (c * 4u + t < p.dh) {
            grad_a[at + c * 4u + t] = x[t];
        }
    }
}

fn store4_b(at: u32, c: u32, x: vec4<f32>) {
    for (var t = 0u; t < 4u; t++) {
        if (c * 4u + t < p.dh) {
            grad_b[at + c * 4u + t] = x[t];
        }
    }
}

@compute @workgroup_size(64)
fn attention_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = group_rows(wid, groups, p.q_len);
    if (g.z == 0u) {
        return;
    }
    let bh = g.x;
    let b = bh / p.heads;
    let h = bh % p.heads;
    let qbase = bh * p.q_len * p.dh;
    let kbase = bh * p.k_len * p.dh;
    let q0 = g.y * ROWS;
    let r = lid / LANES;
    let lane = lid % LANES;
    let i = q0 + r;
    let n4 = vec4s();
    let key_end = causal_key_end(q0);
    var m = HIDDEN;
    var l = 0.0;
    var o0 = vec4<f32>(0.0);
    var o1 = vec4<f32>(0.0);
    var o2 = vec4<f32>(0.0);
    var o3 = vec4<f32>(0.0);
    var o4 = vec4<f32>(0.0);
    var o5 = vec4<f32>(0.0);
    var o6 = vec4<f32>(0.0);
    var o7 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < key_end; k0 += BLOCK) {
        stage_kv(lid, kbase, k0);
        workgroupBarrier();
        for (var pair = lid; pair < ROWS * BLOCK; pair += WG) {
            let qi = q0 + pair / BLOCK;
            let j = k0 + pair % BLOCK;
            var s = HIDDEN;
            if (qi < p.q_len && j < p.k_len && visible_fwd(b, qi, j)) {
                s = score(h, qi, j, q_dot_a(qbase + qi * p.dh, pair % BLOCK), bucket_fwd(qi, j));
            }
            s_tile[pair] = s;
        }
        workgroupBarrier();
        let sa = vec4<f32>(s_tile[r * BLOCK], s_tile[r * BLOCK + 1u], s_tile[r * BLOCK + 2u], s_tile[r * BLOCK + 3u]);
        let sb = vec4<f32>(s_tile[r * BLOCK + 4u], s_tile[r * BLOCK + 5u], s_tile[r * BLOCK + 6u], s_tile[r * BLOCK + 7u]);
        let mx = max(sa, sb);
        let m_new = max(m, max(max(mx.x, mx.y), max(mx.z, mx.w)));
        let alpha = exp(m - m_new);
        let pa = select(exp(sa - m_new), vec4<f32>(0.0), sa <= vec4<f32>(HIDDEN));
        let pb = select(exp(sb - m_new), vec4<f32>(0.0), sb <= vec4<f32>(HIDDEN));
        l = l * alpha + dot(pa + pb, vec4<f32>(1.0));
        m = m_new;
        o0 = o0 * alpha + mix_b(lane, pa, pb);
        if (lane + 4u < n4) {
            o1 = o1 * alpha + mix_b(lane + 4u, pa, pb);
        }
        if (lane + 8u < n4) {
            o2 = o2 * alpha + mix_b(lane + 8u, pa, pb);
        }
        if (lane + 12u < n4) {
            o3 = o3 * alpha + mix_b(lane + 12u, pa, pb);
        }
        if (lane + 16u < n4) {
            o4 = o4 * alpha + mix_b(lane + 16u, pa, pb);
        }
        if (lane + 20u < n4) {
            o5 = o5 * alpha + mix_b(lane + 20u, pa, pb);
        }
        if (lane + 24u < n4) {
            o6 = o6 * alpha + mix_b(lane + 24u, pa, pb);
        }
        if (lane + 28u < n4) {
            o7 = o7 * alpha + mix_b(lane + 28u, pa, pb);
        }
        workgroupBarrier();
    }
    if (i >= p.q_len) {
        return;
    }
    // A row with no visible key: l = 0 and every o is 0, so the output is 0.
    let inv = select(0.0, 1.0 / l, l > 0.0);
    let at = qbase + i * p.dh;
    store4_out(at, lane, o0 * inv);
    store4_out(at, lane + 4u, o1 * inv);
    store4_out(at, lane + 8u, o2 * inv);
    store4_out(at, lane + 12u, o3 * inv);
    store4_out(at, lane + 16u, o4 * inv);
    store4_out(at, lane + 20u, o5 * inv);
    store4_out(at, lane + 24u, o6 * inv);
    store4_out(at, lane + 28u, o7 * inv);
    if (lane == 0u) {
        lse_out[bh * p.q_len + i] = select(neg_inf(), m + log(l), l > 0.0);
    }
}

// One thread per (b, h, query row): two passes over the keys, an online max and sum, then the
// normalised probabilities (0 for hidden keys and for rows with no visible key).
@compute @workgroup_size(64)
fn attention_probs(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let row = gid.x + gid.y * groups.x * WG;
    if (row >= rows_total()) {
        return;
    }
    let bh = row / p.q_len;
    let i = row % p.q_len;
    let b = bh / p.heads;
    let h = bh % p.heads;
    let qa = row * p.dh;
    let kbase = bh * p.k_len * p.dh;
    var m = HIDDEN;
    var l = 0.0;
    for (var j = 0u; j < p.k_len; j++) {
        if (visible_fwd(b, i, j)) {
            var qk = 0.0;
            for (var c = 0u; c < vec4s(); c++) {
                qk += dot(q4(qa, c), k4(kbase + j * p.dh, c));
            }
            let s = score(h, i, j, qk, bucket_fwd(i, j));
            let m_new = max(m, s);
            l = l * exp(m - m_new) + exp(s - m_new);
            m = m_new;
        }
    }
    let inv = select(0.0, 1.0 / l, l > 0.0);
    for (var j = 0u; j < p.k_len; j++) {
        var prob = 0.0;
        if (visible_fwd(b, i, j)) {
            var qk = 0.0;
            for (var c = 0u; c < vec4s(); c++) {
                qk += dot(q4(qa, c), k4(kbase + j * p.dh, c));
            }
            prob = exp(score(h, i, j, qk, bucket_fwd(i, j)) - m) * inv;
        }
        out[row * p.k_len + j] = prob;
    }
}

// One thread per row, per key and per offset: stats = [lse | D = rowsum(dout · out) |
// key visible | bucket of each offset].
@compute @workgroup_size(64)
fn attention_backward_stats(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = gid.x + gid.y * groups.x * WG;
    let rows = rows_total();
    if (t < rows) {
        var d = 0.0;
        for (var e = 0u; e < p.dh; e++) {
            d += st_dout[t * p.dh + e] * st_out[t * p.dh + e];
        }
        stats_out[t] = st_lse[t];
        stats_out[rows + t] = d;
    }
    if (t < p.batch * p.k_len) {
        var seen = 1.0;
        if (p.has_mask != 0u && st_mask[t] == 0) {
            seen = 0.0;
        }
        stats_out[2u * rows + t] = seen;
    }
    if (p.bias_kind == RELATIVE_BIAS && t + 1u < p.q_len + p.k_len) {
        stats_out[buckets_at() + t] = f32(st_buckets[t]);
    }
}

// P and dS of query i and key j (in batch b, head h, slice bh), with the query's and the key's
// dot products already taken: qk = q_i · k_j and dv = dout_i · v_j.
fn p_and_ds(bh: u32, h: u32, i: u32, j: u32, qk: f32, dov: f32) -> vec2<f32> {
    let row = bh * p.q_len + i;
    let prob = exp(score(h, i, j, qk, bucket_bwd(i, j)) - stats[row]);
    return vec2<f32>(prob, prob * (dov - stats[rows_total() + row]));
}

@compute @workgroup_size(64)
fn attention_backward_dkdv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = group_rows(wid, groups, p.k_len);
    if (g.z == 0u) {
        return;
    }
    let bh = g.x;
    let b = bh / p.heads;
    let h = bh % p.heads;
    let qbase = bh * p.q_len * p.dh;
    let kbase = bh * p.k_len * p.dh;
    let key0 = g.y * ROWS;
    let r = lid / LANES;
    let lane = lid % LANES;
    let j = key0 + r;
    let n4 = vec4s();
    // Causal: queries before the one at the block's first key see none of its keys.
    let query_start = causal_query_start(key0);
    var dk0 = vec4<f32>(0.0);
    var dk1 = vec4<f32>(0.0);
    var dk2 = vec4<f32>(0.0);
    var dk3 = vec4<f32>(0.0);
    var dk4 = vec4<f32>(0.0);
    var dk5 = vec4<f32>(0.0);
    var dk6 = vec4<f32>(0.0);
    var dk7 = vec4<f32>(0.0);
    var dv0 = vec4<f32>(0.0);
    var dv1 = vec4<f32>(0.0);
    var dv2 = vec4<f32>(0.0);
    var dv3 = vec4<f32>(0.0);
    var dv4 = vec4<f32>(0.0);
    var dv5 = vec4<f32>(0.0);
    var dv6 = vec4<f32>(0.0);
    var dv7 = vec4<f32>(0.0);
    for (var i0 = query_start; i0 < p.q_len; i0 += BLOCK) {
        stage_q_dout(lid, qbase, i0);
        workgroupBarrier();
        for (var pair = lid; pair < ROWS * BLOCK; pair += WG) {
            let kj = key0 + pair / BLOCK;
            let i = i0 + pair % BLOCK;
            var pd = vec2<f32>(0.0);
            if (i < p.q_len && kj < p.k_len && visible_bwd(b, i, kj)) {
                let at = kbase + kj * p.dh;
                pd = p_and_ds(bh, h, i, kj, k_dot_a(at, pair % BLOCK), v_dot_b(at, pair % BLOCK));
            }
            s_tile[pair] = pd.x;
            ds_tile[pair] = pd.y;
        }
        workgroupBarrier();
        let pa = vec4<f32>(s_tile[r * BLOCK], s_tile[r * BLOCK + 1u], s_tile[r * BLOCK + 2u], s_tile[r * BLOCK + 3u]);
        let pb = vec4<f32>(s_tile[r * BLOCK + 4u], s_tile[r * BLOCK + 5u], s_tile[r * BLOCK + 6u], s_tile[r * BLOCK + 7u]);
        let da = vec4<f32>(ds_tile[r * BLOCK], ds_tile[r * BLOCK + 1u], ds_tile[r * BLOCK + 2u], ds_tile[r * BLOCK + 3u]);
        let db = vec4<f32>(ds_tile[r * BLOCK + 4u], ds_tile[r * BLOCK + 5u], ds_tile[r * BLOCK + 6u], ds_tile[r * BLOCK + 7u]);
        dk0 += mix_a(lane, da, db);
        dv0 += mix_b(lane, pa, pb);
        if (lane + 4u < n4) {
            dk1 += mix_a(lane + 4u, da, db);
            dv1 += mix_b(lane + 4u, pa, pb);
        }
        if (lane + 8u < n4) {
            dk2 += mix_a(lane + 8u, da, db);
            dv2 += mix_b(lane + 8u, pa, pb);
        }
        if (lane + 12u < n4) {
            dk3 += mix_a(lane + 12u, da, db);
            dv3 += mix_b(lane + 12u, pa, pb);
        }
        if (lane + 16u < n4) {
            dk4 += mix_a(lane + 16u, da, db);
            dv4 += mix_b(lane + 16u, pa, pb);
        }
        if (lane + 20u < n4) {
            dk5 += mix_a(lane + 20u, da, db);
            dv5 += mix_b(lane + 20u, pa, pb);
        }
        if (lane + 24u < n4) {
            dk6 += mix_a(lane + 24u, da, db);
            dv6 += mix_b(lane + 24u, pa, pb);
        }
        if (lane + 28u < n4) {
            dk7 += mix_a(lane + 28u, da, db);
            dv7 += mix_b(lane + 28u, pa, pb);
        }
        workgroupBarrier();
    }
    if (j >= p.k_len) {
        return;
    }
    let at = kbase + j * p.dh;
    let sc = p.scale;
    store4_a(at, lane, dk0 * sc);
    store4_a(at, lane + 4u, dk1 * sc);
    store4_a(at, lane + 8u, dk2 * sc);
    store4_a(at, lane + 12u, dk3 * sc);
    store4_a(at, lane + 16u, dk4 * sc);
    store4_a(at, lane + 20u, dk5 * sc);
    store4_a(at, lane + 24u, dk6 * sc);
    store4_a(at, lane + 28u, dk7 * sc);
    store4_b(at, lane, dv0);
    store4_b(at, lane + 4u, dv1);
    store4_b(at, lane + 8u, dv2);
    store4_b(at, lane + 12u, dv3);
    store4_b(at, lane + 16u, dv4);
    store4_b(at, lane + 20u, dv5);
    store4_b(at, lane + 24u, dv6);
    store4_b(at, lane + 28u, dv7);
}

@compute @workgroup_size(64)
fn attention_backward_dq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = group_rows(wid, groups, p.q_len);
    if (g.z == 0u) {
        return;
    }
    let bh = g.x;
    let b = bh / p.heads;
    let h = bh % p.heads;
    let qbase = bh * p.q_len * p.dh;
    let kbase = bh * p.k_len * p.dh;
    let q0 = g.y * ROWS;
    let r = lid / LANES;
    let lane = lid % LANES;
    let i = q0 + r;
    let n4 = vec4s();
    let key_end = causal_key_end(q0);
    var d0 = vec4<f32>(0.0);
    var d1 = vec4<f32>(0.0);
    var d2 = vec4<f32>(0.0);
    var d3 = vec4<f32>(0.0);
    var d4 = vec4<f32>(0.0);
    var d5 = vec4<f32>(0.0);
    var d6 = vec4<f32>(0.0);
    var d7 = vec4<f32>(0.0);
    // The relative bias's table gradient: lane 0 of each row adds the row's dS up per bucket, in
    // key order, into the row's own slice of grad_b. Long runs of keys share a bucket (every key
    // past max_distance shares the last), so a running sum is written out only when the bucket
    // changes; buckets in any order still come out right.
    let sums_buckets = p.bias_kind == RELATIVE_BIAS && lane == 0u && i < p.q_len;
    let sums_at = (bh * p.q_len + i) * p.buckets;
    if (sums_buckets) {
        for (var c = 0u; c < p.buckets; c++) {
            grad_b[sums_at + c] = 0.0;
        }
    }
    var run_bucket = 0u;
    var run_sum = 0.0;
    for (var k0 = 0u; k0 < key_end; k0 += BLOCK) {
        stage_kv(lid, kbase, k0);
        workgroupBarrier();
        for (var pair = lid; pair < ROWS * BLOCK; pair += WG) {
            let qi = q0 + pair / BLOCK;
            let j = k0 + pair % BLOCK;
            var ds = 0.0;
            if (qi < p.q_len && j < p.k_len && visible_bwd(b, qi, j)) {
                let at = qbase + qi * p.dh;
                ds = p_and_ds(bh, h, qi, j, q_dot_a(at, pair % BLOCK), dout_dot_b(at, pair % BLOCK)).y;
            }
            ds_tile[pair] = ds;
        }
        workgroupBarrier();
        let da = vec4<f32>(ds_tile[r * BLOCK], ds_tile[r * BLOCK + 1u], ds_tile[r * BLOCK + 2u], ds_tile[r * BLOCK + 3u]);
        let db = vec4<f32>(ds_tile[r * BLOCK + 4u], ds_tile[r * BLOCK + 5u], ds_tile[r * BLOCK + 6u], ds_tile[r * BLOCK + 7u]);
        d0 += mix_a(lane, da, db);
        if (lane + 4u < n4) {
            d1 += mix_a(lane + 4u, da, db);
        }
        if (lane + 8u < n4) {
            d2 += mix_a(lane + 8u, da, db);
        }
        if (lane + 12u < n4) {
            d3 += mix_a(lane + 12u, da, db);
        }
        if (lane + 16u < n4) {
            d4 += mix_a(lane + 16u, da, db);
        }
        if (lane + 20u < n4) {
            d5 += mix_a(lane + 20u, da, db);
        }
        if (lane + 24u < n4) {
            d6 += mix_a(lane + 24u, da, db);
        }
        if (lane + 28u < n4) {
            d7 += mix_a(lane + 28u, da, db);
        }
        if (sums_buckets) {
            // Hidden keys have dS = 0 in ds_tile.
            for (var jj = 0u; jj < BLOCK && k0 + jj < p.k_len; jj++) {
                let bucket = bucket_bwd(i, k0 + jj);
                if (bucket != run_bucket) {
                    grad_b[sums_at + run_bucket] += run_sum;
                    run_bucket = bucket;
                    run_sum = 0.0;
                }
                run_sum += ds_tile[r * BLOCK + jj];
            }
        }
        workgroupBarrier();
    }
    if (sums_buckets) {
        grad_b[sums_at + run_bucket] += run_sum;
    }
    if (i >= p.q_len) {
        return;
    }
    let at = qbase + i * p.dh;
    let sc = p.scale;
    store4_a(at, lane, d0 * sc);
    store4_a(at, lane + 4u, d1 * sc);
    store4_a(at, lane + 8u, d2 * sc);
    store4_a(at, lane + 12u, d3 * sc);
    store4_a(at, lane + 16u, d4 * sc);
    store4_a(at, lane + 20u, d5 * sc);
    store4_a(at, lane + 24u, d6 * sc);
    store4_a(at, lane + 28u, d7 * sc);
}

// One thread per (h, i, j): dbias = Σ_b dS, summed in batch order.
@compute @workgroup_size(64)
fn attention_backward_dbias(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = gid.x + gid.y * groups.x * WG;
    if (t >= p.heads * p.q_len * p.k_len) {
        return;
    }
    let h = t / (p.q_len * p.k_len);
    let i = (t / p.k_len) % p.q_len;
    let j = t % p.k_len;
    var total = 0.0;
    for (var b = 0u; b < p.batch; b++) {
        if (visible_bwd(b, i, j)) {
            let bh = b * p.heads + h;
            let qa = (bh * p.q_len + i) * p.dh;
            let ka = (bh * p.k_len + j) * p.dh;
            var qk = 0.0;
            var dov = 0.0;
            for (var c = 0u; c < vec4s(); c++) {
                qk += dot(q4(qa, c), k4(ka, c));
                dov += dot(dout4(qa, c), v4(ka, c));
            }
            total += p_and_ds(bh, h, i, j, qk, dov).y;
        }
    }
    grad_a[t] = total;
}
