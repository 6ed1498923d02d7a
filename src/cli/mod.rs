//! The commands of the `posflow` binary that work with models (the engine demos live in main.rs).

pub mod inspect;
pub mod study;
pub mod train;
#[cfg(feature = "viz")]
pub mod viz;
