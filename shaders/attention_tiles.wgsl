// Attention for GPUs (see attention.wgsl, which this file continues): FlashAttention-2 in
// 64-thread workgroups.
//
// Forward: a workgroup owns ROWS = 16 query rows of one (b, h), four threads ("lanes") per row.
// It walks the keys in blocks of BLOCK = 8, staging K and V in workgroup memory, and keeps the
// online softmax per row. Lane t of a row owns the vec4 columns t, t + 4, .., t + 28 of the head
// dimension in eight named vec4 registers (o0..o7), so Dh ≤ 128 needs no runtime-indexed private
// array. Causal attention stops at the key block that holds the workgroup's last query.
//
// Backward: `attention_backward_dkdv` gives each workgroup 16 keys and walks the query blocks,
// staging q and dout; `attention_backward_dq` gives each workgroup 16 queries and walks the key
// blocks, staging k and v.

const LANES: u32 = 4u;
// Rows (queries, or keys for dkdv) per workgroup, and keys (or queries) per staged block.
const ROWS: u32 = 16u;
const BLOCK: u32 = 8u;
// vec4s per staged row: Dh ≤ 128.
const STRIDE: u32 = 32u;

// Two staged blocks of BLOCK rows (K and V, or q and dout), zero beyond Dh and beyond L.
var<workgroup> tile_a: array<vec4<f32>, 256>;
var<workgroup> tile_b: array<vec4<f32>, 256>;
// Per (row, block entry): scores or probabilities, and dS.
var<workgroup> s_tile: array<f32, 128>;
var<workgroup> ds_tile: array<f32, 128>;

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


@compute @workgroup_size(64)
fn attention_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    forward_tiles(wid, groups, lid);
}

@compute @workgroup_size(64)
fn attention_forward_dropout(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    drop_stream = stream_of(fwd_seed[0]);
    forward_tiles(wid, groups, lid);
}

// Z of query i's keys k0 .. k0 + 3.
fn kept4(bh: u32, i: u32, k0: u32) -> vec4<f32> {
    return vec4<f32>(kept(bh, i, k0), kept(bh, i, k0 + 1u), kept(bh, i, k0 + 2u), kept(bh, i, k0 + 3u));
}

fn forward_tiles(wid: vec3<u32>, groups: vec3<u32>, lid: u32) {
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
    let key_end = causal_key_end(q0, ROWS);
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
        // The output sums the probabilities dropout keeps (Z = 1 without it); l sums them all.
        let za = pa * kept4(bh, i, k0);
        let zb = pb * kept4(bh, i, k0 + 4u);
        o0 = o0 * alpha + mix_b(lane, za, zb);
        if (lane + 4u < n4) {
            o1 = o1 * alpha + mix_b(lane + 4u, za, zb);
        }
        if (lane + 8u < n4) {
            o2 = o2 * alpha + mix_b(lane + 8u, za, zb);
        }
        if (lane + 12u < n4) {
            o3 = o3 * alpha + mix_b(lane + 12u, za, zb);
        }
        if (lane + 16u < n4) {
            o4 = o4 * alpha + mix_b(lane + 16u, za, zb);
        }
        if (lane + 20u < n4) {
            o5 = o5 * alpha + mix_b(lane + 20u, za, zb);
        }
        if (lane + 24u < n4) {
            o6 = o6 * alpha + mix_b(lane + 24u, za, zb);
        }
        if (lane + 28u < n4) {
            o7 = o7 * alpha + mix_b(lane + 28u, za, zb);
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
    load_stream();
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
    let key_end = causal_key_end(q0, ROWS);
    load_stream();
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
