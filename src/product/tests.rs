//! The product at every stride, and each implementation of the portable order against the plain
//! loop, bit for bit.

use super::{Strides, product};
use crate::arithmetic::Arithmetic;

/// The plain loop: each output its k-ordered sum of products, a multiply then an add each.
fn plain(m: usize, n: usize, k: usize, a: &[f32], sa: Strides, b: &[f32], sb: Strides) -> Vec<f32> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut sum = 0.0f32;
            for kk in 0..k {
                sum += a[i * sa.rows + kk * sa.cols] * b[kk * sb.rows + j * sb.cols];
            }
            out[i * n + j] = sum;
        }
    }
    out
}

fn values(len: usize, seed: f32) -> Vec<f32> {
    (0..len)
        .map(|i| crate::math::sin((i as f32 + seed) * 0.7123))
        .collect()
}

type Product<'a> = &'a dyn Fn(usize, usize, usize, &[f32], Strides, &[f32], Strides, &mut [f32], bool);

/// `product` equals the plain loop bit for bit on shapes with rows past a whole tile (1-3 left),
/// columns past a whole panel (65: the tied head's vocabulary; 33 past AVX-512's panels of 32),
/// one column, k in three passes (600), both operands transposed or not, threaded or not; the
/// last ones large enough to be shared between threads, in uneven tasks.
pub(super) fn check_portable_order(product: Product) {
    for (m, n, k) in [
        (1, 1, 1),
        (4, 8, 3),
        (5, 9, 17),
        (7, 65, 32),
        (13, 16, 1),
        (16, 3, 40),
        (3, 33, 7),
        (2, 130, 64),
        (6, 11, 600),
        (70, 129, 300),
        (257, 65, 40),
    ] {
        for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
            let sa = if trans_a {
                Strides { rows: 1, cols: m }
            } else {
                Strides { rows: k, cols: 1 }
            };
            let sb = if trans_b {
                Strides { rows: 1, cols: k }
            } else {
                Strides { rows: n, cols: 1 }
            };
            let (a, b) = (values(m * k, 1.0), values(k * n, 2.0));
            let expected = plain(m, n, k, &a, sa, &b, sb);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for threaded in [false, true] {
                let mut dst = vec![f32::NAN; m * n];
                product(m, n, k, &a, sa, &b, sb, &mut dst, threaded);
                assert_eq!(
                    bits(&dst),
                    bits(&expected),
                    "{m}x{k}·{k}x{n}, transposed {trans_a}/{trans_b}, threaded {threaded}"
                );
            }
        }
    }
}

#[test]
fn the_portable_arithmetic_is_the_plain_loop_bit_for_bit() {
    check_portable_order(&|m, n, k, a, sa, b, sb, dst, threaded| {
        product(m, n, k, a, sa, b, sb, dst, threaded, Arithmetic::Portable)
    });
}

#[test]
fn the_native_arithmetic_is_the_product_to_rounding() {
    let (m, n, k) = (37, 70, 300);
    let (sa, sb) = (Strides { rows: k, cols: 1 }, Strides { rows: n, cols: 1 });
    let (a, b) = (values(m * k, 1.0), values(k * n, 2.0));
    let expected = plain(m, n, k, &a, sa, &b, sb);
    let mut dst = vec![f32::NAN; m * n];
    product(m, n, k, &a, sa, &b, sb, &mut dst, true, Arithmetic::Native);
    for (got, want) in dst.iter().zip(&expected) {
        assert!(
            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
            "{got} vs {want}"
        );
    }
}

#[test]
fn every_stride_gives_the_product_and_an_empty_sum_is_zero() {
    // a = [[1, 2, 3], [4, 5, 6]], b = [[1, 0], [0, 1], [1, 1]]: a·b = [[4, 5], [10, 11]],
    // with each operand stored as is or transposed, in either arithmetic.
    let (a, a_t) = ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let (b, b_t) = ([1.0, 0.0, 0.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]);
    for arithmetic in [Arithmetic::Native, Arithmetic::Portable] {
        for (a, sa) in [
            (a, Strides { rows: 3, cols: 1 }),
            (a_t, Strides { rows: 1, cols: 2 }),
        ] {
            for (b, sb) in [
                (b, Strides { rows: 2, cols: 1 }),
                (b_t, Strides { rows: 1, cols: 3 }),
            ] {
                let mut dst = [f32::NAN; 4];
                product(2, 2, 3, &a, sa, &b, sb, &mut dst, false, arithmetic);
                assert_eq!(dst, [4.0, 5.0, 10.0, 11.0], "{arithmetic}: {sa:?}, {sb:?}");
            }
        }
        let mut dst = [f32::NAN; 4];
        let (sa, sb) = (Strides { rows: 0, cols: 1 }, Strides { rows: 2, cols: 1 });
        product(2, 2, 0, &[], sa, &[], sb, &mut dst, true, arithmetic);
        assert_eq!(dst, [0.0; 4], "{arithmetic}");
    }
}

#[test]
#[should_panic(expected = "product operand sizes")]
fn strides_past_an_operand_are_refused() {
    let mut dst = [0.0; 4];
    let (sa, sb) = (Strides { rows: 3, cols: 1 }, Strides { rows: 2, cols: 1 });
    product(
        2,
        2,
        3,
        &[1.0; 5],
        sa,
        &[1.0; 6],
        sb,
        &mut dst,
        false,
        Arithmetic::Portable,
    );
}
