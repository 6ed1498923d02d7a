// Binary arithmetic with NumPy broadcasting, and multiplication by a scalar.
//
// Shapes and strides travel in the uniform as two vec4s each (rank <= 8). A stride of 0 reads
// the same element along a broadcast axis.

struct Broadcast {
    n: u32,
    rank: u32,
    kind: u32, // 0 add, 1 sub, 2 mul, 3 div
    _pad: u32,
    shape: array<vec4<u32>, 2>,
    a_strides: array<vec4<u32>, 2>,
    b_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Broadcast;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn combine(x: f32, y: f32) -> f32 {
    switch p.kind {
        case 0u: { return x + y; }
        case 1u: { return x - y; }
        case 2u: { return x * y; }
        default: { return x / y; }
    }
}

// Both inputs have the output's shape: element i of each, no index arithmetic.
@compute @workgroup_size(256)
fn binary_same(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= p.n) {
        return;
    }
    out[i] = combine(a[i], b[i]);
}

@compute @workgroup_size(256)
fn binary(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= p.n) {
        return;
    }
    var rest = i;
    var ia = 0u;
    var ib = 0u;
    // Indexed in the uniform itself: a helper taking the arrays by value copied them per call.
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let q = u32(d) / 4u;
        let r = u32(d) % 4u;
        let size = p.shape[q][r];
        let coord = rest % size;
        rest = rest / size;
        ia += coord * p.a_strides[q][r];
        ib += coord * p.b_strides[q][r];
    }
    out[i] = combine(a[ia], b[ib]);
}
