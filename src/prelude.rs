//! The front door: what a program that trains, evaluates or studies models with posflow imports,
//! in one `use posflow::prelude::*;`.

pub use crate::backend::{Backend, DeviceChoice, select_backend};
pub use crate::data::{Batch, CharTokenizer, TaskTokenizer};
pub use crate::error::{Error, Result};
pub use crate::inference::SavedModel;
pub use crate::model::{ModelConfig, ModelKind, PosEnc};
pub use crate::study::Study;
pub use crate::train::{
    DataConfig, EvalReport, EvalSet, RunConfig, StepStats, Task, TrainBatch, TrainConfig, Trainer,
    VOCAB_FROM_DATA,
};
/// Natively only: the page steps a trainer itself, awaiting each step.
#[cfg(not(target_arch = "wasm32"))]
pub use crate::train::{FitSummary, Progress, fit};
