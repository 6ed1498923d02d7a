// Elementwise activations and their gradients. `kind`: 0 exp, 1 tanh, 2 sigmoid, 3 relu, 4 gelu
// (the discriminants of `UnaryKind`). The module goes on in gelu.wgsl.

struct Unary {
    n: u32,
    kind: u32,
}

@group(0) @binding(0) var<uniform> p: Unary;
// The forward's x; the backward's saved tensor (the output for exp/tanh/sigmoid, else the input).
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> gy: array<f32>;
@group(0) @binding(3) var<storage, read_write> gx: array<f32>;

fn activation(x: f32) -> f32 {
    switch p.kind {
        case 0u: { return exp(x); }
        // Some drivers compute tanh from exponentials that overflow to inf/inf = NaN for large
        // |x|; tanh(±10) is already ±1 in f32, so clamping changes no result.
        case 1u: { return tanh(clamp(x, -10.0, 10.0)); }
        case 2u: { return 1.0 / (1.0 + exp(-x)); }
        case 3u: { return max(x, 0.0); }
        default: { return gelu(x); }
    }
}

fn activation_grad(saved: f32, g: f32) -> f32 {
    switch p.kind {
        case 0u: { return g * saved; }
        case 1u: { return g * (1.0 - saved * saved); }
        case 2u: { return g * saved * (1.0 - saved); }
        case 3u: { return select(0.0, g, saved > 0.0); }
        default: { return gelu_grad(saved, g); }
    }
}

@compute @workgroup_size(256)
fn unary(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= p.n) {
        return;
    }
    out[i] = activation(src[i]);
}

@compute @workgroup_size(256)
fn unary_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= p.n) {
        return;
    }
    gx[i] = activation_grad(src[i], gy[i]);
}
