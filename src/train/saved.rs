//! A checkpoint's run, made safe to continue or evaluate. A checkpoint may come from anyone, so
//! nothing in it chooses a path posflow reads or writes: the paths its run config names are
//! dropped here, and the caller takes them from the user.

use std::path::PathBuf;

use super::config::RunConfig;
use super::data_config::DataConfig;
use crate::checkpoint::Metadata;
use crate::data::{CharTokenizer, PairTokenizer, TaskTokenizer};
use crate::error::{Error, Result};
use crate::model::ModelConfig;

/// The key of the run config in a checkpoint's training state.
pub const RUN_KEY: &str = "run";

/// The run config a trainer saved in a checkpoint's metadata, checked as a config file is, with
/// every path removed: no checkpoint or metrics output (the caller sets them from the command
/// line) and, for a `text_file` task, no file (the user names it: [`DataConfig::with_file`]).
pub fn saved_run(metadata: &Metadata) -> Result<RunConfig> {
    let value = metadata.training.extra.get(RUN_KEY).ok_or_else(|| {
        Error::Input(
            "the checkpoint holds no run config (it was not written by `posflow train`), so there is no \
             data or schedule to continue with"
                .into(),
        )
    })?;
    let mut run: RunConfig = serde_json::from_value(value.clone())
        .map_err(|e| Error::Input(format!("the checkpoint's run config does not parse: {e}")))?;
    run.train.checkpoint = None;
    run.train.metrics = None;
    run.data = run.data.without_file();
    run.validate()
        .map_err(|e| Error::Input(format!("the checkpoint's run config: {e}")))?;
    let model = ModelConfig::from_json(&metadata.config)?;
    if model != run.model {
        return Err(Error::Input(
            "the checkpoint's run config and its model config describe different models".into(),
        ));
    }
    Ok(run)
}

/// Refuses data whose tokenizer is not the one the checkpoint's model was trained with: the same
/// ids would mean other characters. Lists a few characters that differ.
pub fn check_same_tokenizer(metadata: &Metadata, data: &TaskTokenizer) -> Result<()> {
    let Some(json) = &metadata.tokenizer else {
        return Ok(());
    };
    let data = match data {
        TaskTokenizer::Chars(chars) => chars,
        TaskTokenizer::Pairs(pairs) => {
            return if PairTokenizer::from_json(json).is_ok_and(|saved| &saved == pairs) {
                Ok(())
            } else {
                Err(Error::Input(
                    "the data's vocabulary differs from the checkpoint's tokenizer, so its ids would \
                     mean other tokens; use the data the model was trained on"
                        .into(),
                ))
            };
        }
    };
    let saved = CharTokenizer::from_json(json)?;
    if &saved == data {
        return Ok(());
    }
    let only_in = |a: &CharTokenizer, b: &CharTokenizer| -> String {
        let chars: Vec<String> = a
            .chars()
            .iter()
            .filter(|c| !b.chars().contains(c))
            .take(12)
            .map(|c| c.escape_debug().to_string())
            .collect();
        if chars.is_empty() {
            "none".into()
        } else {
            chars.join(" ")
        }
    };
    Err(Error::Input(format!(
        "the data's characters differ from the checkpoint's tokenizer (characters only in the data: \
         {}; only in the checkpoint: {}), so its ids would mean other characters; use the file the \
         model was trained on",
        only_in(data, &saved),
        only_in(&saved, data)
    )))
}

impl DataConfig {
    /// The task with its file set to `file`; an error for a task that reads no file.
    pub fn with_file(mut self, file: PathBuf) -> Result<Self> {
        match &mut self {
            Self::TextFile { path, .. } | Self::TextPairs { path, .. } => {
                *path = file;
                Ok(self)
            }
            _ => Err(Error::Input(format!(
                "--data {}: the run's task reads no data file (only text_file does)",
                file.display()
            ))),
        }
    }

    /// The task without its file: what a checkpoint's data config is compared on, and what
    /// [`saved_run`] leaves for the user to fill.
    pub fn without_file(mut self) -> Self {
        if let Self::TextFile { path, .. } | Self::TextPairs { path, .. } = &mut self {
            *path = PathBuf::new();
        }
        self
    }
}
