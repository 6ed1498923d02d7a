// Softmax over the last axis and its gradient: one 64-thread workgroup per row on GPUs (threads
// stride over the row, so rows of any length work; short rows leave threads idle), one invocation
// per row on software adapters (the `_rows` entry points; see RowKernels).

struct Rows {
    rows: u32,
    len: u32,
}

@group(0) @binding(0) var<uniform> p: Rows;

// softmax: x -> y.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// softmax_backward: (probs, gy) -> gx.
@group(0) @binding(1) var<storage, read> probs: array<f32>;
@group(0) @binding(2) var<storage, read> gy: array<f32>;
@group(0) @binding(3) var<storage, read_write> gx: array<f32>;

const WG: u32 = 64u;
// The lowest finite f32: the start of a running max (WGSL has no infinity literal). Written in
// hex, exactly: Tint (Chrome) rejects a decimal literal beyond the largest f32, rounding or not.
const LOWEST: f32 = -0x1.fffffep+127f;

@compute @workgroup_size(64)
fn softmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, lane: Lane) {
    let lid = lane.index;
    let row = wid.x + wid.y * groups.x;
    // Uniform across the workgroup, so the barriers below stay in uniform control flow.
    if (row >= p.rows) {
        return;
    }
    let base = row * p.len;
    var m = LOWEST;
    for (var k = lid; k < p.len; k += WG) {
        m = max(m, x[base + k]);
    }
    let row_max = group_max(lane, WG, m);
    var s = 0.0;
    for (var k = lid; k < p.len; k += WG) {
        s += exp(x[base + k] - row_max);
    }
    let total = group_sum(lane, WG, s);
    for (var k = lid; k < p.len; k += WG) {
        y[base + k] = exp(x[base + k] - row_max) / total;
    }
}

@compute @workgroup_size(64)
fn softmax_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, lane: Lane) {
    let lid = lane.index;
    let row = wid.x + wid.y * groups.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.len;
    var d = 0.0;
    for (var k = lid; k < p.len; k += WG) {
        d += probs[base + k] * gy[base + k];
    }
    let dot = group_sum(lane, WG, d);
    for (var k = lid; k < p.len; k += WG) {
        gx[base + k] = probs[base + k] * (gy[base + k] - dot);
    }
}

@compute @workgroup_size(64)
fn softmax_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let row = gid.x + gid.y * groups.x * WG;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.len;
    var m = LOWEST;
    for (var k = 0u; k < p.len; k++) {
        m = max(m, x[base + k]);
    }
    var total = 0.0;
    for (var k = 0u; k < p.len; k++) {
        total += exp(x[base + k] - m);
    }
    for (var k = 0u; k < p.len; k++) {
        y[base + k] = exp(x[base + k] - m) / total;
    }
}

@compute @workgroup_size(64)
fn softmax_backward_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let row = gid.x + gid.y * groups.x * WG;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.len;
    var dot = 0.0;
    for (var k = 0u; k < p.len; k++) {
        dot += probs[base + k] * gy[base + k];
    }
    for (var k = 0u; k < p.len; k++) {
        gx[base + k] = probs[base + k] * (gy[base + k] - dot);
    }
}
