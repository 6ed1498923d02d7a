//! One matrix product at any strides, the CPU backend's building block (the matmul op's products
//! and FLOATER's weight gradients): the `gemm` crate's kernels natively, and in the page, where
//! gemm's SIMD128 kernels were slower, posflow's own (BENCHMARKS.md, "In the browser").

#[cfg(any(test, all(target_arch = "wasm32", target_feature = "simd128")))]
mod simd128;

/// Where element (r, c) of a matrix operand is: r·rows + c·cols (a transpose swaps them).
#[derive(Clone, Copy, Debug)]
pub struct Strides {
    pub rows: usize,
    pub cols: usize,
}

/// `dst[m, n] = a · b` for `a` m × k and `b` k × n at the given strides; `dst` is row-major and
/// only written. `threaded` lets gemm split the product across the current rayon pool (the page
/// has one thread).
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
) {
    assert_eq!(dst.len(), m * n, "product output size");
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, cols: usize, s: Strides| (rows - 1) * s.rows + (cols - 1) * s.cols;
    assert!(
        k == 0 || (last(m, k, sa) < a.len() && last(k, n, sb) < b.len()),
        "product operand sizes"
    );
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        let _ = threaded;
        simd128::product(m, n, k, a, sa, b, sb, dst);
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        #[cfg(not(target_arch = "wasm32"))]
        let par = if threaded {
            gemm::Parallelism::Rayon(0)
        } else {
            gemm::Parallelism::None
        };
        #[cfg(target_arch = "wasm32")]
        let par = {
            let _ = threaded;
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
