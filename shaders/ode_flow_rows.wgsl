// FLOATER's flow on software adapters (continues ode_flow.wgsl): one workgroup per octet of rows
// (rows 8o..8o+7 of the state in the lanes of a mat2x4). A thread computes sixteen outputs of a
// matrix-vector product for the eight rows at once; barriers between dependent products.
//
// Why: lavapipe and SwiftShader run eight invocations in the lanes of one SIMD register, and
// lavapipe loads every element of storage or workgroup memory lane by lane (even where all lanes
// read one address), each about as dear as the register's arithmetic. In the GPU kernels a θ
// value loaded serves one multiply-add; here it serves eight (rows), and each input loaded
// sixteen (outputs). The twelve rows of a 4-layer model take two workgroups: one round on two
// cores. The vectors live in a storage buffer (`qs`: eight rows × 14 vectors pass the workgroup
// memory limit; on lavapipe workgroup memory is no faster), where they also stay between a
// solve's dispatches. Records stay per quad (four rows), as the GPU kernels write them.

// One element of eight rows: rows 8o..8o+3 in column 0, 8o+4..8o+7 in column 1.
alias Rows = mat2x4<f32>;

const SLOTS: u32 = 14u;
const HY: u32 = 12u;
const HDZ: u32 = 13u;

// [octets, SLOTS, max(d, k)]: the slots of ode_flow.wgsl, then σ(z) and σ'(z) ⊙ W2ᵀa.
@group(0) @binding(6) var<storage, read_write> qs: array<Rows>;

var<workgroup> octet_first_bad: array<atomic<u32>, 8>;

fn octets() -> u32 {
    return (p.blocks + 7u) / 8u;
}

fn qat(o: u32, slot: u32, c: u32) -> u32 {
    return (o * SLOTS + slot) * max(p.d, p.k) + c;
}

// Sixteen outputs for the octet's eight rows: out[m] = Σ_{c < n} θ[first + m·out_step + c·in_step] ·
// qs[base + c], for m < 16 (outputs past `outputs` read the last one's θ; callers drop them). Each
// loaded θ value serves eight rows and each loaded input sixteen outputs: lavapipe loads every
// element lane by lane, so loads, not arithmetic, are what this counts (as in matmul.wgsl, the
// accumulators it spills cost far less).
struct Sixteen {
    m0: Rows,
    m1: Rows,
    m2: Rows,
    m3: Rows,
    m4: Rows,
    m5: Rows,
    m6: Rows,
    m7: Rows,
    m8: Rows,
    m9: Rows,
    m10: Rows,
    m11: Rows,
    m12: Rows,
    m13: Rows,
    m14: Rows,
    m15: Rows,
}

fn theta_sixteen(first: u32, out_step: u32, outputs: u32, in_step: u32, base: u32, n: u32) -> Sixteen {
    let last = outputs - 1u;
    let o0 = first + min(0u, last) * out_step;
    let o1 = first + min(1u, last) * out_step;
    let o2 = first + min(2u, last) * out_step;
    let o3 = first + min(3u, last) * out_step;
    let o4 = first + min(4u, last) * out_step;
    let o5 = first + min(5u, last) * out_step;
    let o6 = first + min(6u, last) * out_step;
    let o7 = first + min(7u, last) * out_step;
    let o8 = first + min(8u, last) * out_step;
    let o9 = first + min(9u, last) * out_step;
    let o10 = first + min(10u, last) * out_step;
    let o11 = first + min(11u, last) * out_step;
    let o12 = first + min(12u, last) * out_step;
    let o13 = first + min(13u, last) * out_step;
    let o14 = first + min(14u, last) * out_step;
    let o15 = first + min(15u, last) * out_step;
    var r = Sixteen();
    for (var c = 0u; c < n; c++) {
        let x = qs[base + c];
        let o = c * in_step;
        r.m0 += theta[o0 + o] * x;
        r.m1 += theta[o1 + o] * x;
        r.m2 += theta[o2 + o] * x;
        r.m3 += theta[o3 + o] * x;
        r.m4 += theta[o4 + o] * x;
        r.m5 += theta[o5 + o] * x;
        r.m6 += theta[o6 + o] * x;
        r.m7 += theta[o7 + o] * x;
        r.m8 += theta[o8 + o] * x;
        r.m9 += theta[o9 + o] * x;
        r.m10 += theta[o10 + o] * x;
        r.m11 += theta[o11 + o] * x;
        r.m12 += theta[o12 + o] * x;
        r.m13 += theta[o13 + o] * x;
        r.m14 += theta[o14 + o] * x;
        r.m15 += theta[o15 + o] * x;
    }
    return r;
}

fn sixteen_at(f: Sixteen, m: u32) -> Rows {
    switch (m) {
        case 0u: { return f.m0; }
        case 1u: { return f.m1; }
        case 2u: { return f.m2; }
        case 3u: { return f.m3; }
        case 4u: { return f.m4; }
        case 5u: { return f.m5; }
        case 6u: { return f.m6; }
        case 7u: { return f.m7; }
        case 8u: { return f.m8; }
        case 9u: { return f.m9; }
        case 10u: { return f.m10; }
        case 11u: { return f.m11; }
        case 12u: { return f.m12; }
        case 13u: { return f.m13; }
        case 14u: { return f.m14; }
        default: { return f.m15; }
    }
}

// Rows of octet o in use (1..8).
fn rows_of(o: u32) -> u32 {
    return min(p.blocks - 8u * o, 8u);
}

fn splat(s: f32) -> Rows {
    return Rows(vec4<f32>(s), vec4<f32>(s));
}

fn act_rows(z: Rows) -> Rows {
    return Rows(act4(z[0]), act4(z[1]));
}

// σ'(z) ⊙ g from y = σ(z).
fn act_grad_times(y: Rows, g: Rows) -> Rows {
    return Rows(act_grad4(y[0]) * g[0], act_grad4(y[1]) * g[1]);
}

// Element c of octet o's rows at layer i of a [.., blocks, d] buffer (zero in the lanes past the
// last row). One copy per buffer: a WGSL function cannot take one.
fn traj_rows(o: u32, i: u32, c: u32) -> Rows {
    let at = (i * p.blocks + 8u * o) * p.d + c;
    var v = Rows();
    for (var l = 0u; l < rows_of(o); l++) {
        v[l / 4u][l % 4u] = traj_in[at + l * p.d];
    }
    return v;
}

fn upstream_rows(o: u32, i: u32, c: u32) -> Rows {
    let at = (i * p.blocks + 8u * o) * p.d + c;
    var v = Rows();
    for (var l = 0u; l < rows_of(o); l++) {
        v[l / 4u][l % 4u] = upstream[at + l * p.d];
    }
    return v;
}

fn starts_rows_at(o: u32, g: u32, c: u32) -> Rows {
    let at = (g * p.blocks + 8u * o) * p.d + c;
    var v = Rows();
    for (var l = 0u; l < rows_of(o); l++) {
        v[l / 4u][l % 4u] = step_starts[at + l * p.d];
    }
    return v;
}

fn store_starts(o: u32, g: u32, c: u32, v: Rows) {
    let at = (g * p.blocks + 8u * o) * p.d + c;
    for (var l = 0u; l < rows_of(o); l++) {
        step_starts[at + l * p.d] = v[l / 4u][l % 4u];
    }
}

fn store_dp0(o: u32, c: u32, v: Rows) {
    let at = 8u * o * p.d + c;
    for (var l = 0u; l < rows_of(o); l++) {
        dp0[at + l * p.d] = v[l / 4u][l % 4u];
    }
}

// Thread lid computes outputs 16·lid..16·lid + 15 of each product (d, k ≤ MAX_DIM = 16·16).
// W1·x for outputs j0..j0+3 (of k), x = slot x.
fn w1_x(o: u32, j0: u32, x: u32) -> Sixteen {
    return theta_sixteen(j0 * (p.d + 1u), p.d + 1u, p.k - j0, 1u, qat(o, x, 0u), p.d);
}

// W2[:, j]ᵀ a for j = j0..j0+3 (of k), a = slot a.
fn w2t_a(o: u32, j0: u32, a: u32) -> Sixteen {
    return theta_sixteen(w2_offset() + j0, 1u, p.k - j0, p.k + 1u, qat(o, a, 0u), p.d);
}

// W2[i, :k]·HY for i = i0..i0+3 (of d).
fn w2_hy(o: u32, i0: u32) -> Sixteen {
    return theta_sixteen(w2_offset() + i0 * (p.k + 1u), p.k + 1u, p.d - i0, 1u, qat(o, HY, 0u), p.k);
}

// W1[:, i]ᵀ HDZ for i = i0..i0+3 (of d).
fn w1t_hdz(o: u32, i0: u32) -> Sixteen {
    return theta_sixteen(i0, 1u, p.d - i0, p.d + 1u, qat(o, HDZ, 0u), p.k);
}

// HY = σ(W1·[x; t] + b1) for x = slot x; with `vjp`, also HDZ = σ'(z) ⊙ W2[:, :k]ᵀ a, a = slot a.
fn hidden_rows(o: u32, t: f32, x: u32, a: u32, vjp: bool, lid: u32) {
    let d = p.d;
    let b1 = b1_offset();
    let j0 = 16u * lid;
    if (j0 < p.k) {
        let z = w1_x(o, j0, x);
        var g = Sixteen();
        if (vjp) {
            g = w2t_a(o, j0, a);
        }
        for (var m = 0u; m < min(16u, p.k - j0); m++) {
            let j = j0 + m;
            let y = act_rows(sixteen_at(z, m) + splat(theta[j * (d + 1u) + d] * t + theta[b1 + j]));
            qs[qat(o, HY, j)] = y;
            if (vjp) {
                qs[qat(o, HDZ, j)] = act_grad_times(y, sixteen_at(g, m));
            }
        }
    }
}

// Slope i of a step, K_i = h(t, slot x) into slot K0 + i; callers put a barrier between writing
// x and calling, and it ends with one. The invocation that writes sixteen elements of K_i wrote
// the same elements of every earlier slope, so it goes on at once to those elements of the next
// stage's input, or after the last stage of the step's result in slot Z when `finish` (as the
// GPU kernels do: a pass and a barrier fewer per stage).
fn eval_slope_rows(o: u32, t: f32, x: u32, i: u32, dt: f32, finish: bool, lid: u32) {
    hidden_rows(o, t, x, 0u, false, lid);
    storageBarrier();
    let k = p.k;
    let i0 = 16u * lid;
    if (i0 < p.d) {
        let s = w2_hy(o, i0);
        for (var m = 0u; m < min(16u, p.d - i0); m++) {
            let c = i0 + m;
            let row = w2_offset() + c * (k + 1u);
            qs[qat(o, K0 + i, c)] = sixteen_at(s, m) + splat(theta[row + k] * t + theta[b2_offset() + c]);
            after_slope_rows(o, c, i, dt, finish);
        }
    }
    storageBarrier();
}

// Element c of the input of stage i + 1, or after the last stage and when `finish` of the step's
// result in place (see the GPU kernels' after_slope).
fn after_slope_rows(o: u32, c: u32, i: u32, dt: f32, finish: bool) {
    let next = i + 1u;
    let last = next >= p.stages;
    if (last && !finish) {
        return;
    }
    var v = qs[qat(o, Z, c)];
    for (var j = 0u; j < next; j++) {
        let w = dt * combo_weight(next, j);
        if (w != 0.0) {
            v += w * qs[qat(o, K0 + j, c)];
        }
    }
    qs[qat(o, select(next, Z, last), c)] = v;
}

// Octet o's records of stage evaluation n at (t, slot x) for a = slot a, from HY and HDZ: its
// first four rows' in quad 2o's, the others' in quad 2o + 1's (if that quad has rows).
fn write_record_rows(o: u32, n: u32, t: f32, x: u32, a: u32, coef: f32, lid: u32) {
    let d = p.d;
    let k = p.k;
    for (var h = 0u; h < min(2u, quads() - 2u * o); h++) {
        let at = record_at(2u * o + h, n);
        for (var j = lid; j < k + 2u; j += WG) {
            var y = vec4<f32>(1.0);
            if (j < k) {
                y = qs[qat(o, HY, j)][h];
                records[at + j] = coef * qs[qat(o, HDZ, j)][h];
            } else if (j == k) {
                y = vec4<f32>(t);
            }
            records[at + rec_v2() + j] = y;
        }
        for (var c = lid; c < d + 2u; c += WG) {
            var xc = vec4<f32>(1.0);
            if (c < d) {
                xc = qs[qat(o, x, c)][h];
                records[at + rec_u2() + c] = coef * qs[qat(o, a, c)][h];
            } else if (c == d) {
                xc = vec4<f32>(t);
            }
            records[at + rec_v1() + c] = xc;
        }
    }
}

// Backprop through stage q of a step from t0 by dt, at (t, slot x) with the slope's adjoint in
// slot K0 + q: the input's adjoint aᵀ ∂h/∂p goes at once, element by element by the invocation
// that sums it, into slot ZBAR0 and the earlier slopes' adjoints (dt·a_{q,l} of it into slot
// K0 + l), and the record of stage evaluation n (coef 1) is written. Inputs must be ready
// (barrier); it ends with a barrier.
fn vjp_rows(o: u32, t: f32, x: u32, q: u32, dt: f32, n: u32, lid: u32) {
    let a = K0 + q;
    hidden_rows(o, t, x, a, true, lid);
    storageBarrier();
    let i0 = 16u * lid;
    if (i0 < p.d) {
        let g = w1t_hdz(o, i0);
        for (var m = 0u; m < min(16u, p.d - i0); m++) {
            let c = i0 + m;
            let ib = sixteen_at(g, m);
            qs[qat(o, ZBAR0, c)] += ib;
            for (var l = 0u; l < q; l++) {
                qs[qat(o, K0 + l, c)] += (dt * tab_a(q, l)) * ib;
            }
        }
    }
    write_record_rows(o, n, t, x, a, 1.0, lid);
    storageBarrier();
}

// The adjoint's stage q of a step from t0 by dt, at (t, slot x, slot a): slot KP0 + q = h(t,
// slot x), slot KA0 + q = −aᵀ ∂h/∂p, and the record of stage evaluation n with coef. Inputs must
// be ready (barrier); it ends with a barrier. The invocation that writes elements of the slopes
// goes on to those elements of the next stage's inputs (slots PIN, AIN), or after the last stage
// of the step's p and a: so the record, which reads this stage's inputs, comes first.
fn adjoint_stage_rows(o: u32, t: f32, x: u32, a: u32, q: u32, dt: f32, coef: f32, n: u32, lid: u32) {
    hidden_rows(o, t, x, a, true, lid);
    storageBarrier();
    write_record_rows(o, n, t, x, a, coef, lid);
    storageBarrier();
    let k = p.k;
    let i0 = 16u * lid;
    if (i0 < p.d) {
        let s = w2_hy(o, i0);
        let g = w1t_hdz(o, i0);
        for (var m = 0u; m < min(16u, p.d - i0); m++) {
            let c = i0 + m;
            let row = w2_offset() + c * (k + 1u);
            qs[qat(o, KP0 + q, c)] = sixteen_at(s, m) + splat(theta[row + k] * t + theta[b2_offset() + c]);
            qs[qat(o, KA0 + q, c)] = -1.0 * sixteen_at(g, m);
            after_adjoint_slope_rows(o, c, q, dt);
        }
    }
    storageBarrier();
}

// Element c of the next stage's inputs, or after the last stage of the step's p and a in place
// (see the GPU kernels' after_adjoint_slope).
fn after_adjoint_slope_rows(o: u32, c: u32, q: u32, dt: f32) {
    let next = q + 1u;
    let last = next >= p.stages;
    var pv = qs[qat(o, P, c)];
    var av = qs[qat(o, A, c)];
    for (var l = 0u; l < next; l++) {
        let w = dt * combo_weight(next, l);
        if (w != 0.0) {
            pv += w * qs[qat(o, KP0 + l, c)];
            av += w * qs[qat(o, KA0 + l, c)];
        }
    }
    qs[qat(o, select(PIN, P, last), c)] = pv;
    qs[qat(o, select(AIN, A, last), c)] = av;
}

// The slopes K0.. of one step of slot Z from t0 by dt (stage i > 0 reads its input from slot
// i), and with `finish` the step itself: slot Z becomes the state after it.
fn stages_rows(o: u32, t0: f32, dt: f32, finish: bool, lid: u32) {
    for (var i = 0u; i < p.stages; i++) {
        var x = Z;
        if (i > 0u) {
            x = i;
        }
        eval_slope_rows(o, t0 + tab_c(i) * dt, x, i, dt, finish, lid);
    }
}

// One Runge-Kutta step of slot Z from t0 by dt, in place.
fn rk_step_rows(o: u32, t0: f32, dt: f32, lid: u32) {
    stages_rows(o, t0, dt, true, lid);
}

// Records the first non-finite position of each row among the values v at position i.
fn note_non_finite(v: Rows, i: u32) {
    for (var l = 0u; l < 8u; l++) {
        if (!is_finite(v[l / 4u][l % 4u])) {
            atomicMin(&octet_first_bad[l], i);
        }
    }
}

@compute @workgroup_size(64)
fn forward_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let o = block_index(wid, groups);
    if (o >= octets()) {
        return;
    }
    let d = p.d;
    let n = rows_of(o);
    if (lid < 8u) {
        atomicStore(&octet_first_bad[lid], NO_FAILURE);
    }
    workgroupBarrier();
    // The state stays in slot Z between dispatches.
    if (p.begin == 0u) {
        for (var c = lid; c < d; c += WG) {
            var v = Rows();
            for (var l = 0u; l < n; l++) {
                let at = (8u * o + l) * d + c;
                v[l / 4u][l % 4u] = p0[at];
                traj[at] = p0[at];
            }
            qs[qat(o, Z, c)] = v;
            note_non_finite(v, 0u);
        }
        storageBarrier();
    }
    for (var g = p.begin; g < p.end; g++) {
        let ts = step_times(g);
        rk_step_rows(o, ts.x, ts.y, lid);
        // A non-finite state stays non-finite, so the first non-finite output marks the failure.
        if (g % p.substeps == p.substeps - 1u) {
            let i = g / p.substeps + 1u;
            for (var c = lid; c < d; c += WG) {
                let v = qs[qat(o, Z, c)];
                let at = (i * p.blocks + 8u * o) * d + c;
                for (var l = 0u; l < n; l++) {
                    traj[at + l * d] = v[l / 4u][l % 4u];
                }
                note_non_finite(v, i);
            }
        }
    }
    workgroupBarrier();
    if (lid < n) {
        let b = 8u * o + lid;
        var earlier = NO_FAILURE;
        if (p.begin != 0u) {
            earlier = fail[b];
        }
        fail[b] = min(earlier, atomicLoad(&octet_first_bad[lid]));
    }
}

// step_starts[g] ([steps, blocks, d]) = the state at the start of step g (see the GPU kernel).
@compute @workgroup_size(64)
fn starts_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let o = block_index(wid, groups);
    if (o >= octets()) {
        return;
    }
    let d = p.d;
    // Slot Z holds the start of step begin − 1 from the previous dispatch.
    for (var g = p.begin; g < p.end; g++) {
        if (g % p.substeps == 0u) {
            for (var c = lid; c < d; c += WG) {
                qs[qat(o, Z, c)] = traj_rows(o, g / p.substeps, c);
            }
        } else {
            storageBarrier();
            let ts = step_times(g - 1u);
            rk_step_rows(o, ts.x, ts.y, lid);
        }
        for (var c = lid; c < d; c += WG) {
            store_starts(o, g, c, qs[qat(o, Z, c)]);
        }
    }
}

@compute @workgroup_size(64)
fn backprop_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let o = block_index(wid, groups);
    if (o >= octets()) {
        return;
    }
    let d = p.d;
    // The first dispatch (the last steps) starts the adjoint of the state at 0; it stays in slot
    // ZBAR between dispatches.
    if (p.end == total_steps()) {
        for (var c = lid; c < d; c += WG) {
            qs[qat(o, ZBAR, c)] = Rows();
        }
    }
    storageBarrier();
    for (var g1 = p.end; g1 > p.begin; g1--) {
        let g = g1 - 1u;
        // The last substep of an interval ends at p(t_i): its adjoint gets the upstream there.
        let ends_position = g % p.substeps == p.substeps - 1u;
        let i = g / p.substeps + 1u;
        for (var c = lid; c < d; c += WG) {
            if (ends_position) {
                qs[qat(o, ZBAR, c)] += upstream_rows(o, i, c);
            }
            qs[qat(o, Z, c)] = starts_rows_at(o, g, c);
        }
        storageBarrier();
        let ts = step_times(g);
        let t0 = ts.x;
        let dt = ts.y;
        stages_rows(o, t0, dt, false, lid);
        // z₁ = z₀ + dt·Σ bᵢ kᵢ: the adjoints of z₀ and of every slope (the slopes' slots now hold them).
        for (var c = lid; c < d; c += WG) {
            let zb = qs[qat(o, ZBAR, c)];
            qs[qat(o, ZBAR0, c)] = zb;
            for (var j = 0u; j < p.stages; j++) {
                qs[qat(o, K0 + j, c)] = (dt * tab_b(j)) * zb;
            }
        }
        storageBarrier();
        // Stage s: k_s = h(t₀ + c_s dt, x_s), x_s = z₀ + dt·Σ_l a_sl k_l.
        for (var s1 = p.stages; s1 > 0u; s1--) {
            let s = s1 - 1u;
            var x = Z;
            if (s > 0u) {
                x = s;
            }
            vjp_rows(o, t0 + tab_c(s) * dt, x, s, dt, (g - p.begin) * p.stages + s, lid);
        }
        for (var c = lid; c < d; c += WG) {
            qs[qat(o, ZBAR, c)] = qs[qat(o, ZBAR0, c)];
        }
        storageBarrier();
    }
    if (p.begin == 0u) {
        for (var c = lid; c < d; c += WG) {
            store_dp0(o, c, qs[qat(o, ZBAR, c)] + upstream_rows(o, 0u, c));
        }
    }
}

// Steps in backward order (see the GPU kernel); p and a stay in slots P and A between dispatches.
@compute @workgroup_size(64)
fn adjoint_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let o = block_index(wid, groups);
    if (o >= octets()) {
        return;
    }
    let d = p.d;
    if (p.begin == 0u) {
        for (var c = lid; c < d; c += WG) {
            qs[qat(o, A, c)] = Rows();
        }
    }
    storageBarrier();
    for (var h = p.begin; h < p.end; h++) {
        let i = p.positions - 1u - h / p.substeps;
        let u = h % p.substeps;
        // At t_i: restart p from the forward solution and add the upstream of p(t_i).
        if (u == 0u) {
            for (var c = lid; c < d; c += WG) {
                qs[qat(o, P, c)] = traj_rows(o, i, c);
                qs[qat(o, A, c)] += upstream_rows(o, i, c);
            }
            storageBarrier();
        }
        // Backward over [t_{i-1}, t_i]: negative steps.
        let span0 = f32(i) * p.delta;
        let span1 = f32(i - 1u) * p.delta;
        let t0 = grid_time(span0, span1, u);
        let dt = grid_time(span0, span1, u + 1u) - t0;
        for (var s = 0u; s < p.stages; s++) {
            // The first stage reads p and a themselves; the others, inputs the stage before wrote.
            var x = P;
            var a = A;
            if (s > 0u) {
                x = PIN;
                a = AIN;
            }
            // dp/dt = h, da/dt = −aᵀ ∂h/∂p, dg/dt = −aᵀ ∂h/∂θ (g: the records).
            let n = (h - p.begin) * p.stages + s;
            adjoint_stage_rows(o, t0 + tab_c(s) * dt, x, a, s, dt, -(dt * tab_b(s)), n, lid);
        }
    }
    if (p.end == total_steps()) {
        for (var c = lid; c < d; c += WG) {
            store_dp0(o, c, qs[qat(o, A, c)] + upstream_rows(o, 0u, c));
        }
    }
}

// dθ from the chunk's records (see theta_from_records), an 8 × 8 tile of one outer product per
// invocation: U1 [k] ⊗ V1 [d + 2] (W1, then b1 as column d + 1), then U2 [d] ⊗ V2 [k + 2] (W2,
// b2). Sixty-four elements from sixteen loads per record (its sums in m0..m7 of a Sixteen, row by
// row); the rows walks write zeros for U in lanes past the last row, so nothing is masked.
@compute @workgroup_size(64)
fn theta_from_records_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let tile = gid.x + gid.y * groups.x * WG;
    if (tile == 0u && p.accumulate == 0u) {
        write_backward_ok();
    }
    let d = p.d;
    let k = p.k;
    let cols1 = (d + 9u) / 8u;
    let tiles1 = (k + 7u) / 8u * cols1;
    let cols2 = (k + 9u) / 8u;
    let tiles2 = (d + 7u) / 8u * cols2;
    if (tile >= tiles1 + tiles2) {
        return;
    }
    // This tile's rows r0.. of U (of `rows`) and columns c0.. of V (of `cols`).
    var part2 = tile >= tiles1;
    var u = 0u;
    var v = rec_v1();
    var rows = k;
    var cols = d + 2u;
    var r0 = 8u * (tile / cols1);
    var c0 = 8u * (tile % cols1);
    if (part2) {
        let t2 = tile - tiles1;
        u = rec_u2();
        v = rec_v2();
        rows = d;
        cols = k + 2u;
        r0 = 8u * (t2 / cols2);
        c0 = 8u * (t2 % cols2);
    }
    let u0 = u + min(r0 + 0u, rows - 1u);
    let u1 = u + min(r0 + 1u, rows - 1u);
    let u2 = u + min(r0 + 2u, rows - 1u);
    let u3 = u + min(r0 + 3u, rows - 1u);
    let u4 = u + min(r0 + 4u, rows - 1u);
    let u5 = u + min(r0 + 5u, rows - 1u);
    let u6 = u + min(r0 + 6u, rows - 1u);
    let u7 = u + min(r0 + 7u, rows - 1u);
    let v0 = v + min(c0 + 0u, cols - 1u);
    let v1 = v + min(c0 + 1u, cols - 1u);
    let v2 = v + min(c0 + 2u, cols - 1u);
    let v3 = v + min(c0 + 3u, cols - 1u);
    let v4 = v + min(c0 + 4u, cols - 1u);
    let v5 = v + min(c0 + 5u, cols - 1u);
    let v6 = v + min(c0 + 6u, cols - 1u);
    let v7 = v + min(c0 + 7u, cols - 1u);
    var acc = Sixteen();
    let evaluations = (p.end - p.begin) * p.stages;
    for (var q = 0u; q < quads(); q++) {
        for (var n = 0u; n < evaluations; n++) {
            let at = record_at(q, n);
            let b0 = records[at + v0];
            let b1 = records[at + v1];
            let b2 = records[at + v2];
            let b3 = records[at + v3];
            let b4 = records[at + v4];
            let b5 = records[at + v5];
            let b6 = records[at + v6];
            let b7 = records[at + v7];
            let a0 = records[at + u0];
            acc.m0 += Rows(vec4<f32>(dot(a0, b0), dot(a0, b1), dot(a0, b2), dot(a0, b3)),
                vec4<f32>(dot(a0, b4), dot(a0, b5), dot(a0, b6), dot(a0, b7)));
            let a1 = records[at + u1];
            acc.m1 += Rows(vec4<f32>(dot(a1, b0), dot(a1, b1), dot(a1, b2), dot(a1, b3)),
                vec4<f32>(dot(a1, b4), dot(a1, b5), dot(a1, b6), dot(a1, b7)));
            let a2 = records[at + u2];
            acc.m2 += Rows(vec4<f32>(dot(a2, b0), dot(a2, b1), dot(a2, b2), dot(a2, b3)),
                vec4<f32>(dot(a2, b4), dot(a2, b5), dot(a2, b6), dot(a2, b7)));
            let a3 = records[at + u3];
            acc.m3 += Rows(vec4<f32>(dot(a3, b0), dot(a3, b1), dot(a3, b2), dot(a3, b3)),
                vec4<f32>(dot(a3, b4), dot(a3, b5), dot(a3, b6), dot(a3, b7)));
            let a4 = records[at + u4];
            acc.m4 += Rows(vec4<f32>(dot(a4, b0), dot(a4, b1), dot(a4, b2), dot(a4, b3)),
                vec4<f32>(dot(a4, b4), dot(a4, b5), dot(a4, b6), dot(a4, b7)));
            let a5 = records[at + u5];
            acc.m5 += Rows(vec4<f32>(dot(a5, b0), dot(a5, b1), dot(a5, b2), dot(a5, b3)),
                vec4<f32>(dot(a5, b4), dot(a5, b5), dot(a5, b6), dot(a5, b7)));
            let a6 = records[at + u6];
            acc.m6 += Rows(vec4<f32>(dot(a6, b0), dot(a6, b1), dot(a6, b2), dot(a6, b3)),
                vec4<f32>(dot(a6, b4), dot(a6, b5), dot(a6, b6), dot(a6, b7)));
            let a7 = records[at + u7];
            acc.m7 += Rows(vec4<f32>(dot(a7, b0), dot(a7, b1), dot(a7, b2), dot(a7, b3)),
                vec4<f32>(dot(a7, b4), dot(a7, b5), dot(a7, b6), dot(a7, b7)));
        }
    }
    for (var m = 0u; m < min(8u, rows - r0); m++) {
        let sums = sixteen_at(acc, m);
        let r = r0 + m;
        for (var m2 = 0u; m2 < min(8u, cols - c0); m2++) {
            let c = c0 + m2;
            // θ's element for (r, c): the last column of V is the bias.
            var e = 0u;
            if (!part2) {
                e = select(r * (d + 1u) + c, b1_offset() + r, c == d + 1u);
            } else {
                e = select(w2_offset() + r * (k + 1u) + c, b2_offset() + r, c == k + 1u);
            }
            var s = sums[m2 / 4u][m2 % 4u];
            if (p.accumulate == 1u) {
                s += dtheta[e];
            }
            dtheta[e] = s;
        }
    }
}
