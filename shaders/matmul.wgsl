// Batched matrix products C = op(A) op(B), op transposing when asked: a batch of [m, k] x [k, n]
// products, one per workgroup z. Each workgroup computes a TILE x TILE block of C from K-steps of
// 8 staged in workgroup memory, each thread a block of C in named vec4 accumulators (a Block16 or
// Block8): 16 x 16 (sixty-four vec4s) in matmul_16x16, 8 x 8 in matmul_8x8.
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
// Each body is written once. The override constant TILE sets the tile and with it the workgroup
// (TILE / 16 or TILE / 8 threads square); the op picks it from the sizes: large tiles reuse each
// loaded value more, small ones keep more workgroups busy on small products. Each body has three
// entry points: for GPUs matmul_BxB for any sizes, staging scalars, and matmul_BxB_vec4 when m, n
// and k are nonzero multiples of 4, staging with one vec4 load where the other makes four strided
// scalar loads; for software adapters matmul_BxB_direct, which stages nothing (see below). That
// choice is no override: the vec4 loads need the operands bound as arrays of vec4 too, and one
// entry point may not see one binding as two variables (four scalar loads in place of each vec4
// load, which an override could choose, ran 10-30% slower on lavapipe). A product whose tiles are
// too few for the adapter splits k over workgroup z (Dims.splits), and matmul_sum_splits adds
// the partial products up.
//
// A linear layer's bias is added as each value of C is written (the override BIAS), or after
// the partial products are summed for a split-K product: the add kernel it replaces read and
// wrote all of C again, in a dispatch of its own. Likewise the feed-forward's activation (the
// override ACTIVATION, GELU or ReLU): its up-projection writes C (the activation's backward
// reads it) and act(C) beside it. The module goes on in gelu.wgsl.

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
    // Split-K: each product's k is cut into `splits` ranges of `k_split` (a multiple of KSTEP),
    // one workgroup z each, whose partial products go to C as [batch, splits, m, n] for
    // matmul_sum_splits to add up. One split: C is the product itself.
    splits: u32,
    k_split: u32,
    // Products in the batch (read by matmul_sum_splits).
    batch: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
// The same operands seen as vec4s, for the entry points that need m, n and k multiples of 4.
@group(0) @binding(1) var<storage, read> a4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b4: array<vec4<f32>>;
// The bias [n] added to every row of C when BIAS is true; products without one bind A here, unread.
@group(0) @binding(4) var<storage, read> bias: array<f32>;
// act(C) when ACTIVATION is not 0; products without one bind a word of scratch here, unwritten.
@group(0) @binding(5) var<storage, read_write> activated: array<f32>;

override BIAS: bool = false;
// The activation written beside C: 0 none, 1 GELU, 2 ReLU (src/ops/unary.rs, Activation).
override ACTIVATION: u32 = 0u;

fn activate(x: f32) -> f32 {
    if (ACTIVATION == 2u) {
        return max(x, 0.0);
    }
    return gelu(x);
}

// Rows and columns of C per workgroup: a multiple of 16 for matmul_16x16, of 8 for matmul_8x8.
override TILE: u32;

// Depths staged per K-step (8, 16 or 32): deeper steps are fewer barriers per product, at
// TILE / 2 · KSTEP vec4s of workgroup memory, at most WebGPU's 16 KiB.
override KSTEP: u32 = 8u;

// Depth-major tiles: a_tile[kk * TILE/4 + i] holds rows 4i..4i+3 of op(A) at depth kk of the
// current K-step; b_tile likewise holds columns of op(B).
var<workgroup> a_tile: array<vec4<f32>, TILE / 4u * KSTEP>;
var<workgroup> b_tile: array<vec4<f32>, TILE / 4u * KSTEP>;

// Strides of op(A) and op(B): (row, column) steps in the stored arrays.
struct Strides {
    a_row: u32,
    a_col: u32,
    b_row: u32,
    b_col: u32,
}

// Where a workgroup's tile starts: its first row and column of C, where its matrices of A and B
// start, how to step through them, and its range of k.
struct Origin {
    row0: u32,
    col0: u32,
    a_base: u32,
    b_base: u32,
    s: Strides,
    k_begin: u32,
    k_end: u32,
}

fn origin(group: vec3<u32>) -> Origin {
    let ta = dims.trans_a != 0u;
    let tb = dims.trans_b != 0u;
    let s = Strides(
        select(dims.k, 1u, ta),
        select(1u, dims.m, ta),
        select(dims.n, 1u, tb),
        select(1u, dims.k, tb),
    );
    let row0 = group.y * TILE;
    let col0 = group.x * TILE;
    let product = group.z / dims.splits;
    let k_begin = (group.z % dims.splits) * dims.k_split;
    let k_end = min(dims.k, k_begin + dims.k_split);
    return Origin(row0, col0, product * dims.a_batch, product * dims.b_batch, s, k_begin, k_end);
}

// Stages op(A)[row0.., k0..k0+8] and op(B)[k0..k0+8, col0..] in workgroup memory on `threads`
// threads: each moves whole vec4s (four rows of A, four columns of B, at one depth), zero outside
// the matrices.
fn stage(threads: u32, lid: u32, o: Origin, k0: u32) {
    let quads = TILE / 4u;
    let s = o.s;
    for (var g = lid; g < quads * KSTEP; g += threads) {
        let kk = k0 + g / quads;
        let i = (g % quads) * 4u;
        let r = o.row0 + i;
        let col = o.col0 + i;
        var va = vec4<f32>(0.0);
        var vb = vec4<f32>(0.0);
        if (kk < dims.k) {
            let at = o.a_base + r * s.a_row + kk * s.a_col;
            if (r + 3u < dims.m) {
                va = vec4<f32>(a[at], a[at + s.a_row], a[at + 2u * s.a_row], a[at + 3u * s.a_row]);
            } else {
                for (var j = 0u; j < 4u; j++) {
                    if (r + j < dims.m) {
                        va[j] = a[at + j * s.a_row];
                    }
                }
            }
            let bt = o.b_base + kk * s.b_row + col * s.b_col;
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

// Stages like `stage` when m, n and k are multiples of 4, so that every vec4 of the stored
// matrices lies wholly inside or outside them: each thread moves a 4 x 4 block of op(A) (four rows
// at four depths) and one of op(B) in four vec4 loads each. A vec4 along k (A stored [m, k], B
// stored [n, k]) holds four depths of one row or column: the block is transposed, which in
// registers is only a renaming.
fn stage_vec4(threads: u32, lid: u32, o: Origin, k0: u32) {
    for (var g = lid; g < (TILE / 4u) * (KSTEP / 4u); g += threads) {
        store_blocks(g, load_blocks(g, o, k0));
    }
}

// The 4 x 4 blocks of op(A) and op(B) that `stage_vec4` moves as its g-th: four rows (columns) at
// four depths, at depth 4 · (g / (TILE / 4)) of the K-step and row (column) 4 · (g % (TILE / 4))
// of the tile.
struct Blocks {
    a: mat4x4<f32>,
    b: mat4x4<f32>,
}

// Block g of the K-step from k0: zero outside the matrices, and for g past the step's blocks.
fn load_blocks(g: u32, o: Origin, k0: u32) -> Blocks {
    let quads = TILE / 4u;
    let s = o.s;
    let ta = dims.trans_a != 0u;
    let tb = dims.trans_b != 0u;
    // vec4s between the four loads: the next row (or depth, with trans_a) of the stored A.
    let a_step = select(s.a_row, s.a_col, ta) / 4u;
    let b_step = select(s.b_row, s.b_col, tb) / 4u;
    var blocks = Blocks(mat4x4<f32>(), mat4x4<f32>());
    if (g >= quads * (KSTEP / 4u)) {
        return blocks;
    }
    let kk = k0 + 4u * (g / quads);
    let i = 4u * (g % quads);
    let r = o.row0 + i;
    let col = o.col0 + i;
    if (kk < dims.k) {
        if (r < dims.m) {
            let at = (o.a_base + r * s.a_row + kk * s.a_col) / 4u;
            let m = mat4x4<f32>(a4[at], a4[at + a_step], a4[at + 2u * a_step], a4[at + 3u * a_step]);
            blocks.a = m;
            if (!ta) {
                blocks.a = transpose(m);
            }
        }
        if (col < dims.n) {
            let bt = (o.b_base + kk * s.b_row + col * s.b_col) / 4u;
            let m = mat4x4<f32>(b4[bt], b4[bt + b_step], b4[bt + 2u * b_step], b4[bt + 3u * b_step]);
            blocks.b = m;
            if (tb) {
                blocks.b = transpose(m);
            }
        }
    }
    return blocks;
}

// Writes block g where the K-step's tiles keep it (nothing for g past the step's blocks).
fn store_blocks(g: u32, blocks: Blocks) {
    let quads = TILE / 4u;
    if (g >= quads * (KSTEP / 4u)) {
        return;
    }
    let at = 4u * (g / quads) * quads + g % quads;
    a_tile[at] = blocks.a[0];
    a_tile[at + quads] = blocks.a[1];
    a_tile[at + 2u * quads] = blocks.a[2];
    a_tile[at + 3u * quads] = blocks.a[3];
    b_tile[at] = blocks.b[0];
    b_tile[at + quads] = blocks.b[1];
    b_tile[at + 2u * quads] = blocks.b[2];
    b_tile[at + 3u * quads] = blocks.b[3];
}

// Writes four columns from `col` of one output row, skipping what lies outside C.
fn store4(base: u32, row: u32, col: u32, v: vec4<f32>) {
    if (row >= dims.m) {
        return;
    }
    let at = base + row * dims.n;
    for (var j = 0u; j < 4u; j++) {
        if (col + j < dims.n) {
            var value = v[j];
            if (BIAS) {
                value += bias[col + j];
            }
            c[at + col + j] = value;
            if (ACTIVATION != 0u) {
                activated[at + col + j] = activate(value);
            }
        }
    }
}

// A thread's 16 x 16 block of C in matmul_16x16: cXX_P holds row XX, columns 4P.. of it.
struct Block16 {
    c0_0: vec4<f32>, c0_1: vec4<f32>, c0_2: vec4<f32>, c0_3: vec4<f32>,
    c1_0: vec4<f32>, c1_1: vec4<f32>, c1_2: vec4<f32>, c1_3: vec4<f32>,
    c2_0: vec4<f32>, c2_1: vec4<f32>, c2_2: vec4<f32>, c2_3: vec4<f32>,
    c3_0: vec4<f32>, c3_1: vec4<f32>, c3_2: vec4<f32>, c3_3: vec4<f32>,
    c4_0: vec4<f32>, c4_1: vec4<f32>, c4_2: vec4<f32>, c4_3: vec4<f32>,
    c5_0: vec4<f32>, c5_1: vec4<f32>, c5_2: vec4<f32>, c5_3: vec4<f32>,
    c6_0: vec4<f32>, c6_1: vec4<f32>, c6_2: vec4<f32>, c6_3: vec4<f32>,
    c7_0: vec4<f32>, c7_1: vec4<f32>, c7_2: vec4<f32>, c7_3: vec4<f32>,
    c8_0: vec4<f32>, c8_1: vec4<f32>, c8_2: vec4<f32>, c8_3: vec4<f32>,
    c9_0: vec4<f32>, c9_1: vec4<f32>, c9_2: vec4<f32>, c9_3: vec4<f32>,
    c10_0: vec4<f32>, c10_1: vec4<f32>, c10_2: vec4<f32>, c10_3: vec4<f32>,
    c11_0: vec4<f32>, c11_1: vec4<f32>, c11_2: vec4<f32>, c11_3: vec4<f32>,
    c12_0: vec4<f32>, c12_1: vec4<f32>, c12_2: vec4<f32>, c12_3: vec4<f32>,
    c13_0: vec4<f32>, c13_1: vec4<f32>, c13_2: vec4<f32>, c13_3: vec4<f32>,
    c14_0: vec4<f32>, c14_1: vec4<f32>, c14_2: vec4<f32>, c14_3: vec4<f32>,
    c15_0: vec4<f32>, c15_1: vec4<f32>, c15_2: vec4<f32>, c15_3: vec4<f32>,
}

// A thread's 16 x 16 block += the outer product of op(A)'s rows (a0..a3: four rows each, a
// quarter tile apart) and op(B)'s columns (b0..b3) at one depth.
fn fma_16x16(acc: ptr<function, Block16>, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>, b2: vec4<f32>, b3: vec4<f32>) {
    (*acc).c0_0 += a0.x * b0;
    (*acc).c0_1 += a0.x * b1;
    (*acc).c0_2 += a0.x * b2;
    (*acc).c0_3 += a0.x * b3;
    (*acc).c1_0 += a0.y * b0;
    (*acc).c1_1 += a0.y * b1;
    (*acc).c1_2 += a0.y * b2;
    (*acc).c1_3 += a0.y * b3;
    (*acc).c2_0 += a0.z * b0;
    (*acc).c2_1 += a0.z * b1;
    (*acc).c2_2 += a0.z * b2;
    (*acc).c2_3 += a0.z * b3;
    (*acc).c3_0 += a0.w * b0;
    (*acc).c3_1 += a0.w * b1;
    (*acc).c3_2 += a0.w * b2;
    (*acc).c3_3 += a0.w * b3;
    (*acc).c4_0 += a1.x * b0;
    (*acc).c4_1 += a1.x * b1;
    (*acc).c4_2 += a1.x * b2;
    (*acc).c4_3 += a1.x * b3;
    (*acc).c5_0 += a1.y * b0;
    (*acc).c5_1 += a1.y * b1;
    (*acc).c5_2 += a1.y * b2;
    (*acc).c5_3 += a1.y * b3;
    (*acc).c6_0 += a1.z * b0;
    (*acc).c6_1 += a1.z * b1;
    (*acc).c6_2 += a1.z * b2;
    (*acc).c6_3 += a1.z * b3;
    (*acc).c7_0 += a1.w * b0;
    (*acc).c7_1 += a1.w * b1;
    (*acc).c7_2 += a1.w * b2;
    (*acc).c7_3 += a1.w * b3;
    (*acc).c8_0 += a2.x * b0;
    (*acc).c8_1 += a2.x * b1;
    (*acc).c8_2 += a2.x * b2;
    (*acc).c8_3 += a2.x * b3;
    (*acc).c9_0 += a2.y * b0;
    (*acc).c9_1 += a2.y * b1;
    (*acc).c9_2 += a2.y * b2;
    (*acc).c9_3 += a2.y * b3;
    (*acc).c10_0 += a2.z * b0;
    (*acc).c10_1 += a2.z * b1;
    (*acc).c10_2 += a2.z * b2;
    (*acc).c10_3 += a2.z * b3;
    (*acc).c11_0 += a2.w * b0;
    (*acc).c11_1 += a2.w * b1;
    (*acc).c11_2 += a2.w * b2;
    (*acc).c11_3 += a2.w * b3;
    (*acc).c12_0 += a3.x * b0;
    (*acc).c12_1 += a3.x * b1;
    (*acc).c12_2 += a3.x * b2;
    (*acc).c12_3 += a3.x * b3;
    (*acc).c13_0 += a3.y * b0;
    (*acc).c13_1 += a3.y * b1;
    (*acc).c13_2 += a3.y * b2;
    (*acc).c13_3 += a3.y * b3;
    (*acc).c14_0 += a3.z * b0;
    (*acc).c14_1 += a3.z * b1;
    (*acc).c14_2 += a3.z * b2;
    (*acc).c14_3 += a3.z * b3;
    (*acc).c15_0 += a3.w * b0;
    (*acc).c15_1 += a3.w * b1;
    (*acc).c15_2 += a3.w * b2;
    (*acc).c15_3 += a3.w * b3;
}

// Adds the K-step staged in a_tile and b_tile to a thread's 16 x 16 block.
fn accumulate_16x16(acc: ptr<function, Block16>, local: vec3<u32>) {
    // Threads along each side, which is also the quads between a thread's blocks of four rows.
    let t = TILE / 16u;
    let quads = TILE / 4u;
    for (var kk = 0u; kk < KSTEP; kk++) {
        let at = kk * quads + local.y;
        let bt = kk * quads + local.x;
        fma_16x16(acc, a_tile[at], a_tile[at + t], a_tile[at + 2u * t], a_tile[at + 3u * t],
            b_tile[bt], b_tile[bt + t], b_tile[bt + 2u * t], b_tile[bt + 3u * t]);
    }
}

// Four rows of op(A) from `row` at depth kk, or four columns of op(B), straight from the
// storage buffers: zero outside the matrices.
fn a_rows4(o: Origin, row: u32, kk: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    let at = o.a_base + row * o.s.a_row + kk * o.s.a_col;
    for (var j = 0u; j < 4u; j++) {
        if (row + j < dims.m) {
            v[j] = a[at + j * o.s.a_row];
        }
    }
    return v;
}

fn b_cols4(o: Origin, col: u32, kk: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    let at = o.b_base + kk * o.s.b_row + col * o.s.b_col;
    for (var j = 0u; j < 4u; j++) {
        if (col + j < dims.n) {
            v[j] = b[at + j * o.s.b_col];
        }
    }
    return v;
}

// Writes a thread's 16 x 16 block into C.
fn store_16x16(acc: ptr<function, Block16>, local: vec3<u32>, group: vec3<u32>) {
    let base = group.z * dims.m * dims.n;
    let r = group.y * TILE + 4u * local.y;
    let col = group.x * TILE + 4u * local.x;
    // Rows (and columns) between a thread's blocks of four.
    let d = TILE / 4u;
    store4(base, r, col, (*acc).c0_0);
    store4(base, r, col + d, (*acc).c0_1);
    store4(base, r, col + 2u * d, (*acc).c0_2);
    store4(base, r, col + 3u * d, (*acc).c0_3);
    store4(base, r + 1u, col, (*acc).c1_0);
    store4(base, r + 1u, col + d, (*acc).c1_1);
    store4(base, r + 1u, col + 2u * d, (*acc).c1_2);
    store4(base, r + 1u, col + 3u * d, (*acc).c1_3);
    store4(base, r + 2u, col, (*acc).c2_0);
    store4(base, r + 2u, col + d, (*acc).c2_1);
    store4(base, r + 2u, col + 2u * d, (*acc).c2_2);
    store4(base, r + 2u, col + 3u * d, (*acc).c2_3);
    store4(base, r + 3u, col, (*acc).c3_0);
    store4(base, r + 3u, col + d, (*acc).c3_1);
    store4(base, r + 3u, col + 2u * d, (*acc).c3_2);
    store4(base, r + 3u, col + 3u * d, (*acc).c3_3);
    store4(base, r + d, col, (*acc).c4_0);
    store4(base, r + d, col + d, (*acc).c4_1);
    store4(base, r + d, col + 2u * d, (*acc).c4_2);
    store4(base, r + d, col + 3u * d, (*acc).c4_3);
    store4(base, r + d + 1u, col, (*acc).c5_0);
    store4(base, r + d + 1u, col + d, (*acc).c5_1);
    store4(base, r + d + 1u, col + 2u * d, (*acc).c5_2);
    store4(base, r + d + 1u, col + 3u * d, (*acc).c5_3);
    store4(base, r + d + 2u, col, (*acc).c6_0);
    store4(base, r + d + 2u, col + d, (*acc).c6_1);
    store4(base, r + d + 2u, col + 2u * d, (*acc).c6_2);
    store4(base, r + d + 2u, col + 3u * d, (*acc).c6_3);
    store4(base, r + d + 3u, col, (*acc).c7_0);
    store4(base, r + d + 3u, col + d, (*acc).c7_1);
    store4(base, r + d + 3u, col + 2u * d, (*acc).c7_2);
    store4(base, r + d + 3u, col + 3u * d, (*acc).c7_3);
    store4(base, r + 2u * d, col, (*acc).c8_0);
    store4(base, r + 2u * d, col + d, (*acc).c8_1);
    store4(base, r + 2u * d, col + 2u * d, (*acc).c8_2);
    store4(base, r + 2u * d, col + 3u * d, (*acc).c8_3);
    store4(base, r + 2u * d + 1u, col, (*acc).c9_0);
    store4(base, r + 2u * d + 1u, col + d, (*acc).c9_1);
    store4(base, r + 2u * d + 1u, col + 2u * d, (*acc).c9_2);
    store4(base, r + 2u * d + 1u, col + 3u * d, (*acc).c9_3);
    store4(base, r + 2u * d + 2u, col, (*acc).c10_0);
    store4(base, r + 2u * d + 2u, col + d, (*acc).c10_1);
    store4(base, r + 2u * d + 2u, col + 2u * d, (*acc).c10_2);
    store4(base, r + 2u * d + 2u, col + 3u * d, (*acc).c10_3);
    store4(base, r + 2u * d + 3u, col, (*acc).c11_0);
    store4(base, r + 2u * d + 3u, col + d, (*acc).c11_1);
    store4(base, r + 2u * d + 3u, col + 2u * d, (*acc).c11_2);
    store4(base, r + 2u * d + 3u, col + 3u * d, (*acc).c11_3);
    store4(base, r + 3u * d, col, (*acc).c12_0);
    store4(base, r + 3u * d, col + d, (*acc).c12_1);
    store4(base, r + 3u * d, col + 2u * d, (*acc).c12_2);
    store4(base, r + 3u * d, col + 3u * d, (*acc).c12_3);
    store4(base, r + 3u * d + 1u, col, (*acc).c13_0);
    store4(base, r + 3u * d + 1u, col + d, (*acc).c13_1);
    store4(base, r + 3u * d + 1u, col + 2u * d, (*acc).c13_2);
    store4(base, r + 3u * d + 1u, col + 3u * d, (*acc).c13_3);
    store4(base, r + 3u * d + 2u, col, (*acc).c14_0);
    store4(base, r + 3u * d + 2u, col + d, (*acc).c14_1);
    store4(base, r + 3u * d + 2u, col + 2u * d, (*acc).c14_2);
    store4(base, r + 3u * d + 2u, col + 3u * d, (*acc).c14_3);
    store4(base, r + 3u * d + 3u, col, (*acc).c15_0);
    store4(base, r + 3u * d + 3u, col + d, (*acc).c15_1);
    store4(base, r + 3u * d + 3u, col + 2u * d, (*acc).c15_2);
    store4(base, r + 3u * d + 3u, col + 3u * d, (*acc).c15_3);
}

@compute @workgroup_size(TILE / 16u, TILE / 16u)
fn matmul_16x16(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    let o = origin(group);
    var acc = Block16();
    for (var k0 = o.k_begin; k0 < o.k_end; k0 += KSTEP) {
        stage(TILE * TILE / 256u, lid, o, k0);
        workgroupBarrier();
        accumulate_16x16(&acc, local);
        workgroupBarrier();
    }
    store_16x16(&acc, local, group);
}

@compute @workgroup_size(TILE / 16u, TILE / 16u)
fn matmul_16x16_vec4(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    let o = origin(group);
    var acc = Block16();
    for (var k0 = o.k_begin; k0 < o.k_end; k0 += KSTEP) {
        stage_vec4(TILE * TILE / 256u, lid, o, k0);
        workgroupBarrier();
        accumulate_16x16(&acc, local);
        workgroupBarrier();
    }
    store_16x16(&acc, local, group);
}

// A thread's 8 x 8 block of C in matmul_8x8: cXX_P holds row XX, columns 4P.. of it.
struct Block8 {
    c0_0: vec4<f32>, c0_1: vec4<f32>,
    c1_0: vec4<f32>, c1_1: vec4<f32>,
    c2_0: vec4<f32>, c2_1: vec4<f32>,
    c3_0: vec4<f32>, c3_1: vec4<f32>,
    c4_0: vec4<f32>, c4_1: vec4<f32>,
    c5_0: vec4<f32>, c5_1: vec4<f32>,
    c6_0: vec4<f32>, c6_1: vec4<f32>,
    c7_0: vec4<f32>, c7_1: vec4<f32>,
}

// A thread's 8 x 8 block += the outer product of op(A)'s rows (a0, a1: four rows each, half a
// tile apart) and op(B)'s columns (b0, b1) at one depth.
fn fma_8x8(acc: ptr<function, Block8>, a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>) {
    (*acc).c0_0 += a0.x * b0;
    (*acc).c0_1 += a0.x * b1;
    (*acc).c1_0 += a0.y * b0;
    (*acc).c1_1 += a0.y * b1;
    (*acc).c2_0 += a0.z * b0;
    (*acc).c2_1 += a0.z * b1;
    (*acc).c3_0 += a0.w * b0;
    (*acc).c3_1 += a0.w * b1;
    (*acc).c4_0 += a1.x * b0;
    (*acc).c4_1 += a1.x * b1;
    (*acc).c5_0 += a1.y * b0;
    (*acc).c5_1 += a1.y * b1;
    (*acc).c6_0 += a1.z * b0;
    (*acc).c6_1 += a1.z * b1;
    (*acc).c7_0 += a1.w * b0;
    (*acc).c7_1 += a1.w * b1;
}

// Adds the K-step staged in a_tile and b_tile to a thread's 8 x 8 block.
fn accumulate_8x8(acc: ptr<function, Block8>, local: vec3<u32>) {
    // Threads along each side, which is also the quads between a thread's blocks of four rows.
    let t = TILE / 8u;
    let quads = TILE / 4u;
    for (var kk = 0u; kk < KSTEP; kk++) {
        let at = kk * quads + local.y;
        let bt = kk * quads + local.x;
        fma_8x8(acc, a_tile[at], a_tile[at + t], b_tile[bt], b_tile[bt + t]);
    }
}

// Writes a thread's 8 x 8 block into C.
fn store_8x8(acc: ptr<function, Block8>, local: vec3<u32>, group: vec3<u32>) {
    let base = group.z * dims.m * dims.n;
    let r = group.y * TILE + 4u * local.y;
    let col = group.x * TILE + 4u * local.x;
    // Rows (and columns) between a thread's blocks of four.
    let d = TILE / 2u;
    store4(base, r, col, (*acc).c0_0);
    store4(base, r, col + d, (*acc).c0_1);
    store4(base, r + 1u, col, (*acc).c1_0);
    store4(base, r + 1u, col + d, (*acc).c1_1);
    store4(base, r + 2u, col, (*acc).c2_0);
    store4(base, r + 2u, col + d, (*acc).c2_1);
    store4(base, r + 3u, col, (*acc).c3_0);
    store4(base, r + 3u, col + d, (*acc).c3_1);
    store4(base, r + d, col, (*acc).c4_0);
    store4(base, r + d, col + d, (*acc).c4_1);
    store4(base, r + d + 1u, col, (*acc).c5_0);
    store4(base, r + d + 1u, col + d, (*acc).c5_1);
    store4(base, r + d + 2u, col, (*acc).c6_0);
    store4(base, r + d + 2u, col + d, (*acc).c6_1);
    store4(base, r + d + 3u, col, (*acc).c7_0);
    store4(base, r + d + 3u, col + d, (*acc).c7_1);
}

@compute @workgroup_size(TILE / 8u, TILE / 8u)
fn matmul_8x8(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    let o = origin(group);
    var acc = Block8();
    for (var k0 = o.k_begin; k0 < o.k_end; k0 += KSTEP) {
        stage(TILE * TILE / 64u, lid, o, k0);
        workgroupBarrier();
        accumulate_8x8(&acc, local);
        workgroupBarrier();
    }
    store_8x8(&acc, local, group);
}

@compute @workgroup_size(TILE / 8u, TILE / 8u)
fn matmul_8x8_vec4(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    let o = origin(group);
    var acc = Block8();
    for (var k0 = o.k_begin; k0 < o.k_end; k0 += KSTEP) {
        stage_vec4(TILE * TILE / 64u, lid, o, k0);
        workgroupBarrier();
        accumulate_8x8(&acc, local);
        workgroupBarrier();
    }
    store_8x8(&acc, local, group);
}

// matmul_8x8_vec4 with the next K-step's loads in flight during this one's multiply-adds: each
// thread loads its blocks of op(A) and op(B) into registers (`load_blocks`), and only after the
// barrier that makes the current K-step visible does it issue the next one's loads, before
// `accumulate_8x8`; the stores into workgroup memory wait for the step after. Needs a K-step's
// blocks to be at most one per thread, TILE / 4 · KSTEP / 4 ≤ TILE² / 64 (the op checks).
@compute @workgroup_size(TILE / 8u, TILE / 8u)
fn matmul_8x8_vec4_prefetch(@builtin(local_invocation_id) local: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) group: vec3<u32>) {
    let o = origin(group);
    var acc = Block8();
    var next = load_blocks(lid, o, o.k_begin);
    for (var k0 = o.k_begin; k0 < o.k_end; k0 += KSTEP) {
        store_blocks(lid, next);
        workgroupBarrier();
        if (k0 + KSTEP < o.k_end) {
            next = load_blocks(lid, o, k0 + KSTEP);
        }
        accumulate_8x8(&acc, local);
        workgroupBarrier();
    }
    store_8x8(&acc, local, group);
}

// The partial products are a scratch buffer, which ops bind read_write.
@group(0) @binding(1) var<storage, read_write> parts: array<f32>;
@group(0) @binding(2) var<storage, read_write> sums: array<f32>;
@group(0) @binding(3) var<storage, read> split_bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> split_activated: array<f32>;

// After a split-K product: each output element the sum of its `splits` partial products, in
// split order (deterministic), one thread each. Then the bias, if BIAS, and the activation.
@compute @workgroup_size(64)
fn matmul_sum_splits(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let e = gid.x + gid.y * groups.x * 64u;
    let per = dims.m * dims.n;
    if (e >= dims.batch * per) {
        return;
    }
    let product = e / per;
    let at = product * dims.splits * per + e % per;
    var total = 0.0;
    for (var s = 0u; s < dims.splits; s++) {
        total += parts[at + s * per];
    }
    if (BIAS) {
        total += split_bias[e % dims.n];
    }
    sums[e] = total;
    if (ACTIVATION != 0u) {
        split_activated[e] = activate(total);
    }
}

// The `_direct` bodies, for software adapters: the same blocks, each thread loading its rows and
// columns straight from the storage buffers at every depth. Nothing is staged: no workgroup
// memory, no barriers, one load per value where staging made a load and a store more. On
// lavapipe the 128 tiles ran ~17% faster so (the peers' step's products 3.6 → 3.0 s).
@compute @workgroup_size(TILE / 16u, TILE / 16u)
fn matmul_16x16_direct(@builtin(local_invocation_id) local: vec3<u32>, @builtin(workgroup_id) group: vec3<u32>) {
    let o = origin(group);
    var acc = Block16();
    let d = TILE / 4u;
    let r = o.row0 + 4u * local.y;
    let c = o.col0 + 4u * local.x;
    for (var kk = o.k_begin; kk < o.k_end; kk++) {
        fma_16x16(&acc, a_rows4(o, r, kk), a_rows4(o, r + d, kk), a_rows4(o, r + 2u * d, kk), a_rows4(o, r + 3u * d, kk),
            b_cols4(o, c, kk), b_cols4(o, c + d, kk), b_cols4(o, c + 2u * d, kk), b_cols4(o, c + 3u * d, kk));
    }
    store_16x16(&acc, local, group);
}

@compute @workgroup_size(TILE / 8u, TILE / 8u)
fn matmul_8x8_direct(@builtin(local_invocation_id) local: vec3<u32>, @builtin(workgroup_id) group: vec3<u32>) {
    let o = origin(group);
    var acc = Block8();
    let d = TILE / 2u;
    let r = o.row0 + 4u * local.y;
    let c = o.col0 + 4u * local.x;
    for (var kk = o.k_begin; kk < o.k_end; kk++) {
        fma_8x8(&acc, a_rows4(o, r, kk), a_rows4(o, r + d, kk), b_cols4(o, c, kk), b_cols4(o, c + d, kk));
    }
    store_8x8(&acc, local, group);
}
