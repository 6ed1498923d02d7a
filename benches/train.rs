//! One training step of the model (`posflow::bench::TrainBench::default()`: 4 layers,
//! d_model 128, batch 16 × 128 tokens, AdamW) on the CPU backend and on the GPU backend (any
//! adapter, software ones included). `cargo bench --bench train [-- STEPS]`; 10 steps by default
//! (3 on a software GPU, where a step takes seconds).

use std::rc::Rc;

use posflow::backend::gpu::SoftwareAdapters;
use posflow::backend::{Backend, CpuBackend, GpuBackend};
use posflow::bench::{self, TrainBench};

fn row(backend: &Rc<dyn Backend>, steps: usize) {
    println!("\n{}", backend.describe());
    match pollster::block_on(bench::train(backend, &TrainBench::default(), steps)) {
        Ok(r) => println!(
            "{} parameters, {steps} steps: median {:.1} ms/step, best {:.1} ms, {:.0} tokens/s",
            r.parameters,
            r.median_seconds * 1e3,
            r.best_seconds * 1e3,
            r.tokens_per_second
        ),
        Err(e) => println!("failed: {e}"),
    }
}

fn main() {
    let steps = std::env::args().skip(1).find_map(|a| a.parse().ok());
    row(
        &(Rc::new(CpuBackend::new()) as Rc<dyn Backend>),
        steps.unwrap_or(10),
    );
    match pollster::block_on(GpuBackend::new(SoftwareAdapters::Allow)) {
        Ok(gpu) => row(&(Rc::new(gpu) as Rc<dyn Backend>), steps.unwrap_or(3)),
        Err(e) => println!("\nno GPU backend: {e}"),
    }
}
