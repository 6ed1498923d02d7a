
// ---- group.wgsl: what group_tree.wgsl and group_subgroups.wgsl share (appended after either):
// the workgroup slots their reductions meet in, and the sums and maximum kernels call, each a
// `group_reduce` of the twin the module was built with.

// A slot per invocation (the tree) or per subgroup (subgroups of any size).
var<workgroup> group_slots: array<vec2<f32>, 256>;

fn group_combine(a: vec2<f32>, b: vec2<f32>, take_max: bool) -> vec2<f32> {
    return select(a + b, max(a, b), take_max);
}

// Two sums at once.
fn group_sum2(lane: Lane, threads: u32, value: vec2<f32>) -> vec2<f32> {
    return group_reduce(lane, threads, value, false);
}

fn group_sum(lane: Lane, threads: u32, value: f32) -> f32 {
    return group_reduce(lane, threads, vec2(value, 0.0), false).x;
}

fn group_max(lane: Lane, threads: u32, value: f32) -> f32 {
    return group_reduce(lane, threads, vec2(value, value), true).x;
}
