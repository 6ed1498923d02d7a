// Batched matrix products C = op(A) op(B), op transposing when asked: a batch of [m, k] x [k, n]
// products, one per workgroup z. Each workgroup computes a TILE x TILE block of C from K-steps of
// 8 staged in workgroup memory, each thread a block of C in named vec4 accumulators: 16 x 16
// (sixty-four vec4s) with the 128 tile, 8 x 8 with the 64 and 32 tiles. Accumulator cXX_P holds
// row XX of the thread's block, columns 4P.. of it.
//
// Why the large blocks: lavapipe (software Vulkan, what CI runs) runs eight invocations in the
// lanes of one SIMD register and reads workgroup and storage memory one lane and one component
// at a time, while arithmetic is one instruction for all eight lanes. Loads dominate, so a
// thread should do as many multiply-adds per loaded value as it can: a 16 x 16 block does 8
// per value, an 8 x 8 block 4; its spilled accumulators cost far less than those loads.
// Runtime-indexed private arrays are slow there too, hence named accumulators; a loop over the
// depths of a K-step is as fast as writing them out.
//
// A thread's rows are 4ty..4ty+3, then the same a quarter (16 x 16) or a half (8 x 8) of the
// tile further on, and so on; its columns likewise. Transposes are strides, not branches: a
// per-element branch on them in the loads cost a quarter of the speed on lavapipe. Every
// global read and write is bounds-checked, so any size works; out-of-range elements load as 0.
//
// Entry points: matmul_TILE for any sizes, loading scalars; matmul_TILE_vec4 when m, n and k are
// nonzero multiples of 4, staging with one vec4 load where the general one makes four strided
// scalar loads. The op picks the tile from the sizes: large tiles reuse each loaded value more,
// small ones keep more workgroups busy on small products.

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
// The same operands seen as vec4s, for the entry points that need m, n and k multiples of 4.
@group(0) @binding(1) var<storage, read> a4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b4: array<vec4<f32>>;

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

// Stages like `stage` when m, n and k are multiples of 4, so that every vec4 of the stored
// matrices lies wholly inside or outside them: each thread moves a 4 x 4 block of op(A) (four rows
// at four depths) and one of op(B) in four vec4 loads each. A vec4 along k (A stored [m, k], B
// stored [n, k]) holds four depths of one row or column: the block is transposed, which in
// registers is only a renaming.
fn stage_vec4(tile: u32, threads: u32, lid: u32, s: Strides, a_base: u32, b_base: u32, row0: u32, col0: u32, k0: u32) {
    let quads = tile / 4u;
    let ta = dims.trans_a != 0u;
    let tb = dims.trans_b != 0u;
    // vec4s between the four loads: the next row (or depth, with trans_a) of the stored A.
    let a_step = select(s.a_row, s.a_col, ta) / 4u;
    let b_step = select(s.b_row, s.b_col, tb) / 4u;
    for (var g = lid; g < quads * (KSTEP / 4u); g += threads) {
        let d = 4u * (g / quads);
        let i = 4u * (g % quads);
        let kk = k0 + d;
        let r = row0 + i;
        let col = col0 + i;
        var a_blk = mat4x4<f32>();
        var b_blk = mat4x4<f32>();
        if (kk < dims.k) {
            if (r < dims.m) {
                let at = (a_base + r * s.a_row + kk * s.a_col) / 4u;
                let m = mat4x4<f32>(a4[at], a4[at + a_step], a4[at + 2u * a_step], a4[at + 3u * a_step]);
                a_blk = m;
                if (!ta) {
                    a_blk = transpose(m);
                }
            }
            if (col < dims.n) {
                let bt = (b_base + kk * s.b_row + col * s.b_col) / 4u;
                let m = mat4x4<f32>(b4[bt], b4[bt + b_step], b4[bt + 2u * b_step], b4[bt + 3u * b_step]);
                b_blk = m;
                if (tb) {
                    b_blk = transpose(m);
                }
            }
        }
        let at = d * quads + i / 4u;
        a_tile[at] = a_blk[0];
        a_tile[at + quads] = a_blk[1];
        a_tile[at + 2u * quads] = a_blk[2];
        a_tile[at + 3u * quads] = a_blk[3];
        b_tile[at] = b_blk[0];
        b_tile[at + quads] = b_blk[1];
        b_tile[at + 2u * quads] = b_blk[2];
        b_tile[at + 3u * quads] = b_blk[3];
    }
}


// A 128 x 128 tile on 8 x 8 threads, 16 x 16 outputs per thread.
fn product_128_16x16(local: vec3<u32>, lid: u32, group: vec3<u32>) {
    let quads = 32u;
    let row0 = group.y * 128u;
    let col0 = group.x * 128u;
    let s = strides();
    let a_base = group.z * dims.a_batch;
    let b_base = group.z * dims.b_batch;
    var c0_0 = vec4<f32>(0.0);
    var c0_1 = vec4<f32>(0.0);
    var c0_2 = vec4<f32>(0.0);
    var c0_3 = vec4<f32>(0.0);
    var c1_0 = vec4<f32>(0.0);
    var c1_1 = vec4<f32>(0.0);
    var c1_2 = vec4<f32>(0.0);
    var c1_3 = vec4<f32>(0.0);
    var c2_0 = vec4<f32>(0.0);
    var c2_1 = vec4<f32>(0.0);
    var c2_2 = vec4<f32>(0.0);
    var c2_3 = vec4<f32>(0.0);
    var c3_0 = vec4<f32>(0.0);
    var c3_1 = vec4<f32>(0.0);
    var c3_2 = vec4<f32>(0.0);
    var c3_3 = vec4<f32>(0.0);
    var c4_0 = vec4<f32>(0.0);
    var c4_1 = vec4<f32>(0.0);
    var c4_2 = vec4<f32>(0.0);
    var c4_3 = vec4<f32>(0.0);
    var c5_0 = vec4<f32>(0.0);
    var c5_1 = vec4<f32>(0.0);
    var c5_2 = vec4<f32>(0.0);
    var c5_3 = vec4<f32>(0.0);
    var c6_0 = vec4<f32>(0.0);
    var c6_1 = vec4<f32>(0.0);
    var c6_2 = vec4<f32>(0.0);
    var c6_3 = vec4<f32>(0.0);
    var c7_0 = vec4<f32>(0.0);
    var c7_1 = vec4<f32>(0.0);
    var c7_2 = vec4<f32>(0.0);
    var c7_3 = vec4<f32>(0.0);
    var c8_0 = vec4<f32>(0.0);
    var c8_1 = vec4<f32>(0.0);
    var c8_2 = vec4<f32>(0.0);
    var c8_3 = vec4<f32>(0.0);
    var c9_0 = vec4<f32>(0.0);
    var c9_1 = vec4<f32>(0.0);
    var c9_2 = vec4<f32>(0.0);
    var c9_3 = vec4<f32>(0.0);
    var c10_0 = vec4<f32>(0.0);
    var c10_1 = vec4<f32>(0.0);
    var c10_2 = vec4<f32>(0.0);
    var c10_3 = vec4<f32>(0.0);
    var c11_0 = vec4<f32>(0.0);
    var c11_1 = vec4<f32>(0.0);
    var c11_2 = vec4<f32>(0.0);
    var c11_3 = vec4<f32>(0.0);
    var c12_0 = vec4<f32>(0.0);
    var c12_1 = vec4<f32>(0.0);
    var c12_2 = vec4<f32>(0.0);
    var c12_3 = vec4<f32>(0.0);
    var c13_0 = vec4<f32>(0.0);
    var c13_1 = vec4<f32>(0.0);
    var c13_2 = vec4<f32>(0.0);
    var c13_3 = vec4<f32>(0.0);
    var c14_0 = vec4<f32>(0.0);
    var c14_1 = vec4<f32>(0.0);
    var c14_2 = vec4<f32>(0.0);
    var c14_3 = vec4<f32>(0.0);
    var c15_0 = vec4<f32>(0.0);
    var c15_1 = vec4<f32>(0.0);
    var c15_2 = vec4<f32>(0.0);
    var c15_3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < dims.k; k0 += KSTEP) {
        stage(128u, 64u, lid, s, a_base, b_base, row0, col0, k0);
        workgroupBarrier();
        for (var kk = 0u; kk < KSTEP; kk++) {
            let at = kk * quads + local.y;
            let bt = kk * quads + local.x;
            let a0 = a_tile[at];
            let a1 = a_tile[at + 8u];
            let a2 = a_tile[at + 16u];
            let a3 = a_tile[at + 24u];
            let b0 = b_tile[bt];
            let b1 = b_tile[bt + 8u];
            let b2 = b_tile[bt + 16u];
            let b3 = b_tile[bt + 24u];
            c0_0 += a0.x * b0;
            c0_1 += a0.x * b1;
            c0_2 += a0.x * b2;
            c0_3 += a0.x * b3;
            c1_0 += a0.y * b0;
            c1_1 += a0.y * b1;
            c1_2 += a0.y * b2;
            c1_3 += a0.y * b3;
            c2_0 += a0.z * b0;
            c2_1 += a0.z * b1;
            c2_2 += a0.z * b2;
            c2_3 += a0.z * b3;
            c3_0 += a0.w * b0;
            c3_1 += a0.w * b1;
            c3_2 += a0.w * b2;
            c3_3 += a0.w * b3;
            c4_0 += a1.x * b0;
            c4_1 += a1.x * b1;
            c4_2 += a1.x * b2;
            c4_3 += a1.x * b3;
            c5_0 += a1.y * b0;
            c5_1 += a1.y * b1;
            c5_2 += a1.y * b2;
            c5_3 += a1.y * b3;
            c6_0 += a1.z * b0;
            c6_1 += a1.z * b1;
            c6_2 += a1.z * b2;
            c6_3 += a1.z * b3;
            c7_0 += a1.w * b0;
            c7_1 += a1.w * b1;
            c7_2 += a1.w * b2;
            c7_3 += a1.w * b3;
            c8_0 += a2.x * b0;
            c8_1 += a2.x * b1;
            c8_2 += a2.x * b2;
            c8_3 += a2.x * b3;
            c9_0 += a2.y * b0;
            c9_1 += a2.y * b1;
            c9_2 += a2.y * b2;
            c9_3 += a2.y * b3;
            c10_0 += a2.z * b0;
            c10_1 += a2.z * b1;
            c10_2 += a2.z * b2;
            c10_3 += a2.z * b3;
            c11_0 += a2.w * b0;
            c11_1 += a2.w * b1;
            c11_2 += a2.w * b2;
            c11_3 += a2.w * b3;
            c12_0 += a3.x * b0;
            c12_1 += a3.x * b1;
            c12_2 += a3.x * b2;
            c12_3 += a3.x * b3;
            c13_0 += a3.y * b0;
            c13_1 += a3.y * b1;
            c13_2 += a3.y * b2;
            c13_3 += a3.y * b3;
            c14_0 += a3.z * b0;
            c14_1 += a3.z * b1;
            c14_2 += a3.z * b2;
            c14_3 += a3.z * b3;
            c15_0 += a3.w * b0;
            c15_1 += a3.w * b1;
            c15_2 += a3.w * b2;
            c15_3 += a3.w * b3;
        }
        workgroupBarrier();
    }
    let base = group.z * dims.m * dims.n;
    let r = row0 + 4u * local.y;
    let col = col0 + 4u * local.x;
    store4(base, r, col, c0_0);
    store4(base, r, col + 32u, c0_1);
    store4(base, r, col + 64u, c0_2);
    store4(base, r, col + 96u, c0_3);
    store4(base, r + 1u, col, c1_0);
    store4(base, r + 1u, col + 32u, c1_1);
    store4(base, r + 1u, col + 64u, c1_2);
    store4(base, r + 1u, col + 96u, c1_3);
    store4(base, r + 2u, col, c2_0);
    store4(base, r + 2u, col + 32u, c2_1);
    store4(base, r + 2u, col + 64u, c2_2);
    store4(base, r + 2u, col + 96u, c2_3);
    store4(base, r + 3u, col, c3_0);
    store4(base, r + 3u, col + 32u, c3_1);
    store4(base, r + 3u, col + 64u, c3_2);
    store4(base, r + 3u, col + 96u, c3_3);
    store4(base, r + 32u, col, c4_0);
    store4(base, r + 32u, col + 32u, c4_1);
    store4(base, r + 32u, col + 64u, c4_2);
    store4(base, r + 32u, col + 96u, c4_3);
    store4(base, r + 33u, col, c5_0);
    store4(base, r + 33u, col + 32u, c5_1);
    store4(base, r + 33u, col + 64u, c5_2);
    store4(base, r + 33u, col + 96u, c5_3);
    store4(base, r + 34u, col, c6_0);
    store4(base, r + 34u, col + 32u, c6_1);
    store4(base, r + 34u, col + 64u, c6_2);
    store4(base, r + 34u, col + 96u, c6_3);
    store4(base, r + 35u, col, c7_0);
    store4(base, r + 35u, col + 32u, c7_1);
    store4(base, r + 35u, col + 64u, c7_2);
    store4(base, r + 35u, col + 96u, c7_3);
    store4(base, r + 64u, col, c8_0);
    store4(base, r + 64u, col + 32u, c8_1);
    store4(base, r + 64u, col + 64u, c8_2);
    store4(base, r + 64u, col + 96u, c8_3);
    store4(base, r + 65u, col, c9_0);
    store4(base, r + 65u, col + 32u, c9_1);
    store4(base, r + 65u, col + 64u, c9_2);
    store4(base, r + 65u, col + 96u, c9_3);
    store4(base, r + 66u, col, c10_0);
    store4(base, r + 66u, col + 32u, c10_1);
    store4(base, r + 66u, col + 64u, c10_2);
    store4(base, r + 66u, col + 96u, c10_3);
    store4(base, r + 67u, col, c11_0);
    store4(base, r + 67u, col + 32u, c11_1);
    store4(base, r + 67u, col + 64u, c11_2);
    store4(base, r + 67u, col + 96u, c11_3);
    store4(base, r + 96u, col, c12_0);
    store4(base, r + 96u, col + 32u, c12_1);
    store4(base, r + 96u, col + 64u, c12_2);
    store4(base, r + 96u, col + 96u, c12_3);
    store4(base, r + 97u, col, c13_0);
    store4(base, r + 97u, col + 32u, c13_1);
    store4(base, r + 97u, col + 64u, c13_2);
    store4(base, r + 97u, col + 96u, c13_3);
    store4(base, r + 98u, col, c14_0);
    store4(base, r + 98u, col + 32u, c14_1);
    store4(base, r + 98u, col + 64u, c14_2);
    store4(base, r + 98u, col + 96u, c14_3);
    store4(base, r + 99u, col, c15_0);
    store4(base, r + 99u, col + 32u, c15_1);
    store4(base, r + 99u, col + 64u, c15_2);
    store4(base, r + 99u, col + 96u, c15_3);
}

@compute @workgroup_size(8, 8)
fn matmul_128(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    product_128_16x16(local, lid, group);
}

// A 128 x 128 tile on 8 x 8 threads, 16 x 16 outputs per thread.
fn product_128_16x16_vec4(local: vec3<u32>, lid: u32, group: vec3<u32>) {
    let quads = 32u;
    let row0 = group.y * 128u;
    let col0 = group.x * 128u;
    let s = strides();
    let a_base = group.z * dims.a_batch;
    let b_base = group.z * dims.b_batch;
    var c0_0 = vec4<f32>(0.0);
    var c0_1 = vec4<f32>(0.0);
    var c0_2 = vec4<f32>(0.0);
    var c0_3 = vec4<f32>(0.0);
    var c1_0 = vec4<f32>(0.0);
    var c1_1 = vec4<f32>(0.0);
    var c1_2 = vec4<f32>(0.0);
    var c1_3 = vec4<f32>(0.0);
    var c2_0 = vec4<f32>(0.0);
    var c2_1 = vec4<f32>(0.0);
    var c2_2 = vec4<f32>(0.0);
    var c2_3 = vec4<f32>(0.0);
    var c3_0 = vec4<f32>(0.0);
    var c3_1 = vec4<f32>(0.0);
    var c3_2 = vec4<f32>(0.0);
    var c3_3 = vec4<f32>(0.0);
    var c4_0 = vec4<f32>(0.0);
    var c4_1 = vec4<f32>(0.0);
    var c4_2 = vec4<f32>(0.0);
    var c4_3 = vec4<f32>(0.0);
    var c5_0 = vec4<f32>(0.0);
    var c5_1 = vec4<f32>(0.0);
    var c5_2 = vec4<f32>(0.0);
    var c5_3 = vec4<f32>(0.0);
    var c6_0 = vec4<f32>(0.0);
    var c6_1 = vec4<f32>(0.0);
    var c6_2 = vec4<f32>(0.0);
    var c6_3 = vec4<f32>(0.0);
    var c7_0 = vec4<f32>(0.0);
    var c7_1 = vec4<f32>(0.0);
    var c7_2 = vec4<f32>(0.0);
    var c7_3 = vec4<f32>(0.0);
    var c8_0 = vec4<f32>(0.0);
    var c8_1 = vec4<f32>(0.0);
    var c8_2 = vec4<f32>(0.0);
    var c8_3 = vec4<f32>(0.0);
    var c9_0 = vec4<f32>(0.0);
    var c9_1 = vec4<f32>(0.0);
    var c9_2 = vec4<f32>(0.0);
    var c9_3 = vec4<f32>(0.0);
    var c10_0 = vec4<f32>(0.0);
    var c10_1 = vec4<f32>(0.0);
    var c10_2 = vec4<f32>(0.0);
    var c10_3 = vec4<f32>(0.0);
    var c11_0 = vec4<f32>(0.0);
    var c11_1 = vec4<f32>(0.0);
    var c11_2 = vec4<f32>(0.0);
    var c11_3 = vec4<f32>(0.0);
    var c12_0 = vec4<f32>(0.0);
    var c12_1 = vec4<f32>(0.0);
    var c12_2 = vec4<f32>(0.0);
    var c12_3 = vec4<f32>(0.0);
    var c13_0 = vec4<f32>(0.0);
    var c13_1 = vec4<f32>(0.0);
    var c13_2 = vec4<f32>(0.0);
    var c13_3 = vec4<f32>(0.0);
    var c14_0 = vec4<f32>(0.0);
    var c14_1 = vec4<f32>(0.0);
    var c14_2 = vec4<f32>(0.0);
    var c14_3 = vec4<f32>(0.0);
    var c15_0 = vec4<f32>(0.0);
    var c15_1 = vec4<f32>(0.0);
    var c15_2 = vec4<f32>(0.0);
    var c15_3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < dims.k; k0 += KSTEP) {
        stage_vec4(128u, 64u, lid, s, a_base, b_base, row0, col0, k0);
        workgroupBarrier();
        for (var kk = 0u; kk < KSTEP; kk++) {
            let at = kk * quads + local.y;
            let bt = kk * quads + local.x;
            let a0 = a_tile[at];
            let a1 = a_tile[at + 8u];
            let a2 = a_tile[at + 16u];
            let a3 = a_tile[at + 24u];
            let b0 = b_tile[bt];
            let b1 = b_tile[bt + 8u];
            let b2 = b_tile[bt + 16u];
            let b3 = b_tile[bt + 24u];
            c0_0 += a0.x * b0;
            c0_1 += a0.x * b1;
            c0_2 += a0.x * b2;
            c0_3 += a0.x * b3;
            c1_0 += a0.y * b0;
            c1_1 += a0.y * b1;
            c1_2 += a0.y * b2;
            c1_3 += a0.y * b3;
            c2_0 += a0.z * b0;
            c2_1 += a0.z * b1;
            c2_2 += a0.z * b2;
            c2_3 += a0.z * b3;
            c3_0 += a0.w * b0;
            c3_1 += a0.w * b1;
            c3_2 += a0.w * b2;
            c3_3 += a0.w * b3;
            c4_0 += a1.x * b0;
            c4_1 += a1.x * b1;
            c4_2 += a1.x * b2;
            c4_3 += a1.x * b3;
            c5_0 += a1.y * b0;
            c5_1 += a1.y * b1;
            c5_2 += a1.y * b2;
            c5_3 += a1.y * b3;
            c6_0 += a1.z * b0;
            c6_1 += a1.z * b1;
            c6_2 += a1.z * b2;
            c6_3 += a1.z * b3;
            c7_0 += a1.w * b0;
            c7_1 += a1.w * b1;
            c7_2 += a1.w * b2;
            c7_3 += a1.w * b3;
            c8_0 += a2.x * b0;
            c8_1 += a2.x * b1;
            c8_2 += a2.x * b2;
            c8_3 += a2.x * b3;
            c9_0 += a2.y * b0;
            c9_1 += a2.y * b1;
            c9_2 += a2.y * b2;
            c9_3 += a2.y * b3;
            c10_0 += a2.z * b0;
            c10_1 += a2.z * b1;
            c10_2 += a2.z * b2;
            c10_3 += a2.z * b3;
            c11_0 += a2.w * b0;
            c11_1 += a2.w * b1;
            c11_2 += a2.w * b2;
            c11_3 += a2.w * b3;
            c12_0 += a3.x * b0;
            c12_1 += a3.x * b1;
            c12_2 += a3.x * b2;
            c12_3 += a3.x * b3;
            c13_0 += a3.y * b0;
            c13_1 += a3.y * b1;
            c13_2 += a3.y * b2;
            c13_3 += a3.y * b3;
            c14_0 += a3.z * b0;
            c14_1 += a3.z * b1;
            c14_2 += a3.z * b2;
            c14_3 += a3.z * b3;
            c15_0 += a3.w * b0;
            c15_1 += a3.w * b1;
            c15_2 += a3.w * b2;
            c15_3 += a3.w * b3;
        }
        workgroupBarrier();
    }
    let base = group.z * dims.m * dims.n;
    let r = row0 + 4u * local.y;
    let col = col0 + 4u * local.x;
    store4(base, r, col, c0_0);
    store4(base, r, col + 32u, c0_1);
    store4(base, r, col + 64u, c0_2);
    store4(base, r, col + 96u, c0_3);
    store4(base, r + 1u, col, c1_0);
    store4(base, r + 1u, col + 32u, c1_1);
    store4(base, r + 1u, col + 64u, c1_2);
    store4(base, r + 1u, col + 96u, c1_3);
    store4(base, r + 2u, col, c2_0);
    store4(base, r + 2u, col + 32u, c2_1);
    store4(base, r + 2u, col + 64u, c2_2);
    store4(base, r + 2u, col + 96u, c2_3);
    store4(base, r + 3u, col, c3_0);
    store4(base, r + 3u, col + 32u, c3_1);
    store4(base, r + 3u, col + 64u, c3_2);
    store4(base, r + 3u, col + 96u, c3_3);
    store4(base, r + 32u, col, c4_0);
    store4(base, r + 32u, col + 32u, c4_1);
    store4(base, r + 32u, col + 64u, c4_2);
    store4(base, r + 32u, col + 96u, c4_3);
    store4(base, r + 33u, col, c5_0);
    store4(base, r + 33u, col + 32u, c5_1);
    store4(base, r + 33u, col + 64u, c5_2);
    store4(base, r + 33u, col + 96u, c5_3);
    store4(base, r + 34u, col, c6_0);
    store4(base, r + 34u, col + 32u, c6_1);
    store4(base, r + 34u, col + 64u, c6_2);
    store4(base, r + 34u, col + 96u, c6_3);
    store4(base, r + 35u, col, c7_0);
    store4(base, r + 35u, col + 32u, c7_1);
    store4(base, r + 35u, col + 64u, c7_2);
    store4(base, r + 35u, col + 96u, c7_3);
    store4(base, r + 64u, col, c8_0);
    store4(base, r + 64u, col + 32u, c8_1);
    store4(base, r + 64u, col + 64u, c8_2);
    store4(base, r + 64u, col + 96u, c8_3);
    store4(base, r + 65u, col, c9_0);
    store4(base, r + 65u, col + 32u, c9_1);
    store4(base, r + 65u, col + 64u, c9_2);
    store4(base, r + 65u, col + 96u, c9_3);
    store4(base, r + 66u, col, c10_0);
    store4(base, r + 66u, col + 32u, c10_1);
    store4(base, r + 66u, col + 64u, c10_2);
    store4(base, r + 66u, col + 96u, c10_3);
    store4(base, r + 67u, col, c11_0);
    store4(base, r + 67u, col + 32u, c11_1);
    store4(base, r + 67u, col + 64u, c11_2);
    store4(base, r + 67u, col + 96u, c11_3);
    store4(base, r + 96u, col, c12_0);
    store4(base, r + 96u, col + 32u, c12_1);
    store4(base, r + 96u, col + 64u, c12_2);
    store4(base, r + 96u, col + 96u, c12_3);
    store4(base, r + 97u, col, c13_0);
    store4(base, r + 97u, col + 32u, c13_1);
    store4(base, r + 97u, col + 64u, c13_2);
    store4(base, r + 97u, col + 96u, c13_3);
    store4(base, r + 98u, col, c14_0);
    store4(base, r + 98u, col + 32u, c14_1);
    store4(base, r + 98u, col + 64u, c14_2);
    store4(base, r + 98u, col + 96u, c14_3);
    store4(base, r + 99u, col, c15_0);
    store4(base, r + 99u, col + 32u, c15_1);
    store4(base, r + 99u, col + 64u, c15_2);
    store4(base, r + 99u, col + 96u, c15_3);
}

@compute @workgroup_size(8, 8)
fn matmul_128_vec4(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    product_128_16x16_vec4(local, lid, group);
}

// A 64 x 64 tile on 8 x 8 threads, 8 x 8 outputs per thread.
fn product_64_8x8(local: vec3<u32>, lid: u32, group: vec3<u32>) {
    let quads = 16u;
    let row0 = group.y * 64u;
    let col0 = group.x * 64u;
    let s = strides();
    let a_base = group.z * dims.a_batch;
    let b_base = group.z * dims.b_batch;
    var c0_0 = vec4<f32>(0.0);
    var c0_1 = vec4<f32>(0.0);
    var c1_0 = vec4<f32>(0.0);
    var c1_1 = vec4<f32>(0.0);
    var c2_0 = vec4<f32>(0.0);
    var c2_1 = vec4<f32>(0.0);
    var c3_0 = vec4<f32>(0.0);
    var c3_1 = vec4<f32>(0.0);
    var c4_0 = vec4<f32>(0.0);
    var c4_1 = vec4<f32>(0.0);
    var c5_0 = vec4<f32>(0.0);
    var c5_1 = vec4<f32>(0.0);
    var c6_0 = vec4<f32>(0.0);
    var c6_1 = vec4<f32>(0.0);
    var c7_0 = vec4<f32>(0.0);
    var c7_1 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < dims.k; k0 += KSTEP) {
        stage(64u, 64u, lid, s, a_base, b_base, row0, col0, k0);
        workgroupBarrier();
        for (var kk = 0u; kk < KSTEP; kk++) {
            let at = kk * quads + local.y;
            let bt = kk * quads + local.x;
            let a0 = a_tile[at];
            let a1 = a_tile[at + 8u];
            let b0 = b_tile[bt];
            let b1 = b_tile[bt + 8u];
            c0_0 += a0.x * b0;
            c0_1 += a0.x * b1;
            c1_0 += a0.y * b0;
            c1_1 += a0.y * b1;
            c2_0 += a0.z * b0;
            c2_1 += a0.z * b1;
            c3_0 += a0.w * b0;
            c3_1 += a0.w * b1;
            c4_0 += a1.x * b0;
            c4_1 += a1.x * b1;
            c5_0 += a1.y * b0;
            c5_1 += a1.y * b1;
            c6_0 += a1.z * b0;
            c6_1 += a1.z * b1;
            c7_0 += a1.w * b0;
            c7_1 += a1.w * b1;
        }
        workgroupBarrier();
    }
    let base = group.z * dims.m * dims.n;
    let r = row0 + 4u * local.y;
    let col = col0 + 4u * local.x;
    store4(base, r, col, c0_0);
    store4(base, r, col + 32u, c0_1);
    store4(base, r + 1u, col, c1_0);
    store4(base, r + 1u, col + 32u, c1_1);
    store4(base, r + 2u, col, c2_0);
    store4(base, r + 2u, col + 32u, c2_1);
    store4(base, r + 3u, col, c3_0);
    store4(base, r + 3u, col + 32u, c3_1);
    store4(base, r + 32u, col, c4_0);
    store4(base, r + 32u, col + 32u, c4_1);
    store4(base, r + 33u, col, c5_0);
    store4(base, r + 33u, col + 32u, c5_1);
    store4(base, r + 34u, col, c6_0);
    store4(base, r + 34u, col + 32u, c6_1);
    store4(base, r + 35u, col, c7_0);
    store4(base, r + 35u, col + 32u, c7_1);
}

@compute @workgroup_size(8, 8)
fn matmul_64(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    product_64_8x8(local, lid, group);
}

// A 64 x 64 tile on 8 x 8 threads, 8 x 8 outputs per thread.
fn product_64_8x8_vec4(local: vec3<u32>, lid: u32, group: vec3<u32>) {
    let quads = 16u;
    let row0 = group.y * 64u;
    let col0 = group.x * 64u;
    let s = strides();
    let a_base = group.z * dims.a_batch;
    let b_base = group.z * dims.b_batch;
    var c0_0 = vec4<f32>(0.0);
    var c0_1 = vec4<f32>(0.0);
    var c1_0 = vec4<f32>(0.0);
    var c1_1 = vec4<f32>(0.0);
    var c2_0 = vec4<f32>(0.0);
    var c2_1 = vec4<f32>(0.0);
    var c3_0 = vec4<f32>(0.0);
    var c3_1 = vec4<f32>(0.0);
    var c4_0 = vec4<f32>(0.0);
    var c4_1 = vec4<f32>(0.0);
    var c5_0 = vec4<f32>(0.0);
    var c5_1 = vec4<f32>(0.0);
    var c6_0 = vec4<f32>(0.0);
    var c6_1 = vec4<f32>(0.0);
    var c7_0 = vec4<f32>(0.0);
    var c7_1 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < dims.k; k0 += KSTEP) {
        stage_vec4(64u, 64u, lid, s, a_base, b_base, row0, col0, k0);
        workgroupBarrier();
        for (var kk = 0u; kk < KSTEP; kk++) {
            let at = kk * quads + local.y;
            let bt = kk * quads + local.x;
            let a0 = a_tile[at];
            let a1 = a_tile[at + 8u];
            let b0 = b_tile[bt];
            let b1 = b_tile[bt + 8u];
            c0_0 += a0.x * b0;
            c0_1 += a0.x * b1;
            c1_0 += a0.y * b0;
            c1_1 += a0.y * b1;
            c2_0 += a0.z * b0;
            c2_1 += a0.z * b1;
            c3_0 += a0.w * b0;
            c3_1 += a0.w * b1;
            c4_0 += a1.x * b0;
            c4_1 += a1.x * b1;
            c5_0 += a1.y * b0;
            c5_1 += a1.y * b1;
            c6_0 += a1.z * b0;
            c6_1 += a1.z * b1;
            c7_0 += a1.w * b0;
            c7_1 += a1.w * b1;
        }
        workgroupBarrier();
    }
    let base = group.z * dims.m * dims.n;
    let r = row0 + 4u * local.y;
    let col = col0 + 4u * local.x;
    store4(base, r, col, c0_0);
    store4(base, r, col + 32u, c0_1);
    store4(base, r + 1u, col, c1_0);
    store4(base, r + 1u, col + 32u, c1_1);
    store4(base, r + 2u, col, c2_0);
    store4(base, r + 2u, col + 32u, c2_1);
    store4(base, r + 3u, col, c3_0);
    store4(base, r + 3u, col + 32u, c3_1);
    store4(base, r + 32u, col, c4_0);
    store4(base, r + 32u, col + 32u, c4_1);
    store4(base, r + 33u, col, c5_0);
    store4(base, r + 33u, col + 32u, c5_1);
    store4(base, r + 34u, col, c6_0);
    store4(base, r + 34u, col + 32u, c6_1);
    store4(base, r + 35u, col, c7_0);
    store4(base, r + 35u, col + 32u, c7_1);
}

@compute @workgroup_size(8, 8)
fn matmul_64_vec4(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    product_64_8x8_vec4(local, lid, group);
}

// A 32 x 32 tile on 4 x 4 threads, 8 x 8 outputs per thread.
fn product_32_8x8(local: vec3<u32>, lid: u32, group: vec3<u32>) {
    let quads = 8u;
    let row0 = group.y * 32u;
    let col0 = group.x * 32u;
    let s = strides();
    let a_base = group.z * dims.a_batch;
    let b_base = group.z * dims.b_batch;
    var c0_0 = vec4<f32>(0.0);
    var c0_1 = vec4<f32>(0.0);
    var c1_0 = vec4<f32>(0.0);
    var c1_1 = vec4<f32>(0.0);
    var c2_0 = vec4<f32>(0.0);
    var c2_1 = vec4<f32>(0.0);
    var c3_0 = vec4<f32>(0.0);
    var c3_1 = vec4<f32>(0.0);
    var c4_0 = vec4<f32>(0.0);
    var c4_1 = vec4<f32>(0.0);
    var c5_0 = vec4<f32>(0.0);
    var c5_1 = vec4<f32>(0.0);
    var c6_0 = vec4<f32>(0.0);
    var c6_1 = vec4<f32>(0.0);
    var c7_0 = vec4<f32>(0.0);
    var c7_1 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < dims.k; k0 += KSTEP) {
        stage(32u, 16u, lid, s, a_base, b_base, row0, col0, k0);
        workgroupBarrier();
        for (var kk = 0u; kk < KSTEP; kk++) {
            let at = kk * quads + local.y;
            let bt = kk * quads + local.x;
            let a0 = a_tile[at];
            let a1 = a_tile[at + 4u];
            let b0 = b_tile[bt];
            let b1 = b_tile[bt + 4u];
            c0_0 += a0.x * b0;
            c0_1 += a0.x * b1;
            c1_0 += a0.y * b0;
            c1_1 += a0.y * b1;
            c2_0 += a0.z * b0;
            c2_1 += a0.z * b1;
            c3_0 += a0.w * b0;
            c3_1 += a0.w * b1;
            c4_0 += a1.x * b0;
            c4_1 += a1.x * b1;
            c5_0 += a1.y * b0;
            c5_1 += a1.y * b1;
            c6_0 += a1.z * b0;
            c6_1 += a1.z * b1;
            c7_0 += a1.w * b0;
            c7_1 += a1.w * b1;
        }
        workgroupBarrier();
    }
    let base = group.z * dims.m * dims.n;
    let r = row0 + 4u * local.y;
    let col = col0 + 4u * local.x;
    store4(base, r, col, c0_0);
    store4(base, r, col + 16u, c0_1);
    store4(base, r + 1u, col, c1_0);
    store4(base, r + 1u, col + 16u, c1_1);
    store4(base, r + 2u, col, c2_0);
    store4(base, r + 2u, col + 16u, c2_1);
    store4(base, r + 3u, col, c3_0);
    store4(base, r + 3u, col + 16u, c3_1);
    store4(base, r + 16u, col, c4_0);
    store4(base, r + 16u, col + 16u, c4_1);
    store4(base, r + 17u, col, c5_0);
    store4(base, r + 17u, col + 16u, c5_1);
    store4(base, r + 18u, col, c6_0);
    store4(base, r + 18u, col + 16u, c6_1);
    store4(base, r + 19u, col, c7_0);
    store4(base, r + 19u, col + 16u, c7_1);
}

@compute @workgroup_size(4, 4)
fn matmul_32(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    product_32_8x8(local, lid, group);
}

// A 32 x 32 tile on 4 x 4 threads, 8 x 8 outputs per thread.
fn product_32_8x8_vec4(local: vec3<u32>, lid: u32, group: vec3<u32>) {
    let quads = 8u;
    let row0 = group.y * 32u;
    let col0 = group.x * 32u;
    let s = strides();
    let a_base = group.z * dims.a_batch;
    let b_base = group.z * dims.b_batch;
    var c0_0 = vec4<f32>(0.0);
    var c0_1 = vec4<f32>(0.0);
    var c1_0 = vec4<f32>(0.0);
    var c1_1 = vec4<f32>(0.0);
    var c2_0 = vec4<f32>(0.0);
    var c2_1 = vec4<f32>(0.0);
    var c3_0 = vec4<f32>(0.0);
    var c3_1 = vec4<f32>(0.0);
    var c4_0 = vec4<f32>(0.0);
    var c4_1 = vec4<f32>(0.0);
    var c5_0 = vec4<f32>(0.0);
    var c5_1 = vec4<f32>(0.0);
    var c6_0 = vec4<f32>(0.0);
    var c6_1 = vec4<f32>(0.0);
    var c7_0 = vec4<f32>(0.0);
    var c7_1 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < dims.k; k0 += KSTEP) {
        stage_vec4(32u, 16u, lid, s, a_base, b_base, row0, col0, k0);
        workgroupBarrier();
        for (var kk = 0u; kk < KSTEP; kk++) {
            let at = kk * quads + local.y;
            let bt = kk * quads + local.x;
            let a0 = a_tile[at];
            let a1 = a_tile[at + 4u];
            let b0 = b_tile[bt];
            let b1 = b_tile[bt + 4u];
            c0_0 += a0.x * b0;
            c0_1 += a0.x * b1;
            c1_0 += a0.y * b0;
            c1_1 += a0.y * b1;
            c2_0 += a0.z * b0;
            c2_1 += a0.z * b1;
            c3_0 += a0.w * b0;
            c3_1 += a0.w * b1;
            c4_0 += a1.x * b0;
            c4_1 += a1.x * b1;
            c5_0 += a1.y * b0;
            c5_1 += a1.y * b1;
            c6_0 += a1.z * b0;
            c6_1 += a1.z * b1;
            c7_0 += a1.w * b0;
            c7_1 += a1.w * b1;
        }
        workgroupBarrier();
    }
    let base = group.z * dims.m * dims.n;
    let r = row0 + 4u * local.y;
    let col = col0 + 4u * local.x;
    store4(base, r, col, c0_0);
    store4(base, r, col + 16u, c0_1);
    store4(base, r + 1u, col, c1_0);
    store4(base, r + 1u, col + 16u, c1_1);
    store4(base, r + 2u, col, c2_0);
    store4(base, r + 2u, col + 16u, c2_1);
    store4(base, r + 3u, col, c3_0);
    store4(base, r + 3u, col + 16u, c3_1);
    store4(base, r + 16u, col, c4_0);
    store4(base, r + 16u, col + 16u, c4_1);
    store4(base, r + 17u, col, c5_0);
    store4(base, r + 17u, col + 16u, c5_1);
    store4(base, r + 18u, col, c6_0);
    store4(base, r + 18u, col + 16u, c6_1);
    store4(base, r + 19u, col, c7_0);
    store4(base, r + 19u, col + 16u, c7_1);
}

@compute @workgroup_size(4, 4)
fn matmul_32_vec4(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    product_32_8x8_vec4(local, lid, group);
}

