// Data movement: copies of row segments (concat, slice), zero padding (the slice's gradient) and
// strided gathers (axis permutation, and broadcasting with stride 0 on the repeated axes). Elements are moved as u32 words so f32 and i32 tensors both pass bit-exact
// (a float load could flush an integer's bit pattern that happens to be a denormal).
//
// A tensor split at an axis is [outer, axis * inner]; a "row" is one outer index's contiguous run.

struct Rows {
    n: u32,       // elements to move
    row: u32,     // words moved per outer index
    src_row: u32, // row length of the source
    src_off: u32, // where the moved run starts in each source row
    dst_row: u32,
    dst_off: u32,
}

struct Pad {
    n: u32,       // output elements
    row: u32,     // input row length
    dst_row: u32, // output row length
    dst_off: u32, // where the input run starts in each output row
}

// Shapes padded at the front to rank 8 with size 1, stride 0: the index arithmetic then runs over
// all eight axes with vector operations instead of runtime-indexed arrays.
struct Gather {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    out_shape: array<vec4<u32>, 2>,
    out_strides: array<vec4<u32>, 2>,
    // The input stride read at each output axis (0 on a broadcast axis).
    src_strides: array<vec4<u32>, 2>,
}

// Attention heads: part `offset / (heads · head_dim)` of a packed [B, L, row] tensor as
// [B, heads, L, head_dim], and back.
struct Heads {
    n: u32,        // elements of one part
    heads: u32,
    len: u32,
    head_dim: u32,
    row: u32,      // the packed tensor's last axis: parts · heads · head_dim
    offset: u32,   // where the part starts in each packed row
}

@group(0) @binding(0) var<uniform> rows: Rows;
@group(0) @binding(0) var<uniform> pad: Pad;
@group(0) @binding(0) var<uniform> perm: Gather;
@group(0) @binding(0) var<uniform> hd: Heads;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
// split_heads3 writes k and v too; merge_heads3 reads k and v and writes the packed tensor.
@group(0) @binding(3) var<storage, read_write> dst_k: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst_v: array<u32>;
@group(0) @binding(2) var<storage, read> src_k: array<u32>;
@group(0) @binding(3) var<storage, read> src_v: array<u32>;
@group(0) @binding(4) var<storage, read_write> packed: array<u32>;

// Concat (one dispatch per input, into its slice of the output) and slice (out of one).
@compute @workgroup_size(256)
fn copy_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= rows.n) {
        return;
    }
    let outer = i / rows.row;
    let k = i % rows.row;
    dst[outer * rows.dst_row + rows.dst_off + k] = src[outer * rows.src_row + rows.src_off + k];
}

// The gradient of a slice: the incoming run in place, zeros around it.
@compute @workgroup_size(256)
fn pad_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= pad.n) {
        return;
    }
    let outer = i / pad.dst_row;
    let k = i % pad.dst_row;
    if (k >= pad.dst_off && k < pad.dst_off + pad.row) {
        dst[i] = src[outer * pad.row + k - pad.dst_off];
    } else {
        dst[i] = 0u;
    }
}

@compute @workgroup_size(256)
fn gather(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= perm.n) {
        return;
    }
    let lo = (vec4<u32>(i) / perm.out_strides[0]) % perm.out_shape[0];
    let hi = (vec4<u32>(i) / perm.out_strides[1]) % perm.out_shape[1];
    dst[i] = src[dot(lo, perm.src_strides[0]) + dot(hi, perm.src_strides[1])];
}

// Where element i of a part [B, H, L, Dh] lives in the packed [B, L, row] tensor.
fn packed_index(i: u32) -> u32 {
    let d = i % hd.head_dim;
    let row = i / hd.head_dim;
    let l = row % hd.len;
    let bh = row / hd.len;
    let h = bh % hd.heads;
    let b = bh / hd.heads;
    return (b * hd.len + l) * hd.row + hd.offset + h * hd.head_dim + d;
}

@compute @workgroup_size(256)
fn split_heads(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= hd.n) {
        return;
    }
    dst[i] = src[packed_index(i)];
}

@compute @workgroup_size(256)
fn merge_heads(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= hd.n) {
        return;
    }
    dst[packed_index(i)] = src[i];
}

// q, k and v (three parts) in one dispatch each way: a thread moves element i of all three.
@compute @workgroup_size(256)
fn split_heads3(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= hd.n) {
        return;
    }
    let at = packed_index(i);
    let part = hd.heads * hd.head_dim;
    dst[i] = src[at];
    dst_k[i] = src[at + part];
    dst_v[i] = src[at + 2u * part];
}

@compute @workgroup_size(256)
fn merge_heads3(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= hd.n) {
        return;
    }
    let at = packed_index(i);
    let part = hd.heads * hd.head_dim;
    packed[at] = src[i];
    packed[at + part] = src_k[i];
    packed[at + 2u * part] = src_v[i];
}
