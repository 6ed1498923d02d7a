// Batched matrix products C = op(A) op(B), op transposing when asked: a batch of [m, k] x [k, n]
// products, one per workgroup z. Each workgroup computes a TILE x TILE block of C from K-steps of
// 8 staged in workgroup memory; each thread accumulates an 8 x 8 block of C in sixteen named vec4
// registers, with the eight depths of a K-step written out (runtime-indexed private arrays and
// function-scope loops over them are slow on software Vulkan; named vectors stay in registers).
// A thread's rows are 4ty..4ty+3 and TILE/2+4ty..; its columns likewise, so one depth is four
// vec4 loads and sixteen vec4 multiply-adds. Transposes are strides, not branches: a per-element
// branch on them in the loads cost a quarter of the speed on lavapipe. Every global read and
// write is bounds-checked, so any size works; out-of-range elements load as zero.
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

// Strides of op(A) and op(B): (row, column) steps in the stored arrays.
struct Strides {
    a_row: u32,
    a_col: u32,
    b_row: u32,
    b_col: u32,
}

fn strides() -> Strides {
    let ta = dims.trans_a != 0u;
    let tb = dims.trans_b != 0u;
    return Strides(
        select(dims.k, 1u, ta),
        select(1u, dims.m, ta),
        select(dims.n, 1u, tb),
        select(1u, dims.k, tb),
    );
}

// Stages op(A)[row0.., k0..k0+8] and op(B)[k0..k0+8, col0..] in workgroup memory: each thread
// moves whole vec4s (four rows of A, four columns of B, at one depth), zero outside the matrices.
fn stage(tile: u32, threads: u32, lid: u32, s: Strides, a_base: u32, b_base: u32, row0: u32, col0: u32, k0: u32) {
    let quads = tile / 4u;
    for (var g = lid; g < quads * KSTEP; g += threads) {
        let kk = k0 + g / quads;
        let i = (g % quads) * 4u;
        let r = row0 + i;
        let col = col0 + i;
        var va = vec4<f32>(0.0);
        var vb = vec4<f32>(0.0);
        if (kk < dims.k) {
            let at = a_base + r * s.a_row + kk * s.a_col;
            if (r + 3u < dims.m) {
                va = vec4<f32>(a[at], a[at + s.a_row], a[at + 2u * s.a_row], a[at + 3u * s.a_row]);
            } else {
                for (var j = 0u; j < 4u; j++) {
                    if (r + j < dims.m) {
                        va[j] = a[at + j * s.a_row];
                    }
                }
            }
            let bt = b_base + kk * s.b_row + col * s.b_col;
            if (col + 3u < dims.n) {
                vb = vec4<f32>(b[bt], b[bt + s.b_col], b[bt + 2u * s.b_col], b[bt + 3u * s.b_col]);
            } else {
                for (var j = 0u; j < 4u; j++) {
                    if (col + j < dims.n) {
                        vb[j] = b[bt + j * s.b_col];
                    }
                }
            }
        }
        a_tile[g] = va;
        b_tile[g] = vb;
    }
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
    let half = quads / 2u;
    let row0 = group.y * tile;
    let col0 = group.x * tile;
    let s = strides();
    let a_base = group.z * dims.a_batch;
    let b_base = group.z * dims.b_batch;
    var c00 = vec4<f32>(0.0);
    var c01 = vec4<f32>(0.0);
    var c10 = vec4<f32>(0.0);
    var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0);
    var c21 = vec4<f32>(0.0);
    var c30 = vec4<f32>(0.0);
    var c31 = vec4<f32>(0.0);
    var c40 = vec4<f32>(0.0);
    var c41 = vec4<f32>(0.0);
    var c50 = vec4<f32>(0.0);
    var c51 = vec4<f32>(0.0);
    var c60 = vec4<f32>(0.0);
    var c61 = vec4<f32>(0.0);
    var c70 = vec4<f32>(0.0);
    var c71 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < dims.k; k0 += KSTEP) {
        stage(tile, threads, lid, s, a_base, b_base, row0, col0, k0);
        workgroupBarrier();
        {
            let a0 = a_tile[0u * quads + local.y];
            let a1 = a_tile[0u * quads + half + local.y];
            let b0 = b_tile[0u * quads + local.x];
            let b1 = b_tile[0u * quads + half + local.x];
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
        {
            let a0 = a_tile[1u * quads + local.y];
            let a1 = a_tile[1u * quads + half + local.y];
            let b0 = b_tile[1u * quads + local.x];
            let b1 = b_tile[1u * quads + half + local.x];
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
        {
            let a0 = a_tile[2u * quads + local.y];
            let a1 = a_tile[2u * quads + half + local.y];
            let b0 = b_tile[2u * quads + local.x];
            let b1 = b_tile[2u * quads + half + local.x];
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
        {
            let a0 = a_tile[3u * quads + local.y];
            let a1 = a_tile[3u * quads + half + local.y];
            let b0 = b_tile[3u * quads + local.x];
            let b1 = b_tile[3u * quads + half + local.x];
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
        {
            let a0 = a_tile[4u * quads + local.y];
            let a1 = a_tile[4u * quads + half + local.y];
            let b0 = b_tile[4u * quads + local.x];
            let b1 = b_tile[4u * quads + half + local.x];
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
        {
            let a0 = a_tile[5u * quads + local.y];
            let a1 = a_tile[5u * quads + half + local.y];
            let b0 = b_tile[5u * quads + local.x];
            let b1 = b_tile[5u * quads + half + local.x];
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
        {
            let a0 = a_tile[6u * quads + local.y];
            let a1 = a_tile[6u * quads + half + local.y];
            let b0 = b_tile[6u * quads + local.x];
            let b1 = b_tile[6u * quads + half + local.x];
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
        {
            let a0 = a_tile[7u * quads + local.y];
            let a1 = a_tile[7u * quads + half + local.y];
            let b0 = b_tile[7u * quads + local.x];
            let b1 = b_tile[7u * quads + half + local.x];
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
