// Embedding lookup and its gradient, a deterministic scatter-add.
//
// Ids outside [0, vocab) read a zero row and contribute no gradient.
//
// The backward pass groups tokens by id and sums each vocabulary row's gradients in ascending
// token order, so every run gives the same bits without float atomics. Integer atomics only
// count and bucket; the order inside a bucket is then fixed by sorting on the token index:
//   1. backward_clear:   zero the counts and the bucket cursors;
//   2. backward_count:   one thread per token counts its id;
//   3. backward_offsets: one workgroup turns the counts into bucket offsets (exclusive scan);
//   4. backward_place:   one thread per token drops its index into its id's bucket (any order);
//   5. backward_rank:    one thread per token finds its rank in its bucket (the bucket entries
//                        below it) and writes itself there: the bucket, sorted;
//   6. backward_sum:     one thread per (row, column) sums its bucket's gradients in order.
// The cost is O(tokens + vocab) plus the sum of squared bucket sizes in step 5.

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
// The index buffer: offsets[0..=vocab] (counts before the scan), then vocab bucket cursors.
@group(0) @binding(1) var<storage, read_write> index: array<u32>;
@group(0) @binding(2) var<storage, read_write> index_atomic: array<atomic<u32>>;
// Token indices grouped by id: in arrival order, then sorted.
@group(0) @binding(3) var<storage, read_write> bucketed: array<u32>;
@group(0) @binding(4) var<storage, read_write> order: array<u32>;
// The sum reads the output gradient and the sorted buckets, and writes the table's gradient.
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> sorted: array<u32>;
@group(0) @binding(4) var<storage, read_write> grad_table: array<f32>;

fn linear_id(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * groups.x * 256u;
}

// The bucket of a token, or vocab for an id that is not counted.
fn bucket_of(t: u32) -> u32 {
    let id = ids[t];
    if (id >= 0 && u32(id) < scatter.vocab) {
        return u32(id);
    }
    return scatter.vocab;
}

@compute @workgroup_size(256)
fn backward_clear(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = linear_id(gid, groups);
    if (i < 2u * scatter.vocab + 1u) {
        index[i] = 0u;
    }
}

@compute @workgroup_size(256)
fn backward_count(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = linear_id(gid, groups);
    if (t >= scatter.tokens) {
        return;
    }
    let v = bucket_of(t);
    if (v < scatter.vocab) {
        atomicAdd(&index_atomic[v], 1u);
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
        sum += index[v];
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
        let c = index[v];
        index[v] = at;
        at += c;
    }
    if (lid == 255u) {
        index[scatter.vocab] = partial[255];
    }
}

@compute @workgroup_size(256)
fn backward_place(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = linear_id(gid, groups);
    if (t >= scatter.tokens) {
        return;
    }
    let v = bucket_of(t);
    if (v < scatter.vocab) {
        let slot = atomicAdd(&index_atomic[scatter.vocab + 1u + v], 1u);
        bucketed[atomicLoad(&index_atomic[v]) + slot] = t;
    }
}

@compute @workgroup_size(256)
fn backward_rank(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = linear_id(gid, groups);
    if (t >= scatter.tokens) {
        return;
    }
    let v = bucket_of(t);
    if (v >= scatter.vocab) {
        return;
    }
    let lo = atomicLoad(&index_atomic[v]);
    let hi = atomicLoad(&index_atomic[v + 1u]);
    var rank = 0u;
    for (var p = lo; p < hi; p++) {
        rank += select(0u, 1u, bucketed[p] < t);
    }
    order[lo + rank] = t;
}

@compute @workgroup_size(256)
fn backward_sum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = linear_id(gid, groups);
    if (i >= scatter.vocab * scatter.dim) {
        return;
    }
    let v = i / scatter.dim;
    let d = i % scatter.dim;
    let end = atomicLoad(&index_atomic[v + 1u]);
    var acc = 0.0;
    for (var p = atomicLoad(&index_atomic[v]); p < end; p++) {
        acc += grad[sorted[p] * scatter.dim + d];
    }
    grad_table[i] = acc;
}
