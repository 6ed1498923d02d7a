//! One matrix product at any strides, the CPU backend's building block (the matmul op's products
//! and FLOATER's weight gradients): the `gemm` crate's kernels natively, and in the page, where
//! gemm's SIMD128 kernels were slower, posflow's own (BENCHMARKS.md, "The page's products").

/// The page's helper threads, in a page built with atomics (web/build.sh's threaded build).
#[cfg(any(test, all(target_arch = "wasm32", target_feature = "atomics")))]
pub mod page_threads;
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
    if k == 0 {
        dst.fill(0.0);
        return;
    }
    let last = |rows: usize, cols: usize, s: Strides| (rows - 1) * s.rows + (cols - 1) * s.cols;
    assert!(
        last(m, k, sa) < a.len() && last(k, n, sb) < b.len(),
        "product operand sizes"
    );
    #[cfg(all(target_arch = "wasm32", not(target_feature = "simd128")))]
    let _ = threaded;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    simd128::product(m, n, k, a, sa, b, sb, dst, threaded);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        #[cfg(not(target_arch = "wasm32"))]
        let par = if threaded {
            gemm::Parallelism::Rayon(0)
        } else {
            gemm::Parallelism::None
        };
        #[cfg(target_arch = "wasm32")]
        let par = gemm::Parallelism::None;
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

#[cfg(test)]
mod tests {
    use super::{Strides, product};

    #[test]
    fn every_stride_gives_the_product_and_an_empty_sum_is_zero() {
        // a = [[1, 2, 3], [4, 5, 6]], b = [[1, 0], [0, 1], [1, 1]]: a·b = [[4, 5], [10, 11]],
        // with each operand stored as is or transposed.
        let (a, a_t) = ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let (b, b_t) = ([1.0, 0.0, 0.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]);
        for (a, sa) in [
            (a, Strides { rows: 3, cols: 1 }),
            (a_t, Strides { rows: 1, cols: 2 }),
        ] {
            for (b, sb) in [
                (b, Strides { rows: 2, cols: 1 }),
                (b_t, Strides { rows: 1, cols: 3 }),
            ] {
                let mut dst = [f32::NAN; 4];
                product(2, 2, 3, &a, sa, &b, sb, &mut dst, false);
                assert_eq!(dst, [4.0, 5.0, 10.0, 11.0], "a strides {sa:?}, b strides {sb:?}");
            }
        }
        let mut dst = [f32::NAN; 4];
        product(
            2,
            2,
            0,
            &[],
            Strides { rows: 0, cols: 1 },
            &[],
            Strides { rows: 2, cols: 1 },
            &mut dst,
            true,
        );
        assert_eq!(dst, [0.0; 4]);
    }

    #[test]
    #[should_panic(expected = "product operand sizes")]
    fn strides_past_an_operand_are_refused() {
        let mut dst = [0.0; 4];
        product(
            2,
            2,
            3,
            &[1.0; 5],
            Strides { rows: 3, cols: 1 },
            &[1.0; 6],
            Strides { rows: 2, cols: 1 },
            &mut dst,
            false,
        );
    }
}
