//! The tasks the Compare tab offers, with the unit each measures lengths in and the longest
//! length each fits.

use crate::data::chomsky::ChomskyTask;
use crate::error::{Error, Result};

/// The tasks the tab offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareTask {
    Chomsky(ChomskyTask),
    /// `abc|abc`, a causal LM.
    Copy,
    /// `abc|cba`, a causal LM.
    Reverse,
    /// Next character of Moby Dick, a causal LM.
    MobyDick,
}

impl CompareTask {
    pub fn all() -> Vec<CompareTask> {
        let mut tasks: Vec<CompareTask> = ChomskyTask::ALL.into_iter().map(CompareTask::Chomsky).collect();
        tasks.extend([CompareTask::Copy, CompareTask::Reverse, CompareTask::MobyDick]);
        tasks
    }

    /// The name in URLs and study files.
    pub fn name(self) -> String {
        match self {
            CompareTask::Chomsky(task) => toml::Value::try_from(task)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .expect("a Chomsky task serializes to its name"),
            CompareTask::Copy => "copy".into(),
            CompareTask::Reverse => "reverse".into(),
            CompareTask::MobyDick => "moby_dick".into(),
        }
    }

    pub fn from_name(name: &str) -> Result<CompareTask> {
        Self::all().into_iter().find(|t| t.name() == name).ok_or_else(|| {
            let names: Vec<String> = Self::all().into_iter().map(CompareTask::name).collect();
            Error::Input(format!(
                "unknown task `{name}`; the tasks are {}",
                names.join(", ")
            ))
        })
    }

    /// The model is an encoder (the Chomsky tasks' token classifier); the others are causal LMs.
    pub fn encoder(self) -> bool {
        matches!(self, CompareTask::Chomsky(_))
    }

    /// What the length counts.
    pub fn unit(self) -> &'static str {
        match self {
            CompareTask::Chomsky(_) => "input symbols",
            CompareTask::Copy | CompareTask::Reverse => "string symbols",
            CompareTask::MobyDick => "characters",
        }
    }

    /// Test lengths past this would not fit 2,048 positions (an answer, or a copy, is as long
    /// as the input or twice it).
    pub fn max_length(self) -> usize {
        match self {
            CompareTask::Chomsky(_) => 500,
            CompareTask::Copy | CompareTask::Reverse => 1000,
            CompareTask::MobyDick => 2048,
        }
    }

    /// A length in the unit the task's evaluation bins count: sequence tokens for copy and
    /// reverse (`abc|abc` and its two markers: 2n + 2), the length itself otherwise.
    pub(super) fn bin_units(self, length: usize) -> usize {
        match self {
            CompareTask::Copy | CompareTask::Reverse => 2 * length + 2,
            _ => length,
        }
    }

    /// Scored by accuracy, or (Moby Dick's characters) by loss.
    pub(super) fn metric(self) -> &'static str {
        match self {
            CompareTask::MobyDick => "loss",
            _ => "accuracy",
        }
    }
}
