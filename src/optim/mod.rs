//! Optimizers: they run after the backward pass, in the same submission, on the same buffers.

pub(crate) mod adam;
pub(crate) mod update;

pub use adam::{AdamW, Optimizer};
