// Inverted dropout with a counter-based mask: element i of a run seeded `seed` at site `salt` is
// kept when hash(i, seed, salt) >= threshold, and then scaled by 1 / (1 - p). The hash is PCG's
// output permutation (hash.wgsl), the same u32 arithmetic as the CPU reference in
// src/ops/dropout.rs, so both backends drop the same elements, and the backward pass re-derives
// the mask instead of storing it.

struct Params {
    n: u32,
    threshold: u32,
    scale: f32,
    salt: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> seed: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn dropout(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= p.n) {
        return;
    }
    let stream = pcg(bitcast<u32>(seed[0]) ^ pcg(p.salt));
    if (pcg(i ^ stream) >= p.threshold) {
        out[i] = x[i] * p.scale;
    } else {
        out[i] = 0.0;
    }
}
