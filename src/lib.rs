//! posflow: a compute engine on WebGPU that trains small Transformers with neural-ODE position
//! encodings (FLOATER), untied positional attention (TUPE) and Runge-Kutta blocks (ODE
//! Transformer), natively on any GPU or on the CPU, and in the browser.
//!
//! The floors, bottom up, each importing only those below it: `kernel` (how a CPU reference
//! sees tensors and how GPU work is described) → [`graph`] (a static graph of [`graph::Op`]s,
//! autodiff) → [`backend`] (CPU and wgpu) → [`params`] → [`exec`] (planner, executor) → [`ops`]
//! (shape rules, CPU references, GPU dispatches, gradients; [`ode`] is their numeric library) →
//! [`model`] and [`optim`] → [`train`] and [`inference`] → [`viz`] and the command line.
//! `DESIGN.md` in the repository root says why.
//!
//! Training a model (the README's example; a copy task small enough for a doctest):
//!
//! ```
//! use posflow::prelude::*;
//!
//! # fn main() -> posflow::Result<()> {
//! let model = ModelConfig {
//!     vocab: VOCAB_FROM_DATA, // the data's tokenizer sets it
//!     d_model: 32,
//!     heads: 2,
//!     layers: 2,
//!     ffn: 64,
//!     max_len: 64,
//!     posenc: PosEnc::from_preset("rope", false)?,
//!     ..ModelConfig::default()
//! };
//! let data = DataConfig::Copy { min_len: 1, max_len: 8 };
//! let run = RunConfig::new(data, model, TrainConfig::new(200, 16, 3e-3))?;
//! let backend = pollster::block_on(select_backend(DeviceChoice::Cpu))?;
//! let mut trainer = Trainer::new(backend, run)?;
//! let summary = fit(&mut trainer, &mut ())?; // () hears nothing; a Progress of yours, each step
//! assert!(summary.last_loss < summary.first_loss);
//! # Ok(())
//! # }
//! ```

pub mod arithmetic;
pub mod backend;
// Internals that the binary, the benchmarks and the page reach, hidden from the library's docs:
// the benchmarks, the kernels' descriptions and sources, and the memory accounting.
#[doc(hidden)]
pub mod bench;
pub mod checkpoint;
pub mod data;
pub mod error;
pub mod exec;
pub mod graph;
pub mod inference;
#[doc(hidden)]
pub mod kernel;
pub mod math;
#[doc(hidden)]
pub mod memory;
#[cfg(not(target_arch = "wasm32"))]
pub mod mlp;
pub mod model;
pub mod ode;
pub mod ops;
pub mod optim;
pub mod params;
pub mod prelude;
mod product;
/// The page's helper threads for its products (web/build.sh's threaded build).
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
pub use product::page_threads;
pub mod score;
#[doc(hidden)]
pub mod shaders;
pub mod study;
pub mod tensor;
#[cfg(test)]
pub(crate) mod testing;
pub mod train;
#[cfg(test)]
mod uniform_reflection;
mod vector;
#[cfg(feature = "viz")]
pub mod viz;

pub use error::{Error, Result};
pub use graph::{Graph, Init, TensorId};
pub use tensor::{DType, TensorMeta};
