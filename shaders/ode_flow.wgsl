// FLOATER's position flow dp/dt = h(t, p) = W2·[σ(W1·[p; t] + b1); t] + b2, integrated with an
// explicit fixed-step Runge-Kutta method (its tableau in the uniform) for every block at once.
// θ layout: W1 [k, d+1] | b1 [k] | W2 [d, k+1] | b2 [d]; the last column of each weight multiplies t.
//
// One workgroup per block: its 64 threads keep the block's vectors in workgroup memory and split
// every matrix-vector product by rows, with a barrier between dependent steps. Steps are numbered
// g = interval·substeps + substep over the whole grid; each dispatch runs the steps [begin, end) and
// hands its state to the next through `carry` (a few dispatches per solve, sized by the op so that
// no dispatch runs more than ~32k loop iterations per thread: lavapipe silently stops all loops of
// an invocation after 65535 iterations in total). Entry points:
//   forward:           p(t_i) at every position; records the block's first non-finite position in
//                      `fail`
//   report:            one thread turns `fail` into the status [code, block, time]
//   starts:            backprop's step starts, recomputed from the trajectory (one state per step)
//   backprop:          backprop through the solver, steps in reverse: each step's stages are
//                      recomputed from its start and differentiated
//   adjoint:           the continuous adjoint [p | a | g] integrated backward with the same method,
//                      restarting p from the trajectory at every position (memory: a few vectors)
//   reduce_theta:      dθ = Σ over blocks of `partial`, in block order
// The backward kernels accumulate each block's dθ in its own row of `partial`, each θ element always
// by the same thread, so the result is deterministic without atomics.

const WG: u32 = 64u;
const MAX_DIM: u32 = 256u;
const NO_FAILURE: u32 = 0xffffffffu;

// Slots of `vecs`. Forward and backprop: the state Z, stage inputs X1..X3 (stage 0 reads Z),
// slopes K0..K3 (reused for their adjoints in backprop), and the adjoints ZBAR, ZBAR0, IB.
const Z: u32 = 0u;
const K0: u32 = 4u;
const ZBAR: u32 = 8u;
const ZBAR0: u32 = 9u;
const IB: u32 = 10u;
// Adjoint: the state P and adjoint A, the current stage's inputs PIN and AIN, slopes KP0..3, KA0..3.
const P: u32 = 0u;
const PIN: u32 = 1u;
const AIN: u32 = 2u;
const A: u32 = 3u;
const KP0: u32 = 4u;
const KA0: u32 = 8u;

struct Params {
    // f32 bits: c, b, then rows 1..3 of a (a[i][j], j < i).
    tab: array<vec4<u32>, 5>,
    blocks: u32,
    d: u32,
    k: u32,
    positions: u32,
    substeps: u32,
    stages: u32,
    relu: u32,
    param_len: u32,
    delta: f32,
    // The steps this dispatch runs (backprop walks them from end − 1 down to begin).
    begin: u32,
    end: u32,
}

@group(0) @binding(0) var<uniform> p: Params;

// forward, report
@group(0) @binding(1) var<storage, read> theta: array<f32>;
@group(0) @binding(2) var<storage, read> p0: array<f32>;
@group(0) @binding(3) var<storage, read_write> traj: array<f32>;
@group(0) @binding(4) var<storage, read_write> status: array<f32>;
@group(0) @binding(5) var<storage, read_write> fail: array<u32>;
@group(0) @binding(6) var<storage, read_write> fwd_carry: array<f32>;

// starts, backprop, adjoint, reduce_theta (θ at binding 1 as above)
@group(0) @binding(2) var<storage, read> traj_in: array<f32>;
// reduce_theta (which reads neither θ nor the trajectory): the backward's status, always ok (a
// fixed grid cannot run out of steps).
@group(0) @binding(2) var<storage, read_write> bstatus: array<f32>;
@group(0) @binding(3) var<storage, read> upstream: array<f32>;
@group(0) @binding(4) var<storage, read_write> dtheta: array<f32>;
@group(0) @binding(5) var<storage, read_write> dp0: array<f32>;
@group(0) @binding(6) var<storage, read_write> partial: array<f32>;
@group(0) @binding(7) var<storage, read_write> step_starts: array<f32>;
@group(0) @binding(8) var<storage, read_write> carry: array<f32>;

var<workgroup> vecs: array<array<f32, MAX_DIM>, 12>;
var<workgroup> hy: array<f32, MAX_DIM>;
var<workgroup> hdz: array<f32, MAX_DIM>;
var<workgroup> first_bad: atomic<u32>;

fn tab_c(i: u32) -> f32 {
    return bitcast<f32>(p.tab[0][i]);
}

fn tab_b(i: u32) -> f32 {
    return bitcast<f32>(p.tab[1][i]);
}

fn tab_a(i: u32, j: u32) -> f32 {
    return bitcast<f32>(p.tab[1u + i][j]);
}

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

fn act(z: f32) -> f32 {
    if (p.relu == 1u) {
        return max(z, 0.0);
    }
    // Clamped: some tanh implementations return NaN for large |z|; tanh(±15) is ±1 in f32.
    return tanh(clamp(z, -15.0, 15.0));
}

// σ'(z) from y = σ(z) (ReLU: 1 where z > 0, i.e. where y > 0).
fn act_grad(y: f32) -> f32 {
    if (p.relu == 1u) {
        return select(0.0, 1.0, y > 0.0);
    }
    return 1.0 - y * y;
}

// The output times' substep grid, as the CPU's: span0 + s·(span1 − span0)/substeps, span1 at the end.
fn grid_time(span0: f32, span1: f32, s: u32) -> f32 {
    if (s == p.substeps) {
        return span1;
    }
    return span0 + f32(s) * (span1 - span0) / f32(p.substeps);
}

// (t0, dt) of step g.
fn step_times(g: u32) -> vec2<f32> {
    let i = g / p.substeps;
    let s = g % p.substeps;
    let span0 = f32(i) * p.delta;
    let span1 = f32(i + 1u) * p.delta;
    let t0 = grid_time(span0, span1, s);
    return vec2<f32>(t0, grid_time(span0, span1, s + 1u) - t0);
}

fn total_steps() -> u32 {
    return (p.positions - 1u) * p.substeps;
}

fn b1_offset() -> u32 {
    return p.k * (p.d + 1u);
}

fn w2_offset() -> u32 {
    return b1_offset() + p.k;
}

fn b2_offset() -> u32 {
    return w2_offset() + p.d * (p.k + 1u);
}

// hy = σ(W1·[vecs[x]; t] + b1).
fn hidden_layer(t: f32, x: u32, lid: u32) {
    let d = p.d;
    let b1 = b1_offset();
    for (var j = lid; j < p.k; j += WG) {
        let row = j * (d + 1u);
        var s = 0.0;
        for (var c = 0u; c < d; c++) {
            s += theta[row + c] * vecs[x][c];
        }
        hy[j] = act(s + theta[row + d] * t + theta[b1 + j]);
    }
}

// vecs[out] = h(t, vecs[x]). Callers put a barrier between writing x and calling; it ends with one.
fn eval_h(t: f32, x: u32, out: u32, lid: u32) {
    hidden_layer(t, x, lid);
    workgroupBarrier();
    let k = p.k;
    let w2 = w2_offset();
    let b2 = b2_offset();
    for (var i = lid; i < p.d; i += WG) {
        let row = w2 + i * (k + 1u);
        var s = 0.0;
        for (var j = 0u; j < k; j++) {
            s += theta[row + j] * hy[j];
        }
        vecs[out][i] = s + theta[row + k] * t + theta[b2 + i];
    }
    workgroupBarrier();
}

// aᵀ ∂h/∂θ for one element e of θ, given hy = σ(z) and hdz = σ'(z) ⊙ W2[:, :k]ᵀ a of vjp.
fn theta_grad(e: u32, t: f32, x: u32, a: u32) -> f32 {
    let d = p.d;
    let k = p.k;
    let b1 = b1_offset();
    let w2 = w2_offset();
    let b2 = b2_offset();
    if (e < b1) {
        let c = e % (d + 1u);
        if (c < d) {
            return hdz[e / (d + 1u)] * vecs[x][c];
        }
        return hdz[e / (d + 1u)] * t;
    }
    if (e < w2) {
        return hdz[e - b1];
    }
    if (e < b2) {
        let i = (e - w2) / (k + 1u);
        let j = (e - w2) % (k + 1u);
        if (j < k) {
            return vecs[a][i] * hy[j];
        }
        return vecs[a][i] * t;
    }
    return vecs[a][e - b2];
}

// vecs[out] = sign · aᵀ ∂h/∂p at (t, vecs[x]) for a = vecs[a]; when coef ≠ 0 also
// partial[prow + e] += coef · aᵀ ∂h/∂θ_e. Inputs must be ready (barrier); it ends with a barrier.
fn vjp(t: f32, x: u32, a: u32, out: u32, sign: f32, coef: f32, prow: u32, lid: u32) {
    let d = p.d;
    let k = p.k;
    let b1 = b1_offset();
    let w2 = w2_offset();
    for (var j = lid; j < k; j += WG) {
        let row = j * (d + 1u);
        var s = 0.0;
        for (var c = 0u; c < d; c++) {
            s += theta[row + c] * vecs[x][c];
        }
        let y = act(s + theta[row + d] * t + theta[b1 + j]);
        hy[j] = y;
        var g = 0.0;
        for (var i = 0u; i < d; i++) {
            g += theta[w2 + i * (k + 1u) + j] * vecs[a][i];
        }
        hdz[j] = g * act_grad(y);
    }
    workgroupBarrier();
    for (var c = lid; c < d; c += WG) {
        var s = 0.0;
        for (var j = 0u; j < k; j++) {
            s += theta[j * (d + 1u) + c] * hdz[j];
        }
        vecs[out][c] = sign * s;
    }
    if (coef != 0.0) {
        for (var e = lid; e < p.param_len; e += WG) {
            partial[prow + e] += coef * theta_grad(e, t, x, a);
        }
    }
    workgroupBarrier();
}

// The slopes K0.. of one step of vecs[Z] from t0 by dt (stage i > 0 reads its input from slot i).
fn stages(t0: f32, dt: f32, lid: u32) {
    for (var i = 0u; i < p.stages; i++) {
        var x = Z;
        if (i > 0u) {
            x = i;
            for (var c = lid; c < p.d; c += WG) {
                var v = vecs[Z][c];
                for (var j = 0u; j < i; j++) {
                    let w = dt * tab_a(i, j);
                    if (w != 0.0) {
                        v += w * vecs[K0 + j][c];
                    }
                }
                vecs[i][c] = v;
            }
            workgroupBarrier();
        }
        eval_h(t0 + tab_c(i) * dt, x, K0 + i, lid);
    }
}

// One Runge-Kutta step of vecs[Z] from t0 by dt, in place.
fn rk_step(t0: f32, dt: f32, lid: u32) {
    stages(t0, dt, lid);
    for (var c = lid; c < p.d; c += WG) {
        var v = vecs[Z][c];
        for (var i = 0u; i < p.stages; i++) {
            let w = dt * tab_b(i);
            if (w != 0.0) {
                v += w * vecs[K0 + i][c];
            }
        }
        vecs[Z][c] = v;
    }
    workgroupBarrier();
}

fn block_index(wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return wid.x + wid.y * groups.x;
}

@compute @workgroup_size(64)
fn forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let b = block_index(wid, groups);
    if (b >= p.blocks) {
        return;
    }
    let d = p.d;
    let row = p.blocks * d;
    if (lid == 0u) {
        atomicStore(&first_bad, NO_FAILURE);
    }
    workgroupBarrier();
    for (var c = lid; c < d; c += WG) {
        if (p.begin == 0u) {
            let v = p0[b * d + c];
            vecs[Z][c] = v;
            traj[b * d + c] = v;
            if (!is_finite(v)) {
                atomicMin(&first_bad, 0u);
            }
        } else {
            vecs[Z][c] = fwd_carry[b * d + c];
        }
    }
    workgroupBarrier();
    for (var g = p.begin; g < p.end; g++) {
        let ts = step_times(g);
        rk_step(ts.x, ts.y, lid);
        // A non-finite state stays non-finite, so the first non-finite output marks the failure.
        if (g % p.substeps == p.substeps - 1u) {
            let i = g / p.substeps + 1u;
            for (var c = lid; c < d; c += WG) {
                let v = vecs[Z][c];
                traj[i * row + b * d + c] = v;
                if (!is_finite(v)) {
                    atomicMin(&first_bad, i);
                }
            }
        }
    }
    for (var c = lid; c < d; c += WG) {
        fwd_carry[b * d + c] = vecs[Z][c];
    }
    workgroupBarrier();
    if (lid == 0u) {
        var earlier = NO_FAILURE;
        if (p.begin != 0u) {
            earlier = fail[b];
        }
        fail[b] = min(earlier, atomicLoad(&first_bad));
    }
}

// Status [code, block, time]: 0 = ok (block −1), 1 = non-finite state, first in `block` at
// position time `time` (the earliest position; the lowest block among those failing there).
@compute @workgroup_size(1)
fn report() {
    var best = NO_FAILURE;
    var block = 0u;
    for (var b = 0u; b < p.blocks; b++) {
        if (fail[b] < best) {
            best = fail[b];
            block = b;
        }
    }
    status[3] = 0.0;
    if (best == NO_FAILURE) {
        status[0] = 0.0;
        status[1] = -1.0;
        status[2] = 0.0;
    } else {
        status[0] = 1.0;
        status[1] = f32(block);
        status[2] = f32(best) * p.delta;
    }
}

// step_starts[g] ([steps, blocks, d]) = the state at the start of step g: the trajectory at each
// interval's start, then the substeps taken from it.
@compute @workgroup_size(64)
fn starts(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let b = block_index(wid, groups);
    if (b >= p.blocks) {
        return;
    }
    let d = p.d;
    let row = p.blocks * d;
    for (var g = p.begin; g < p.end; g++) {
        if (g % p.substeps == 0u) {
            let i = g / p.substeps;
            for (var c = lid; c < d; c += WG) {
                vecs[Z][c] = traj_in[i * row + b * d + c];
            }
        } else {
            if (g == p.begin) {
                for (var c = lid; c < d; c += WG) {
                    vecs[Z][c] = step_starts[(g - 1u) * row + b * d + c];
                }
            }
            workgroupBarrier();
            let ts = step_times(g - 1u);
            rk_step(ts.x, ts.y, lid);
        }
        for (var c = lid; c < d; c += WG) {
            step_starts[g * row + b * d + c] = vecs[Z][c];
        }
    }
}

@compute @workgroup_size(64)
fn backprop(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let b = block_index(wid, groups);
    if (b >= p.blocks) {
        return;
    }
    let d = p.d;
    let row = p.blocks * d;
    let prow = b * p.param_len;
    // The first dispatch (the last steps) starts the adjoint of the state at 0 and clears dθ.
    if (p.end == total_steps()) {
        for (var e = lid; e < p.param_len; e += WG) {
            partial[prow + e] = 0.0;
        }
    }
    for (var c = lid; c < d; c += WG) {
        if (p.end == total_steps()) {
            vecs[ZBAR][c] = 0.0;
        } else {
            vecs[ZBAR][c] = carry[b * d + c];
        }
    }
    workgroupBarrier();
    for (var g1 = p.end; g1 > p.begin; g1--) {
        let g = g1 - 1u;
        // The last substep of an interval ends at p(t_i): its adjoint gets the upstream there.
        let ends_position = g % p.substeps == p.substeps - 1u;
        let i = g / p.substeps + 1u;
        for (var c = lid; c < d; c += WG) {
            if (ends_position) {
                vecs[ZBAR][c] += upstream[i * row + b * d + c];
            }
            vecs[Z][c] = step_starts[g * row + b * d + c];
        }
        workgroupBarrier();
        let ts = step_times(g);
        let t0 = ts.x;
        let dt = ts.y;
        stages(t0, dt, lid);
        // z₁ = z₀ + dt·Σ bᵢ kᵢ: the adjoints of z₀ and of every slope (the slopes' slots now hold them).
        for (var c = lid; c < d; c += WG) {
            let zb = vecs[ZBAR][c];
            vecs[ZBAR0][c] = zb;
            for (var j = 0u; j < p.stages; j++) {
                vecs[K0 + j][c] = (dt * tab_b(j)) * zb;
            }
        }
        workgroupBarrier();
        // Stage q: k_q = h(t₀ + c_q dt, x_q), x_q = z₀ + dt·Σ_l a_ql k_l.
        for (var q1 = p.stages; q1 > 0u; q1--) {
            let q = q1 - 1u;
            var x = Z;
            if (q > 0u) {
                x = q;
            }
            vjp(t0 + tab_c(q) * dt, x, K0 + q, IB, 1.0, 1.0, prow, lid);
            for (var c = lid; c < d; c += WG) {
                let ib = vecs[IB][c];
                vecs[ZBAR0][c] += ib;
                for (var l = 0u; l < q; l++) {
                    vecs[K0 + l][c] += (dt * tab_a(q, l)) * ib;
                }
            }
            workgroupBarrier();
        }
        for (var c = lid; c < d; c += WG) {
            vecs[ZBAR][c] = vecs[ZBAR0][c];
        }
        workgroupBarrier();
    }
    for (var c = lid; c < d; c += WG) {
        if (p.begin == 0u) {
            dp0[b * d + c] = vecs[ZBAR][c] + upstream[b * d + c];
        } else {
            carry[b * d + c] = vecs[ZBAR][c];
        }
    }
}

// Steps in backward order: h = m·substeps + u is substep u of the interval that ends at position
// positions − 1 − m, integrated from its end.
@compute @workgroup_size(64)
fn adjoint(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let b = block_index(wid, groups);
    if (b >= p.blocks) {
        return;
    }
    let d = p.d;
    let row = p.blocks * d;
    let prow = b * p.param_len;
    let crow = b * 2u * d;
    if (p.begin == 0u) {
        for (var e = lid; e < p.param_len; e += WG) {
            partial[prow + e] = 0.0;
        }
    }
    for (var c = lid; c < d; c += WG) {
        if (p.begin == 0u) {
            vecs[A][c] = 0.0;
        } else {
            vecs[P][c] = carry[crow + c];
            vecs[A][c] = carry[crow + d + c];
        }
    }
    workgroupBarrier();
    for (var h = p.begin; h < p.end; h++) {
        let i = p.positions - 1u - h / p.substeps;
        let u = h % p.substeps;
        // At t_i: restart p from the forward solution and add the upstream of p(t_i).
        if (u == 0u) {
            for (var c = lid; c < d; c += WG) {
                vecs[P][c] = traj_in[i * row + b * d + c];
                vecs[A][c] += upstream[i * row + b * d + c];
            }
            workgroupBarrier();
        }
        // Backward over [t_{i-1}, t_i]: negative steps.
        let span0 = f32(i) * p.delta;
        let span1 = f32(i - 1u) * p.delta;
        let t0 = grid_time(span0, span1, u);
        let dt = grid_time(span0, span1, u + 1u) - t0;
        for (var q = 0u; q < p.stages; q++) {
            for (var c = lid; c < d; c += WG) {
                var pin = vecs[P][c];
                var ain = vecs[A][c];
                for (var l = 0u; l < q; l++) {
                    let w = dt * tab_a(q, l);
                    if (w != 0.0) {
                        pin += w * vecs[KP0 + l][c];
                        ain += w * vecs[KA0 + l][c];
                    }
                }
                vecs[PIN][c] = pin;
                vecs[AIN][c] = ain;
            }
            workgroupBarrier();
            let t = t0 + tab_c(q) * dt;
            // dp/dt = h, da/dt = −aᵀ ∂h/∂p, dg/dt = −aᵀ ∂h/∂θ (g only enters the step's result).
            eval_h(t, PIN, KP0 + q, lid);
            vjp(t, PIN, AIN, KA0 + q, -1.0, -(dt * tab_b(q)), prow, lid);
        }
        for (var c = lid; c < d; c += WG) {
            var pv = vecs[P][c];
            var av = vecs[A][c];
            for (var q = 0u; q < p.stages; q++) {
                let w = dt * tab_b(q);
                if (w != 0.0) {
                    pv += w * vecs[KP0 + q][c];
                    av += w * vecs[KA0 + q][c];
                }
            }
            vecs[P][c] = pv;
            vecs[A][c] = av;
        }
        workgroupBarrier();
    }
    for (var c = lid; c < d; c += WG) {
        if (p.end == total_steps()) {
            dp0[b * d + c] = vecs[A][c] + upstream[b * d + c];
        } else {
            carry[crow + c] = vecs[P][c];
            carry[crow + d + c] = vecs[A][c];
        }
    }
}

@compute @workgroup_size(64)
fn reduce_theta(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let e = gid.x + gid.y * groups.x * WG;
    if (e == 0u) {
        bstatus[0] = 0.0;
        bstatus[1] = -1.0;
        bstatus[2] = 0.0;
        bstatus[3] = 0.0;
    }
    if (e >= p.param_len) {
        return;
    }
    var s = 0.0;
    for (var b = 0u; b < p.blocks; b++) {
        s += partial[b * p.param_len + e];
    }
    dtheta[e] = s;
}
