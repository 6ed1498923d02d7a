//! Register tiles for the CPU attention's dk and dv: a group of key rows at a time, so that each
//! row of Q or dO loaded from memory serves every row of the group, and the group's sums run as
//! independent chains instead of one chain waiting on each add.
//!
//! Every output element is still summed term by term in the order of the one-row loop (a
//! weighted sum over queries ascending, starting from 0), so the results are the same bits as
//! one row at a time: only independent sums share a vector or run side by side.

use std::ops::Range;

/// Rows handled together.
pub(super) const GROUP: usize = 4;
/// Whether the vector unit has 32 registers of 16 floats (AVX-512): tiles of 32 keys or columns
/// then keep a group's sums in 8 of them. Elsewhere (AVX2's 16 registers of 8, NEON, SIMD128)
/// such tiles need 16 registers or more and spill; tiles of 16 need 8 (or 16 of NEON's 32).
#[inline(always)]
fn wide_registers() -> bool {
    crate::vector::avx512()
}

/// `outs[r] = Σ weights[r·stride + t] · rows[t]` over `t ∈ ranges[r]` ascending, for each row r
/// of the group (`outs` holds them one after another, `rows` is `[.., Dh]`).
///
/// The one-row loops this replaced skipped the terms of hidden keys, whose weight is ±0; here
/// they add w·x = ±0 (x finite), which leaves a sum that starts from +0 unchanged, since such a
/// sum is never −0. A full group runs over the union of its ranges, each row adding 0·x for the
/// terms outside its own range (a select: what `weights` holds there is not read), so every
/// sum is still its range's terms in order.
#[inline(always)]
pub(super) fn weighted_sums(
    outs: &mut [f32],
    ranges: &[Range<usize>],
    weights: &[f32],
    stride: usize,
    rows: &[f32],
) {
    let dh = outs.len() / ranges.len();
    let shared =
        ranges.iter().map(|r| r.start).max().unwrap_or(0)..ranges.iter().map(|r| r.end).min().unwrap_or(0);
    let mut tiled = 0;
    if let ([r0, r1, r2, r3], false) = (ranges, shared.is_empty()) {
        let tile = Tile {
            ranges: [r0.clone(), r1.clone(), r2.clone(), r3.clone()],
            span: ranges.iter().map(|r| r.start).min().unwrap_or(0)
                ..ranges.iter().map(|r| r.end).max().unwrap_or(0),
            weights,
            stride,
            rows,
            dh,
        };
        if wide_registers() {
            while tiled + 32 <= dh {
                tile.columns::<32>(outs, tiled);
                tiled += 32;
            }
        }
        while tiled + 16 <= dh {
            tile.columns::<16>(outs, tiled);
            tiled += 16;
        }
        if tiled + 8 <= dh {
            tile.columns::<8>(outs, tiled);
            tiled += 8;
        }
    }
    if tiled == dh {
        return;
    }
    // The columns past the last tile (all of them when the group shares no terms), row by row.
    for (r, (out, terms)) in outs.chunks_exact_mut(dh).zip(ranges).enumerate() {
        let rest = &mut out[tiled..];
        rest.fill(0.0);
        for t in terms.clone() {
            axpy(
                rest,
                weights[r * stride + t],
                &rows[t * dh + tiled..][..dh - tiled],
            );
        }
    }
}

/// The weighted sums of a full group of rows whose ranges overlap.
struct Tile<'a> {
    ranges: [Range<usize>; GROUP],
    /// The union of the ranges.
    span: Range<usize>,
    weights: &'a [f32],
    stride: usize,
    rows: &'a [f32],
    dh: usize,
}

impl Tile<'_> {
    /// Columns `c .. c + W` of the four sums over the span, each row of `rows` loaded once for
    /// all four. The sums are locals that nothing else borrows, so that they stay in registers.
    #[inline(always)]
    fn columns<const W: usize>(&self, outs: &mut [f32], c: usize) {
        let Self {
            ref ranges,
            ref span,
            weights,
            stride,
            rows,
            dh,
        } = *self;
        let (mut a0, mut a1, mut a2, mut a3) = ([0.0f32; W], [0.0f32; W], [0.0f32; W], [0.0f32; W]);
        let weight = |r: usize, t: usize| {
            if ranges[r].contains(&t) {
                weights[r * stride + t]
            } else {
                0.0
            }
        };
        for t in span.clone() {
            let (v0, v1, v2, v3) = (weight(0, t), weight(1, t), weight(2, t), weight(3, t));
            let x: &[f32; W] = rows[t * dh + c..][..W].try_into().expect("a tile of columns");
            for (l, &x) in x.iter().enumerate() {
                a0[l] += v0 * x;
                a1[l] += v1 * x;
                a2[l] += v2 * x;
                a3[l] += v3 * x;
            }
        }
        for (r, a) in [a0, a1, a2, a3].iter().enumerate() {
            outs[r * dh + c..][..W].copy_from_slice(a);
        }
    }
}

/// x += w · y over a row.
#[inline(always)]
fn axpy(x: &mut [f32], w: f32, y: &[f32]) {
    for (x, y) in x.iter_mut().zip(y) {
        *x += w * y;
    }
}

#[cfg(test)]
mod tests {
    use super::{GROUP, weighted_sums};

    /// A value that makes every rounding visible: no two products alike.
    fn value(i: usize) -> f32 {
        ((i * 7919 % 1009) as f32 - 504.0) / 97.0
    }

    #[test]
    fn grouped_sums_are_the_bits_of_skipping_zero_weights_row_by_row() {
        // Ranges that start and end apart or share nothing, head widths with every kind of tile
        // and a rest, and zero weights of both signs (the hidden keys the one-row loop skipped).
        let terms = 60;
        let weights: Vec<f32> = (0..GROUP * terms)
            .map(|i| match i % 5 {
                0 => 0.0,
                1 if i % 2 == 0 => -0.0,
                _ => value(3000 + i),
            })
            .collect();
        for dh in [5, 8, 16, 32, 37, 61] {
            let table: Vec<f32> = (0..terms * dh).map(value).collect();
            for ranges in [
                vec![0..57, 0..58, 0..59, 0..60],
                vec![3..60, 4..60, 5..60, 6..60],
                vec![0..10, 20..30, 0..60, 5..6],
                vec![0..60, 1..59],
            ] {
                let mut grouped = vec![f32::NAN; ranges.len() * dh];
                weighted_sums(&mut grouped, &ranges, &weights, terms, &table);
                for (r, range) in ranges.iter().enumerate() {
                    for c in 0..dh {
                        let by_hand = range
                            .clone()
                            .map(|t| weights[r * terms + t])
                            .zip(range.clone())
                            .filter(|&(w, _)| w != 0.0)
                            .fold(0.0f32, |s, (w, t)| s + w * table[t * dh + c]);
                        assert_eq!(
                            grouped[r * dh + c].to_bits(),
                            by_hand.to_bits(),
                            "dh {dh}, {ranges:?}: row {r}, column {c}"
                        );
                    }
                }
            }
        }
    }
}
