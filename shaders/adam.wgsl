// AdamW with global gradient-norm clipping, as torch.optim.AdamW after
// torch.nn.utils.clip_grad_norm_.
//
// A step is: `sum_squares` over up to seven gradients at a time, each writing its squared norm
// into one slot of `norms`; `clip_factor`, which adds the slots up once and writes the clipping
// factor (not finite when the global norm is not); then one `adam` per parameter, which skips
// the update when that factor is not finite. The learning rate and bias corrections change
// every step, so they come from a small storage buffer written before each run instead of from
// the uniform, which is fixed at compile time.

struct SumSquares {
    // Each gradient's length; 0 for the bindings a dispatch with fewer than seven repeats.
    lengths: array<vec4<u32>, 2>,
    first_slot: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

struct Clip {
    n_norms: u32,
    // Clip the global gradient norm to this value; 0 means no clipping.
    max_norm: f32,
}

struct Adam {
    n: u32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
}

@group(0) @binding(0) var<uniform> sq: SumSquares;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read> grad1: array<f32>;
@group(0) @binding(3) var<storage, read> grad2: array<f32>;
@group(0) @binding(4) var<storage, read> grad3: array<f32>;
@group(0) @binding(5) var<storage, read> grad4: array<f32>;
@group(0) @binding(6) var<storage, read> grad5: array<f32>;
@group(0) @binding(7) var<storage, read> grad6: array<f32>;
@group(0) @binding(8) var<storage, read_write> norms: array<f32>;

var<workgroup> partial: array<f32, 256>;

// Element i of gradient k of the dispatch (k is the workgroup's, so every thread takes one case).
fn gradient_value(k: u32, i: u32) -> f32 {
    switch k {
        case 0u: { return grad[i]; }
        case 1u: { return grad1[i]; }
        case 2u: { return grad2[i]; }
        case 3u: { return grad3[i]; }
        case 4u: { return grad4[i]; }
        case 5u: { return grad5[i]; }
        default: { return grad6[i]; }
    }
}

// A workgroup per gradient: 256 threads stride over it, then a tree sum. Each thread keeps eight
// sums of every eighth of its values, so eight of its loads are in flight at once: one running
// sum made each load wait for the one before, 28 µs per gradient on an H100 (BENCHMARKS.md).
@compute @workgroup_size(256)
fn sum_squares(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let k = wid.x;
    let n = sq.lengths[k / 4u][k % 4u];
    var s0 = 0.0;
    var s1 = 0.0;
    var s2 = 0.0;
    var s3 = 0.0;
    var s4 = 0.0;
    var s5 = 0.0;
    var s6 = 0.0;
    var s7 = 0.0;
    var i = lid;
    for (; i + 7u * 256u < n; i += 8u * 256u) {
        let g0 = gradient_value(k, i);
        let g1 = gradient_value(k, i + 256u);
        let g2 = gradient_value(k, i + 2u * 256u);
        let g3 = gradient_value(k, i + 3u * 256u);
        let g4 = gradient_value(k, i + 4u * 256u);
        let g5 = gradient_value(k, i + 5u * 256u);
        let g6 = gradient_value(k, i + 6u * 256u);
        let g7 = gradient_value(k, i + 7u * 256u);
        s0 += g0 * g0;
        s1 += g1 * g1;
        s2 += g2 * g2;
        s3 += g3 * g3;
        s4 += g4 * g4;
        s5 += g5 * g5;
        s6 += g6 * g6;
        s7 += g7 * g7;
    }
    for (; i < n; i += 256u) {
        let g = gradient_value(k, i);
        s0 += g * g;
    }
    partial[lid] = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
    workgroupBarrier();
    for (var stride = 128u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        norms[sq.first_slot + k] = partial[0];
    }
}

@group(0) @binding(0) var<uniform> clip_params: Clip;
@group(0) @binding(1) var<storage, read> all_norms: array<f32>;
@group(0) @binding(2) var<storage, read_write> clip_out: array<f32>;

// One invocation: the slots summed in order, as the CPU reference does.
@compute @workgroup_size(1)
fn clip_factor() {
    var total = 0.0;
    for (var k = 0u; k < clip_params.n_norms; k++) {
        total += all_norms[k];
    }
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
// binding 1 is `grad`, shared with sum_squares.
@group(0) @binding(2) var<storage, read> clip: array<f32>;
// [learning rate, 1 - beta1^t, 1 - beta2^t]
@group(0) @binding(3) var<storage, read> schedule: array<f32>;
@group(0) @binding(4) var<storage, read_write> param: array<f32>;
@group(0) @binding(5) var<storage, read_write> m: array<f32>;
@group(0) @binding(6) var<storage, read_write> v: array<f32>;

@compute @workgroup_size(256)
fn adam_step(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= adam.n) {
        return;
    }
    let factor = clip[0];
    if ((bitcast<u32>(factor) & 0x7f800000u) == 0x7f800000u) {
        return;
    }
    let lr = schedule[0];
    let g = grad[i] * factor;
    let mi = adam.beta1 * m[i] + (1.0 - adam.beta1) * g;
    let vi = adam.beta2 * v[i] + (1.0 - adam.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    let decayed = param[i] * (1.0 - lr * adam.weight_decay);
    let denom = sqrt(vi) / sqrt(schedule[2]) + adam.eps;
    param[i] = decayed - (lr / schedule[1]) * mi / denom;
}
