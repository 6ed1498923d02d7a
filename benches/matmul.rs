//! Square matrix products on the CPU backend and on the GPU backend (any adapter, software ones
//! included). `cargo bench --bench matmul [-- SIZE...]`; sizes default to 256 512 1024 2048.

use std::rc::Rc;

use posflow::backend::gpu::SoftwareAdapters;
use posflow::backend::{Backend, CpuBackend, GpuBackend};
use posflow::bench;

fn table(backend: &Rc<dyn Backend>, sizes: &[usize]) {
    println!("\n{}", backend.describe());
    println!("{:>6}  {:>12}  {:>9}", "size", "ms/matmul", "GFLOP/s");
    for &size in sizes {
        // About a second of work per size at a few GFLOP/s, and at least three runs.
        let repeats = (4e9 / (2.0 * (size as f64 * size as f64 * size as f64))).clamp(3.0, 50.0) as usize;
        match bench::matmul(backend, &[size], repeats) {
            Ok(rows) => {
                for r in rows {
                    println!("{:>6}  {:>12.3}  {:>9.1}", r.size, r.seconds * 1e3, r.gflops);
                }
            }
            Err(e) => println!("{size:>6}  failed: {e}"),
        }
    }
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if args.is_empty() {
        vec![256, 512, 1024, 2048]
    } else {
        args
    };
    table(&(Rc::new(CpuBackend::new()) as Rc<dyn Backend>), &sizes);
    match pollster::block_on(GpuBackend::new(SoftwareAdapters::Allow)) {
        Ok(gpu) => table(&(Rc::new(gpu) as Rc<dyn Backend>), &sizes),
        Err(e) => println!("\nno GPU backend: {e}"),
    }
}
