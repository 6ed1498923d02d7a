//! Optimizers: they run after the backward pass, in the same submission, on the same buffers.

mod adam;

pub use adam::{AdamW, Optimizer};
