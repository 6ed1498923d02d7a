//! Square matrix products on one backend: the op's own kernel choice, or every kernel it has.

use std::rc::Rc;
use std::time::Instant;

use crate::backend::Backend;
use crate::error::Result;
use crate::exec::Executor;
use crate::graph::Graph;
use crate::ops::matmul::KernelChoice;
use crate::params::ParamStore;
use crate::tensor::TensorMeta;

/// The time of one square product `[size, size] · [size, size]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatmulRow {
    pub size: usize,
    /// Wall time per product.
    pub seconds: f64,
    /// 2·size³ floating-point operations per product, per second, in billions.
    pub gflops: f64,
}

/// Times square matrix products on `backend`: for each size, a graph with one matmul runs once
/// to warm up (pipelines, buffers), then `repeats` times followed by one readback, so the time
/// includes all the GPU work queued.
pub fn matmul(backend: &Rc<dyn Backend>, sizes: &[usize], repeats: usize) -> Result<Vec<MatmulRow>> {
    sizes
        .iter()
        .map(|&size| time_product(backend, size, repeats, None))
        .collect()
}

/// One kernel's time on one size, for [`matmul_kernels`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelRow {
    /// The kernel named, or `None` for the op's own choice.
    pub kernel: Option<KernelChoice>,
    pub row: MatmulRow,
}

/// Splits of k that [`matmul_kernels`] tries with each tile.
const KERNEL_SPLITS: [usize; 2] = [1, 4];

/// Like [`matmul`], but each size is timed with the op's own choice and then with every kernel
/// the shader has ([`KernelChoice::every`], k unsplit or split in 4): what tunes the choice per
/// adapter kind. `progress` sees each row as it is measured.
pub fn matmul_kernels(
    backend: &Rc<dyn Backend>,
    sizes: &[usize],
    repeats: usize,
    mut progress: impl FnMut(&KernelRow),
) -> Result<Vec<KernelRow>> {
    let named = KernelChoice::every(1).flat_map(|kernel| {
        KERNEL_SPLITS
            .iter()
            .map(move |&splits| Some(KernelChoice { splits, ..kernel }))
    });
    let kernels: Vec<Option<KernelChoice>> = std::iter::once(None).chain(named).collect();
    let mut rows = Vec::new();
    for &size in sizes {
        for &kernel in &kernels {
            let row = KernelRow {
                kernel,
                row: time_product(backend, size, repeats, kernel)?,
            };
            progress(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

fn time_product(
    backend: &Rc<dyn Backend>,
    size: usize,
    repeats: usize,
    kernel: Option<KernelChoice>,
) -> Result<MatmulRow> {
    let repeats = repeats.max(1);
    let mut g = Graph::new();
    let a = g.input("a", TensorMeta::f32(&[size, size]));
    let b = g.input("b", TensorMeta::f32(&[size, size]));
    let c = match kernel {
        Some(kernel) => g.matmul_with_kernel(a, b, kernel)?,
        None => g.matmul(a, b)?,
    };
    let params = ParamStore::init(backend.clone(), &g, 0)?;
    let exec = Executor::new(&g, &[c], &params)?;
    exec.set_f32(a, &pattern(size * size, 1))?;
    exec.set_f32(b, &pattern(size * size, 2))?;
    exec.run()?;
    exec.read_blocking(c)?;
    let start = Instant::now();
    for _ in 0..repeats {
        exec.run()?;
    }
    exec.read_blocking(c)?;
    let seconds = start.elapsed().as_secs_f64() / repeats as f64;
    Ok(MatmulRow {
        size,
        seconds,
        gflops: 2.0 * (size as f64 * size as f64 * size as f64) / seconds / 1e9,
    })
}

/// Deterministic values in [-0.5, 0.5): benchmarks need no randomness, only no zeros or NaNs.
fn pattern(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}
