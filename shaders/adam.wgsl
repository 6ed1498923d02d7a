// AdamW with global gradient-norm clipping, as torch.optim.AdamW after
// torch.nn.utils.clip_grad_norm_, over every parameter in a few dispatches.
//
// The parameters, their moments and a step's gradients each lie side by side in one allocation
// (an arena), so a kernel binds each arena once and reaches them all. The work is cut into chunks
// of at most 4,096 values of one parameter, a workgroup each; a table gives each chunk's start in
// the gradient arena, the parameter arena and the moment arenas (m and v share a layout), its
// length, and whether the parameter decays (bit 31).
//
// A step is: `sum_squares`, each chunk's squared norm into one slot of `norms`; `clip_factor`,
// which adds the slots and writes the clipping factor (not finite when the global norm is not)
// and the squared global norm; then `adam_step`, which skips the update when that factor is not
// finite. A dispatch per arena combination: one on a GPU, a parameter's own on the CPU, where
// buffers are not packed. The learning rate and bias corrections change every step, so they come
// from a small storage buffer written before each run instead of from the uniform, which is fixed
// at compile time.

struct SumSquares {
    n_chunks: u32,
    first_slot: u32,
}

struct Clip {
    n_norms: u32,
    // Clip the global gradient norm to this value; 0 means no clipping.
    max_norm: f32,
}

struct Adam {
    n_chunks: u32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
}

const THREADS: u32 = 256u;
const DECAYS: u32 = 0x80000000u;

@group(0) @binding(0) var<uniform> sq: SumSquares;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
// Per chunk: gradient start, parameter start, moments start, length | DECAYS.
@group(0) @binding(2) var<storage, read> chunks: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> norms: array<f32>;

// The workgroup's chunk: the grid is two-dimensional past 65,535 chunks.
fn chunk_index(wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return wid.x + wid.y * groups.x;
}

// Each thread keeps eight sums of every eighth of its values, so eight of its loads are in flight
// at once: one running sum made each load wait for the one before, 28 µs per gradient on an H100
// (BENCHMARKS.md).
@compute @workgroup_size(THREADS)
fn sum_squares(
    lane: Lane,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let lid = lane.index;
    let c = chunk_index(wid, groups);
    // Uniform across the workgroup, so the sum below stays in uniform control flow.
    if (c >= sq.n_chunks) {
        return;
    }
    let chunk = chunks[c];
    let start = chunk.x;
    let n = chunk.w & ~DECAYS;
    var s0 = 0.0;
    var s1 = 0.0;
    var s2 = 0.0;
    var s3 = 0.0;
    var s4 = 0.0;
    var s5 = 0.0;
    var s6 = 0.0;
    var s7 = 0.0;
    var i = lid;
    for (; i + 7u * THREADS < n; i += 8u * THREADS) {
        let g0 = grad[start + i];
        let g1 = grad[start + i + THREADS];
        let g2 = grad[start + i + 2u * THREADS];
        let g3 = grad[start + i + 3u * THREADS];
        let g4 = grad[start + i + 4u * THREADS];
        let g5 = grad[start + i + 5u * THREADS];
        let g6 = grad[start + i + 6u * THREADS];
        let g7 = grad[start + i + 7u * THREADS];
        s0 += g0 * g0;
        s1 += g1 * g1;
        s2 += g2 * g2;
        s3 += g3 * g3;
        s4 += g4 * g4;
        s5 += g5 * g5;
        s6 += g6 * g6;
        s7 += g7 * g7;
    }
    for (; i < n; i += THREADS) {
        let g = grad[start + i];
        s0 += g * g;
    }
    let total = group_sum(lane, THREADS, ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)));
    if (lid == 0u) {
        norms[sq.first_slot + c] = total;
    }
}

@group(0) @binding(0) var<uniform> clip_params: Clip;
@group(0) @binding(1) var<storage, read> all_norms: array<f32>;
// [the clipping factor, the squared global norm]
@group(0) @binding(2) var<storage, read_write> clip_out: array<f32>;

// One workgroup: a few hundred slots for a model of a million parameters.
@compute @workgroup_size(THREADS)
fn clip_factor(lane: Lane) {
    var sum = 0.0;
    for (var k = lane.index; k < clip_params.n_norms; k += THREADS) {
        sum += all_norms[k];
    }
    let total = group_sum(lane, THREADS, sum);
    if (lane.index != 0u) {
        return;
    }
    clip_out[1] = total;
    // A non-finite gradient anywhere skips the whole update, so a diverging step leaves the
    // parameters as they were. The exponent bits test for inf and NaN alike, where a NaN
    // comparison might be optimised away. The sum itself is the factor then (inf or NaN): a NaN
    // constant would be plainer, but Chrome's WGSL compiler refuses one ("value nan cannot be
    // represented as 'f32'").
    if ((bitcast<u32>(total) & 0x7f800000u) == 0x7f800000u) {
        clip_out[0] = total;
        return;
    }
    var clip = 1.0;
    if (clip_params.max_norm > 0.0) {
        clip = min(clip_params.max_norm / (sqrt(total) + 1e-6), 1.0);
    }
    clip_out[0] = clip;
}

@group(0) @binding(0) var<uniform> adam: Adam;
// bindings 1 and 2 are `grad` and `chunks`, shared with sum_squares.
@group(0) @binding(3) var<storage, read> clip: array<f32>;
// [learning rate, 1 - beta1^t, 1 - beta2^t]
@group(0) @binding(4) var<storage, read> schedule: array<f32>;
@group(0) @binding(5) var<storage, read_write> param: array<f32>;
@group(0) @binding(6) var<storage, read_write> m: array<f32>;
@group(0) @binding(7) var<storage, read_write> v: array<f32>;

@compute @workgroup_size(THREADS)
fn adam_step(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let c = chunk_index(wid, groups);
    if (c >= adam.n_chunks) {
        return;
    }
    let factor = clip[0];
    if ((bitcast<u32>(factor) & 0x7f800000u) == 0x7f800000u) {
        return;
    }
    let chunk = chunks[c];
    let n = chunk.w & ~DECAYS;
    let decay = select(0.0, adam.weight_decay, (chunk.w & DECAYS) != 0u);
    let lr = schedule[0];
    let step = lr / schedule[1];
    let root_bias2 = sqrt(schedule[2]);
    for (var k = lid; k < n; k += THREADS) {
        let g = grad[chunk.x + k] * factor;
        let p = chunk.y + k;
        let j = chunk.z + k;
        let mi = adam.beta1 * m[j] + (1.0 - adam.beta1) * g;
        let vi = adam.beta2 * v[j] + (1.0 - adam.beta2) * g * g;
        m[j] = mi;
        v[j] = vi;
        let decayed = param[p] * (1.0 - lr * decay);
        let denom = sqrt(vi) / root_bias2 + adam.eps;
        param[p] = decayed - step * mi / denom;
    }
}
