// Layer normalisation over the last axis and its gradient. On GPUs rows are normalised by one
// 64-thread workgroup each (threads stride over the row, so any length works); on software
// adapters, where each lane's load costs as much as a register's arithmetic and a workgroup's
// tree of barriers is dear, by one invocation each (the `_rows` entry points). dgamma and dbeta are sums
// over rows: each thread of `layernorm_backward_partials` sums one column over a chunk of rows,
// then `layernorm_backward_params` adds the chunks in order: deterministic, no float atomics.
//
// A residual add before a norm is fused into it (`add_layernorm_*`: s = x + r, written, and its
// norm), and the gradient arriving at s from the residual stream into the norm's dx (the
// `_residual` entry points): each saves an add's dispatch and a pass over the rows.

struct Norm {
    rows: u32,
    dim: u32,
    eps: f32, // forward only
    chunk_rows: u32, // backward only: rows per partial sum
}

@group(0) @binding(0) var<uniform> p: Norm;

// layernorm_forward: x, gamma, beta -> y, mean, rstd.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> mean_out: array<f32>;
@group(0) @binding(6) var<storage, read_write> rstd_out: array<f32>;

// layernorm_backward_dx: x, gamma, mean, rstd, gy -> dx.
// layernorm_backward_partials: the same inputs (gamma unused) -> partials.
@group(0) @binding(3) var<storage, read> mean: array<f32>;
@group(0) @binding(4) var<storage, read> rstd: array<f32>;
@group(0) @binding(5) var<storage, read> gy: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx: array<f32>;
@group(0) @binding(6) var<storage, read_write> partials: array<f32>;

// add_layernorm_forward: x, r, gamma, beta -> s = x + r, y = norm(s), mean, rstd.
@group(0) @binding(2) var<storage, read> residual: array<f32>;
@group(0) @binding(3) var<storage, read> fused_gamma: array<f32>;
@group(0) @binding(4) var<storage, read> fused_beta: array<f32>;
@group(0) @binding(5) var<storage, read_write> sum_out: array<f32>;
@group(0) @binding(6) var<storage, read_write> fused_y: array<f32>;
@group(0) @binding(7) var<storage, read_write> fused_mean: array<f32>;
@group(0) @binding(8) var<storage, read_write> fused_rstd: array<f32>;

// layernorm_backward_dx_residual: as layernorm_backward_dx, plus the gradient gs that reaches
// the norm's input from elsewhere, added to dx.
@group(0) @binding(7) var<storage, read> gs: array<f32>;

// layernorm_backward_params: partials -> dgamma, dbeta.
@group(0) @binding(1) var<storage, read_write> partials_in: array<f32>;
@group(0) @binding(2) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(3) var<storage, read_write> dbeta: array<f32>;

const WG: u32 = 64u;

@compute @workgroup_size(64)
fn layernorm_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, lane: Lane) {
    let lid = lane.index;
    let row = wid.x + wid.y * groups.x;
    // Uniform across the workgroup, so the barriers below stay in uniform control flow.
    if (row >= p.rows) {
        return;
    }
    let base = row * p.dim;
    let n = f32(p.dim);
    var s = 0.0;
    for (var k = lid; k < p.dim; k += WG) {
        s += x[base + k];
    }
    let m = group_sum(lane, WG, s) / n;
    // Two passes: the variance of x − mean, not E[x²] − mean², which cancels badly.
    var q = 0.0;
    for (var k = lid; k < p.dim; k += WG) {
        let d = x[base + k] - m;
        q += d * d;
    }
    let variance = group_sum(lane, WG, q) / n;
    let r = 1.0 / sqrt(variance + p.eps);
    for (var k = lid; k < p.dim; k += WG) {
        y[base + k] = (x[base + k] - m) * r * gamma[k] + beta[k];
    }
    if (lid == 0u) {
        mean_out[row] = m;
        rstd_out[row] = r;
    }
}

// The dx kernels' shared arithmetic, on the row starting at `base`: (Σ g, Σ g·x̂) over the
// columns first, first + step, … with g = gy·gamma and x̂ = (x − mean)·rstd; then one element's
// dx from the row's means of those two.
fn dx_sums(base: u32, first: u32, step: u32, m: f32, r: f32) -> vec2<f32> {
    var acc = vec2(0.0, 0.0);
    for (var k = first; k < p.dim; k += step) {
        let g = gy[base + k] * gamma[k];
        acc += vec2(g, g * (x[base + k] - m) * r);
    }
    return acc;
}

fn norm_dx(base: u32, k: u32, m: f32, r: f32, means: vec2<f32>) -> f32 {
    let xhat = (x[base + k] - m) * r;
    return r * (gy[base + k] * gamma[k] - means.x - xhat * means.y);
}

@compute @workgroup_size(64)
fn layernorm_backward_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, lane: Lane) {
    let lid = lane.index;
    let row = wid.x + wid.y * groups.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.dim;
    let m = mean[row];
    let r = rstd[row];
    let means = group_sum2(lane, WG, dx_sums(base, lid, WG, m, r)) / f32(p.dim);
    for (var k = lid; k < p.dim; k += WG) {
        dx[base + k] = norm_dx(base, k, m, r, means);
    }
}

// One invocation per row: the same three passes, in order.
@compute @workgroup_size(64)
fn layernorm_forward_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let row = gid.x + gid.y * groups.x * WG;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.dim;
    let n = f32(p.dim);
    var s = 0.0;
    for (var k = 0u; k < p.dim; k++) {
        s += x[base + k];
    }
    let m = s / n;
    var q = 0.0;
    for (var k = 0u; k < p.dim; k++) {
        let d = x[base + k] - m;
        q += d * d;
    }
    let r = 1.0 / sqrt(q / n + p.eps);
    for (var k = 0u; k < p.dim; k++) {
        y[base + k] = (x[base + k] - m) * r * gamma[k] + beta[k];
    }
    mean_out[row] = m;
    rstd_out[row] = r;
}

@compute @workgroup_size(64)
fn layernorm_backward_dx_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let row = gid.x + gid.y * groups.x * WG;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.dim;
    let m = mean[row];
    let r = rstd[row];
    let means = dx_sums(base, 0u, 1u, m, r) / f32(p.dim);
    for (var k = 0u; k < p.dim; k++) {
        dx[base + k] = norm_dx(base, k, m, r, means);
    }
}

fn chunk_count() -> u32 {
    return (p.rows + p.chunk_rows - 1u) / p.chunk_rows;
}

// One thread per (chunk of rows, column); partials are laid out [2][chunks][dim]: dgamma, dbeta.
@compute @workgroup_size(256)
fn layernorm_backward_partials(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    let chunks = chunk_count();
    if (i >= chunks * p.dim) {
        return;
    }
    let chunk = i / p.dim;
    let col = i % p.dim;
    let end = min(p.rows, (chunk + 1u) * p.chunk_rows);
    var acc_gamma = 0.0;
    var acc_beta = 0.0;
    for (var row = chunk * p.chunk_rows; row < end; row++) {
        let g = gy[row * p.dim + col];
        acc_gamma += g * (x[row * p.dim + col] - mean[row]) * rstd[row];
        acc_beta += g;
    }
    partials[chunk * p.dim + col] = acc_gamma;
    partials[(chunks + chunk) * p.dim + col] = acc_beta;
}

// One thread per column: adds the chunks' partials in order.
@compute @workgroup_size(256)
fn layernorm_backward_params(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let col = gid.x + gid.y * groups.x * 256u;
    if (col >= p.dim) {
        return;
    }
    let chunks = chunk_count();
    var acc_gamma = 0.0;
    var acc_beta = 0.0;
    for (var c = 0u; c < chunks; c++) {
        acc_gamma += partials_in[c * p.dim + col];
        acc_beta += partials_in[(chunks + c) * p.dim + col];
    }
    dgamma[col] = acc_gamma;
    dbeta[col] = acc_beta;
}

// The fused residual add: the forward kernels above with x + r in place of x, s written in the
// first pass and read back by the thread that wrote it. (Written out again: their reads and
// writes are other bindings, and a WGSL function cannot take a storage array as an argument.)
@compute @workgroup_size(64)
fn add_layernorm_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, lane: Lane) {
    let lid = lane.index;
    let row = wid.x + wid.y * groups.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.dim;
    let n = f32(p.dim);
    var s = 0.0;
    for (var k = lid; k < p.dim; k += WG) {
        let v = x[base + k] + residual[base + k];
        sum_out[base + k] = v;
        s += v;
    }
    let m = group_sum(lane, WG, s) / n;
    var q = 0.0;
    for (var k = lid; k < p.dim; k += WG) {
        let d = sum_out[base + k] - m;
        q += d * d;
    }
    let variance = group_sum(lane, WG, q) / n;
    let r = 1.0 / sqrt(variance + p.eps);
    for (var k = lid; k < p.dim; k += WG) {
        fused_y[base + k] = (sum_out[base + k] - m) * r * fused_gamma[k] + fused_beta[k];
    }
    if (lid == 0u) {
        fused_mean[row] = m;
        fused_rstd[row] = r;
    }
}

@compute @workgroup_size(64)
fn add_layernorm_forward_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let row = gid.x + gid.y * groups.x * WG;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.dim;
    let n = f32(p.dim);
    var s = 0.0;
    for (var k = 0u; k < p.dim; k++) {
        let v = x[base + k] + residual[base + k];
        sum_out[base + k] = v;
        s += v;
    }
    let m = s / n;
    var q = 0.0;
    for (var k = 0u; k < p.dim; k++) {
        let d = sum_out[base + k] - m;
        q += d * d;
    }
    let r = 1.0 / sqrt(q / n + p.eps);
    for (var k = 0u; k < p.dim; k++) {
        fused_y[base + k] = (sum_out[base + k] - m) * r * fused_gamma[k] + fused_beta[k];
    }
    fused_mean[row] = m;
    fused_rstd[row] = r;
}

@compute @workgroup_size(64)
fn layernorm_backward_dx_residual(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, lane: Lane) {
    let lid = lane.index;
    let row = wid.x + wid.y * groups.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.dim;
    let m = mean[row];
    let r = rstd[row];
    let means = group_sum2(lane, WG, dx_sums(base, lid, WG, m, r)) / f32(p.dim);
    for (var k = lid; k < p.dim; k += WG) {
        dx[base + k] = gs[base + k] + norm_dx(base, k, m, r, means);
    }
}

@compute @workgroup_size(64)
fn layernorm_backward_dx_rows_residual(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let row = gid.x + gid.y * groups.x * WG;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.dim;
    let m = mean[row];
    let r = rstd[row];
    let means = dx_sums(base, 0u, 1u, m, r) / f32(p.dim);
    for (var k = 0u; k < p.dim; k++) {
        dx[base + k] = gs[base + k] + norm_dx(base, k, m, r, means);
    }
}
