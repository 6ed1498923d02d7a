//! Benchmarks of single ops on one backend, for `cargo bench` and `posflow bench`.

use std::rc::Rc;
use std::time::Instant;

use crate::backend::Backend;
use crate::error::Result;
use crate::graph::{Executor, Graph};
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
    let repeats = repeats.max(1);
    sizes
        .iter()
        .map(|&size| {
            let mut g = Graph::new();
            let a = g.input("a", TensorMeta::f32(&[size, size]));
            let b = g.input("b", TensorMeta::f32(&[size, size]));
            let c = g.matmul(a, b)?;
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
                gflops: 2.0 * (size as f64).powi(3) / seconds / 1e9,
            })
        })
        .collect()
}

/// Deterministic values in [-0.5, 0.5): benchmarks need no randomness, only no zeros or NaNs.
fn pattern(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}
