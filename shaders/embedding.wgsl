// Embedding lookup and its gradient, a deterministic scatter-add.
//
// Ids outside [0, vocab) read a zero row and contribute no gradient.
//
// The backward pass sorts tokens by id without float atomics, so every run sums each vocabulary
// row's gradients in the same order (ascending token index):
//   1. backward_count:   one thread per vocabulary row counts the tokens with its id;
//   2. backward_offsets: one workgroup turns the counts into start offsets (exclusive scan);
//   3. backward_order:   one thread per vocabulary row lists its tokens, in order, from its offset;
//   4. backward_sum:     one thread per (row, column) sums the listed tokens' gradients.
// Steps 1 and 3 scan every id once per vocabulary row, from tiles of ids in workgroup memory.

struct Lookup {
    n: u32,     // output elements
    dim: u32,   // D
    vocab: u32, // V
}

struct Scatter {
    tokens: u32,
    dim: u32,
    vocab: u32,
}

// Each entry point binds its buffers from 1 upwards; globals that share a binding number are
// never used by the same entry point.
@group(0) @binding(0) var<uniform> lookup: Lookup;
@group(0) @binding(1) var<storage, read> ids: array<i32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= lookup.n) {
        return;
    }
    let id = ids[i / lookup.dim];
    if (id >= 0 && u32(id) < lookup.vocab) {
        out[i] = table[u32(id) * lookup.dim + i % lookup.dim];
    } else {
        out[i] = 0.0;
    }
}

@group(0) @binding(0) var<uniform> scatter: Scatter;
// offsets[v] is where row v's tokens start in `order`; offsets[vocab] is the total.
@group(0) @binding(2) var<storage, read_write> offsets: array<u32>;
@group(0) @binding(3) var<storage, read_write> order: array<u32>;
// The scan sees only the offsets (holding the counts on entry).
@group(0) @binding(1) var<storage, read_write> counts: array<u32>;
// The sum reads the output gradient at binding 1 and writes the table's gradient.
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(4) var<storage, read_write> grad_table: array<f32>;

const TILE: u32 = 256u;
var<workgroup> tile: array<i32, TILE>;

// The vocabulary row of a thread in the per-row kernels. Every workgroup scans every id, so the
// last one's threads past the vocabulary still join the barriers.
fn row_of(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * TILE + lid;
}

// Loads ids[base..base + TILE] into the tile; returns how many are valid.
fn load_tile(base: u32, lid: u32) -> u32 {
    workgroupBarrier();
    if (base + lid < scatter.tokens) {
        tile[lid] = ids[base + lid];
    }
    workgroupBarrier();
    return min(TILE, scatter.tokens - base);
}

@compute @workgroup_size(256)
fn backward_count(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v = row_of(wid, groups, lid);
    var count = 0u;
    for (var base = 0u; base < scatter.tokens; base += TILE) {
        let m = load_tile(base, lid);
        for (var k = 0u; k < m; k++) {
            count += select(0u, 1u, tile[k] == i32(v));
        }
    }
    if (v < scatter.vocab) {
        offsets[v] = count;
    }
}

var<workgroup> partial: array<u32, 256>;

// Exclusive scan of the counts in place: each thread owns a contiguous block of rows.
@compute @workgroup_size(256)
fn backward_offsets(@builtin(local_invocation_index) lid: u32) {
    let per = (scatter.vocab + 255u) / 256u;
    let lo = min(lid * per, scatter.vocab);
    let hi = min(lo + per, scatter.vocab);
    var sum = 0u;
    for (var v = lo; v < hi; v++) {
        sum += counts[v];
    }
    partial[lid] = sum;
    workgroupBarrier();
    // Hillis-Steele inclusive scan of the 256 block sums.
    for (var stride = 1u; stride < 256u; stride <<= 1u) {
        var add = 0u;
        if (lid >= stride) {
            add = partial[lid - stride];
        }
        workgroupBarrier();
        partial[lid] += add;
        workgroupBarrier();
    }
    var at = partial[lid] - sum;
    for (var v = lo; v < hi; v++) {
        let c = counts[v];
        counts[v] = at;
        at += c;
    }
    if (lid == 255u) {
        counts[scatter.vocab] = partial[255];
    }
}

@compute @workgroup_size(256)
fn backward_order(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v = row_of(wid, groups, lid);
    let mine = v < scatter.vocab;
    var at = 0u;
    if (mine) {
        at = offsets[v];
    }
    for (var base = 0u; base < scatter.tokens; base += TILE) {
        let m = load_tile(base, lid);
        for (var k = 0u; k < m; k++) {
            if (mine && tile[k] == i32(v)) {
                order[at] = base + k;
                at++;
            }
        }
    }
}

@compute @workgroup_size(256)
fn backward_sum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= scatter.vocab * scatter.dim) {
        return;
    }
    let v = i / scatter.dim;
    let d = i % scatter.dim;
    let end = offsets[v + 1u];
    var acc = 0.0;
    for (var p = offsets[v]; p < end; p++) {
        acc += grad[order[p] * scatter.dim + d];
    }
    grad_table[i] = acc;
}
