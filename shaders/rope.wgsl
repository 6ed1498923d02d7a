// RoPE (Su et al., RoFormer): each pair (2i, 2i+1) of a head's vector at position l turned by the
// angle l·θ_i, θ_i = base^(−2i/Dh). The cos and sin come from a table [L, Dh] (cos of the Dh/2
// angles, then their sin) computed in f64 on the host: WGSL's sin and cos lose precision at the
// large angles of long sequences. `inverse` turns by −l·θ_i, which is the rotation's transpose and
// so its backward.

struct Params {
    // Pairs in x: numel / 2.
    pairs: u32,
    // Positions (L) and half the head width (Dh / 2).
    len: u32,
    half: u32,
    // 1: turn by −l·θ_i.
    inverse: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// One pair per thread: x is [.., L, Dh], rows of Dh at consecutive positions.
@compute @workgroup_size(256)
fn rope(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let pair = gid.x + gid.y * groups.x * 256u;
    if (pair >= p.pairs) {
        return;
    }
    let row = pair / p.half;
    let i = pair % p.half;
    let l = row % p.len;
    let at = 2u * pair;
    let c = table[l * 2u * p.half + i];
    var s = table[l * 2u * p.half + p.half + i];
    if (p.inverse != 0u) {
        s = -s;
    }
    let x0 = x[at];
    let x1 = x[at + 1u];
    out[at] = x0 * c - x1 * s;
    out[at + 1u] = x0 * s + x1 * c;
}
