//! One matrix product at any strides, the CPU backend's building block (the matmul op's products
//! and FLOATER's weight gradients). Natively, in the native arithmetic, the `gemm` crate's
//! kernels; in the portable arithmetic, and always in the page, products whose every output is its
//! k-ordered sum: `ordered.rs` natively, `simd128.rs` in the page (where gemm's SIMD128 kernels
//! were slower: BENCHMARKS.md, "The page's products"), the same bits.

use crate::arithmetic::Arithmetic;

// The page's SIMD128 builds compute in `simd128.rs`'s tiles, the same order.
#[cfg(any(test, not(all(target_arch = "wasm32", target_feature = "simd128"))))]
mod ordered;
/// The page's helper threads, in a page built with atomics (web/build.sh's threaded build).
#[cfg(any(test, all(target_arch = "wasm32", target_feature = "atomics")))]
pub mod page_threads;
#[cfg(any(test, all(target_arch = "wasm32", target_feature = "simd128")))]
mod simd128;
#[cfg(test)]
pub(crate) mod tests;

/// Where element (r, c) of a matrix operand is: r·rows + c·cols (a transpose swaps them).
#[derive(Clone, Copy, Debug)]
pub struct Strides {
    pub rows: usize,
    pub cols: usize,
}

/// One pass of the k-ordered tiles (`ordered.rs` natively, `simd128.rs` in the page): `depth`
/// values of k from `from`, b already packed in `panels` ([`pack_panels`]); each later pass adds
/// to the sums the earlier ones stored (a stored f32 is the register's value, so the order holds).
struct Pass<'a> {
    n: usize,
    a: &'a [f32],
    sa: Strides,
    from: usize,
    depth: usize,
    panels: &'a [f32],
}

/// b's rows `from..from + depth` in panels of C columns, each `depth` rows of C values in a row
/// (the order the tiles read them in); the columns past n are zeros, and their sums are not
/// stored. `panels` holds `n.div_ceil(C) * depth * C` values.
fn pack_panels<const C: usize>(
    b: &[f32],
    sb: Strides,
    n: usize,
    (from, depth): (usize, usize),
    panels: &mut [f32],
) {
    for (p, panel) in panels.chunks_exact_mut(depth * C).enumerate() {
        for (kk, row) in panel.chunks_exact_mut(C).enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                let column = p * C + j;
                *v = if column < n {
                    b[(from + kk) * sb.rows + column * sb.cols]
                } else {
                    0.0
                };
            }
        }
    }
}

/// `dst[m, n] = a · b` for `a` m × k and `b` k × n at the given strides, in `arithmetic`; `dst`
/// is row-major and only written. `threaded` lets the product be split across the current rayon
/// pool (or the page's helper threads).
#[allow(clippy::too_many_arguments)]
pub fn product(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    sa: Strides,
    b: &[f32],
    sb: Strides,
    dst: &mut [f32],
    threaded: bool,
    arithmetic: Arithmetic,
) {
    assert_eq!(dst.len(), m * n, "product output size");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        dst.fill(0.0);
        return;
    }
    let last = |rows: usize, cols: usize, s: Strides| (rows - 1) * s.rows + (cols - 1) * s.cols;
    assert!(
        last(m, k, sa) < a.len() && last(k, n, sb) < b.len(),
        "product operand sizes"
    );
    // The page computes in the portable order whichever arithmetic is asked for: its SIMD128
    // tiles are that order already (gemm's SIMD128 kernels were slower there anyway).
    #[cfg(target_arch = "wasm32")]
    {
        let _ = arithmetic;
        #[cfg(target_feature = "simd128")]
        simd128::product(m, n, k, a, sa, b, sb, dst, threaded);
        #[cfg(not(target_feature = "simd128"))]
        ordered::product(m, n, k, a, sa, b, sb, dst, threaded);
    }
    #[cfg(not(target_arch = "wasm32"))]
    if arithmetic == Arithmetic::Portable {
        ordered::product(m, n, k, a, sa, b, sb, dst, threaded);
    } else {
        let par = if threaded {
            gemm::Parallelism::Rayon(0)
        } else {
            gemm::Parallelism::None
        };
        // SAFETY: the strides reach only elements inside `a` and `b` (asserted above), `dst` holds
        // the m·n outputs at row stride n and is a unique borrow, and gemm does not read it
        // (read_dst false). gemm takes (column stride, row stride).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                sa.cols as isize,
                sa.rows as isize,
                b.as_ptr(),
                sb.cols as isize,
                sb.rows as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            );
        }
    }
}
