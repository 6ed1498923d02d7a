//! The Compare tab: a visitor compares position encodings on a length split, trained live in
//! this process (the page's, in a browser) by the same study rule as `posflow study`.

mod evaluation;
mod run;
pub mod settings;
mod tab;
mod task;

pub use evaluation::{BIN_SEQUENCES, EvalPlan, MAX_EVAL_TOKENS, PlanBin};
pub use run::{ClaimStatus, CompareStatus};
pub(crate) use run::{Comparing, Step, next_step, offer_study, run_step, start, stop};
pub use settings::{Choice, CompareSettings, Encoding, Preset};
pub(crate) use tab::show;
pub use task::CompareTask;
