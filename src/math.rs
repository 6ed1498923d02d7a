//! The transcendental functions posflow computes with: one pure-Rust implementation of each (the
//! `libm` crate, Rust's port of musl's) on every target. `f32::ln` and its kin call the platform's
//! C library natively (glibc, Apple's, Microsoft's, each rounding some inputs differently, and
//! differently between versions) and Rust's own port in WebAssembly, so a number that went
//! through one of them could differ in its last bit between machines, and a training run then
//! drifts. `clippy.toml` refuses the standard library's forms, so none slips back in.
//!
//! `sqrt` is not here: IEEE 754 rounds it correctly everywhere. posflow's own `exp` for the
//! softmax and the attention (`ops::unary::exp`) and its `erf` are plain Rust already.

/// A float type with the functions below (f32 and f64).
pub trait Real: Copy {
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn log2(self) -> Self;
    fn log10(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tanh(self) -> Self;
    fn powf(self, exponent: Self) -> Self;
}

impl Real for f32 {
    fn exp(self) -> Self {
        libm::expf(self)
    }
    fn ln(self) -> Self {
        libm::logf(self)
    }
    fn log2(self) -> Self {
        libm::log2f(self)
    }
    fn log10(self) -> Self {
        libm::log10f(self)
    }
    fn sin(self) -> Self {
        libm::sinf(self)
    }
    fn cos(self) -> Self {
        libm::cosf(self)
    }
    fn tanh(self) -> Self {
        libm::tanhf(self)
    }
    fn powf(self, exponent: Self) -> Self {
        libm::powf(self, exponent)
    }
}

impl Real for f64 {
    fn exp(self) -> Self {
        libm::exp(self)
    }
    fn ln(self) -> Self {
        libm::log(self)
    }
    fn log2(self) -> Self {
        libm::log2(self)
    }
    fn log10(self) -> Self {
        libm::log10(self)
    }
    fn sin(self) -> Self {
        libm::sin(self)
    }
    fn cos(self) -> Self {
        libm::cos(self)
    }
    fn tanh(self) -> Self {
        libm::tanh(self)
    }
    fn powf(self, exponent: Self) -> Self {
        libm::pow(self, exponent)
    }
}

/// eˣ.
pub fn exp<T: Real>(x: T) -> T {
    Real::exp(x)
}

/// The natural logarithm.
pub fn ln<T: Real>(x: T) -> T {
    Real::ln(x)
}

/// The base-2 logarithm.
pub fn log2<T: Real>(x: T) -> T {
    Real::log2(x)
}

/// The base-10 logarithm.
pub fn log10<T: Real>(x: T) -> T {
    Real::log10(x)
}

/// The sine of `x` radians.
pub fn sin<T: Real>(x: T) -> T {
    Real::sin(x)
}

/// The cosine of `x` radians.
pub fn cos<T: Real>(x: T) -> T {
    Real::cos(x)
}

/// The hyperbolic tangent.
pub fn tanh<T: Real>(x: T) -> T {
    Real::tanh(x)
}

/// `base` to the power `exponent` (an integer power too: `powf(b, n as f32)`, where `powi`'s
/// multiplications are left to the compiler's order).
pub fn powf<T: Real>(base: T, exponent: T) -> T {
    Real::powf(base, exponent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_functions_are_the_ones_named() {
        // Within a few ulp of the standard library's (which this module replaces, not corrects).
        #[allow(clippy::disallowed_methods)]
        for x in [0.1f64, 0.5, 1.0, 2.5, 7.0] {
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-14 * b.abs().max(1.0);
            assert!(close(exp(x), x.exp()) && close(ln(x), x.ln()), "{x}");
            assert!(close(log2(x), x.log2()) && close(log10(x), x.log10()), "{x}");
            assert!(close(sin(x), x.sin()) && close(cos(x), x.cos()), "{x}");
            assert!(close(tanh(x), x.tanh()), "{x}");
            assert!(close(powf(x, 1.7), x.powf(1.7)), "{x}");
            let (y, closef) = (x as f32, |a: f32, b: f32| {
                (a - b).abs() <= 4e-7 * b.abs().max(1.0)
            });
            assert!(closef(exp(y), y.exp()) && closef(ln(y), y.ln()), "{y}");
            assert!(closef(log2(y), y.log2()) && closef(log10(y), y.log10()), "{y}");
            assert!(closef(sin(y), y.sin()) && closef(cos(y), y.cos()), "{y}");
            assert!(closef(tanh(y), y.tanh()), "{y}");
            assert!(closef(powf(y, 1.7), y.powf(1.7)), "{y}");
        }
    }
}
