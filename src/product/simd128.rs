//! The products in the page: WebAssembly's SIMD128 lanes, each tile of four rows × eight columns
//! of the output summed in registers. gemm's SIMD128 kernels ran the page's product shapes at
//! 26–34 GFLOP/s; these tiles at 33–41 on the same machine (BENCHMARKS.md, "The page's products").
//! Every output is its k-ordered sum of products, each a multiply then an add (SIMD128 has no
//! fused multiply-add), so it equals the plain loop bit for bit.

use super::{Pass, Strides, pack_panels};
use lanes::F32x4;

/// Output rows per tile: each holds two vectors of sums, eight in all, beside the two vectors of
/// b and the broadcast of a, within the 16 vector registers of the x86 the page mostly runs on
/// (tiles of six rows ran 20% slower, of eight 30%, of two 20%).
const ROWS: usize = 4;
/// Output columns per tile: two vectors.
const COLS: usize = 8;
/// Values of k per pass: a panel of b (8 KB) and a block of a (4 KB) fit the first-level cache.
const DEPTH: usize = 256;

/// Products smaller than this many multiply-adds a pass stay on one thread.
const PAR_WORK: usize = 1 << 18;

/// [`super::product`] in the page, which checks the operands' sizes and answers the empty
/// products (m, n or k zero) itself. With
/// `threaded` (the product is not already one of several run in parallel), each pass's tiles are
/// shared with the page's helper threads, if it has any: every output is still summed by one
/// thread in k order, so the bits do not depend on them.
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
    let mut panels = vec![0.0f32; n.div_ceil(COLS) * DEPTH * COLS];
    let mut block = [0.0f32; DEPTH * ROWS];
    // DEPTH values of k at a time, so that a panel and a block stay in the first-level cache;
    // each later slice adds to the sums the earlier ones stored, in k order still.
    for from in (0..k).step_by(DEPTH) {
        let depth = (k - from).min(DEPTH);
        let panels = &mut panels[..n.div_ceil(COLS) * depth * COLS];
        pack_panels::<COLS>(b, sb, n, (from, depth), panels);
        let pass = Pass {
            n,
            a,
            sa,
            from,
            depth,
            panels,
        };
        if threaded && m * n * depth >= PAR_WORK {
            share_pass(&pass, m, dst, &mut block);
        } else {
            pass.tiles(dst, 0, &mut block);
        }
    }
}

/// A pass's tiles over the m rows of `dst` shared with the page's helper threads, where it has
/// some (a page built with threads), each task with a block of its own; alone, in `block`,
/// otherwise.
fn share_pass(pass: &Pass, m: usize, dst: &mut [f32], block: &mut [f32]) {
    #[cfg(any(test, target_feature = "atomics"))]
    {
        use super::page_threads::{Chunks, helpers, share};
        let threads = helpers() + 1;
        if threads > 1 {
            // A few tasks per thread, so that a slower one does not hold the rest up.
            let per_task = m.div_ceil(ROWS).div_ceil(4 * threads);
            let chunks = Chunks::new(dst, per_task * ROWS * pass.n);
            share(chunks.count(), &|c| {
                // SAFETY: task c takes chunk c only.
                let rows = unsafe { chunks.chunk(c) };
                pass.tiles(rows, c * per_task * ROWS, &mut [0.0f32; DEPTH * ROWS]);
            });
            return;
        }
    }
    #[cfg(not(any(test, target_feature = "atomics")))]
    let _ = m;
    pass.tiles(dst, 0, block);
}

impl Pass<'_> {
    /// The pass's sums for the output rows `dst` (row `first` on), a tile of ROWS rows at a time;
    /// `block` holds a tile's rows of a.
    fn tiles(&self, dst: &mut [f32], first: usize, block: &mut [f32]) {
        let Self {
            n,
            a,
            sa,
            from,
            depth,
            panels,
        } = *self;
        for (t, rows) in dst.chunks_mut(ROWS * n).enumerate() {
            // The tile's rows of a, `depth` columns of up to ROWS values, packed once for
            // every panel.
            let (first, count) = (first + t * ROWS, rows.len() / n);
            let block = &mut block[..depth * count];
            for (kk, column) in block.chunks_exact_mut(count).enumerate() {
                for (r, v) in column.iter_mut().enumerate() {
                    *v = a[(first + r) * sa.rows + (from + kk) * sa.cols];
                }
            }
            let added = from > 0;
            for (p, panel) in panels.chunks_exact(depth * COLS).enumerate() {
                match count {
                    4 => tile::<4>(block, panel, rows, n, p, added),
                    3 => tile::<3>(block, panel, rows, n, p, added),
                    2 => tile::<2>(block, panel, rows, n, p, added),
                    _ => tile::<1>(block, panel, rows, n, p, added),
                }
            }
        }
    }
}

/// R rows of the output (`rows`, n wide) at panel `p`'s columns: the sums of R packed rows of a
/// (`block`, depth × R) with the panel, in registers, added to what `rows` holds if `added`.
#[inline(always)]
fn tile<const R: usize>(block: &[f32], panel: &[f32], rows: &mut [f32], n: usize, p: usize, added: bool) {
    let (start, width) = (p * COLS, (n - p * COLS).min(COLS));
    let mut sums = [[F32x4::splat(0.0); 2]; R];
    if added {
        for (sums, row) in sums.iter_mut().zip(rows.chunks_exact(n)) {
            let mut values = [0.0; COLS];
            values[..width].copy_from_slice(&row[start..start + width]);
            *sums = [F32x4::load(&values[..4]), F32x4::load(&values[4..])];
        }
    }
    for (x, b) in block.chunks_exact(R).zip(panel.chunks_exact(COLS)) {
        let x: &[f32; R] = x.try_into().expect("R rows");
        let (b0, b1) = (F32x4::load(&b[..4]), F32x4::load(&b[4..]));
        for r in 0..R {
            let x = F32x4::splat(x[r]);
            sums[r][0] = sums[r][0].add_product(x, b0);
            sums[r][1] = sums[r][1].add_product(x, b1);
        }
    }
    for (row, sums) in rows.chunks_exact_mut(n).zip(sums) {
        if width == COLS {
            sums[0].store(&mut row[start..start + 4]);
            sums[1].store(&mut row[start + 4..start + 8]);
        } else {
            let mut values = [0.0; COLS];
            sums[0].store(&mut values[..4]);
            sums[1].store(&mut values[4..]);
            row[start..start + width].copy_from_slice(&values[..width]);
        }
    }
}

/// Four f32 lanes: SIMD128's `v128` in the page.
#[cfg(target_arch = "wasm32")]
mod lanes {
    use core::arch::wasm32::{f32x4_add, f32x4_mul, f32x4_splat, v128, v128_load, v128_store};

    #[derive(Clone, Copy)]
    pub struct F32x4(v128);

    impl F32x4 {
        #[inline(always)]
        pub fn splat(x: f32) -> Self {
            Self(f32x4_splat(x))
        }

        #[inline(always)]
        pub fn load(values: &[f32]) -> Self {
            let values: &[f32; 4] = values.try_into().expect("four lanes");
            // SAFETY: `values` is four f32, 16 bytes; v128_load reads them unaligned.
            Self(unsafe { v128_load(values.as_ptr().cast()) })
        }

        /// self + x·y, lane by lane: the product rounded, then the sum.
        #[inline(always)]
        pub fn add_product(self, x: Self, y: Self) -> Self {
            Self(f32x4_add(self.0, f32x4_mul(x.0, y.0)))
        }

        #[inline(always)]
        pub fn store(self, values: &mut [f32]) {
            let values: &mut [f32; 4] = values.try_into().expect("four lanes");
            // SAFETY: `values` is four f32, 16 bytes, uniquely borrowed.
            unsafe { v128_store(values.as_mut_ptr().cast(), self.0) }
        }
    }
}

/// Four f32 lanes as an array, for the native tests: the same arithmetic lane by lane.
#[cfg(not(target_arch = "wasm32"))]
mod lanes {
    #[derive(Clone, Copy)]
    pub struct F32x4([f32; 4]);

    impl F32x4 {
        pub fn splat(x: f32) -> Self {
            Self([x; 4])
        }

        pub fn load(values: &[f32]) -> Self {
            Self(values.try_into().expect("four lanes"))
        }

        pub fn add_product(self, x: Self, y: Self) -> Self {
            Self(std::array::from_fn(|l| self.0[l] + x.0[l] * y.0[l]))
        }

        pub fn store(self, values: &mut [f32]) {
            values.copy_from_slice(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_tile_and_edge_equals_the_plain_loop_bit_for_bit() {
        // Threaded products shared with the page's helper threads, in uneven tasks.
        crate::product::page_threads::tests::start_helpers();
        crate::product::tests::check_portable_order(&|m, n, k, a, sa, b, sb, dst, threaded| {
            super::product(m, n, k, a, sa, b, sb, dst, threaded)
        });
    }
}
