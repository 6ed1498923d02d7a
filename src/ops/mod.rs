//! Ops: one file per op family. Each op states its shape rule, its CPU reference, the GPU
//! dispatches that compute it, and its vector-Jacobian product as more graph ops.
//!
//! Ops describe; backends execute. An op never touches wgpu: [`Op::gpu`] returns [`Dispatch`]
//! descriptions (which WGSL entry point, which buffers, how many workgroups) and the GPU backend
//! turns them into pipelines and bind groups once per plan.

pub use crate::graph::{Op, VjpArgs};
pub use crate::kernel::{AdapterKind, Arg, Dispatch, GpuKernels, In, Out, RowKernels, grid, word};

pub mod attention;
pub mod cross_entropy;
pub mod dropout;
pub mod elementwise;
pub mod embedding;
pub mod fill;
pub mod heads;
pub mod layernorm;
pub mod matmul;
pub mod ode_flow;
pub(crate) mod par;
pub mod reduce;
pub mod rk_stage;
pub mod rope;
pub mod shape;
pub mod softmax;
mod strided;
pub mod unary;
