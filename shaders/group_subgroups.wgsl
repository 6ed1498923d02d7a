
// ---- group_subgroups.wgsl: a workgroup's sum or max by subgroup operations, for adapters with
// wgpu's SUBGROUP feature (natively: wgpu 30 cannot ask a browser for subgroups). The same
// functions as group_tree.wgsl, which explains how kernels call them: each subgroup reduces its
// lanes in registers, its first lane writes one slot, and after one barrier every invocation
// combines the slots in order. Two barriers per reduction where the tree takes log2(threads)
// + 2; the order of additions within a subgroup is the hardware's.

struct Lane {
    @builtin(local_invocation_index) index: u32,
    @builtin(subgroup_invocation_id) in_subgroup: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
    @builtin(subgroup_size) subgroup_size: u32,
}

// Pairs (see group_tree.wgsl): slots are numbered subgroup by subgroup, so an output's two parts
// lie in adjacent lanes of one subgroup (subgroups hold an even number of lanes, and a workgroup
// of a power of two holds whole ones) and meet by a shuffle, without a barrier.

fn pair_slot(lane: Lane) -> u32 {
    return lane.subgroup * lane.subgroup_size + lane.in_subgroup;
}

// The first part plus the second, in the tree's order, so both paths give the same bits.
fn pair_sum(lane: Lane, value: vec2<f32>) -> vec2<f32> {
    let other = subgroupShuffleXor(value, 1u);
    return select(other + value, value + other, (lane.in_subgroup & 1u) == 0u);
}

fn group_reduce(lane: Lane, threads: u32, value: vec2<f32>, take_max: bool) -> vec2<f32> {
    var part: vec2<f32>;
    if (take_max) {
        part = subgroupMax(value);
    } else {
        part = subgroupAdd(value);
    }
    if (lane.in_subgroup == 0u) {
        group_slots[lane.subgroup] = part;
    }
    workgroupBarrier();
    var result = group_slots[0];
    for (var s = 1u; s < lane.subgroups; s++) {
        result = group_combine(result, group_slots[s], take_max);
    }
    // Everyone reads the slots before the next reduction overwrites them.
    workgroupBarrier();
    return result;
}
