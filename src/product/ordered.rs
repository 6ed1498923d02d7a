//! The products of the portable arithmetic natively: each output its sum over k in order from 0,
//! each term a multiply then an add, as the page's SIMD128 tiles (`simd128.rs`) and the plain
//! loop form it, so the three agree to the bit. Tiles of four rows of the output, their sums in
//! registers while a packed panel of b passes, compiled for the widest vector unit the CPU has
//! (`vector.rs`): a vector only ever holds the sums of different columns.

use rayon::prelude::*;

use super::{Pass, Strides, pack_panels};
use crate::vector::vectorised_fn;

/// Output rows per tile.
const ROWS: usize = 4;
/// Output columns per panel: 32 where AVX-512's 32 registers of 16 floats hold a tile's eight
/// vectors of sums, 16 elsewhere (AVX2 has 16 registers of 8, SSE2 and NEON 16 or 32 of 4).
const WIDE_COLS: usize = 32;
const COLS: usize = 16;
/// Values of k per pass: a tile's block of a and a panel of b stay in the first-level cache.
const DEPTH: usize = 256;
/// Passes with fewer multiply-adds than this stay on one thread.
const PAR_WORK: usize = 1 << 18;

/// [`super::product`] in the portable arithmetic (the caller checks the operands' sizes and
/// answers the empty products). With `threaded`, each pass's tiles are shared across the current
/// rayon pool, a whole tile to a thread, so the bits do not depend on the thread count.
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
    if crate::vector::avx512() {
        passes::<WIDE_COLS>(m, n, k, (a, sa), (b, sb), dst, threaded);
    } else {
        passes::<COLS>(m, n, k, (a, sa), (b, sb), dst, threaded);
    }
}

/// [`product`] with panels of C columns, DEPTH values of k a pass.
fn passes<const C: usize>(
    m: usize,
    n: usize,
    k: usize,
    (a, sa): (&[f32], Strides),
    (b, sb): (&[f32], Strides),
    dst: &mut [f32],
    threaded: bool,
) {
    let mut panels = vec![0.0f32; n.div_ceil(C) * DEPTH * C];
    for from in (0..k).step_by(DEPTH) {
        let depth = (k - from).min(DEPTH);
        let panels = &mut panels[..n.div_ceil(C) * depth * C];
        pack_panels::<C>(b, sb, n, (from, depth), panels);
        let pass = Pass {
            n,
            a,
            sa,
            from,
            depth,
            panels,
        };
        let tile_rows = ROWS * n;
        if threaded && m * n * depth >= PAR_WORK {
            dst.par_chunks_mut(tile_rows)
                .enumerate()
                .for_each(|(t, rows)| tile_rows_of::<C>(&pass, rows, t * ROWS));
        } else {
            for (t, rows) in dst.chunks_mut(tile_rows).enumerate() {
                tile_rows_of::<C>(&pass, rows, t * ROWS);
            }
        }
    }
}

/// The pass's sums for one tile of output rows (`rows`, up to ROWS of them, the first `first`).
fn tile_rows_of<const C: usize>(pass: &Pass, rows: &mut [f32], first: usize) {
    let Pass {
        n,
        a,
        sa,
        from,
        depth,
        panels,
    } = *pass;
    // The tile's rows of a, `depth` columns of ROWS values (zeros past the last row), packed once
    // for every panel.
    let count = rows.len() / n;
    let mut block = [0.0f32; DEPTH * ROWS];
    for (kk, column) in block[..depth * ROWS].chunks_exact_mut(ROWS).enumerate() {
        for (r, v) in column.iter_mut().enumerate().take(count) {
            *v = a[(first + r) * sa.rows + (from + kk) * sa.cols];
        }
    }
    let added = from > 0;
    for (p, panel) in panels.chunks_exact(depth * C).enumerate() {
        if C == WIDE_COLS {
            tile_wide(&block[..depth * ROWS], panel, rows, n, p, added);
        } else {
            tile_narrow(&block[..depth * ROWS], panel, rows, n, p, added);
        }
    }
}

vectorised_fn! {
    /// [`tile`] with panels of WIDE_COLS columns.
    fn tile_wide(block: &[f32], panel: &[f32], rows: &mut [f32], n: usize, p: usize, added: bool) {
        tile::<WIDE_COLS>(block, panel, rows, (n, p), added);
    }
}

vectorised_fn! {
    /// [`tile`] with panels of COLS columns.
    fn tile_narrow(block: &[f32], panel: &[f32], rows: &mut [f32], n: usize, p: usize, added: bool) {
        tile::<COLS>(block, panel, rows, (n, p), added);
    }
}

/// Up to ROWS rows of the output (`rows`, n wide) at panel `p`'s columns: the sums of the packed
/// rows of a (`block`, depth × ROWS) with the panel (depth × C), in registers, added to what
/// `rows` holds if `added`.
#[inline(always)]
fn tile<const C: usize>(block: &[f32], panel: &[f32], rows: &mut [f32], (n, p): (usize, usize), added: bool) {
    let (start, width) = (p * C, (n - p * C).min(C));
    // Four named rows of sums, so that they stay in registers.
    let (mut s0, mut s1, mut s2, mut s3) = ([0.0f32; C], [0.0f32; C], [0.0f32; C], [0.0f32; C]);
    if added {
        for (sums, row) in [&mut s0, &mut s1, &mut s2, &mut s3]
            .into_iter()
            .zip(rows.chunks_exact(n))
        {
            sums[..width].copy_from_slice(&row[start..start + width]);
        }
    }
    for (x, b) in block.chunks_exact(ROWS).zip(panel.chunks_exact(C)) {
        let b: &[f32; C] = b.try_into().expect("a panel row");
        let (x0, x1, x2, x3) = (x[0], x[1], x[2], x[3]);
        for j in 0..C {
            s0[j] += x0 * b[j];
            s1[j] += x1 * b[j];
            s2[j] += x2 * b[j];
            s3[j] += x3 * b[j];
        }
    }
    for (row, sums) in rows.chunks_exact_mut(n).zip([s0, s1, s2, s3]) {
        row[start..start + width].copy_from_slice(&sums[..width]);
    }
}
