//! The arithmetic of a block of query rows with the queries in vector lanes: lane l of a vector
//! holds query `first + l` of one (batch entry, head), and each key takes one vector operation
//! per head dimension, a key row's element broadcast across the block.
//!
//! Heads of width 8-16 over a few dozen keys are too narrow to fill a vector along the head or the
//! keys without short rows and scalar tails; a block of 16 queries fills it whatever the lengths.
//! Softmax maxima and totals over the keys are then maxima and sums of whole vectors, and the
//! products with v (forward) and k (dq) are sums over keys too, so no sum ever runs across
//! lanes: each number is summed term by term in the definition's order (a score over the head
//! dimension ascending from 0, a total or a weighted sum over keys ascending from 0;
//! `tests/order.rs`), and the results are the bits of one query at a time.

use crate::ops::unary::exp;

/// The most queries a block holds: one AVX-512 register of 16 floats. Elsewhere (AVX2's 8, NEON's
/// and SIMD128's 4) a block holds 8, as one such block's sums of eight columns then fill AVX2's 16
/// registers without spilling ([`block_lanes`]).
pub(super) const LANES: usize = 16;

/// The queries of a full block here, and of the half block that takes the last ≤ half of them.
#[inline(always)]
pub(super) fn block_lanes() -> (usize, usize) {
    if crate::vector::avx512() { (16, 8) } else { (8, 4) }
}

/// Head dimensions whose weighted sums run together: eight vectors of sums stay in registers.
const COLUMNS: usize = 8;

/// `out[j][l] = Σ_d x_t[d][l] · rows[j·Dh + d]` for the keys `j < out.len()`, summed over d
/// ascending from 0; `x_t` is the block's rows transposed (`[Dh][W]`), `rows` `[.., Dh]`.
/// Four keys at a time, so that four independent chains of sums share the loads of `x_t`.
#[inline(always)]
pub(super) fn dots<const W: usize>(x_t: &[[f32; W]], rows: &[f32], out: &mut [[f32; W]]) {
    let dh = x_t.len();
    let mut tiles = out.chunks_exact_mut(4);
    let mut j = 0;
    for tile in &mut tiles {
        let [r0, r1, r2, r3]: [&[f32]; 4] = std::array::from_fn(|t| &rows[(j + t) * dh..][..dh]);
        // Four named vectors of sums, so that they stay in registers.
        let (mut a0, mut a1, mut a2, mut a3) = ([0.0f32; W], [0.0f32; W], [0.0f32; W], [0.0f32; W]);
        for (d, x) in x_t.iter().enumerate() {
            let (k0, k1, k2, k3) = (r0[d], r1[d], r2[d], r3[d]);
            for l in 0..W {
                a0[l] += x[l] * k0;
                a1[l] += x[l] * k1;
                a2[l] += x[l] * k2;
                a3[l] += x[l] * k3;
            }
        }
        tile.copy_from_slice(&[a0, a1, a2, a3]);
        j += 4;
    }
    for (t, o) in tiles.into_remainder().iter_mut().enumerate() {
        let row = &rows[(j + t) * dh..][..dh];
        let mut a = [0.0f32; W];
        for (x, &k) in x_t.iter().zip(row) {
            for l in 0..W {
                a[l] += x[l] * k;
            }
        }
        *o = a;
    }
}

/// `out[d][l] = Σ_j w[j][l] · rows[j·Dh + d]` over the keys `j < w.len()` ascending from 0, for
/// each head dimension d of `out` (`[Dh][W]`): the block's weighted sums of key rows,
/// transposed. A weight of 0 (a hidden key) adds ±0, which leaves a sum that starts from +0 as
/// it is (such a sum is never −0), for finite rows.
#[inline(always)]
pub(super) fn weighted_sums<const W: usize>(w: &[[f32; W]], rows: &[f32], out: &mut [[f32; W]]) {
    let dh = out.len();
    let mut columns = out.chunks_exact_mut(COLUMNS);
    let mut c = 0;
    for chunk in &mut columns {
        // Eight named vectors of sums, each lane loop holding all eight, so that the sums stay
        // in registers and each statement is one vector operation.
        let (mut a0, mut a1, mut a2, mut a3) = ([0.0f32; W], [0.0f32; W], [0.0f32; W], [0.0f32; W]);
        let (mut a4, mut a5, mut a6, mut a7) = ([0.0f32; W], [0.0f32; W], [0.0f32; W], [0.0f32; W]);
        for (j, w) in w.iter().enumerate() {
            let x: &[f32; COLUMNS] = rows[j * dh + c..][..COLUMNS]
                .try_into()
                .expect("a chunk of columns");
            for l in 0..W {
                a0[l] += w[l] * x[0];
                a1[l] += w[l] * x[1];
                a2[l] += w[l] * x[2];
                a3[l] += w[l] * x[3];
                a4[l] += w[l] * x[4];
                a5[l] += w[l] * x[5];
                a6[l] += w[l] * x[6];
                a7[l] += w[l] * x[7];
            }
        }
        chunk.copy_from_slice(&[a0, a1, a2, a3, a4, a5, a6, a7]);
        c += COLUMNS;
    }
    let rest = columns.into_remainder();
    rest.fill([0.0; W]);
    for (j, w) in w.iter().enumerate() {
        for (a, &x) in rest.iter_mut().zip(&rows[j * dh + c..][..dh - c]) {
            for l in 0..W {
                a[l] += w[l] * x;
            }
        }
    }
}

/// `x`, or +0 where the score `s` is −∞ (a hidden key), lane by lane: what the backward takes a
/// hidden key's e^x of. e^−∞ underflows through subnormal products, which cost this CPU a microcode assist
/// each (a block's padding lanes are hidden at every key). The mask goes through `black_box`:
/// the compiler drops a select (or a mask it recognises as one) on the input of an e^x whose
/// result the same condition selects away, and the assists come back.
#[inline(always)]
pub(super) fn zero_where_hidden<const W: usize>(s: &[f32; W], x: &mut [f32; W]) {
    let mut keep = [0u32; W];
    for (k, &s) in keep.iter_mut().zip(s) {
        *k = if s == f32::NEG_INFINITY { 0 } else { u32::MAX };
    }
    let keep = std::hint::black_box(keep);
    for (x, k) in x.iter_mut().zip(keep) {
        *x = f32::from_bits(x.to_bits() & k);
    }
}

/// Each lane's largest score (−∞ for none; NaNs passed over, as `f32::max` does).
#[inline(always)]
pub(super) fn maxima<const W: usize>(s: &[[f32; W]]) -> [f32; W] {
    let mut m = [f32::NEG_INFINITY; W];
    for s in s {
        for l in 0..W {
            m[l] = m[l].max(s[l]);
        }
    }
    m
}

/// The scores `s` (−∞ where hidden) turned into their probabilities in place, each lane's total
/// summed over the keys ascending from 0; returns each lane's (max, total). A lane with no
/// visible key (max −∞) gets all zeros.
#[inline(always)]
pub(super) fn softmax<const W: usize>(s: &mut [[f32; W]]) -> ([f32; W], [f32; W]) {
    let max = maxima(s);
    let mut total = [0.0f32; W];
    for s in s.iter_mut() {
        for l in 0..W {
            // A hidden key's probability is 0 and adds nothing to the total. Its e^x is taken of
            // 0 (see `zero_where_hidden`); here the compiler keeps the select, the total reading
            // the selected value, and a mask through `black_box` cost a long evaluation 7%.
            let hidden = s[l] == f32::NEG_INFINITY;
            let e = exp(if hidden { 0.0 } else { s[l] - max[l] });
            s[l] = if hidden { 0.0 } else { e };
            total[l] += s[l];
        }
    }
    // A lane with no visible key holds zeros and a total of 0: it divides by 1 instead, so that
    // the loop has no select (with one, the compiler divided lane by lane behind branches).
    let divisor: [f32; W] = std::array::from_fn(|l| {
        if max[l] == f32::NEG_INFINITY {
            1.0
        } else {
            total[l]
        }
    });
    for s in s.iter_mut() {
        for l in 0..W {
            s[l] /= divisor[l];
        }
    }
    (max, total)
}

#[cfg(test)]
mod tests {
    use super::{dots, weighted_sums};

    fn value(i: usize) -> f32 {
        ((i * 7919 % 1009) as f32 - 504.0) / 97.0
    }

    /// Each head width with and without a rest of columns, key counts with and without a rest
    /// of the four-key tiles: every element the one-query loop's bits.
    #[test]
    fn lanes_are_the_bits_of_one_query_at_a_time() {
        for (dh, keys) in [(8, 20), (5, 7), (16, 33), (13, 1), (32, 4)] {
            let rows: Vec<f32> = (0..keys * dh).map(value).collect();
            let x_t: Vec<[f32; 16]> = (0..dh)
                .map(|d| std::array::from_fn(|l| value(5000 + 16 * d + l)))
                .collect();
            let mut scores = vec![[f32::NAN; 16]; keys];
            dots(&x_t, &rows, &mut scores);
            let mut sums = vec![[f32::NAN; 16]; dh];
            weighted_sums(&scores, &rows, &mut sums);
            for l in 0..16 {
                for j in 0..keys {
                    let by_hand = (0..dh).fold(0.0f32, |a, d| a + x_t[d][l] * rows[j * dh + d]);
                    assert_eq!(
                        scores[j][l].to_bits(),
                        by_hand.to_bits(),
                        "dh {dh}: score of lane {l}, key {j}"
                    );
                }
                for d in 0..dh {
                    let by_hand = (0..keys).fold(0.0f32, |a, j| a + scores[j][l] * rows[j * dh + d]);
                    assert_eq!(
                        sums[d][l].to_bits(),
                        by_hand.to_bits(),
                        "dh {dh}: sum of lane {l}, column {d}"
                    );
                }
            }
        }
    }
}
