//! Training: a run's configuration (TOML), its data, the trainer (one step at a time), the
//! evaluation per length bin, the learning-rate schedule, and natively the whole loop with its
//! metrics log and checkpoints.

mod class_report;
mod config;
mod data_config;
mod data_task;
mod eval;
mod eval_classes;
mod eval_pairs;
mod finetune;
#[cfg(not(target_arch = "wasm32"))]
mod fit;
mod metrics;
mod pair_report;
mod program;
mod saved;
mod schedule;
mod task;
mod trainer;
mod values;

pub use class_report::{ClassBinScores, ClassReport};
pub use config::{DEFAULT_RUN, RunConfig, TrainConfig, VOCAB_FROM_DATA, check_eval_lengths};
pub use data_config::{ClassSettings, DataConfig, MAX_SEQUENCE, Vocabulary};
pub use data_task::DataTask;
pub use eval::{EvalReport, Evaluator};
pub use finetune::{FineTune, FineTuneSettings};
#[cfg(not(target_arch = "wasm32"))]
pub use fit::{FitSummary, Progress, fit};
#[cfg(not(target_arch = "wasm32"))]
pub use metrics::MetricsLog;
pub use metrics::{ClassScores, DecodedScores, ItemErrors, Record};
pub use pair_report::PairReport;
pub use program::{BatchShape, TrainGraph, TrainingProgram};
pub use saved::{RUN_KEY, check_same_tokenizer, saved_run};
pub use schedule::{Decay, Schedule};
pub use task::{EvalBins, EvalSet, LengthUnit, Task, TrainBatch};
pub use trainer::{StepStats, Trainer, WarmStart, positions_seed};
pub use values::{Read, ValueBatch, Values, checkpoint_values, i32_safetensors};
