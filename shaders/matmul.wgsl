// Batched matrix products C = op(A) op(B), op transposing when asked: a batch of [m, k] x [k, n]
// products, one per workgroup z. Each workgroup computes a TILE x TILE block of C from K-steps of
// 8 staged in workgroup memory; each thread accumulates an 8 x 8 block of C in sixteen named vec4
// registers (runtime-indexed private arrays are very slow on software Vulkan, named vectors stay
// in registers). A thread's rows are 4ty..4ty+3 and TILE/2+4ty..; its columns likewise, so the
// reads of one K-step are four vec4 loads. Every global read and write is bounds-checked, so any
// size works; out-of-range elements load as zero.
//
// Three entry points differ only in the tile (128, 64, 32), chosen by the op from the sizes: large
// tiles reuse each loaded value more, small ones keep more workgroups busy on small products.

struct Dims {
    m: u32,
    n: u32,
    k: u32,
    // Elements between consecutive matrices of the batch; 0 for an operand shared by the batch.
    a_batch: u32,
    b_batch: u32,
    // A is stored [k, m] instead of [m, k]; B is stored [n, k] instead of [k, n].
    trans_a: u32,
    trans_b: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

const KSTEP: u32 = 8u;

// Depth-major tiles: a_tile[kk * TILE/4 + i] holds rows 4i..4i+3 of op(A) at depth kk of the
// current K-step; b_tile likewise holds columns of op(B). Sized for the largest tile.
var<workgroup> a_tile: array<vec4<f32>, 256>;
var<workgroup> b_tile: array<vec4<f32>, 256>;

var<private> c00: vec4<f32>;
var<private> c01: vec4<f32>;
var<private> c10: vec4<f32>;
var<private> c11: vec4<f32>;
var<private> c20: vec4<f32>;
var<private> c21: vec4<f32>;
var<private> c30: vec4<f32>;
var<private> c31: vec4<f32>;
var<private> c40: vec4<f32>;
var<private> c41: vec4<f32>;
var<private> c50: vec4<f32>;
var<private> c51: vec4<f32>;
var<private> c60: vec4<f32>;
var<private> c61: vec4<f32>;
var<private> c70: vec4<f32>;
var<private> c71: vec4<f32>;

// op(A)[row, kk] of the batch matrix at `base`, zero outside.
fn load_a(base: u32, row: u32, kk: u32) -> f32 {
    if (row >= dims.m || kk >= dims.k) {
        return 0.0;
    }
    if (dims.trans_a != 0u) {
        return a[base + kk * dims.m + row];
    }
    return a[base + row * dims.k + kk];
}

// op(B)[kk, col] of the batch matrix at `base`, zero outside.
fn load_b(base: u32, kk: u32, col: u32) -> f32 {
    if (col >= dims.n || kk >= dims.k) {
        return 0.0;
    }
    if (dims.trans_b != 0u) {
        return b[base + col * dims.k + kk];
    }
    return b[base + kk * dims.n + col];
}

// Stages op(A)[row0.., k0..k0+8] and op(B)[k0..k0+8, col0..] in workgroup memory. Each thread
// moves groups of four elements that are contiguous in the stored matrix: four depths of one row
// when that row is contiguous, else four rows (a vec4) at one depth.
fn stage(tile: u32, threads: u32, lid: u32, a_base: u32, b_base: u32, row0: u32, col0: u32, k0: u32) {
    let quads = tile / 4u;
    for (var g = lid; g < quads * KSTEP; g += threads) {
        if (dims.trans_a != 0u) {
            let kk = g / quads;
            let r = row0 + (g % quads) * 4u;
            a_tile[g] = vec4<f32>(
                load_a(a_base, r, k0 + kk),
                load_a(a_base, r + 1u, k0 + kk),
                load_a(a_base, r + 2u, k0 + kk),
                load_a(a_base, r + 3u, k0 + kk),
            );
        } else {
            let r = g / 2u;
            let kk = (g % 2u) * 4u;
            for (var j = 0u; j < 4u; j++) {
                a_tile[(kk + j) * quads + r / 4u][r % 4u] = load_a(a_base, row0 + r, k0 + kk + j);
            }
        }
        if (dims.trans_b != 0u) {
            let col = g / 2u;
            let kk = (g % 2u) * 4u;
            for (var j = 0u; j < 4u; j++) {
                b_tile[(kk + j) * quads + col / 4u][col % 4u] = load_b(b_base, k0 + kk + j, col0 + col);
            }
        } else {
            let kk = g / quads;
            let col = col0 + (g % quads) * 4u;
            b_tile[g] = vec4<f32>(
                load_b(b_base, k0 + kk, col),
                load_b(b_base, k0 + kk, col + 1u),
                load_b(b_base, k0 + kk, col + 2u),
                load_b(b_base, k0 + kk, col + 3u),
            );
        }
    }
}

// One depth of the outer product: rows (quads*kk + ty, + half), columns (quads*kk + tx, + half).
fn accumulate(quads: u32, kk: u32, tx: u32, ty: u32) {
    let half = quads / 2u;
    let a0 = a_tile[kk * quads + ty];
    let a1 = a_tile[kk * quads + half + ty];
    let b0 = b_tile[kk * quads + tx];
    let b1 = b_tile[kk * quads + half + tx];
    c00 += a0.x * b0;
    c01 += a0.x * b1;
    c10 += a0.y * b0;
    c11 += a0.y * b1;
    c20 += a0.z * b0;
    c21 += a0.z * b1;
    c30 += a0.w * b0;
    c31 += a0.w * b1;
    c40 += a1.x * b0;
    c41 += a1.x * b1;
    c50 += a1.y * b0;
    c51 += a1.y * b1;
    c60 += a1.z * b0;
    c61 += a1.z * b1;
    c70 += a1.w * b0;
    c71 += a1.w * b1;
}

// Writes four columns from `col` of one output row, skipping what lies outside C.
fn store4(base: u32, row: u32, col: u32, v: vec4<f32>) {
    if (row >= dims.m) {
        return;
    }
    let at = base + row * dims.n;
    for (var j = 0u; j < 4u; j++) {
        if (col + j < dims.n) {
            c[at + col + j] = v[j];
        }
    }
}

fn product(tile: u32, local: vec3<u32>, lid: u32, group: vec3<u32>) {
    let threads = (tile / 8u) * (tile / 8u);
    let quads = tile / 4u;
    let row0 = group.y * tile;
    let col0 = group.x * tile;
    let a_base = group.z * dims.a_batch;
    let b_base = group.z * dims.b_batch;
    c00 = vec4<f32>(0.0);
    c01 = vec4<f32>(0.0);
    c10 = vec4<f32>(0.0);
    c11 = vec4<f32>(0.0);
    c20 = vec4<f32>(0.0);
    c21 = vec4<f32>(0.0);
    c30 = vec4<f32>(0.0);
    c31 = vec4<f32>(0.0);
    c40 = vec4<f32>(0.0);
    c41 = vec4<f32>(0.0);
    c50 = vec4<f32>(0.0);
    c51 = vec4<f32>(0.0);
    c60 = vec4<f32>(0.0);
    c61 = vec4<f32>(0.0);
    c70 = vec4<f32>(0.0);
    c71 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < dims.k; k0 += KSTEP) {
        stage(tile, threads, lid, a_base, b_base, row0, col0, k0);
        workgroupBarrier();
        accumulate(quads, 0u, local.x, local.y);
        accumulate(quads, 1u, local.x, local.y);
        accumulate(quads, 2u, local.x, local.y);
        accumulate(quads, 3u, local.x, local.y);
        accumulate(quads, 4u, local.x, local.y);
        accumulate(quads, 5u, local.x, local.y);
        accumulate(quads, 6u, local.x, local.y);
        accumulate(quads, 7u, local.x, local.y);
        workgroupBarrier();
    }
    let base = group.z * dims.m * dims.n;
    let r = row0 + 4u * local.y;
    let r2 = r + tile / 2u;
    let col = col0 + 4u * local.x;
    let col2 = col + tile / 2u;
    store4(base, r, col, c00);
    store4(base, r, col2, c01);
    store4(base, r + 1u, col, c10);
    store4(base, r + 1u, col2, c11);
    store4(base, r + 2u, col, c20);
    store4(base, r + 2u, col2, c21);
    store4(base, r + 3u, col, c30);
    store4(base, r + 3u, col2, c31);
    store4(base, r2, col, c40);
    store4(base, r2, col2, c41);
    store4(base, r2 + 1u, col, c50);
    store4(base, r2 + 1u, col2, c51);
    store4(base, r2 + 2u, col, c60);
    store4(base, r2 + 2u, col2, c61);
    store4(base, r2 + 3u, col, c70);
    store4(base, r2 + 3u, col2, c71);
}

@compute @workgroup_size(16, 16)
fn matmul_128(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    product(128u, local, lid, group);
}

@compute @workgroup_size(8, 8)
fn matmul_64(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    product(64u, local, lid, group);
}

@compute @workgroup_size(4, 4)
fn matmul_32(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    product(32u, local, lid, group);
}
