// Sums over one axis of a tensor seen as [outer, len, inner]. Their adjoint, broadcasting, is the
// strided gather in shape.wgsl.

struct Axis {
    outer: u32,
    len: u32,
    inner: u32,
    n_out: u32,
}

@group(0) @binding(0) var<uniform> axis: Axis;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// One thread per output element: for short axes.
@compute @workgroup_size(256)
fn sum_axis(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let o = gid.x + gid.y * groups.x * 256u;
    if (o >= axis.n_out) {
        return;
    }
    let outer = o / axis.inner;
    let i = o % axis.inner;
    var acc = 0.0;
    for (var k = 0u; k < axis.len; k++) {
        acc += x[(outer * axis.len + k) * axis.inner + i];
    }
    out[o] = acc;
}

// One workgroup per output element: 64 threads stride over a long axis, then add up.
@compute @workgroup_size(64)
fn sum_axis_workgroup(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, lane: Lane) {
    let lid = lane.index;
    let o = wid.x + wid.y * groups.x;
    let outer = o / axis.inner;
    let i = o % axis.inner;
    var acc = 0.0;
    if (o < axis.n_out) {
        for (var k = lid; k < axis.len; k += 64u) {
            acc += x[(outer * axis.len + k) * axis.inner + i];
        }
    }
    let total = group_sum(lane, 64u, acc);
    if (lid == 0u && o < axis.n_out) {
        out[o] = total;
    }
}
