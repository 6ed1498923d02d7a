//! Which arithmetic the CPU backend computes in. Every other sum on the CPU already runs in one
//! fixed order at every vector width and thread count (`vector.rs`), and every transcendental
//! function comes from one implementation (`math.rs`); what is left is the matrix products.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How the CPU backend forms its matrix products. A run config asks for one in
/// `[train] arithmetic`; a result's config says which produced it (the field is written only when
/// it is not the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arithmetic {
    /// The fastest on this machine: the `gemm` crate's kernels, which split each sum and fuse
    /// multiply-adds as the CPU's vector unit suits, so the last bits (and a run's drift from
    /// them) differ between, say, an AVX-512 and an AVX2 machine. Runs on one machine repeat to
    /// the bit.
    #[default]
    Native,
    /// The same bits on every machine and in the page: each product's output is its sum over k
    /// in order from 0, each term a multiply then an add (no fused multiply-add), whatever the
    /// vector width or thread count. The page always computes in it.
    Portable,
}

impl Arithmetic {
    pub fn is_native(&self) -> bool {
        *self == Self::Native
    }
}

impl fmt::Display for Arithmetic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Native => "native",
            Self::Portable => "portable",
        })
    }
}
