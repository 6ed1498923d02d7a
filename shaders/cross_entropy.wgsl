// Cross-entropy of logits [rows, V] against i32 targets [rows], averaged over the counted rows:
// those whose target is not the ignore index and lies in [0, V).
//
// Forward: `row_loss` (one workgroup per row: max, log-sum-exp) writes each row's loss to a
// scratch buffer and its log-sum-exp to `saved`, then `mean` (one workgroup) sums the losses in a
// fixed order (deterministic) and writes the count of rows to `saved` too. On software adapters
// `row_loss_rows` gives each row one invocation instead (see RowKernels).
// Backward: `logit_grad`, a thread per logit, writes (exp(x - lse) - onehot) * g / count from
// what the forward saved, zeros for rows not counted: one pass over the logits, where
// recomputing each row's max and sum read them three times, and no count of its own to
// dispatch first.

struct Rows {
    rows: u32,
    vocab: u32,
    ignore_index: i32,
}

@group(0) @binding(0) var<uniform> p: Rows;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
// Each entry point binds its buffers from 1 upwards; globals that share a binding number are
// never used by the same entry point.
// row_loss: logits 1, targets 2, per-row losses 3, saved 4: [each row's log-sum-exp, the count].
@group(0) @binding(3) var<storage, read_write> losses: array<f32>;
@group(0) @binding(4) var<storage, read_write> saved: array<f32>;
// mean: targets 1, per-row losses 2, the loss 3, saved 4.
@group(0) @binding(1) var<storage, read> count_targets: array<i32>;
@group(0) @binding(2) var<storage, read_write> mean_losses: array<f32>;
@group(0) @binding(3) var<storage, read_write> mean_out: array<f32>;
// logit_grad: logits 1, targets 2, the upstream gradient 3, saved 4 (read), dlogits 5.
@group(0) @binding(3) var<storage, read> upstream: array<f32>;
@group(0) @binding(4) var<storage, read> grad_saved: array<f32>;
@group(0) @binding(5) var<storage, read_write> dlogits: array<f32>;

const WG: u32 = 256u;
var<workgroup> row_label: i32;

fn counts(label: i32) -> bool {
    return label != p.ignore_index && label >= 0 && u32(label) < p.vocab;
}

// The row's target, uniform across the workgroup so that the barriers after a branch on it stay
// in uniform control flow.
fn load_target(row: u32, lid: u32) -> i32 {
    if (lid == 0u) {
        row_label = targets[row];
    }
    return workgroupUniformLoad(&row_label);
}

// The row's max and sum of exp(x - max), from a workgroup striding over the row.
fn row_stats(row: u32, lane: Lane) -> vec2<f32> {
    let lid = lane.index;
    let base = row * p.vocab;
    // The lowest finite f32, exactly: Tint (Chrome) rejects a decimal literal that rounds to it.
    var m = -0x1.fffffep+127f;
    for (var j = lid; j < p.vocab; j += WG) {
        m = max(m, logits[base + j]);
    }
    m = group_max(lane, WG, m);
    var s = 0.0;
    for (var j = lid; j < p.vocab; j += WG) {
        s += exp(logits[base + j] - m);
    }
    return vec2<f32>(m, group_sum(lane, WG, s));
}

@compute @workgroup_size(256)
fn row_loss(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, lane: Lane) {
    let lid = lane.index;
    let row = wid.x + wid.y * groups.x;
    if (row >= p.rows) {
        return;
    }
    let label = load_target(row, lid);
    if (!counts(label)) {
        if (lid == 0u) {
            losses[row] = 0.0;
            saved[row] = 0.0;
        }
        return;
    }
    let stats = row_stats(row, lane);
    if (lid == 0u) {
        let lse = log(stats.y) + stats.x;
        losses[row] = lse - logits[row * p.vocab + u32(label)];
        saved[row] = lse;
    }
}

// How many rows count, by one workgroup in a fixed order.
fn count_rows(lane: Lane) -> f32 {
    let lid = lane.index;
    var c = 0.0;
    for (var r = lid; r < p.rows; r += WG) {
        c += select(0.0, 1.0, counts(count_targets[r]));
    }
    return group_sum(lane, WG, c);
}

@compute @workgroup_size(256)
fn mean(lane: Lane) {
    let lid = lane.index;
    let c = count_rows(lane);
    var s = 0.0;
    for (var r = lid; r < p.rows; r += WG) {
        s += mean_losses[r];
    }
    s = group_sum(lane, WG, s);
    if (lid == 0u) {
        // Every row ignored: 0, not PyTorch's NaN.
        mean_out[0] = select(0.0, s / c, c > 0.0);
        saved[p.rows] = c;
    }
}

// A thread per logit. A counted row has a count of at least 1, so the division is safe.
@compute @workgroup_size(256)
fn logit_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let e = gid.x + gid.y * groups.x * 256u;
    if (e >= p.rows * p.vocab) {
        return;
    }
    let row = e / p.vocab;
    let j = e % p.vocab;
    let label = targets[row];
    if (!counts(label)) {
        dlogits[e] = 0.0;
        return;
    }
    let prob = exp(logits[e] - grad_saved[row]);
    let scale = upstream[0] / grad_saved[p.rows];
    dlogits[e] = (prob - select(0.0, 1.0, j == u32(label))) * scale;
}

// The row's max and sum of exp(x - max), by one invocation.
fn row_stats_alone(row: u32) -> vec2<f32> {
    let base = row * p.vocab;
    var m = -0x1.fffffep+127f;
    for (var j = 0u; j < p.vocab; j++) {
        m = max(m, logits[base + j]);
    }
    var s = 0.0;
    for (var j = 0u; j < p.vocab; j++) {
        s += exp(logits[base + j] - m);
    }
    return vec2<f32>(m, s);
}

@compute @workgroup_size(64)
fn row_loss_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let row = gid.x + gid.y * groups.x * 64u;
    if (row >= p.rows) {
        return;
    }
    let label = targets[row];
    if (!counts(label)) {
        losses[row] = 0.0;
        saved[row] = 0.0;
        return;
    }
    let stats = row_stats_alone(row);
    let lse = log(stats.y) + stats.x;
    losses[row] = lse - logits[row * p.vocab + u32(label)];
    saved[row] = lse;
}
