// GELU in PyTorch's default (erf) form and its gradient: the end of the modules that apply it,
// unary.wgsl and matmul.wgsl (a product's epilogue).

const FRAC_1_SQRT_2: f32 = 0.70710678;
const INV_SQRT_2PI: f32 = 0.39894228;

// erf by Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7; WGSL has no erf. `erf` in
// src/ops/unary.rs is the same formula, so both backends compute the same GELU.
fn erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let poly = t * (0.2548296 + t * (-0.2844967 + t * (1.4214138 + t * (-1.453152 + t * 1.0614054))));
    let magnitude = 1.0 - poly * exp(-x * x);
    return select(magnitude, -magnitude, x < 0.0);
}

// x·Φ(x).
fn gelu(x: f32) -> f32 {
    return 0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2));
}

// g·(Φ(x) + x·φ(x)): the gradient through GELU at x of g.
fn gelu_grad(x: f32, g: f32) -> f32 {
    let cdf = 0.5 * (1.0 + erf(x * FRAC_1_SQRT_2));
    let pdf = INV_SQRT_2PI * exp(-0.5 * x * x);
    return g * (cdf + x * pdf);
}
