// Attention for software adapters (see attention.wgsl, which this file continues): one
// invocation owns four rows whole (queries in the forward and dq passes, keys in dkdv) and walks
// the other side one row at a time, reading it straight from its storage buffer. Dh ≤ 32.
//
// Why: lavapipe and SwiftShader run eight invocations in the lanes of one SIMD register, and each
// lane's load from memory (workgroup or storage) costs about as much as the register's whole
// arithmetic. In the tiles kernels a thread loads a value for every one or two multiply-adds; here
// each loaded k_j or v_j (or q_i and dout_i) serves four rows, and nothing is staged: no
// workgroup memory, no barriers. On lavapipe that made the peers' attention forward 7.6× and its
// backward 11.6× faster. A GPU needs far more invocations than the B·H·L/4 this gives, so GPUs
// keep the tiles kernels. A row is eight named vec4s (Row8): runtime-indexed private arrays are
// slow on software adapters.

// One row of Dh ≤ 32 values: vec4 columns 0..7, zero beyond Dh.
struct Row8 {
    c0: vec4<f32>, c1: vec4<f32>, c2: vec4<f32>, c3: vec4<f32>,
    c4: vec4<f32>, c5: vec4<f32>, c6: vec4<f32>, c7: vec4<f32>,
}

// Row i of q (or dout) of slice bh, zero past the queries; row j of k (or v), zero past the keys.
// Four copies, not one with a selector: a WGSL function cannot take a buffer, and a selector
// would make the forward reach dout, whose binding holds the forward's bucket list.
fn q_row(bh: u32, i: u32) -> Row8 {
    var r = Row8();
    if (i >= p.q_len) {
        return r;
    }
    let at = (bh * p.q_len + i) * p.dh;
    let n4 = vec4s();
    r.c0 = q4(at, 0u);
    if (n4 > 1u) { r.c1 = q4(at, 1u); }
    if (n4 > 2u) { r.c2 = q4(at, 2u); }
    if (n4 > 3u) { r.c3 = q4(at, 3u); }
    if (n4 > 4u) { r.c4 = q4(at, 4u); }
    if (n4 > 5u) { r.c5 = q4(at, 5u); }
    if (n4 > 6u) { r.c6 = q4(at, 6u); }
    if (n4 > 7u) { r.c7 = q4(at, 7u); }
    return r;
}

fn dout_row(bh: u32, i: u32) -> Row8 {
    var r = Row8();
    if (i >= p.q_len) {
        return r;
    }
    let at = (bh * p.q_len + i) * p.dh;
    let n4 = vec4s();
    r.c0 = dout4(at, 0u);
    if (n4 > 1u) { r.c1 = dout4(at, 1u); }
    if (n4 > 2u) { r.c2 = dout4(at, 2u); }
    if (n4 > 3u) { r.c3 = dout4(at, 3u); }
    if (n4 > 4u) { r.c4 = dout4(at, 4u); }
    if (n4 > 5u) { r.c5 = dout4(at, 5u); }
    if (n4 > 6u) { r.c6 = dout4(at, 6u); }
    if (n4 > 7u) { r.c7 = dout4(at, 7u); }
    return r;
}

fn k_row(bh: u32, j: u32) -> Row8 {
    var r = Row8();
    if (j >= p.k_len) {
        return r;
    }
    let at = (bh * p.k_len + j) * p.dh;
    let n4 = vec4s();
    r.c0 = k4(at, 0u);
    if (n4 > 1u) { r.c1 = k4(at, 1u); }
    if (n4 > 2u) { r.c2 = k4(at, 2u); }
    if (n4 > 3u) { r.c3 = k4(at, 3u); }
    if (n4 > 4u) { r.c4 = k4(at, 4u); }
    if (n4 > 5u) { r.c5 = k4(at, 5u); }
    if (n4 > 6u) { r.c6 = k4(at, 6u); }
    if (n4 > 7u) { r.c7 = k4(at, 7u); }
    return r;
}

fn v_row(bh: u32, j: u32) -> Row8 {
    var r = Row8();
    if (j >= p.k_len) {
        return r;
    }
    let at = (bh * p.k_len + j) * p.dh;
    let n4 = vec4s();
    r.c0 = v4(at, 0u);
    if (n4 > 1u) { r.c1 = v4(at, 1u); }
    if (n4 > 2u) { r.c2 = v4(at, 2u); }
    if (n4 > 3u) { r.c3 = v4(at, 3u); }
    if (n4 > 4u) { r.c4 = v4(at, 4u); }
    if (n4 > 5u) { r.c5 = v4(at, 5u); }
    if (n4 > 6u) { r.c6 = v4(at, 6u); }
    if (n4 > 7u) { r.c7 = v4(at, 7u); }
    return r;
}

fn dot8(a: Row8, b: Row8) -> f32 {
    return dot(a.c0, b.c0) + dot(a.c1, b.c1) + dot(a.c2, b.c2) + dot(a.c3, b.c3)
        + dot(a.c4, b.c4) + dot(a.c5, b.c5) + dot(a.c6, b.c6) + dot(a.c7, b.c7);
}

// o · alpha + w · x
fn scale_add8(o: Row8, alpha: f32, w: f32, x: Row8) -> Row8 {
    return Row8(o.c0 * alpha + w * x.c0, o.c1 * alpha + w * x.c1, o.c2 * alpha + w * x.c2,
        o.c3 * alpha + w * x.c3, o.c4 * alpha + w * x.c4, o.c5 * alpha + w * x.c5,
        o.c6 * alpha + w * x.c6, o.c7 * alpha + w * x.c7);
}


// Row `at` (an element offset) of out, grad_a or grad_b: x · s, within Dh.
fn store_out8(at: u32, x: Row8, s: f32) {
    store4_out(at, 0u, x.c0 * s);
    store4_out(at, 1u, x.c1 * s);
    store4_out(at, 2u, x.c2 * s);
    store4_out(at, 3u, x.c3 * s);
    store4_out(at, 4u, x.c4 * s);
    store4_out(at, 5u, x.c5 * s);
    store4_out(at, 6u, x.c6 * s);
    store4_out(at, 7u, x.c7 * s);
}

fn store_a8(at: u32, x: Row8, s: f32) {
    store4_a(at, 0u, x.c0 * s);
    store4_a(at, 1u, x.c1 * s);
    store4_a(at, 2u, x.c2 * s);
    store4_a(at, 3u, x.c3 * s);
    store4_a(at, 4u, x.c4 * s);
    store4_a(at, 5u, x.c5 * s);
    store4_a(at, 6u, x.c6 * s);
    store4_a(at, 7u, x.c7 * s);
}

fn store_b8(at: u32, x: Row8) {
    store4_b(at, 0u, x.c0);
    store4_b(at, 1u, x.c1);
    store4_b(at, 2u, x.c2);
    store4_b(at, 3u, x.c3);
    store4_b(at, 4u, x.c4);
    store4_b(at, 5u, x.c5);
    store4_b(at, 6u, x.c6);
    store4_b(at, 7u, x.c7);
}

// The invocation's slice (b·H + h) and first row of the four it owns, among rows of `len`; or
// false past the end.
fn thread_rows(gid: vec3<u32>, groups: vec3<u32>, len: u32) -> vec3<u32> {
    let t = gid.x + gid.y * groups.x * WG;
    let quads = (len + 3u) / 4u;
    return vec3<u32>(t / quads, (t % quads) * 4u, u32(t < p.batch * p.heads * quads));
}

// A query row of attention_forward_rows: q, the output accumulator, the running max and sum.
struct ForwardRow {
    q: Row8,
    o: Row8,
    m: f32,
    l: f32,
}

fn forward_row(bh: u32, i: u32) -> ForwardRow {
    return ForwardRow(q_row(bh, i), Row8(), HIDDEN, 0.0);
}

// Adds key j (its v row vj) to query row i's online softmax.
fn forward_add_key(r: ptr<function, ForwardRow>, b: u32, h: u32, i: u32, j: u32, kj: Row8, vj: Row8) {
    var s = HIDDEN;
    if (i < p.q_len && visible_fwd(b, i, j)) {
        s = score(h, i, j, dot8((*r).q, kj), bucket_fwd(i, j));
    }
    let m_new = max((*r).m, s);
    let alpha = exp((*r).m - m_new);
    let prob = select(exp(s - m_new), 0.0, s <= HIDDEN);
    (*r).l = (*r).l * alpha + prob;
    (*r).m = m_new;
    // The output sums the probabilities dropout keeps (Z = 1 without it); l sums them all.
    (*r).o = scale_add8((*r).o, alpha, prob * kept(b * p.heads + h, i, j), vj);
}

fn forward_store(r: ForwardRow, bh: u32, i: u32) {
    if (i >= p.q_len) {
        return;
    }
    // A row with no visible key: l = 0 and o is 0, so the output is 0.
    store_out8((bh * p.q_len + i) * p.dh, r.o, select(0.0, 1.0 / r.l, r.l > 0.0));
    lse_out[bh * p.q_len + i] = select(neg_inf(), r.m + log(r.l), r.l > 0.0);
}

@compute @workgroup_size(64)
fn attention_forward_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    forward_rows(gid, groups);
}

@compute @workgroup_size(64)
fn attention_forward_rows_dropout(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    drop_stream = stream_of(fwd_seed[0]);
    forward_rows(gid, groups);
}

fn forward_rows(gid: vec3<u32>, groups: vec3<u32>) {
    let g = thread_rows(gid, groups, p.q_len);
    if (g.z == 0u) {
        return;
    }
    let bh = g.x;
    let i = g.y;
    let b = bh / p.heads;
    let h = bh % p.heads;
    var r0 = forward_row(bh, i);
    var r1 = forward_row(bh, i + 1u);
    var r2 = forward_row(bh, i + 2u);
    var r3 = forward_row(bh, i + 3u);
    let key_end = causal_key_end(i, 4u);
    for (var j = 0u; j < key_end; j++) {
        let kj = k_row(bh, j);
        let vj = v_row(bh, j);
        forward_add_key(&r0, b, h, i, j, kj, vj);
        forward_add_key(&r1, b, h, i + 1u, j, kj, vj);
        forward_add_key(&r2, b, h, i + 2u, j, kj, vj);
        forward_add_key(&r3, b, h, i + 3u, j, kj, vj);
    }
    forward_store(r0, bh, i);
    forward_store(r1, bh, i + 1u);
    forward_store(r2, bh, i + 2u);
    forward_store(r3, bh, i + 3u);
}

// P and dS of query i and key j, or zeros when either is past the end or the key is hidden, from
// the query's lse and D, qk = q_i · k_j and dov = dout_i · v_j.
fn p_ds_or_zero(b: u32, h: u32, i: u32, j: u32, lse: f32, d: f32, qk: f32, dov: f32) -> vec2<f32> {
    if (i < p.q_len && j < p.k_len && visible_bwd(b, i, j)) {
        return p_and_ds_given(b * p.heads + h, h, i, j, qk, dov, lse, d);
    }
    return vec2<f32>(0.0);
}

// A query row of attention_backward_dq_rows: q, dout, lse and D, the dq accumulator, and for the
// relative bias the run of keys in one bucket whose dS is being summed (see the tiles' dq pass).
struct QueryRow {
    q: Row8,
    dout: Row8,
    lse: f32,
    d: f32,
    dq: Row8,
    bucket: u32,
    bucket_sum: f32,
}

fn query_row(bh: u32, i: u32) -> QueryRow {
    var r = QueryRow(q_row(bh, i), dout_row(bh, i), 0.0, 0.0, Row8(), 0u, 0.0);
    if (i < p.q_len) {
        let row = bh * p.q_len + i;
        r.lse = stats[row];
        r.d = stats[rows_total() + row];
        if (p.bias_kind == RELATIVE_BIAS) {
            for (var c = 0u; c < p.buckets; c++) {
                grad_b[row * p.buckets + c] = 0.0;
            }
        }
    }
    return r;
}

// Adds key j's dS · k_j to query row i's dq, and dS to its bucket's sum.
fn query_add_key(r: ptr<function, QueryRow>, b: u32, h: u32, bh: u32, i: u32, j: u32, kj: Row8, vj: Row8) {
    let ds = p_ds_or_zero(b, h, i, j, (*r).lse, (*r).d, dot8((*r).q, kj), dot8((*r).dout, vj)).y;
    (*r).dq = scale_add8((*r).dq, 1.0, ds, kj);
    if (p.bias_kind == RELATIVE_BIAS && i < p.q_len) {
        let bucket = bucket_bwd(i, j);
        if (bucket != (*r).bucket) {
            grad_b[(bh * p.q_len + i) * p.buckets + (*r).bucket] += (*r).bucket_sum;
            (*r).bucket = bucket;
            (*r).bucket_sum = 0.0;
        }
        (*r).bucket_sum += ds;
    }
}

fn query_store(r: QueryRow, bh: u32, i: u32) {
    if (i >= p.q_len) {
        return;
    }
    let row = bh * p.q_len + i;
    store_a8(row * p.dh, r.dq, p.scale);
    if (p.bias_kind == RELATIVE_BIAS) {
        grad_b[row * p.buckets + r.bucket] += r.bucket_sum;
    }
}

@compute @workgroup_size(64)
fn attention_backward_dq_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let g = thread_rows(gid, groups, p.q_len);
    if (g.z == 0u) {
        return;
    }
    load_stream();
    let bh = g.x;
    let i = g.y;
    let b = bh / p.heads;
    let h = bh % p.heads;
    var r0 = query_row(bh, i);
    var r1 = query_row(bh, i + 1u);
    var r2 = query_row(bh, i + 2u);
    var r3 = query_row(bh, i + 3u);
    let key_end = causal_key_end(i, 4u);
    for (var j = 0u; j < key_end; j++) {
        let kj = k_row(bh, j);
        let vj = v_row(bh, j);
        query_add_key(&r0, b, h, bh, i, j, kj, vj);
        query_add_key(&r1, b, h, bh, i + 1u, j, kj, vj);
        query_add_key(&r2, b, h, bh, i + 2u, j, kj, vj);
        query_add_key(&r3, b, h, bh, i + 3u, j, kj, vj);
    }
    query_store(r0, bh, i);
    query_store(r1, bh, i + 1u);
    query_store(r2, bh, i + 2u);
    query_store(r3, bh, i + 3u);
}

// A key row of attention_backward_dkdv_rows: k, v and their gradients' accumulators.
struct KeyRow {
    k: Row8,
    v: Row8,
    dk: Row8,
    dv: Row8,
}

fn key_row(bh: u32, j: u32) -> KeyRow {
    return KeyRow(k_row(bh, j), v_row(bh, j), Row8(), Row8());
}

// Adds query i (its q and dout rows qi and gi, its lse and D) to key row j's dk and dv.
fn key_add_query(r: ptr<function, KeyRow>, b: u32, h: u32, i: u32, j: u32, qi: Row8, gi: Row8, lse: f32, d: f32) {
    let pd = p_ds_or_zero(b, h, i, j, lse, d, dot8(qi, (*r).k), dot8(gi, (*r).v));
    (*r).dv = scale_add8((*r).dv, 1.0, pd.x, gi);
    (*r).dk = scale_add8((*r).dk, 1.0, pd.y, qi);
}

fn key_store(r: KeyRow, bh: u32, j: u32) {
    if (j >= p.k_len) {
        return;
    }
    let at = (bh * p.k_len + j) * p.dh;
    store_a8(at, r.dk, p.scale);
    store_b8(at, r.dv);
}

@compute @workgroup_size(64)
fn attention_backward_dkdv_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let g = thread_rows(gid, groups, p.k_len);
    if (g.z == 0u) {
        return;
    }
    load_stream();
    let bh = g.x;
    let j = g.y;
    let b = bh / p.heads;
    let h = bh % p.heads;
    var r0 = key_row(bh, j);
    var r1 = key_row(bh, j + 1u);
    var r2 = key_row(bh, j + 2u);
    var r3 = key_row(bh, j + 3u);
    let rows = rows_total();
    // Causal: queries before the one at key j see none of the four keys.
    for (var i = causal_query_start(j); i < p.q_len; i++) {
        let qi = q_row(bh, i);
        let gi = dout_row(bh, i);
        let lse = stats[bh * p.q_len + i];
        let d = stats[rows + bh * p.q_len + i];
        key_add_query(&r0, b, h, i, j, qi, gi, lse, d);
        key_add_query(&r1, b, h, i, j + 1u, qi, gi, lse, d);
        key_add_query(&r2, b, h, i, j + 2u, qi, gi, lse, d);
        key_add_query(&r3, b, h, i, j + 3u, qi, gi, lse, d);
    }
    key_store(r0, bh, j);
    key_store(r1, bh, j + 1u);
    key_store(r2, bh, j + 2u);
    key_store(r3, bh, j + 3u);
}
