//! Batched matrix products `op(a) · op(b)`, where `op` transposes the last two axes when asked.
//!
//! `a` is `[..batch, m, k]` (`[..batch, k, m]` with `trans_a`), `b` is `[..batch, k, n]`
//! (`[..batch, n, k]` with `trans_b`), the result `[..batch, m, n]`. Either operand may instead be
//! a plain matrix shared by the whole batch: `x[B, T, D] · w[D, F]` is the linear layer.

use rayon::prelude::*;

use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::tensor::{DType, TensorMeta};

uniform! {
    pub struct MatMulUniform = MATMUL "Dims" {
        m: u32, n: u32, k: u32, a_batch: u32, b_batch: u32, trans_a: u32, trans_b: u32,
        splits: u32, k_split: u32, batch: u32, _pad0: u32, _pad1: u32,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatMul {
    pub trans_a: bool,
    pub trans_b: bool,
    /// A kernel named by hand (`bench matmul --kernels`); `None` lets the op choose.
    pub kernel: Option<KernelChoice>,
}

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
}

/// The depths a K-step may stage: tile · kstep at most [`MAX_TILE_DEPTHS`].
const KSTEPS: [usize; 3] = [8, 16, 32];

/// Two staged tiles of TILE × KSTEP floats fill WebGPU's 16 KiB of workgroup memory at this.
const MAX_TILE_DEPTHS: usize = 2048;

/// Every (block, tile) the shader is built for: a tile is a multiple of twice the block.
pub const BLOCK_TILES: [(usize, usize); 5] = [(16, 128), (16, 64), (8, 128), (8, 64), (8, 32)];

/// A product as the kernels see it: `batch` products `[m, k] · [k, n]`, the matrices of each
/// operand `a_batch` / `b_batch` elements apart (0 for a matrix shared by the batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    a_batch: usize,
    b_batch: usize,
}

impl MatMul {
    fn err<T>(&self, a: &TensorMeta, b: &TensorMeta, why: &str) -> Result<T> {
        shape_err(
            self.name(),
            format!(
                "{why}: a {a} (trans_a {}), b {b} (trans_b {})",
                self.trans_a, self.trans_b
            ),
        )
    }

    /// The output shape and the layout of the product, or an error naming both shapes.
    fn plan(&self, a: &TensorMeta, b: &TensorMeta) -> Result<(Vec<usize>, Layout)> {
        if a.dtype != DType::F32 || b.dtype != DType::F32 {
            return self.err(a, b, "needs f32 tensors");
        }
        if a.rank() < 2 || b.rank() < 2 {
            return self.err(a, b, "needs matrices (rank 2 or more)");
        }
        let (a_batch, a_mat) = a.shape.split_at(a.rank() - 2);
        let (b_batch, b_mat) = b.shape.split_at(b.rank() - 2);
        let batch_shape = match (a_batch.is_empty(), b_batch.is_empty()) {
            (_, true) => a_batch,
            (true, false) => b_batch,
            (false, false) if a_batch == b_batch => a_batch,
            _ => return self.err(a, b, "batch dimensions differ"),
        };
        let (m, ka) = if self.trans_a {
            (a_mat[1], a_mat[0])
        } else {
            (a_mat[0], a_mat[1])
        };
        let (kb, n) = if self.trans_b {
            (b_mat[1], b_mat[0])
        } else {
            (b_mat[0], b_mat[1])
        };
        if ka != kb {
            return self.err(a, b, &format!("inner dimensions differ ({ka} vs {kb})"));
        }
        let k = ka;
        let batch: usize = batch_shape.iter().product();
        let mut out = batch_shape.to_vec();
        out.extend([m, n]);
        let mut layout = Layout {
            batch,
            m,
            n,
            k,
            a_batch: if a_batch.is_empty() { 0 } else { m * k },
            b_batch: if b_batch.is_empty() { 0 } else { k * n },
        };
        // A weight shared by a batch of row-major inputs: the batch is just more rows.
        if layout.b_batch == 0 && layout.a_batch != 0 && !self.trans_a {
            layout = Layout {
                batch: 1,
                m: batch * m,
                a_batch: 0,
                ..layout
            };
        }
        Ok((out, layout))
    }
}

/// Below this many multiply-adds a product runs on one thread: a batch of small products is
/// split across threads by product instead.
const SMALL_PRODUCT: usize = 1 << 18;

/// GEMM's own threading for one large product; the web has no threads to give it.
#[cfg(not(target_arch = "wasm32"))]
const THREADED: gemm::Parallelism = gemm::Parallelism::Rayon(0);
#[cfg(target_arch = "wasm32")]
const THREADED: gemm::Parallelism = gemm::Parallelism::None;

/// Fewer workgroups than this leave the adapter idle, so k is split or a smaller tile taken: a
/// software adapter runs a workgroup per core at a time (a few), a GPU one or more per SM (the
/// H100 has 132; this figure is not yet tuned on one).
fn min_workgroups(adapter: AdapterKind) -> usize {
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
struct Kernel {
    entry: &'static str,
    /// Rows and columns of the output per workgroup.
    tile: usize,
    splits: usize,
    /// Depths per K-step (the override constant `KSTEP`).
    kstep: usize,
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
    fn constants(&self) -> Vec<(&'static str, f64)> {
        vec![("TILE", self.tile as f64), ("KSTEP", self.kstep as f64)]
    }
}

/// The entry points of one body (the block of the output each thread computes): staging in
/// workgroup memory for any sizes, the same with vec4 loads for sizes that are all nonzero
/// multiples of 4 (both for GPUs), and loading straight from the buffers (software adapters).
#[derive(Clone, Copy, Debug)]
struct Body {
    general: &'static str,
    vec4: &'static str,
    direct: &'static str,
}

const BLOCK16: Body = Body {
    general: "matmul_16x16",
    vec4: "matmul_16x16_vec4",
    direct: "matmul_16x16_direct",
};
const BLOCK8: Body = Body {
    general: "matmul_8x8",
    vec4: "matmul_8x8_vec4",
    direct: "matmul_8x8_direct",
};

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
fn entry(body: Body, adapter: AdapterKind, l: &Layout) -> &'static str {
    let aligned = [l.m, l.n, l.k].iter().all(|&d| d > 0 && d % 4 == 0);
    match adapter {
        AdapterKind::Software => body.direct,
        AdapterKind::Gpu if aligned => body.vec4,
        AdapterKind::Gpu => body.general,
    }
}

/// The kernel for a product: the largest tile that wastes at most a third of its work on padding
/// and gives the adapter [`min_workgroups`], with k split into ranges of at least
/// [`MIN_SPLIT_K`] where the tiles alone are too few (the smallest tile is taken in any case).
fn kernel_for(adapter: AdapterKind, l: &Layout) -> Kernel {
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
        entry: entry(body, adapter, l),
        tile,
        splits,
        kstep: kstep_for(adapter, tile),
    }
}

impl KernelChoice {
    /// Every kernel the shader has with k in `splits` ranges: each (block, tile) of
    /// [`BLOCK_TILES`] with each K-step its workgroup memory allows.
    pub fn every(splits: usize) -> impl Iterator<Item = KernelChoice> {
        BLOCK_TILES.into_iter().flat_map(move |(block, tile)| {
            KSTEPS
                .into_iter()
                .filter(move |kstep| tile * kstep <= MAX_TILE_DEPTHS)
                .map(move |kstep| KernelChoice {
                    block,
                    tile,
                    splits,
                    kstep,
                })
        })
    }

    /// The kernel it names, or why it names none.
    fn kernel(&self, adapter: AdapterKind, l: &Layout) -> std::result::Result<Kernel, String> {
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
        Ok(Kernel {
            entry: entry(body, adapter, l),
            tile: self.tile,
            splits: self.splits,
            kstep: self.kstep,
        })
    }
}

impl Kernel {
    /// k per split: a whole number of the kernel's K-steps, so that only the last split ends
    /// inside one.
    fn k_split(&self, k: usize) -> usize {
        k.div_ceil(self.splits)
            .next_multiple_of(self.kstep)
            .max(self.kstep)
    }
}

impl MatMul {
    /// One product of the batch into `dst`, through the `gemm` crate with strides for the
    /// transposes (`gemm` computes dst = beta · lhs · rhs when it does not read dst).
    fn gemm(&self, l: &Layout, a: &[f32], b: &[f32], index: usize, dst: &mut [f32], par: gemm::Parallelism) {
        let a = &a[index * l.a_batch..][..l.m * l.k];
        let b = &b[index * l.b_batch..][..l.k * l.n];
        assert_eq!(dst.len(), l.m * l.n, "matmul output size");
        // (row stride, column stride) of op(a) and op(b).
        let (a_rs, a_cs) = if self.trans_a { (1, l.m) } else { (l.k, 1) };
        let (b_rs, b_cs) = if self.trans_b { (1, l.k) } else { (l.n, 1) };
        // SAFETY: `a`, `b` and `dst` hold exactly the m·k, k·n and m·n elements that these
        // strides reach, `dst` is a unique borrow, and gemm does not read dst (read_dst false).
        unsafe {
            gemm::gemm(
                l.m,
                l.n,
                l.k,
                dst.as_mut_ptr(),
                1,
                l.n as isize,
                false,
                a.as_ptr(),
                a_cs as isize,
                a_rs as isize,
                b.as_ptr(),
                b_cs as isize,
                b_rs as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            );
        }
    }

    /// d loss / d a for this product (batched like the product, before any sum over a batch).
    fn grad_a(&self, g: &mut Graph, grad: TensorId, b: TensorId) -> Result<TensorId> {
        if self.trans_a {
            g.matmul_t(b, grad, self.trans_b, true)
        } else {
            g.matmul_t(grad, b, false, !self.trans_b)
        }
    }

    /// d loss / d b for this product (batched like the product, before any sum over a batch).
    fn grad_b(&self, g: &mut Graph, a: TensorId, grad: TensorId) -> Result<TensorId> {
        if self.trans_b {
            g.matmul_t(grad, a, true, self.trans_a)
        } else {
            g.matmul_t(a, grad, !self.trans_a, false)
        }
    }
}

/// Sums a batch of matrices `[..batch, r, c]` into one `[r, c]`: the gradient of an operand
/// shared by the batch.
fn sum_batch(g: &mut Graph, x: TensorId) -> Result<TensorId> {
    let shape = g.shape(x).to_vec();
    let (r, c) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let batch: usize = shape[..shape.len() - 2].iter().product();
    let flat = g.reshape(x, &[batch, r * c])?;
    let summed = g.sum(flat, 0, false)?;
    g.reshape(summed, &[r, c])
}

impl Op for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (out, l) = self.plan(inputs[0], inputs[1])?;
        if let Some(choice) = self.kernel {
            // Checked for either kind: only the entry point differs between them.
            if let Err(why) = choice.kernel(AdapterKind::Gpu, &l) {
                return self.err(inputs[0], inputs[1], &why);
            }
        }
        Ok(vec![TensorMeta::f32(&out)])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (_, l) = self
            .plan(inputs[0].meta, inputs[1].meta)
            .expect("shapes checked by infer");
        let (a, b) = (inputs[0].data, inputs[1].data);
        let out = &mut *outputs[0].data;
        let per = l.m * l.n;
        if per == 0 {
            return;
        }
        if l.k == 0 {
            out.fill(0.0);
        } else if l.batch > 1 && per * l.k < SMALL_PRODUCT {
            out.par_chunks_mut(per)
                .enumerate()
                .for_each(|(i, dst)| self.gemm(&l, a, b, i, dst, gemm::Parallelism::None));
        } else {
            for (i, dst) in out.chunks_mut(per).enumerate() {
                self.gemm(&l, a, b, i, dst, THREADED);
            }
        }
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let (_, l) = self.plan(inputs[0], inputs[1]).expect("shapes checked by infer");
        let kernel = match self.kernel {
            Some(choice) => choice.kernel(adapter, &l).expect("checked by infer"),
            None => kernel_for(adapter, &l),
        };
        let tile = kernel.tile;
        let uniform = MatMulUniform {
            m: word(l.m),
            n: word(l.n),
            k: word(l.k),
            a_batch: word(l.a_batch),
            b_batch: word(l.b_batch),
            trans_a: self.trans_a.into(),
            trans_b: self.trans_b.into(),
            splits: word(kernel.splits),
            k_split: word(kernel.k_split(l.k)),
            batch: word(l.batch),
            _pad0: 0,
            _pad1: 0,
        };
        let groups = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        let workgroups = [
            groups(l.n.div_ceil(tile)),
            groups(l.m.div_ceil(tile)),
            groups(l.batch * kernel.splits),
        ];
        if kernel.splits == 1 {
            let args = vec![Arg::In(0), Arg::In(1), Arg::Out(0)];
            let dispatch = Dispatch::new(kernel.entry, &uniform, args, workgroups);
            return GpuKernels::single(dispatch.with_constants(kernel.constants()));
        }
        // The partial products into a scratch [batch, splits, m, n], then their sums.
        let args = vec![Arg::In(0), Arg::In(1), Arg::Scratch(0)];
        let product = Dispatch::new(kernel.entry, &uniform, args, workgroups);
        let sum = Dispatch::new(
            "matmul_sum_splits",
            &uniform,
            vec![Arg::Scratch(0), Arg::Out(0)],
            grid(l.batch * l.m * l.n, 64),
        );
        GpuKernels {
            scratch: vec![l.batch * kernel.splits * l.m * l.n],
            dispatches: vec![product.with_constants(kernel.constants()), sum],
        }
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None, None]);
        };
        let (a, b) = (args.inputs[0], args.inputs[1]);
        let (rank_a, rank_b) = (g.shape(a).len(), g.shape(b).len());
        let ga = self.grad_a(g, grad, b)?;
        let ga = if rank_a == 2 && rank_b > 2 {
            sum_batch(g, ga)?
        } else {
            ga
        };
        let gb = if rank_b == 2 && rank_a > 2 {
            if self.trans_a {
                let gb = self.grad_b(g, a, grad)?;
                sum_batch(g, gb)?
            } else {
                // The batch is just more rows of a: one product sums over it.
                let (k, n) = (g.shape(a)[rank_a - 1], g.shape(grad)[rank_a - 1]);
                let rows = g.meta(a).numel() / k.max(1);
                let a2 = g.reshape(a, &[rows, k])?;
                let grad2 = g.reshape(grad, &[rows, n])?;
                self.grad_b(g, a2, grad2)?
            }
        } else {
            self.grad_b(g, a, grad)?
        };
        Ok(vec![Some(ga), Some(gb)])
    }
}

impl Graph {
    /// `a · b` over the last two axes; see [`MatMul`] for the shapes.
    pub fn matmul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.matmul_t(a, b, false, false)
    }

    /// `op(a) · op(b)`, each operand transposed (its last two axes swapped) when asked.
    pub fn matmul_t(&mut self, a: TensorId, b: TensorId, trans_a: bool, trans_b: bool) -> Result<TensorId> {
        let op = MatMul {
            trans_a,
            trans_b,
            kernel: None,
        };
        self.apply1(op, &[a, b])
    }

    /// `a · b` computed by the kernel named: for measuring each kernel on an adapter.
    pub fn matmul_with_kernel(&mut self, a: TensorId, b: TensorId, kernel: KernelChoice) -> Result<TensorId> {
        let op = MatMul {
            trans_a: false,
            trans_b: false,
            kernel: Some(kernel),
        };
        self.apply1(op, &[a, b])
    }
}

#[cfg(test)]
mod tests {
    use super::{AdapterKind, BLOCK8, BLOCK16, Kernel, KernelChoice, Layout, MatMul, kernel_for};
    use crate::graph::Graph;
    use crate::tensor::TensorMeta;
    use crate::testing::*;

    fn product(
        sa: &'static [usize],
        sb: &'static [usize],
        ta: bool,
        tb: bool,
    ) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let a = param(g, "a", sa);
            let b = param(g, "b", sb);
            let out = g.matmul_t(a, b, ta, tb).unwrap();
            Built { out, feeds: vec![] }
        }
    }

    /// Shapes of a [m, k] and b [k, n] for the given transposes, with a batch prefix.
    fn shapes(batch: &[usize], m: usize, k: usize, n: usize, ta: bool, tb: bool) -> (Vec<usize>, Vec<usize>) {
        let mut a = batch.to_vec();
        a.extend(if ta { [k, m] } else { [m, k] });
        let mut b = batch.to_vec();
        b.extend(if tb { [n, k] } else { [k, n] });
        (a, b)
    }

    fn layout(a: &[usize], b: &[usize], ta: bool, tb: bool) -> Layout {
        let op = MatMul {
            trans_a: ta,
            trans_b: tb,
            kernel: None,
        };
        op.plan(&TensorMeta::f32(a), &TensorMeta::f32(b)).unwrap().1
    }

    const TRANSPOSES: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

    fn leak(v: Vec<usize>) -> &'static [usize] {
        Vec::leak(v)
    }

    /// A product's batch and (m, k, n), and the (entry, tile) it should take.
    type Choice = (&'static [usize], (usize, usize, usize), (&'static str, usize));

    /// Each product takes the entry and tile given on adapters of `kind`, unsplit, and computes
    /// as the CPU does, for every transpose.
    fn check_choices(kind: AdapterKind, cases: &[Choice]) {
        for &(batch, (m, k, n), (entry, tile)) in cases {
            for (ta, tb) in TRANSPOSES {
                let (sa, sb) = shapes(batch, m, k, n, ta, tb);
                let kernel = kernel_for(kind, &layout(&sa, &sb, ta, tb));
                assert_eq!(
                    (kernel.entry, kernel.tile, kernel.splits),
                    (entry, tile, 1),
                    "{batch:?} {m}x{k}x{n}"
                );
                check_kind_matches_cpu(kind, &product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
            }
        }
    }

    /// Software adapters load straight from the buffers: every tile, odd sizes and sizes beyond one
    /// tile with ragged edges.
    #[test]
    fn software_kernels_match_cpu_for_every_tile_and_transpose() {
        check_choices(
            AdapterKind::Software,
            &[
                (&[], (37, 91, 53), ("matmul_8x8_direct", 32)),
                (&[], (130, 257, 129), ("matmul_8x8_direct", 32)),
                (&[], (200, 40, 190), ("matmul_8x8_direct", 64)),
                (&[], (250, 40, 255), ("matmul_16x16_direct", 128)),
                (&[], (256, 44, 256), ("matmul_16x16_direct", 128)),
            ],
        );
    }

    /// GPUs stage in workgroup memory, with vec4 loads when every size is a multiple of 4 (k = 44
    /// ends in half a K-step; n = 255 falls back to the general loads): every tile, the batches
    /// large enough that a GPU takes it.
    #[test]
    fn gpu_kernels_match_cpu_for_every_tile_and_transpose() {
        check_choices(
            AdapterKind::Gpu,
            &[
                (&[], (37, 91, 53), ("matmul_8x8", 32)),
                (&[11], (200, 40, 190), ("matmul_8x8", 64)),
                (&[32], (250, 40, 255), ("matmul_8x8", 128)),
                (&[], (36, 92, 52), ("matmul_8x8_vec4", 32)),
                (&[11], (200, 44, 192), ("matmul_8x8_vec4", 64)),
                (&[32], (256, 44, 256), ("matmul_8x8_vec4", 128)),
                (&[32], (256, 44, 255), ("matmul_8x8", 128)),
            ],
        );
    }

    #[test]
    fn batched_and_shared_operands_match_cpu_on_the_vec4_path() {
        // Batched and shared operands on the vec4 path.
        for (ta, tb) in TRANSPOSES {
            let (sa, sb) = shapes(&[2, 3], 20, 24, 16, ta, tb);
            let (sa2, _) = shapes(&[2, 5], 32, 16, 28, ta, tb);
            let (_, sb2) = shapes(&[], 32, 16, 28, ta, tb);
            let (sa3, _) = shapes(&[], 12, 40, 36, ta, tb);
            let (_, sb3) = shapes(&[4], 12, 40, 36, ta, tb);
            for (sa, sb) in [(sa, sb), (sa2, sb2), (sa3, sb3)] {
                assert!(
                    kernel_for(AdapterKind::Gpu, &layout(&sa, &sb, ta, tb))
                        .entry
                        .ends_with("_vec4")
                );
                check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
            }
        }
    }

    /// naga validates each variant the op can ask for as wgpu will build it: its constants set.
    #[test]
    fn every_kernel_validates_with_its_constants() {
        for choice in KernelChoice::every(1) {
            let body = if choice.block == 16 { BLOCK16 } else { BLOCK8 };
            for entry in [body.general, body.vec4, body.direct] {
                let kernel = Kernel {
                    entry,
                    tile: choice.tile,
                    splits: 1,
                    kstep: choice.kstep,
                };
                crate::shaders::validate_variant(&crate::shaders::MATMUL, entry, &kernel.constants())
                    .unwrap_or_else(|e| panic!("{kernel:?}: {e}"));
            }
        }
        crate::shaders::validate_variant(&crate::shaders::MATMUL, "matmul_sum_splits", &[]).unwrap();
    }

    /// Every kernel `bench matmul --kernels` can name computes the product, on both kinds' entry
    /// points: ragged sizes (the general loads) and multiples of 4 (vec4), split (k = 45 in three
    /// ranges of one K-step or less) and unsplit.
    #[test]
    fn every_named_kernel_matches_cpu() {
        for choice in KernelChoice::every(1) {
            for splits in [1, 3] {
                for (m, k, n) in [(70, 45, 133), (68, 44, 132)] {
                    let kernel = KernelChoice { splits, ..choice };
                    let build = move |g: &mut Graph| {
                        let a = param(g, "a", leak(vec![m, k]));
                        let b = param(g, "b", leak(vec![k, n]));
                        let out = g.matmul_with_kernel(a, b, kernel).unwrap();
                        Built { out, feeds: vec![] }
                    };
                    check_each_kind_matches_cpu(&build, 1e-4, 1e-4);
                }
            }
        }
    }

    #[test]
    fn a_kernel_that_does_not_exist_is_refused_by_name() {
        let kernel = |block, tile, splits, kstep| KernelChoice {
            block,
            tile,
            splits,
            kstep,
        };
        for (kernel, why) in [
            (kernel(4, 32, 1, 8), "no kernel computes 4 x 4 blocks"),
            (kernel(16, 32, 1, 8), "no 32 x 32 tile of 16 x 16 blocks"),
            (kernel(8, 64, 0, 8), "0 splits of k = 9"),
            (kernel(8, 64, 10, 8), "10 splits of k = 9"),
            (kernel(8, 64, 1, 12), "no K-step of 12 depths on 64 x 64 tiles"),
            (kernel(8, 128, 1, 32), "no K-step of 32 depths on 128 x 128 tiles"),
        ] {
            let mut g = Graph::new();
            let a = g.input("a", TensorMeta::f32(&[5, 9]));
            let b = g.input("b", TensorMeta::f32(&[9, 7]));
            let err = g.matmul_with_kernel(a, b, kernel).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
    }

    /// Long k over few output tiles splits k (the gradient of a weight, k = the batch's rows):
    /// ranges that end inside a K-step, batched products, every transpose; on both adapter kinds'
    /// choices (GPUs want many more workgroups, so they split where software adapters do not).
    #[test]
    fn split_k_products_match_cpu() {
        // (batch, m, k, n): splits on a software adapter, on a GPU.
        let cases = [
            (&[][..], (20, 1030, 28), (4, 4)),
            (&[2][..], (20, 1030, 28), (2, 4)),
            (&[][..], (33, 700, 17), (2, 2)),
            (&[][..], (64, 1100, 64), (4, 4)),
        ];
        for (batch, (m, k, n), (software, gpu)) in cases {
            for (ta, tb) in TRANSPOSES {
                let (sa, sb) = shapes(batch, m, k, n, ta, tb);
                let l = layout(&sa, &sb, ta, tb);
                assert_eq!(
                    kernel_for(AdapterKind::Software, &l).splits,
                    software,
                    "{m}x{k}x{n}"
                );
                assert_eq!(kernel_for(AdapterKind::Gpu, &l).splits, gpu, "{m}x{k}x{n}");
                check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
            }
        }
    }

    /// The peers' step's weight gradients (k = 2,048 rows, few output tiles) as each kind splits
    /// them.
    #[test]
    fn weight_gradients_split_k_per_adapter_kind() {
        let kernel = |kind, m, n| kernel_for(kind, &layout(&[2048, m], &[2048, n], true, false));
        let chosen = |k: Kernel| (k.tile, k.splits);
        assert_eq!(chosen(kernel(AdapterKind::Software, 128, 384)), (128, 2));
        assert_eq!(chosen(kernel(AdapterKind::Software, 128, 128)), (128, 4));
        assert_eq!(chosen(kernel(AdapterKind::Software, 128, 512)), (128, 1));
        assert_eq!(chosen(kernel(AdapterKind::Gpu, 128, 384)), (32, 3));
        assert_eq!(chosen(kernel(AdapterKind::Gpu, 128, 512)), (64, 8));
    }

    #[test]
    fn gpu_matches_cpu_batched_and_shared_operands() {
        for (ta, tb) in TRANSPOSES {
            // Both batched, two batch axes.
            let (sa, sb) = shapes(&[2, 3], 19, 23, 17, ta, tb);
            check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
            // b shared by the batch (a linear layer), and a shared by the batch.
            let (sa, _) = shapes(&[2, 5], 33, 17, 29, ta, tb);
            let (_, sb) = shapes(&[], 33, 17, 29, ta, tb);
            check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
            let (_, sb) = shapes(&[4], 33, 17, 29, ta, tb);
            let (sa, _) = shapes(&[], 33, 17, 29, ta, tb);
            check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        for (ta, tb) in TRANSPOSES {
            let (sa, sb) = shapes(&[2], 3, 4, 5, ta, tb);
            check_gradients(&product(leak(sa), leak(sb), ta, tb), 1e-2, 1e-3, 12);
            let (sa, _) = shapes(&[2, 2], 3, 4, 5, ta, tb);
            let (_, sb) = shapes(&[], 3, 4, 5, ta, tb);
            check_gradients(&product(leak(sa), leak(sb), ta, tb), 1e-2, 1e-3, 12);
            let (sa, _) = shapes(&[], 3, 4, 5, ta, tb);
            let (_, sb) = shapes(&[3], 3, 4, 5, ta, tb);
            check_gradients(&product(leak(sa), leak(sb), ta, tb), 1e-2, 1e-3, 12);
        }
    }

    /// A case of `gen_matmul.py`: name, shapes of a and b, trans_a, trans_b.
    type Case = (&'static str, &'static [usize], &'static [usize], bool, bool);

    #[test]
    fn matches_pytorch() {
        let cases: [Case; 9] = [
            ("plain", &[5, 7], &[7, 3], false, false),
            ("trans_a", &[7, 5], &[7, 3], true, false),
            ("trans_b", &[5, 7], &[3, 7], false, true),
            ("trans_ab", &[7, 5], &[3, 7], true, true),
            ("batched", &[2, 4, 6], &[2, 6, 3], false, false),
            ("batched_trans_b", &[2, 3, 4, 6], &[2, 3, 5, 6], false, true),
            ("shared_weight", &[2, 3, 4, 6], &[6, 5], false, false),
            ("shared_weight_trans", &[2, 6, 4], &[5, 6], true, true),
            ("shared_a", &[4, 6], &[3, 6, 5], false, false),
        ];
        for (case, sa, sb, ta, tb) in cases {
            check_reference("matmul", case, &product(sa, sb, ta, tb), 1e-5, 1e-4);
        }
    }

    #[test]
    fn bad_shapes_name_the_op_and_both_shapes() {
        let cases: [(&[usize], &[usize], bool); 4] = [
            (&[3, 4], &[5, 6], false),
            (&[2, 3, 4], &[3, 4, 6], false),
            (&[4], &[4, 6], false),
            (&[3, 4], &[3, 6], true),
        ];
        for (sa, sb, tb) in cases {
            let mut g = Graph::new();
            let a = param(&mut g, "a", sa);
            let b = param(&mut g, "b", sb);
            let err = g.matmul_t(a, b, false, tb).unwrap_err().to_string();
            assert!(err.starts_with("matmul: "), "{err}");
            assert!(
                err.contains(&format!("{sa:?}")) && err.contains(&format!("{sb:?}")),
                "{err}"
            );
        }
    }
}
