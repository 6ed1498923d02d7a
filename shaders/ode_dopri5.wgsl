// FLOATER's position flow with adaptive Dormand-Prince 5(4), as torchdiffeq steps it (the CPU
// reference is src/ode/integrate.rs): one step size for the whole state, so ONE workgroup integrates
// every block, its vectors in the storage buffer `dv` and its controller in `ctl`. The error norm
// (max over groups of the RMS of err / (atol + rtol·max(|z0|, |z1|))) is a workgroup reduction that
// thread 0 finishes in a fixed order; every thread then holds the same controller copy.
//
// Lavapipe stops an invocation's loops after 65535 iterations in all, and an adaptive solve has an
// unknown step count, so each kernel runs as chunks: the first (chunk 0) starts the solve, then the
// op repeats a second dispatch until the flag word in `ctl` says done (or full: `record`'s tape).
// Each chunk runs at most `units` units of work (an interval start or a step attempt; a backprop
// step) and hands the controller over in `ctl`; a chunk after the end returns at once. Entry points:
//   forward:  the trajectory; outputs come from the dense output of the step containing them
//   report:   status [code, −1, time] and NaN rows from the first position not reached
//   record:   the forward again (bit for bit), keeping every accepted step's (t0, dt, z0) and each
//             output's step and dense weights in `tape`
//   backprop: the recorded steps in reverse, stages recomputed and differentiated (step sizes constant)
//   adjoint:  [p | a | g] backward over each interval with its own initial step, restarting p from the
//             trajectory and adding the upstream at every position; the norm is the max of the RMS
//             norms of p, a and each θ tensor, as torchdiffeq's
//   finish:   dθ and dp0 (NaN when the solve failed), and the backward's status
// (record, backprop, adjoint and finish are in ode_dopri5_backward.wgsl).

const WG: u32 = 64u;
const NO_STEP: u32 = 0xffffffffu;

// Controller phases.
const INIT: u32 = 0u;
const STEP: u32 = 1u;
const DONE: u32 = 2u;
const FAILED: u32 = 3u;

// Words of `ctl` after the controller: the repeat flags the op reads back after each round of
// chunks (the solve's, backprop's walk), and backprop's walk.
const FLAG: u32 = 24u;
const WALK_FLAG: u32 = 25u;
const WALK: u32 = 16u;
const GOING: u32 = 0u;
const FINISHED: u32 = 1u;
const FULL: u32 = 2u;

// Status codes (src/ops/ode_flow/mod.rs).
const STATUS_OK: f32 = 0.0;
const STATUS_SOLVER_FAILED: f32 = 2.0;
const STATUS_ADJOINT_FAILED: f32 = 3.0;
const STATUS_REPLAY_FAILED: f32 = 4.0;

// Slots of `dv`, each `len` long: the state Z, the step's result Z1, a stage input X, the slopes
// K0..K6; backprop adds the stage inputs X1..X6, their adjoints KB0..KB6, and ZBAR, ZBAR0, IB.
const Z: u32 = 0u;
const Z1: u32 = 1u;
const X: u32 = 2u;
const K0: u32 = 3u;
const X1: u32 = 10u;
const KB0: u32 = 16u;
const ZBAR: u32 = 23u;
const ZBAR0: u32 = 24u;
const IB: u32 = 25u;

struct Params {
    blocks: u32,
    d: u32,
    k: u32,
    positions: u32,
    param_len: u32,
    relu: u32,
    max_steps: u32,
    // 1: the adjoint's augmented field, integrated backward.
    adjoint: u32,
    // State length: blocks·d, or 2·blocks·d + param_len for the adjoint.
    len: u32,
    // Where the hidden activations start in `dv` (after the slots).
    hidden_off: u32,
    // This dispatch's index among the kernel's chunks, and the units each runs.
    chunk: u32,
    units: u32,
    delta: f32,
    rtol: f32,
    atol: f32,
    nan: f32,
    // Norm groups [bounds[g], bounds[g + 1]), g < groups.
    groups: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    bounds: array<vec4<u32>, 2>,
}

// The time t = time(base) + r: an offset from a position time keeps t's rounding at the scale of a
// step, not of t (f32 has no room for a long solve's t to the step's precision).
struct Ctl {
    phase: u32,
    r: f32,
    h: f32,
    attempts: u32,
    // forward, record: outputs written; adjoint: the interval end (position) being integrated from.
    next_out: u32,
    // record: accepted steps.
    accepted: u32,
    // The last attempt: its step and whether it was accepted.
    dt: f32,
    base: u32,
    ok: u32,
}

// backprop's walk: steps left, the last output not yet taken.
struct Walk {
    steps_left: u32,
    out_ptr: u32,
}

@group(0) @binding(0) var<uniform> dp: Params;
@group(0) @binding(1) var<storage, read> theta: array<f32>;
// finish
@group(0) @binding(2) var<storage, read_write> bstatus: array<f32>;
// forward, report
@group(0) @binding(2) var<storage, read> p0: array<f32>;
@group(0) @binding(3) var<storage, read_write> traj: array<f32>;
@group(0) @binding(4) var<storage, read_write> status: array<f32>;
// record, backprop, adjoint, finish
@group(0) @binding(2) var<storage, read> traj_in: array<f32>;
@group(0) @binding(3) var<storage, read> upstream: array<f32>;
@group(0) @binding(4) var<storage, read_write> dtheta: array<f32>;
@group(0) @binding(7) var<storage, read_write> dp0: array<f32>;
@group(0) @binding(8) var<storage, read_write> tape: array<f32>;
// all
@group(0) @binding(5) var<storage, read_write> dv: array<f32>;
@group(0) @binding(6) var<storage, read_write> ctl: array<u32>;

var<workgroup> wctl: Ctl;
var<workgroup> wwalk: Walk;
var<workgroup> wred: array<f32, 384>;
var<workgroup> wscalar: f32;
var<workgroup> wmail: vec4<f32>;

// The tableau (f32), torchdiffeq's dopri5 with the seventh (FSAL) stage written out.
fn tab_c(i: u32) -> f32 {
    switch i {
        case 1u: { return 0.2; }
        case 2u: { return 0.3; }
        case 3u: { return 0.8; }
        case 4u: { return 8.0 / 9.0; }
        case 5u, 6u: { return 1.0; }
        default: { return 0.0; }
    }
}

// a[i][0..4] and a[i][4..7].
fn tab_a_lo(i: u32) -> vec4<f32> {
    switch i {
        case 1u: { return vec4<f32>(0.2, 0.0, 0.0, 0.0); }
        case 2u: { return vec4<f32>(3.0 / 40.0, 9.0 / 40.0, 0.0, 0.0); }
        case 3u: { return vec4<f32>(44.0 / 45.0, -56.0 / 15.0, 32.0 / 9.0, 0.0); }
        case 4u: { return vec4<f32>(19372.0 / 6561.0, -25360.0 / 2187.0, 64448.0 / 6561.0, -212.0 / 729.0); }
        case 5u: { return vec4<f32>(9017.0 / 3168.0, -355.0 / 33.0, 46732.0 / 5247.0, 49.0 / 176.0); }
        case 6u: { return tab_b_lo(); }
        default: { return vec4<f32>(0.0); }
    }
}

fn tab_a_hi(i: u32) -> vec4<f32> {
    switch i {
        case 5u: { return vec4<f32>(-5103.0 / 18656.0, 0.0, 0.0, 0.0); }
        case 6u: { return tab_b_hi(); }
        default: { return vec4<f32>(0.0); }
    }
}

fn tab_b_lo() -> vec4<f32> {
    return vec4<f32>(35.0 / 384.0, 0.0, 500.0 / 1113.0, 125.0 / 192.0);
}

fn tab_b_hi() -> vec4<f32> {
    return vec4<f32>(-2187.0 / 6784.0, 11.0 / 84.0, 0.0, 0.0);
}

// Fifth- minus fourth-order weights.
fn tab_e_lo() -> vec4<f32> {
    return vec4<f32>(35.0 / 384.0 - 1951.0 / 21600.0, 0.0, 500.0 / 1113.0 - 22642.0 / 50085.0, 125.0 / 192.0 - 451.0 / 720.0);
}

fn tab_e_hi() -> vec4<f32> {
    return vec4<f32>(-2187.0 / 6784.0 + 12231.0 / 42400.0, 11.0 / 84.0 - 649.0 / 6300.0, -1.0 / 60.0, 0.0);
}

// Shampine's midpoint weights (the dense output's fifth point).
fn tab_mid_lo() -> vec4<f32> {
    return vec4<f32>(6025192743.0 / 30085553152.0 / 2.0, 0.0, 51252292925.0 / 65400821598.0 / 2.0, -2691868925.0 / 45128329728.0 / 2.0);
}

fn tab_mid_hi() -> vec4<f32> {
    return vec4<f32>(187940372067.0 / 1594534317056.0 / 2.0, -1776094331.0 / 19743644256.0 / 2.0, 11237099.0 / 235043384.0 / 2.0, 0.0);
}

// torchdiffeq's dense output weights w(x), z(x) = z0 + dt·Σ wᵢ kᵢ (src/ode/tableau.rs), as lo / hi.
fn dense_lo(x: f32) -> vec4<f32> {
    let first = vec4<f32>(1.0, 0.0, 0.0, 0.0);
    let b = tab_b_lo();
    let m = tab_mid_lo();
    let x2 = x * x;
    return x * first + x2 * (-4.0 * first - 5.0 * b + 16.0 * m) + x2 * x * (5.0 * first + 14.0 * b - 32.0 * m)
        + x2 * x2 * (-2.0 * first - 8.0 * b + 16.0 * m);
}

fn dense_hi(x: f32) -> vec4<f32> {
    let last = vec4<f32>(0.0, 0.0, 1.0, 0.0);
    let b = tab_b_hi();
    let m = tab_mid_hi();
    let x2 = x * x;
    return x2 * (last - 5.0 * b + 16.0 * m) + x2 * x * (-3.0 * last + 14.0 * b - 32.0 * m)
        + x2 * x2 * (2.0 * last - 8.0 * b + 16.0 * m);
}

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

fn act(z: f32) -> f32 {
    if (dp.relu == 1u) {
        return max(z, 0.0);
    }
    // Clamped: some tanh implementations return NaN for large |z|; tanh(±15) is ±1 in f32.
    return tanh(clamp(z, -15.0, 15.0));
}

fn act_grad(y: f32) -> f32 {
    if (dp.relu == 1u) {
        return select(0.0, 1.0, y > 0.0);
    }
    return 1.0 - y * y;
}

fn slot(s: u32) -> u32 {
    return s * dp.len;
}

fn b1_offset() -> u32 {
    return dp.k * (dp.d + 1u);
}

fn w2_offset() -> u32 {
    return b1_offset() + dp.k;
}

fn b2_offset() -> u32 {
    return w2_offset() + dp.d * (dp.k + 1u);
}

// The time of position i.
fn time(i: u32) -> f32 {
    return f32(i) * dp.delta;
}

fn dir() -> f32 {
    return select(1.0, -1.0, dp.adjoint == 1u);
}

// A value every thread agrees on, from thread 0 (storage reads are not uniform to WGSL).
fn share(v: vec4<f32>, lid: u32) -> vec4<f32> {
    if (lid == 0u) {
        wmail = v;
    }
    return workgroupUniformLoad(&wmail);
}

// dv[out..] = h(t, dv[x..]) for every block row; ends with a barrier (callers put one before).
fn eval_state(t: f32, x: u32, out: u32, lid: u32) {
    let d = dp.d;
    let k = dp.k;
    let rows = dp.blocks;
    let hid = dp.hidden_off;
    let b1 = b1_offset();
    let w2 = w2_offset();
    let b2 = b2_offset();
    for (var idx = lid; idx < rows * k; idx += WG) {
        let b = idx / k;
        let j = idx % k;
        let row = j * (d + 1u);
        var s = 0.0;
        for (var c = 0u; c < d; c++) {
            s += theta[row + c] * dv[x + b * d + c];
        }
        dv[hid + idx] = act(s + theta[row + d] * t + theta[b1 + j]);
    }
    storageBarrier();
    for (var idx = lid; idx < rows * d; idx += WG) {
        let b = idx / d;
        let i = idx % d;
        let row = w2 + i * (k + 1u);
        var s = 0.0;
        for (var j = 0u; j < k; j++) {
            s += theta[row + j] * dv[hid + b * k + j];
        }
        dv[out + idx] = s + theta[row + k] * t + theta[b2 + i];
    }
    storageBarrier();
}

// aᵀ ∂h/∂θ_e of block row b at (t, x), from the hidden activations and hdz of `vjp_rows`.
fn theta_grad(e: u32, b: u32, t: f32, x: u32, a: u32) -> f32 {
    let d = dp.d;
    let k = dp.k;
    let hid = dp.hidden_off + b * k;
    let hdz = dp.hidden_off + dp.blocks * k + b * k;
    let b1 = b1_offset();
    let w2 = w2_offset();
    let b2 = b2_offset();
    if (e < b1) {
        let c = e % (d + 1u);
        if (c < d) {
            return dv[hdz + e / (d + 1u)] * dv[x + b * d + c];
        }
        return dv[hdz + e / (d + 1u)] * t;
    }
    if (e < w2) {
        return dv[hdz + e - b1];
    }
    if (e < b2) {
        let i = (e - w2) / (k + 1u);
        let j = (e - w2) % (k + 1u);
        if (j < k) {
            return dv[a + b * d + i] * dv[hid + j];
        }
        return dv[a + b * d + i] * t;
    }
    return dv[a + b * d + e - b2];
}

// dv[out..] = sign·aᵀ ∂h/∂p per row at (t, dv[x..]) for a = dv[a..], and the θ gradient summed over
// rows (in row order): dv[g..] = −Σ (adjoint field) or dv[g..] += Σ (backprop). Ends with a barrier.
fn vjp_rows(t: f32, x: u32, a: u32, out: u32, sign: f32, g: u32, accumulate: bool, lid: u32) {
    let d = dp.d;
    let k = dp.k;
    let rows = dp.blocks;
    let hid = dp.hidden_off;
    let hdz = hid + rows * k;
    let b1 = b1_offset();
    let w2 = w2_offset();
    for (var idx = lid; idx < rows * k; idx += WG) {
        let b = idx / k;
        let j = idx % k;
        let row = j * (d + 1u);
        var s = 0.0;
        for (var c = 0u; c < d; c++) {
            s += theta[row + c] * dv[x + b * d + c];
        }
        let y = act(s + theta[row + d] * t + theta[b1 + j]);
        dv[hid + idx] = y;
        var ga = 0.0;
        for (var i = 0u; i < d; i++) {
            ga += theta[w2 + i * (k + 1u) + j] * dv[a + b * d + i];
        }
        dv[hdz + idx] = ga * act_grad(y);
    }
    storageBarrier();
    for (var idx = lid; idx < rows * d; idx += WG) {
        let b = idx / d;
        let c = idx % d;
        var s = 0.0;
        for (var j = 0u; j < k; j++) {
            s += theta[j * (d + 1u) + c] * dv[hdz + b * k + j];
        }
        dv[out + idx] = sign * s;
    }
    for (var e = lid; e < dp.param_len; e += WG) {
        var s = 0.0;
        for (var b = 0u; b < rows; b++) {
            s += theta_grad(e, b, t, x, a);
        }
        if (accumulate) {
            dv[g + e] += s;
        } else {
            dv[g + e] = -s;
        }
    }
    storageBarrier();
}

// The solved field at (t, dv[x..]) into dv[out..]: the state's, or the adjoint's
// [h(p) | −aᵀ ∂h/∂p | −Σ aᵀ ∂h/∂θ].
fn field(t: f32, x: u32, out: u32, lid: u32) {
    eval_state(t, x, out, lid);
    if (dp.adjoint == 1u) {
        let n = dp.blocks * dp.d;
        vjp_rows(t, x, x + n, out + n, -1.0, out + 2u * n, false, lid);
    }
}

// dv[out + i] = dv[base + i] + Σⱼ cⱼ·dv[slot(ks + j) + i] (j < 7, zero coefficients skipped, in
// order, as the CPU's combine); no barrier.
fn combine_into(out: u32, base: u32, ks: u32, lo: vec4<f32>, hi: vec4<f32>, lid: u32) {
    let k0 = slot(ks);
    let n = dp.len;
    for (var i = lid; i < n; i += WG) {
        var v = dv[base + i];
        if (lo.x != 0.0) { v += lo.x * dv[k0 + i]; }
        if (lo.y != 0.0) { v += lo.y * dv[k0 + n + i]; }
        if (lo.z != 0.0) { v += lo.z * dv[k0 + 2u * n + i]; }
        if (lo.w != 0.0) { v += lo.w * dv[k0 + 3u * n + i]; }
        if (hi.x != 0.0) { v += hi.x * dv[k0 + 4u * n + i]; }
        if (hi.y != 0.0) { v += hi.y * dv[k0 + 5u * n + i]; }
        if (hi.z != 0.0) { v += hi.z * dv[k0 + 6u * n + i]; }
        dv[out + i] = v;
    }
}

// One term of a norm: 0: Z / scale0, 1: K0 / scale0, 2: (K1 − K0) / scale0 (scale0 = atol + rtol|Z|),
// 3: the step's error estimate dt·Σ eⱼ Kⱼ / (atol + rtol·max(|Z|, |Z1|)).
fn norm_term(kind: u32, i: u32, dt: f32) -> f32 {
    let z = dv[slot(Z) + i];
    if (kind == 3u) {
        let k0 = slot(K0) + i;
        let n = dp.len;
        let lo = tab_e_lo();
        let hi = tab_e_hi();
        // Σ eⱼ kⱼ = Σ eⱼ (kⱼ − k₀) since Σ eⱼ = 0: the differences are small and exact, which keeps
        // f32's cancellation out of the estimate (the CPU sums in f64).
        let k = dv[k0];
        let err = lo.z * (dv[k0 + 2u * n] - k) + lo.w * (dv[k0 + 3u * n] - k) + hi.x * (dv[k0 + 4u * n] - k)
            + hi.y * (dv[k0 + 5u * n] - k) + hi.z * (dv[k0 + 6u * n] - k);
        return dt * err / (dp.atol + dp.rtol * max(abs(z), abs(dv[slot(Z1) + i])));
    }
    let scale = dp.atol + dp.rtol * abs(z);
    switch kind {
        case 0u: { return z / scale; }
        case 1u: { return dv[slot(K0) + i] / scale; }
        default: { return (dv[slot(K0 + 1u) + i] - dv[slot(K0) + i]) / scale; }
    }
}

fn group_bound(g: u32) -> u32 {
    return dp.bounds[g / 4u][g % 4u];
}

// max over the norm groups of the RMS of norm_term(kind, ·); inputs must be ready (barrier).
fn group_norm(kind: u32, dt: f32, lid: u32) -> f32 {
    for (var g = 0u; g < dp.groups; g++) {
        var s = 0.0;
        for (var i = group_bound(g) + lid; i < group_bound(g + 1u); i += WG) {
            let v = norm_term(kind, i, dt);
            s += v * v;
        }
        wred[g * WG + lid] = s;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var norm = 0.0;
        for (var g = 0u; g < dp.groups; g++) {
            var s = 0.0;
            for (var l = 0u; l < WG; l++) {
                s += wred[g * WG + l];
            }
            norm = max(norm, sqrt(s / f32(group_bound(g + 1u) - group_bound(g))));
        }
        wscalar = norm;
    }
    return workgroupUniformLoad(&wscalar);
}

// Whether dv[s..s + len] is all finite; inputs must be ready (barrier).
fn all_finite(s: u32, lid: u32) -> bool {
    var bad = 0.0;
    for (var i = lid; i < dp.len; i += WG) {
        if (!is_finite(dv[s + i])) {
            bad = 1.0;
        }
    }
    wred[lid] = bad;
    workgroupBarrier();
    if (lid == 0u) {
        var any = 0.0;
        for (var l = 0u; l < WG; l++) {
            any = max(any, wred[l]);
        }
        wscalar = any;
    }
    return workgroupUniformLoad(&wscalar) == 0.0;
}

// The start of a solve from Z at the position time t0 = time(base): the finite check, K0 and
// torchdiffeq's initial step.
fn start(c0: Ctl, base: u32, lid: u32) -> Ctl {
    var c = c0;
    let t0 = time(base);
    storageBarrier();
    if (!all_finite(slot(Z), lid)) {
        c.phase = FAILED;
        return c;
    }
    c.base = base;
    c.r = 0.0;
    c.phase = STEP;
    field(t0, slot(Z), slot(K0), lid);
    let d0 = group_norm(0u, 0.0, lid);
    let d1 = group_norm(1u, 0.0, lid);
    var h0 = 0.01 * d0 / d1;
    if (d0 < 1e-5 || d1 < 1e-5) {
        h0 = 1e-6;
    }
    let step = dir() * h0;
    for (var i = lid; i < dp.len; i += WG) {
        dv[slot(X) + i] = dv[slot(Z) + i] + step * dv[slot(K0) + i];
    }
    storageBarrier();
    field(t0 + step, slot(X), slot(K0 + 1u), lid);
    let d2 = group_norm(2u, 0.0, lid) / h0;
    var h1 = fifth_root(0.01 / max(d1, d2));
    if (d1 <= 1e-15 && d2 <= 1e-15) {
        h1 = max(h0 * 1e-3, 1e-6);
    }
    c.h = min(100.0 * h0, h1);
    return c;
}

// x^(1/5) to f32 precision: pow is an exp2/log2 approximation on some drivers (llvmpipe), and the
// step sizes must follow the CPU's closely (one Newton step on y⁵ = x).
fn fifth_root(x: f32) -> f32 {
    let y = pow(x, 0.2);
    let y4 = y * y * y * y;
    if (!(is_finite(y4 * y) && y > 0.0)) {
        return y;
    }
    return y - (y4 * y - x) / (5.0 * y4);
}

// torchdiffeq's _optimal_step_size: safety 0.9, growth ≤ 10, shrink ≥ 0.2, no shrink after an accept.
fn next_step(h: f32, ratio: f32) -> f32 {
    if (ratio == 0.0) {
        return h * 10.0;
    }
    let dfactor = select(0.2, 1.0, ratio < 1.0);
    return h * min(max(0.9 / fifth_root(ratio), dfactor), 10.0);
}

// One step attempt from (t, Z, K0): the stages, Z1 and the error ratio; sets c.ok when accepted
// (the caller takes the outputs, then `accept`). Fails on the step limit, a step size that no
// longer moves t, or a non-finite Z1.
fn attempt(c0: Ctl, lid: u32) -> Ctl {
    var c = c0;
    c.ok = 0u;
    if (c.attempts >= dp.max_steps) {
        c.phase = FAILED;
        return c;
    }
    c.attempts += 1u;
    let dt = dir() * c.h;
    // The CPU's f64 t + dt == t.
    if (abs(dt) <= abs(now(c)) * 1.1e-16) {
        c.phase = FAILED;
        return c;
    }
    c.dt = dt;
    for (var i = 1u; i < 7u; i++) {
        combine_into(slot(X), slot(Z), K0, dt * tab_a_lo(i), dt * tab_a_hi(i), lid);
        storageBarrier();
        field(time(c.base) + (c.r + tab_c(i) * dt), slot(X), slot(K0 + i), lid);
    }
    combine_into(slot(Z1), slot(Z), K0, dt * tab_b_lo(), dt * tab_b_hi(), lid);
    storageBarrier();
    if (!all_finite(slot(Z1), lid)) {
        c.phase = FAILED;
        return c;
    }
    let ratio = group_norm(3u, dt, lid);
    if (ratio <= 1.0) {
        c.ok = 1u;
    }
    c.h = next_step(c.h, ratio);
    return c;
}

// Takes an accepted step: Z = Z1, K0 = K6 (first same as last), t = t + dt, measured from the last
// position passed (forward; the adjoint's intervals restart from their position).
fn accept(c0: Ctl, lid: u32) -> Ctl {
    var c = c0;
    storageBarrier();
    for (var i = lid; i < dp.len; i += WG) {
        dv[slot(Z) + i] = dv[slot(Z1) + i];
        dv[slot(K0) + i] = dv[slot(K0 + 6u) + i];
    }
    storageBarrier();
    c.r += c.dt;
    if (dp.adjoint == 0u) {
        let base = c.next_out - 1u;
        c.r -= offset(base, c.base);
        c.base = base;
    }
    return c;
}

// The trajectory's start (forward, and record again bit for bit): the first output is p0
// itself, so the next is position 1 (0 if the start failed); one position is done at once.
fn start_trajectory(c0: Ctl, lid: u32) -> Ctl {
    var c = start(c0, 0u, lid);
    c.next_out = select(1u, 0u, c.phase == FAILED);
    if (c.phase == STEP && dp.positions == 1u) {
        c.phase = DONE;
    }
    return c;
}

// Takes the trajectory's accepted step; done after its last position.
fn accept_trajectory(c0: Ctl, lid: u32) -> Ctl {
    var c = accept(c0, lid);
    if (c.next_out == dp.positions) {
        c.phase = DONE;
    }
    return c;
}

fn now(c: Ctl) -> f32 {
    return time(c.base) + c.r;
}

// time(pos) − time(base), exactly as f32 allows.
fn offset(pos: u32, base: u32) -> f32 {
    return (f32(pos) - f32(base)) * dp.delta;
}

// Whether position `pos` lies in the accepted step (t, t + dt], and where: (t_pos − t) / dt.
fn in_step(c: Ctl, pos: u32) -> bool {
    return dir() * (offset(pos, c.base) - (c.r + c.dt)) <= 0.0;
}

fn step_fraction(c: Ctl, pos: u32) -> f32 {
    return (offset(pos, c.base) - c.r) / c.dt;
}

// Whether output `next_out` lies in the accepted step (t, t1].
fn output_in_step(c: Ctl) -> bool {
    return c.next_out < dp.positions && in_step(c, c.next_out);
}

// The controller at the dispatch's start: fresh in the first chunk, else the previous chunk's.
fn load_ctl(lid: u32) -> Ctl {
    if (lid == 0u) {
        if (dp.chunk == 0u) {
            wctl = Ctl(INIT, 0.0, 0.0, 0u, 0u, 0u, 0.0, 0u, 0u);
        } else {
            wctl = Ctl(
                ctl[0],
                bitcast<f32>(ctl[1]),
                bitcast<f32>(ctl[2]),
                ctl[3],
                ctl[4],
                ctl[5],
                bitcast<f32>(ctl[6]),
                ctl[7],
                ctl[8],
            );
        }
    }
    return workgroupUniformLoad(&wctl);
}

// Stores the controller and the repeat flag: finished when the solve is over, full when `record`
// has no room for another step.
fn store_ctl(c: Ctl, full: bool, lid: u32) {
    if (lid == 0u) {
        ctl[FLAG] = select(select(GOING, FINISHED, c.phase >= DONE), FULL, full);
        ctl[0] = c.phase;
        ctl[1] = bitcast<u32>(c.r);
        ctl[2] = bitcast<u32>(c.h);
        ctl[3] = c.attempts;
        ctl[4] = c.next_out;
        ctl[5] = c.accepted;
        ctl[6] = bitcast<u32>(c.dt);
        ctl[7] = c.base;
        ctl[8] = c.ok;
    }
}

// The dense weights (scaled by dt) of output `next_out` in the accepted step.
fn output_weights(c: Ctl) -> array<vec4<f32>, 2> {
    let x = step_fraction(c, c.next_out);
    return array<vec4<f32>, 2>(c.dt * dense_lo(x), c.dt * dense_hi(x));
}

@compute @workgroup_size(64)
fn forward(@builtin(local_invocation_index) lid: u32) {
    var c = load_ctl(lid);
    let n = dp.len;
    if (dp.chunk == 0u) {
        for (var i = lid; i < n; i += WG) {
            let v = p0[i];
            dv[slot(Z) + i] = v;
            traj[i] = v;
        }
    }
    for (var u = 0u; u < dp.units; u++) {
        if (c.phase >= DONE) {
            break;
        }
        if (c.phase == INIT) {
            c = start_trajectory(c, lid);
            continue;
        }
        c = attempt(c, lid);
        if (c.ok == 1u) {
            while (output_in_step(c)) {
                let w = output_weights(c);
                combine_into(slot(X), slot(Z), K0, w[0], w[1], lid);
                for (var i = lid; i < n; i += WG) {
                    traj[c.next_out * n + i] = dv[slot(X) + i];
                }
                c.next_out += 1u;
            }
            c = accept_trajectory(c, lid);
        }
    }
    store_ctl(c, false, lid);
}

// Status [code, block, time]: 0 = ok (block −1); 2 = failed (a non-finite state or the step limit)
// before the position time `time`, every row from that position on NaN.
@compute @workgroup_size(64)
fn report(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * WG;
    let reached = select(ctl[4], dp.positions, ctl[0] == DONE);
    if (i >= reached * dp.len && i < dp.positions * dp.len) {
        traj[i] = dp.nan;
    }
    if (i == 0u) {
        status[1] = -1.0;
        status[3] = f32(ctl[3]);
        if (ctl[0] == DONE) {
            status[0] = STATUS_OK;
            status[2] = 0.0;
        } else {
            status[0] = STATUS_SOLVER_FAILED;
            status[2] = time(reached);
        }
    }
}
