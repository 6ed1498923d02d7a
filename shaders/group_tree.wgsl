
// ---- group_tree.wgsl: a workgroup's sum or max through workgroup memory, without subgroup
// operations (the path every adapter has, the web's included). Its twin, group_subgroups.wgsl,
// offers the same functions; the backend builds each module with one of the two (and group.wgsl,
// which both use), so the kernels above are written once. A kernel takes `lane: Lane` among its arguments and calls these from
// uniform control flow, every invocation of the workgroup, with `threads` its workgroup size (a
// power of two, at most 256). Every invocation gets the result, in a fixed order of additions.

struct Lane {
    @builtin(local_invocation_index) index: u32,
}

// Pairs: where two invocations share one output (FLOATER's cooperative products), each output's
// two parts are added by `pair_sum`, the invocation at `pair_slot` s working on part s % 2 of
// output s / 2. Here the slot is the invocation's index, and the parts meet in workgroup memory.

fn pair_slot(lane: Lane) -> u32 {
    return lane.index;
}

// The first part plus the second, for two sums at once: the partner's value after a barrier. Call
// from uniform control flow; the caller's next barrier must come before the next pair_sum.
fn pair_sum(lane: Lane, value: vec2<f32>) -> vec2<f32> {
    group_slots[lane.index] = value;
    workgroupBarrier();
    let first = lane.index & ~1u;
    return group_slots[first] + group_slots[first + 1u];
}

// A tree: log2(threads) rounds, a barrier each.
fn group_reduce(lane: Lane, threads: u32, value: vec2<f32>, take_max: bool) -> vec2<f32> {
    group_slots[lane.index] = value;
    workgroupBarrier();
    for (var stride = threads / 2u; stride > 0u; stride >>= 1u) {
        if (lane.index < stride) {
            group_slots[lane.index] = group_combine(group_slots[lane.index], group_slots[lane.index + stride], take_max);
        }
        workgroupBarrier();
    }
    let result = group_slots[0];
    // Everyone reads the result before the next reduction overwrites it.
    workgroupBarrier();
    return result;
}
