// Fused multi-head softmax attention, out = softmax(q kᵀ · scale + bias) v, and its gradient.
// q and out are [B, H, Lq, Dh], k and v [B, H, Lk, Dh], Dh ≤ 128 (Lq ≠ Lk: cross-attention, or
// new queries against cached keys); the key mask is i32 [B, Lk]. Query i sits at position
// i + Lk − Lq among the keys (the last query with the last key), which is where causal attention
// and the relative bias measure from. The bias is dense, [H, Lq, Lk], or T5's relative bias:
// `bias` then holds the table [buckets, H], and the bias of query i and key j in head h is
// bias[bucket · H + h], with the bucket of each offset given by the host (i32 [Lq + Lk − 1],
// entry j − i + Lq − 1) so that it is T5's function bit for bit. It is looked up per (i, j) like
// the causal mask, so nothing [Lq, Lk] is ever stored — except for randomized positions, whose
// offsets pos[j] − pos[i] are not j − i: the host then gives the bucket of each pair (i32
// [Lq, Lk], `pair_buckets`), still no float [H, Lq, Lk].
//
// This module is three files, one WGSL module: this one (the bindings, the masks and biases,
// and the kernels both families share), attention_tiles.wgsl (FlashAttention-2 in 64-thread
// workgroups that stage K and V, for GPUs) and attention_rows.wgsl (one invocation owns four
// rows whole, for software adapters, Dh ≤ 32). Both families compute the same thing: an online
// softmax forward (running max m, running sum l, an output accumulator rescaled by
// exp(m_old − m_new) whenever the max grows), and a backward that recomputes the probabilities,
// P = exp(s − lse), dS = P (dout · v − D), from what `attention_backward_stats` caches.
//
// Hidden keys (causal, padded) get probability exactly 0 by a select, never through exp(−inf):
// WGSL does not promise infinities. A row with no visible key has l = 0; it outputs 0 and stores
// lse = −inf (written by bit pattern), which the backward never reads.
//
// Backward: `attention_backward_stats` caches per row lse and D = rowsum(dout · out), and per key
// a 1/0 visibility, in one scratch buffer. A dkdv pass gives dv = Pᵀ dout and dk = dSᵀ q · scale
// per key, a dq pass dq = dS k · scale per query, and `attention_backward_dbias` gives each thread
// one (h, i, j) and sums dS over the batch. For the relative bias, the dq pass also sums each
// query row's dS per bucket into that row's slice of [B, H, Lq, buckets], which the graph sums
// over B and Lq. Every output element is written by one thread: deterministic, no atomics (WGSL
// has no float atomics).
//
// Optional inputs: the op binds q in the slot of an absent bias, mask or bucket list (and in v's
// slot for the probabilities kernel), and a one-word scratch in the dq pass's slot for the
// relative bias's sums; the flags in the uniform say what is present, so those are never touched.
//
// Dropout on the probabilities (FlashAttention's): the kept probabilities are scaled by
// 1 / (1 − p) and the others zeroed in out = Z∘P·v, Z drawn from the hash of each (b, h, i, j)'s
// index, the step's seed and the site's salt (hash.wgsl, as the dropout op's), so nothing
// [Lq, Lk] is stored: the backward draws the same Z. The softmax's sum is not dropped, and
// D = rowsum(dout · out) still equals Σ_j P Z (dout · v_j), so dS = P ∘ (Z ∘ dout·vᵀ − D) and
// dv = (Z∘P)ᵀ dout. Only the `_dropout` forward entries bind the seed (a ninth buffer: training
// runs natively, where adapters have more than WebGPU's default eight); the stats pass copies
// its stream into `stats` for the passes after it.

struct Attn {
    batch: u32,
    heads: u32,
    q_len: u32,
    k_len: u32,
    dh: u32,
    scale: f32,
    causal: u32,
    // What `bias` holds: nothing (0), DENSE_BIAS, RELATIVE_BIAS or FIXED_RELATIVE_BIAS.
    bias_kind: u32,
    has_mask: u32,
    // Rows of the relative bias's table; 0 without one.
    buckets: u32,
    // 1: the bucket list holds the bucket of each (query, key) pair [Lq, Lk] (randomized
    // positions); 0: of each offset [Lq + Lk − 1].
    pair_buckets: u32,
    // Dropout on the probabilities (training): a probability is dropped when the hash of its
    // index is below drop_threshold (0: no dropout) and the others scaled by drop_scale.
    drop_threshold: u32,
    drop_scale: f32,
    drop_salt: u32,
}

const DENSE_BIAS: u32 = 1u;
const RELATIVE_BIAS: u32 = 2u;
// A relative bias whose table is constant (ALiBi): looked up as RELATIVE_BIAS, no per-row sums.
const FIXED_RELATIVE_BIAS: u32 = 3u;

// Whether the bias is a table looked up by the bucket of each offset, trained or not.
fn relative_lookup() -> bool {
    return p.bias_kind == RELATIVE_BIAS || p.bias_kind == FIXED_RELATIVE_BIAS;
}

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
// attention_forward_dropout and _rows_dropout: the step's dropout seed, i32 [1].
@group(0) @binding(9) var<storage, read> fwd_seed: array<i32>;

// attention_backward_stats: out, lse, dout, key_mask, rel_buckets, seed -> stats.
@group(0) @binding(1) var<storage, read> st_out: array<f32>;
@group(0) @binding(2) var<storage, read> st_lse: array<f32>;
@group(0) @binding(3) var<storage, read> st_dout: array<f32>;
@group(0) @binding(4) var<storage, read> st_mask: array<i32>;
@group(0) @binding(5) var<storage, read> st_buckets: array<i32>;
@group(0) @binding(6) var<storage, read_write> stats_out: array<f32>;
@group(0) @binding(7) var<storage, read> st_seed: array<i32>;

// attention_backward_dkdv / _dq / _dbias: q, k, v, bias, stats, dout -> grad_a (dk, dq or dbias)
// and grad_b (dkdv: dv; dq: the relative bias's per-row sums [B, H, Lq, buckets]).
// stats = [lse (rows) | D (rows) | key visible (B·Lk) | relative bias: bucket of each offset
// (Lq + Lk − 1) or pair (Lq·Lk), as f32 | dropout: the mask's stream, its bits], so that these passes bind eight
// storage buffers at most, WebGPU's default.
@group(0) @binding(5) var<storage, read_write> stats: array<f32>;
@group(0) @binding(6) var<storage, read> dout: array<f32>;
@group(0) @binding(7) var<storage, read_write> grad_a: array<f32>;
@group(0) @binding(8) var<storage, read_write> grad_b: array<f32>;

const WG: u32 = 64u;
// The score of a hidden key: below any real score, and finite.
const HIDDEN: f32 = -1e30;

// The dropout stream of this invocation's dispatch (0 without dropout, when no mask is drawn).
var<private> drop_stream: u32;

// The stream of the seed `seed` at this dispatch's site, as the dropout op's.
fn stream_of(seed: i32) -> u32 {
    return pcg(bitcast<u32>(seed) ^ pcg(p.drop_salt));
}

// Where the stats hold the dropout stream.
fn stream_at() -> u32 {
    return buckets_at() + select(0u, bucket_list(), relative_lookup());
}

// The backward passes' stream, from the stats.
fn load_stream() {
    if (p.drop_threshold != 0u) {
        drop_stream = bitcast<u32>(stats[stream_at()]);
    }
}

// Z of probability (slice bh, query i, key j): 0 (dropped) or drop_scale, or 1 without dropout.
fn kept(bh: u32, i: u32, j: u32) -> f32 {
    if (p.drop_threshold == 0u) {
        return 1.0;
    }
    let index = (bh * p.q_len + i) * p.k_len + j;
    return select(0.0, p.drop_scale, pcg(index ^ drop_stream) >= p.drop_threshold);
}

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

// The end of the keys that causal queries q0..q0 + rows see (all keys otherwise).
fn causal_key_end(q0: u32, rows: u32) -> u32 {
    if (p.causal == 0u) {
        return p.k_len;
    }
    let last = q0 + rows + p.k_len;
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

// Where stats holds the bucket of each offset (or pair).
fn buckets_at() -> u32 {
    return 2u * rows_total() + p.batch * p.k_len;
}

// The length of the bucket list: one per offset, or one per pair.
fn bucket_list() -> u32 {
    if (p.pair_buckets != 0u) {
        return p.q_len * p.k_len;
    }
    return p.q_len + p.k_len - 1u;
}

// Where query i's buckets start in the list: key j's is entry bucket_row(i) + j.
fn bucket_row(i: u32) -> u32 {
    if (p.pair_buckets != 0u) {
        return i * p.k_len;
    }
    return p.q_len - 1u - i;
}

// The relative bias's bucket of offset j − i, for the forward kernels (which read the input
// itself); 0 without a relative bias, whose slot then holds a placeholder.
fn bucket_fwd(i: u32, j: u32) -> u32 {
    if (!relative_lookup()) {
        return 0u;
    }
    return u32(rel_buckets[bucket_row(i) + j]);
}

// The same for the backward kernels, which read the copy cached in stats.
fn bucket_bwd(i: u32, j: u32) -> u32 {
    if (!relative_lookup()) {
        return 0u;
    }
    return u32(stats[buckets_at() + bucket_row(i) + j]);
}

// The score of query i and key j in head h from their dot product, and the bucket of j − i
// (read only for a relative bias).
fn score(h: u32, i: u32, j: u32, qk: f32, bucket: u32) -> f32 {
    var s = qk * p.scale;
    if (p.bias_kind == DENSE_BIAS) {
        s += bias[(h * p.q_len + i) * p.k_len + j];
    } else if (relative_lookup()) {
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
    if (relative_lookup() && t < bucket_list()) {
        stats_out[buckets_at() + t] = f32(st_buckets[t]);
    }
    if (p.drop_threshold != 0u && t == 0u) {
        stats_out[stream_at()] = bitcast<f32>(stream_of(st_seed[0]));
    }
}

// Z∘P (what dv reads) and dS of query i and key j (in head h, slice bh), with the query's and
// the key's dot products already taken: qk = q_i · k_j and dv = dout_i · v_j.
fn p_and_ds(bh: u32, h: u32, i: u32, j: u32, qk: f32, dov: f32) -> vec2<f32> {
    let row = bh * p.q_len + i;
    return p_and_ds_given(bh, h, i, j, qk, dov, stats[row], stats[rows_total() + row]);
}

// The same with the query's lse and D already read.
fn p_and_ds_given(bh: u32, h: u32, i: u32, j: u32, qk: f32, dov: f32, lse: f32, d: f32) -> vec2<f32> {
    let prob = exp(score(h, i, j, qk, bucket_bwd(i, j)) - lse);
    let z = kept(bh, i, j);
    return vec2<f32>(prob * z, prob * (z * dov - d));
}

// One thread per (h, i, j): dbias = Σ_b dS, summed in batch order.
@compute @workgroup_size(64)
fn attention_backward_dbias(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = gid.x + gid.y * groups.x * WG;
    if (t >= p.heads * p.q_len * p.k_len) {
        return;
    }
    load_stream();
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

