//! Benchmarks on one backend, for `cargo bench`, `posflow bench` and the page's `benchTrain`:
//! single products, one training step of a small Transformer, and seq2seq decoding.
//! The training step also builds for wasm, so that the page times the same step as the
//! command line (BENCHMARKS.md's browser table).

#[cfg(not(target_arch = "wasm32"))]
mod decode;
#[cfg(not(target_arch = "wasm32"))]
mod matmul;
mod step;

#[cfg(not(target_arch = "wasm32"))]
pub use decode::{DecodeRow, decode};
#[cfg(not(target_arch = "wasm32"))]
pub use matmul::{KernelRow, MatmulRow, matmul, matmul_kernels};
pub use step::{OTHER_VARIANTS, TrainBench, TrainBenchRow, TrainShape, train, train_variants};
