//! Training utilities shared by every model: the learning-rate schedule and the metrics log.

mod metrics;
mod schedule;

pub use metrics::{MetricsLog, Record};
pub use schedule::{Decay, Schedule};
