// FLOATER's position flow dp/dt = h(t, p) = W2·[σ(W1·[p; t] + b1); t] + b2, integrated with an
// explicit fixed-step Runge-Kutta method (its tableau in the uniform) for every row of the state
// (a block) at once. θ layout: W1 [k, d+1] | b1 [k] | W2 [d, k+1] | b2 [d]; the last column of each
// weight multiplies t.
//
// This file holds what both kernel families share; `ode_flow_groups.wgsl` (GPUs: a workgroup per
// row, its vectors in workgroup memory) and `ode_flow_rows.wgsl` (software adapters: a workgroup
// per four rows, each invocation computing an element for all four) continue it. Steps are
// numbered g = interval·substeps + substep over the whole grid; each dispatch runs the steps
// [begin, end) and hands its state to the next (a few dispatches per solve, sized by the op so that
// no dispatch runs more than ~32k loop iterations per thread: lavapipe silently stops all loops of
// an invocation after 65535 iterations in total). Entry points, each family with its own:
//   forward:           p(t_i) at every position; records each row's first non-finite position in
//                      `fail`
//   starts:            backprop's step starts, recomputed from the trajectory (one state per step)
//   backprop:          backprop through the solver, steps in reverse: each step's stages are
//                      recomputed from its start and differentiated
//   adjoint:           the continuous adjoint [p | a | g] integrated backward with the same method,
//                      restarting p from the trajectory at every position (memory: a few vectors)
// and shared:
//   report:            one thread turns `fail` into the status [code, block, time]
//   theta_from_records: dθ from the chunk's records (below), added in a fixed order
//
// dθ = Σ over rows and stage evaluations of coef · aᵀ ∂h/∂θ, and aᵀ ∂h/∂θ is two outer products:
// (σ'(z) ⊙ W2ᵀa) ⊗ [x; t; 1] for W1 | b1, a ⊗ [σ(z); t; 1] for W2 | b2. So the walks do not touch
// dθ: each stage evaluation writes its four vectors (a record, coef folded into the left ones) and
// one pass per chunk, a thread per θ element, sums the products over the chunk's records. Records
// hold four rows (a quad, rows 4q..4q+3) in the lanes of each vec4, so one product covers four rows.

const WG: u32 = 64u;
const MAX_DIM: u32 = 256u;
const NO_FAILURE: u32 = 0xffffffffu;

// Slots of the state vectors. Forward and backprop: the state Z, stage inputs X1..X3 (stage 0 reads
// Z), slopes K0..K3 (reused for their adjoints in backprop), and the adjoints ZBAR, ZBAR0.
const Z: u32 = 0u;
const K0: u32 = 4u;
const ZBAR: u32 = 8u;
const ZBAR0: u32 = 9u;
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
    // Stage evaluations each quad's records hold (the longest chunk's steps × stages).
    capacity: u32,
    // theta_from_records: 0 on the first chunk (write dθ), 1 after (add to it).
    accumulate: u32,
}

@group(0) @binding(0) var<uniform> p: Params;

// forward, report
@group(0) @binding(1) var<storage, read> theta: array<f32>;
@group(0) @binding(2) var<storage, read> p0: array<f32>;
@group(0) @binding(3) var<storage, read_write> traj: array<f32>;
@group(0) @binding(4) var<storage, read_write> status: array<f32>;
@group(0) @binding(5) var<storage, read_write> fail: array<u32>;

// starts, backprop, adjoint, theta_from_records (θ at binding 1 as above)
@group(0) @binding(2) var<storage, read> traj_in: array<f32>;
// theta_from_records (which reads neither θ nor the trajectory): the backward's status, always ok
// (a fixed grid cannot run out of steps).
@group(0) @binding(2) var<storage, read_write> bstatus: array<f32>;
@group(0) @binding(3) var<storage, read> upstream: array<f32>;
@group(0) @binding(4) var<storage, read_write> dtheta: array<f32>;
@group(0) @binding(5) var<storage, read_write> dp0: array<f32>;
@group(0) @binding(7) var<storage, read_write> step_starts: array<f32>;
// [quads, capacity, record_len()] vec4s: one record per quad and stage evaluation.
@group(0) @binding(8) var<storage, read_write> records: array<vec4<f32>>;

fn tab_c(i: u32) -> f32 {
    return bitcast<f32>(p.tab[0][i]);
}

fn tab_b(i: u32) -> f32 {
    return bitcast<f32>(p.tab[1][i]);
}

fn tab_a(i: u32, j: u32) -> f32 {
    return bitcast<f32>(p.tab[1u + i][j]);
}

// The weight of slope j in the input of stage `next`, or, for next = the stage count, in the
// step's result: what a step's stages and its end combine the slopes with.
fn combo_weight(next: u32, j: u32) -> f32 {
    if (next >= p.stages) {
        return tab_b(j);
    }
    return tab_a(next, j);
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

fn act4(z: vec4<f32>) -> vec4<f32> {
    if (p.relu == 1u) {
        return max(z, vec4<f32>(0.0));
    }
    return tanh(clamp(z, vec4<f32>(-15.0), vec4<f32>(15.0)));
}

fn act_grad4(y: vec4<f32>) -> vec4<f32> {
    if (p.relu == 1u) {
        return select(vec4<f32>(0.0), vec4<f32>(1.0), y > vec4<f32>(0.0));
    }
    return 1.0 - y * y;
}

// A record's vectors, in vec4s from its start: U1 = coef·σ'(z) ⊙ W2ᵀa [k], V1 = [x; t; 1] [d + 2],
// U2 = coef·a [d], V2 = [σ(z); t; 1] [k + 2].
fn rec_v1() -> u32 {
    return p.k;
}

fn rec_u2() -> u32 {
    return p.k + p.d + 2u;
}

fn rec_v2() -> u32 {
    return 2u * p.d + p.k + 2u;
}

fn record_len() -> u32 {
    return 2u * (p.d + p.k + 2u);
}

// The first vec4 of quad q's record of stage evaluation n (of this chunk).
fn record_at(q: u32, n: u32) -> u32 {
    return (q * p.capacity + n) * record_len();
}

fn quads() -> u32 {
    return (p.blocks + 3u) / 4u;
}

// Which lanes of quad q are rows of the state.
fn lanes_in_use(q: u32) -> vec4<bool> {
    return vec4<u32>(4u * q) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(p.blocks);
}

fn block_index(wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return wid.x + wid.y * groups.x;
}

// The backward's status: always ok (a fixed grid cannot run out of steps).
fn write_backward_ok() {
    bstatus[0] = 0.0;
    bstatus[1] = -1.0;
    bstatus[2] = 0.0;
    bstatus[3] = 0.0;
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

// dθ[e] (+)= Σ over quads, then over the chunk's stage evaluations, of U[row(e)] · V[col(e)], the
// lanes that are no row masked out (the GPU walks leave them unwritten).
@compute @workgroup_size(64)
fn theta_from_records(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let e = gid.x + gid.y * groups.x * WG;
    if (e == 0u && p.accumulate == 0u) {
        write_backward_ok();
    }
    if (e >= p.param_len) {
        return;
    }
    let d = p.d;
    let k = p.k;
    var u = 0u;
    var v = 0u;
    if (e < b1_offset()) {
        u = e / (d + 1u);
        v = rec_v1() + e % (d + 1u);
    } else if (e < w2_offset()) {
        u = e - b1_offset();
        v = rec_v1() + d + 1u;
    } else if (e < b2_offset()) {
        let f = e - w2_offset();
        u = rec_u2() + f / (k + 1u);
        v = rec_v2() + f % (k + 1u);
    } else {
        u = rec_u2() + e - b2_offset();
        v = rec_v2() + k + 1u;
    }
    let evaluations = (p.end - p.begin) * p.stages;
    var s = 0.0;
    for (var q = 0u; q < quads(); q++) {
        let rows = lanes_in_use(q);
        for (var n = 0u; n < evaluations; n++) {
            let at = record_at(q, n);
            let zero = vec4<f32>(0.0);
            s += dot(select(zero, records[at + u], rows), select(zero, records[at + v], rows));
        }
    }
    if (p.accumulate == 1u) {
        s += dtheta[e];
    }
    dtheta[e] = s;
}
