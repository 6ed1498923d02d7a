//! Which kernel of `matmul.wgsl` computes a product: the tile, the block of the output per
//! thread, the depths per K-step and the split of k, chosen per adapter kind from the sizes, or
//! named by hand (`bench matmul --kernels`).

use super::Layout;
use crate::kernel::AdapterKind;
use crate::ops::unary::Activation;

/// A product's kernel named by hand rather than chosen from the sizes: the block of the output
/// each thread computes (8 or 16 rows and columns), the rows and columns per workgroup, and the
/// ranges k is split into. `bench matmul --kernels` times each of [`BLOCK_TILES`] on the adapter at
/// hand: that is how the op's own choice per adapter kind is tuned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelChoice {
    pub block: usize,
    pub tile: usize,
    pub splits: usize,
    /// Depths staged in workgroup memory between barriers (GPU entry points).
    pub kstep: usize,
    /// The next K-step's loads in flight during this one's multiply-adds (`matmul_8x8_vec4_prefetch`:
    /// 8 × 8 blocks, sizes multiples of 4, on GPUs; other products take the plain entry point).
    pub prefetch: bool,
}

/// The depths a K-step may stage: tile · kstep at most [`MAX_TILE_DEPTHS`].
const KSTEPS: [usize; 3] = [8, 16, 32];

/// Two staged tiles of TILE × KSTEP floats fill WebGPU's 16 KiB of workgroup memory at this.
const MAX_TILE_DEPTHS: usize = 2048;

/// Every (block, tile) the shader is built for: a tile is a multiple of twice the block.
pub const BLOCK_TILES: [(usize, usize); 5] = [(16, 128), (16, 64), (8, 128), (8, 64), (8, 32)];

/// Fewer workgroups than this leave the adapter idle, so k is split or a smaller tile taken: a
/// software adapter runs a workgroup per core at a time (a few), a GPU one or more per SM (the
/// H100 has 132; this figure is not yet tuned on one).
pub(super) fn min_workgroups(adapter: AdapterKind) -> usize {
    match adapter {
        AdapterKind::Software => 4,
        AdapterKind::Gpu => 128,
    }
}

/// The least k a split of a split-K product gets: below it the partial products' extra writes
/// and their sum cost more than the idle cores.
const MIN_SPLIT_K: usize = 256;

/// A kernel of matmul.wgsl: an entry point (its body is named by the block of the output each
/// thread computes), the tile it is built with (the override constant `TILE`), and the ranges
/// k is split into (1: no split-K).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Kernel {
    pub(super) entry: &'static str,
    /// Rows and columns of the output per workgroup.
    pub(super) tile: usize,
    pub(super) splits: usize,
    /// Depths per K-step (the override constant `KSTEP`).
    pub(super) kstep: usize,
}

/// The depths per K-step the op chooses: 16 on a GPU's 128-tiles, where they were 6-15% faster
/// than 8 at 2048 and 4096 in three sweeps on an H200 (slower on 64-tiles; BENCHMARKS.md), 8
/// otherwise (the software adapters' entry points stage nothing).
fn kstep_for(adapter: AdapterKind, tile: usize) -> usize {
    match adapter {
        AdapterKind::Gpu if tile == 128 => 16,
        _ => 8,
    }
}

impl Kernel {
    /// The override constants of the product's dispatch, with what it does as it writes C.
    pub(super) fn constants(&self, epilogue: Epilogue) -> Vec<(&'static str, f64)> {
        let mut constants = vec![("TILE", self.tile as f64), ("KSTEP", self.kstep as f64)];
        constants.extend(epilogue.constants());
        constants
    }
}

/// What a product does to each value of C as it writes it: add the bias, and write an
/// activation of the result beside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Epilogue {
    pub(super) bias: bool,
    pub(super) activation: Option<Activation>,
}

impl Epilogue {
    /// Its override constants (the product's, or for a split-K product the sum's).
    pub(super) fn constants(self) -> [(&'static str, f64); 2] {
        [
            ("BIAS", f64::from(u8::from(self.bias))),
            ("ACTIVATION", Activation::constant(self.activation)),
        ]
    }
}

/// The entry points of one body (the block of the output each thread computes): staging in
/// workgroup memory for any sizes, the same with vec4 loads for sizes that are all nonzero
/// multiples of 4 (both for GPUs), and loading straight from the buffers (software adapters).
#[derive(Clone, Copy, Debug)]
pub(super) struct Body {
    pub(super) general: &'static str,
    pub(super) vec4: &'static str,
    pub(super) direct: &'static str,
    /// The vec4 entry with the next K-step's loads in flight, where the body has one.
    pub(super) vec4_prefetch: Option<&'static str>,
}

pub(super) const BLOCK16: Body = Body {
    general: "matmul_16x16",
    vec4: "matmul_16x16_vec4",
    direct: "matmul_16x16_direct",
    vec4_prefetch: None,
};
pub(super) const BLOCK8: Body = Body {
    general: "matmul_8x8",
    vec4: "matmul_8x8_vec4",
    direct: "matmul_8x8_direct",
    vec4_prefetch: Some("matmul_8x8_vec4_prefetch"),
};

/// Whether the prefetching entry can hold a K-step in registers: one 4 × 4 block of each operand
/// per thread at most, (tile / 4) · (kstep / 4) ≤ tile² / 64.
fn prefetch_fits(block: usize, tile: usize, kstep: usize) -> bool {
    block == 8 && 4 * kstep <= tile
}

/// The tiles an adapter kind chooses from, largest first, each with the body whose per-thread
/// block suits it. Software adapters want the most multiply-adds per load (16 × 16 blocks, see
/// matmul.wgsl); on a GPU 256 accumulators per thread spill and leave few warps per SM, so its
/// large tile is 8 × 8 blocks on 256 threads (measured on an H100: BENCHMARKS.md).
fn tiles(adapter: AdapterKind) -> [(Body, usize); 3] {
    match adapter {
        AdapterKind::Software => [(BLOCK16, 128), (BLOCK8, 64), (BLOCK8, 32)],
        AdapterKind::Gpu => [(BLOCK8, 128), (BLOCK8, 64), (BLOCK8, 32)],
    }
}

/// The entry point of `body` for an adapter kind and a product: software adapters load straight
/// from the buffers; GPUs stage, with vec4 loads when every size is a nonzero multiple of 4.
fn entry(body: Body, adapter: AdapterKind, l: &Layout, prefetch: bool) -> &'static str {
    let aligned = [l.m, l.n, l.k].iter().all(|&d| d > 0 && d % 4 == 0);
    match (adapter, body.vec4_prefetch) {
        (AdapterKind::Software, _) => body.direct,
        (AdapterKind::Gpu, Some(prefetching)) if aligned && prefetch => prefetching,
        (AdapterKind::Gpu, _) if aligned => body.vec4,
        (AdapterKind::Gpu, _) => body.general,
    }
}

/// The kernel for a product: the largest tile that wastes at most a third of its work on padding
/// and gives the adapter [`min_workgroups`], with k split into ranges of at least
/// [`MIN_SPLIT_K`] where the tiles alone are too few (the smallest tile is taken in any case).
pub(super) fn kernel_for(adapter: AdapterKind, l: &Layout) -> Kernel {
    let wanted = min_workgroups(adapter);
    let work = l.m * l.n;
    let choice = |tile: usize| {
        let tiles = l.m.div_ceil(tile) * l.n.div_ceil(tile);
        let groups = l.batch * tiles;
        let splits = wanted.div_ceil(groups.max(1)).min(l.k / MIN_SPLIT_K).max(1);
        let fits = groups * splits >= wanted && 2 * tiles * tile * tile <= 3 * work;
        (fits || tile == 32).then_some(splits)
    };
    let ((body, tile), splits) = tiles(adapter)
        .into_iter()
        .find_map(|t| choice(t.1).map(|splits| (t, splits)))
        .expect("the smallest tile always fits");
    Kernel {
        entry: entry(body, adapter, l, false),
        tile,
        splits,
        kstep: kstep_for(adapter, tile),
    }
}

/// Kernels that compute what `chosen` computes bit for bit: every other (block, tile, K-step,
/// prefetch) with the same ranges of k, for a tuning backend to time on its adapter. Each output
/// is one running sum over its range of k in order whatever the tile, block or staging, so only
/// a different split would change the sums. Software adapters' entry points stage nothing, so
/// their K-step and prefetching are the chosen ones; GPUs keep to 8 × 8 blocks (16 × 16 spill
/// there: 2-6 TFLOP/s on an H100, BENCHMARKS.md).
pub(super) fn same_sums(adapter: AdapterKind, l: &Layout, chosen: &Kernel) -> Vec<Kernel> {
    let mut found: Vec<Kernel> = Vec::new();
    for choice in KernelChoice::every(chosen.splits) {
        let Ok(kernel) = choice.kernel(adapter, l) else {
            continue;
        };
        let fits = match adapter {
            AdapterKind::Software => !choice.prefetch && kernel.kstep == kstep_for(adapter, kernel.tile),
            AdapterKind::Gpu => choice.block == 8,
        };
        if !fits {
            continue;
        }
        let same_ranges = kernel.splits == 1 || kernel.k_split(l.k) == chosen.k_split(l.k);
        if same_ranges && kernel != *chosen && !found.contains(&kernel) {
            found.push(kernel);
        }
    }
    found
}

impl KernelChoice {
    /// Every kernel the shader has with k in `splits` ranges: each (block, tile) of
    /// [`BLOCK_TILES`] with each K-step its workgroup memory allows, and where the prefetching
    /// entry fits, with it too.
    pub fn every(splits: usize) -> impl Iterator<Item = KernelChoice> {
        BLOCK_TILES.into_iter().flat_map(move |(block, tile)| {
            KSTEPS
                .into_iter()
                .filter(move |kstep| tile * kstep <= MAX_TILE_DEPTHS)
                .flat_map(move |kstep| {
                    [false, true]
                        .into_iter()
                        .filter(move |&prefetch| !prefetch || prefetch_fits(block, tile, kstep))
                        .map(move |prefetch| KernelChoice {
                            block,
                            tile,
                            splits,
                            kstep,
                            prefetch,
                        })
                })
        })
    }

    /// The kernel it names, or why it names none.
    pub(super) fn kernel(&self, adapter: AdapterKind, l: &Layout) -> std::result::Result<Kernel, String> {
        let body = match self.block {
            16 => BLOCK16,
            8 => BLOCK8,
            other => return Err(format!("no kernel computes {other} x {other} blocks (8 or 16)")),
        };
        if !BLOCK_TILES.contains(&(self.block, self.tile)) {
            return Err(format!(
                "no {0} x {0} tile of {1} x {1} blocks; the tiles are {BLOCK_TILES:?}",
                self.tile, self.block
            ));
        }
        if self.splits == 0 || self.splits > l.k.max(1) {
            return Err(format!("{} splits of k = {}", self.splits, l.k));
        }
        if !KSTEPS.contains(&self.kstep) || self.tile * self.kstep > MAX_TILE_DEPTHS {
            return Err(format!(
                "no K-step of {} depths on {} x {} tiles (one of {KSTEPS:?}, tile x depths at most {MAX_TILE_DEPTHS})",
                self.kstep, self.tile, self.tile
            ));
        }
        if self.prefetch && !prefetch_fits(self.block, self.tile, self.kstep) {
            return Err(format!(
                "no prefetching kernel for {0} x {0} blocks on {1} x {1} tiles of {2} depths (8 x 8 \
                 blocks, at most tile / 4 depths)",
                self.block, self.tile, self.kstep
            ));
        }
        Ok(Kernel {
            entry: entry(body, adapter, l, self.prefetch),
            tile: self.tile,
            splits: self.splits,
            kstep: self.kstep,
        })
    }
}

impl Kernel {
    /// k per split: a whole number of the kernel's K-steps, so that only the last split ends
    /// inside one.
    pub(super) fn k_split(&self, k: usize) -> usize {
        k.div_ceil(self.splits)
            .next_multiple_of(self.kstep)
            .max(self.kstep)
    }
}
