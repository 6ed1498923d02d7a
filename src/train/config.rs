//! A training run's configuration, read from a TOML file: the data, the model and how to train
//! it. Unknown keys are errors everywhere, so a typo never silently falls back to a default.
//!
//! ```toml
//! [data]
//! task = "moby_dick"   # moby_dick | text_file | cmudict | copy | reverse | names | spam | stress …
//! seq_len = 128
//!
//! [model]              # a ModelConfig; `vocab` may be left out: the data's tokenizer sets it
//!                      # when the trainer loads the data (reading a config reads no data)
//! d_model = 128
//! heads = 4
//! layers = 4
//! ffn = 512
//! max_len = 128
//! kind = { type = "causal_lm" }
//! posenc = { type = "relative" }
//!
//! [train]
//! steps = 1000
//! batch = 16
//! lr = 3e-3
//! eval_lengths = [64, 128, 256, 512]
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::data_config::{DataConfig, MAX_SEQUENCE};
use super::{Decay, Schedule};
use crate::arithmetic::Arithmetic;
use crate::error::{Error, Result};
use crate::model::{EmbedScale, ModelConfig, ModelKind};
use crate::optim::AdamW;

/// The most training steps a run may ask for (a run's schedule is one f32 per step away from
/// these, and a typo of a few zeros should not start a run of centuries).
const MAX_STEPS: usize = 1 << 31;
/// The most rows in a batch: far above what fits anywhere posflow runs, low enough that the
/// tokens of a batch are counted without overflow.
const MAX_BATCH: usize = 1 << 16;
const MAX_EVAL_BATCHES: usize = 1 << 16;

/// Evaluation lengths must be sequences posflow can build: at least 2 tokens (one target) and at
/// most [`MAX_SEQUENCE`].
pub fn check_eval_lengths(lengths: &[usize]) -> Result<()> {
    match lengths.iter().find(|&&l| !(2..=MAX_SEQUENCE).contains(&l)) {
        Some(bad) => Err(Error::Input(format!(
            "evaluation length {bad} is out of range: use 2 to {MAX_SEQUENCE} tokens"
        ))),
        None => Ok(()),
    }
}

/// A whole run: what `posflow train --config` reads and what a checkpoint keeps for `--resume`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub data: DataConfig,
    pub model: ModelConfig,
    pub train: TrainConfig,
}

/// How to train: steps, batch, optimizer, schedule, evaluation and outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub steps: usize,
    pub batch: usize,
    /// Seeds the initial parameters and the order of the training batches.
    #[serde(default)]
    pub seed: u64,
    /// The peak learning rate.
    pub lr: f32,
    /// Steps of linear warmup to `lr`.
    #[serde(default)]
    pub warmup: usize,
    #[serde(default = "default_decay")]
    pub decay: Decay,
    /// The learning rate at the last step, as a fraction of `lr`.
    #[serde(default = "default_final_lr_fraction")]
    pub final_lr_fraction: f32,
    /// AdamW's decoupled weight decay, on matrices only.
    #[serde(default = "default_weight_decay")]
    pub weight_decay: f32,
    #[serde(default = "default_beta1")]
    pub beta1: f32,
    #[serde(default = "default_beta2")]
    pub beta2: f32,
    #[serde(default = "default_eps")]
    pub eps: f32,
    /// Clip the global gradient norm to this; 0 turns clipping off.
    #[serde(default = "default_clip")]
    pub clip_grad_norm: f32,
    /// Train only the parameters whose names start with one of these (e.g. `["posenc."]`: the
    /// position encoding of a warm-started model, the others frozen); empty trains all.
    #[serde(default)]
    pub trainable: Vec<String>,
    /// Evaluate every this many steps (and always after the last); 0 evaluates only at the end.
    #[serde(default)]
    pub eval_every: usize,
    /// The sequence lengths to evaluate at, longer than training too (text tasks: windows of
    /// that many tokens; copy/reverse: strings of (L − 2)/2 symbols, so sequences of about L).
    #[serde(default)]
    pub eval_lengths: Vec<usize>,
    /// At most this many batches per evaluation length.
    #[serde(default = "default_eval_batches")]
    pub eval_batches: usize,
    /// The final evaluation's batches per length, where it should see more than those during
    /// training (a study's claims read the final one: an evaluation set as large as they need,
    /// without paying for it at every evaluation). Unset: `eval_batches`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_eval_batches: Option<usize>,
    /// Where to save the checkpoint: at every evaluation and at the end. Relative paths are
    /// relative to the working directory.
    #[serde(default)]
    pub checkpoint: Option<PathBuf>,
    /// Where to append the metrics log (JSON lines, one per step and per evaluated bin).
    #[serde(default)]
    pub metrics: Option<PathBuf>,
    /// A text to continue after training, to show what the model learned.
    #[serde(default)]
    pub sample_prompt: Option<String>,
    /// The CPU backend's arithmetic: `native` (the fastest here) or `portable` (the same bits on
    /// every machine and in the page; a GPU run refuses it). Written only when portable.
    #[serde(default, skip_serializing_if = "Arithmetic::is_native")]
    pub arithmetic: Arithmetic,
}

fn default_decay() -> Decay {
    Decay::Cosine
}

fn default_final_lr_fraction() -> f32 {
    0.1
}

fn default_weight_decay() -> f32 {
    0.01
}

fn default_beta1() -> f32 {
    0.9
}

fn default_beta2() -> f32 {
    0.99
}

fn default_eps() -> f32 {
    1e-8
}

fn default_clip() -> f32 {
    1.0
}

fn default_eval_batches() -> usize {
    4
}

impl TrainConfig {
    /// `steps` steps of `batch` at learning rate `lr`, every other setting its default (what a
    /// config file that leaves it out gets): a run's training built in code.
    pub fn new(steps: usize, batch: usize, lr: f32) -> Self {
        let table: toml::Table = [
            ("steps".to_string(), toml::Value::Integer(steps as i64)),
            ("batch".to_string(), toml::Value::Integer(batch as i64)),
            ("lr".to_string(), toml::Value::Float(f64::from(lr))),
        ]
        .into_iter()
        .collect();
        TrainConfig::deserialize(toml::Value::Table(table)).expect("three settings and the defaults")
    }

    /// The batches per length of an evaluation: the final one's (`done`) or the others'.
    pub fn eval_batches_at(&self, done: bool) -> usize {
        match self.final_eval_batches {
            Some(batches) if done => batches,
            _ => self.eval_batches,
        }
    }
}

/// `[model] vocab` in a run config that left it out: the data sets it when the trainer loads it
/// ([`RunConfig::settle_vocab`]; [`RunConfig::with_data_vocab`] for code that needs it sooner).
/// Reading a config reads no data file.
pub const VOCAB_FROM_DATA: usize = 0;

/// The file as written: `[model]` stays a table until `vocab` is filled in.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunFile {
    data: DataConfig,
    model: toml::Table,
    train: TrainConfig,
}

/// The default run, `configs/moby_dick.toml`: what `posflow` does with no arguments.
pub const DEFAULT_RUN: &str = include_str!("../../configs/moby_dick.toml");

impl RunConfig {
    /// A run built in code, checked as a config file is: its data, its model (`vocab`
    /// [`VOCAB_FROM_DATA`] to take the data's) and its training.
    pub fn new(data: DataConfig, model: ModelConfig, train: TrainConfig) -> Result<Self> {
        let run = Self { data, model, train };
        run.validate()?;
        Ok(run)
    }

    /// Reads and validates a run from TOML, reading no other file. `origin` names the text in
    /// errors (its path). `vocab` in `[model]` may be left out ([`VOCAB_FROM_DATA`]): the data's
    /// tokenizer sets it when the trainer loads the data.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self> {
        let file: RunFile = toml::from_str(text).map_err(|e| Error::Input(format!("{origin}: {e}")))?;
        Self::from_file(file, origin)
    }

    /// As [`RunConfig::from_toml`], from a table already parsed (a study's base with its
    /// variant's overrides); errors carry no line numbers, so `origin` should say where it is.
    pub fn from_table(table: toml::Table, origin: &str) -> Result<Self> {
        let file = RunFile::deserialize(toml::Value::Table(table))
            .map_err(|e| Error::Input(format!("{origin}: {e}")))?;
        Self::from_file(file, origin)
    }

    fn from_file(file: RunFile, origin: &str) -> Result<Self> {
        let mut model = file.model;
        // Left out, the data sets it when the trainer loads it; no file is read here.
        match model.get("vocab").map(toml::Value::as_integer) {
            None => {
                model.insert("vocab".into(), toml::Value::Integer(VOCAB_FROM_DATA as i64));
            }
            Some(Some(0)) => {
                return Err(Error::Input(format!(
                    "{origin}: [model] vocab must be positive, got 0; leave it out and the data sets it"
                )));
            }
            Some(_) => {}
        }
        let scale_set = model.contains_key("embed_scale");
        let mut model = ModelConfig::deserialize(toml::Value::Table(model))
            .map_err(|e| Error::Input(format!("{origin}: [model]: {e}")))?;
        if !scale_set && model.posenc.adds_a_fixed_table() {
            model.embed_scale = EmbedScale::SqrtD;
        }
        let run = Self {
            data: file.data,
            model,
            train: file.train,
        };
        run.validate()
            .map_err(|e| Error::Input(format!("{origin}: {e}")))?;
        Ok(run)
    }

    /// Sets `[model] vocab` to `vocab`, the size of the data's tokenizer, when the config left it
    /// out, or checks that it is that; then checks the whole config.
    pub fn settle_vocab(&mut self, vocab: usize) -> Result<()> {
        if self.model.vocab == VOCAB_FROM_DATA {
            self.model.vocab = vocab;
        } else if self.model.vocab != vocab {
            return Err(Error::Input(format!(
                "[model] vocab is {}, but the data's tokenizer has {vocab} ids; leave vocab out and \
                 the data sets it",
                self.model.vocab
            )));
        }
        self.validate()
    }

    /// Checks what the trainer relies on; errors name the key and its value. A vocabulary still
    /// to come from the data ([`VOCAB_FROM_DATA`]) is checked when it is settled.
    pub fn validate(&self) -> Result<()> {
        if self.model.vocab == VOCAB_FROM_DATA {
            self.model.validate_without_vocab()?;
        } else {
            self.model.validate()?;
        }
        if let Some((set, _)) = self.data.classes() {
            let classes = set.class_names().len();
            match self.model.kind {
                ModelKind::Encoder { n_classes } if n_classes == classes => {}
                ModelKind::Encoder { n_classes } => {
                    return Err(Error::Input(format!(
                        "[model] kind: this set has {classes} classes ({}), but the encoder has \
                         n_classes = {n_classes}",
                        set.class_names().join(", ")
                    )));
                }
                _ => {
                    return Err(Error::Input(format!(
                        "[model] kind: a classification set trains an encoder with a classifier: kind \
                         = {{ type = \"encoder\", n_classes = {classes} }}"
                    )));
                }
            }
        } else if matches!(self.model.kind, ModelKind::Encoder { .. }) {
            return Err(Error::Input(
                "[model] kind: an encoder classifies, so its task must be a classification set \
                 (names, spam, stress); a text trains a causal_lm or a masked_lm"
                    .into(),
            ));
        }
        match (self.data.chomsky(), self.model.kind) {
            (Some((task, _)), ModelKind::TokenClassifier { n_classes }) if n_classes == task.classes() => {}
            (Some((task, _)), _) => {
                return Err(Error::Input(format!(
                    "[model] kind: {task:?} is read at placeholders into {} classes: kind = {{ type \
                     = \"token_classifier\", n_classes = {} }}",
                    task.classes(),
                    task.classes()
                )));
            }
            (None, ModelKind::TokenClassifier { .. }) => {
                return Err(Error::Input(
                    "[model] kind: a token classifier reads a Chomsky-hierarchy task: [data] task = \
                     \"chomsky\""
                        .into(),
                ));
            }
            (None, _) => {}
        }
        match (self.data.is_pairs(), self.model.kind) {
            (false, ModelKind::CausalLm { .. }) | (true, ModelKind::Seq2Seq { .. }) => {}
            (false, ModelKind::Encoder { .. } | ModelKind::TokenClassifier { .. }) => {}
            (_, ModelKind::MaskedLm {}) => {
                if !matches!(
                    self.data,
                    DataConfig::MobyDick { .. } | DataConfig::TextFile { .. }
                ) {
                    return Err(masked_lm_needs_text());
                }
                if self
                    .train
                    .sample_prompt
                    .as_deref()
                    .is_some_and(|p| !p.contains("<mask>"))
                {
                    return Err(Error::Input(
                        "[train] sample_prompt: a masked LM fills the <mask>s of a text rather than \
                         continuing it, and this prompt has none (write e.g. \"Call me <mask>shmael.\")"
                            .into(),
                    ));
                }
            }
            (false, _) => {
                return Err(Error::Input(
                    "[model] kind: this task is next-token prediction, so the model must be a causal_lm \
                     (a pair task trains a seq2seq model)"
                        .into(),
                ));
            }
            (true, _) => {
                return Err(Error::Input(
                    "[model] kind: a pair task maps sources to targets, so the model must be a seq2seq \
                     model: kind = { type = \"seq2seq\", decoder_layers = N }"
                        .into(),
                ));
            }
        }
        let t = &self.train;
        if t.steps == 0 || t.batch == 0 {
            return Err(Error::Input(format!(
                "[train] steps ({}) and batch ({}) must be at least 1",
                t.steps, t.batch
            )));
        }
        for (key, value, limit) in [
            ("steps", t.steps, MAX_STEPS),
            ("batch", t.batch, MAX_BATCH),
            ("eval_batches", t.eval_batches, MAX_EVAL_BATCHES),
            (
                "final_eval_batches",
                t.final_eval_batches.unwrap_or(1),
                MAX_EVAL_BATCHES,
            ),
        ] {
            if value > limit {
                return Err(Error::Input(format!(
                    "[train] {key} is {value}, over posflow's limit of {limit}"
                )));
            }
        }
        if t.eval_batches == 0 || t.final_eval_batches == Some(0) {
            return Err(Error::Input(
                "[train] eval_batches and final_eval_batches must be at least 1".into(),
            ));
        }
        check_eval_lengths(&t.eval_lengths)
            .map_err(|e| Error::Input(format!("[train] eval_lengths: {e}")))?;
        if !(t.clip_grad_norm.is_finite() && t.clip_grad_norm >= 0.0) {
            return Err(Error::Input(format!(
                "[train] clip_grad_norm must be 0 (off) or positive, got {}",
                t.clip_grad_norm
            )));
        }
        self.adamw()
            .validate()
            .map_err(|e| Error::Input(format!("[train] {e}")))?;
        // The schedule calls it final_fraction; name the key the file has.
        if !(0.0..=1.0).contains(&t.final_lr_fraction) {
            return Err(Error::Input(format!(
                "[train] final_lr_fraction must be in [0, 1], got {}",
                t.final_lr_fraction
            )));
        }
        self.schedule().validate()?;
        self.data.validate()?;
        if let Some(len) = self.data.train_len()
            && len > self.model.max_len
        {
            let from = match self.data {
                DataConfig::Copy { .. } | DataConfig::Reverse { .. } => "2 · [data] max_len + 2",
                _ if self.data.is_pairs() => "the sources of [data] train_max_len",
                _ => "[data] seq_len",
            };
            return Err(Error::Input(format!(
                "training sequences are {len} tokens long ({from}), over [model] max_len {}",
                self.model.max_len
            )));
        }
        Ok(())
    }

    /// The learning rate at every step.
    pub fn schedule(&self) -> Schedule {
        let t = &self.train;
        Schedule {
            peak_lr: t.lr,
            warmup_steps: t.warmup,
            total_steps: t.steps,
            decay: t.decay,
            final_fraction: t.final_lr_fraction,
        }
    }

    /// The optimizer's hyperparameters (its `lr` is set by the schedule at every step).
    pub fn adamw(&self) -> AdamW {
        let t = &self.train;
        AdamW {
            lr: t.lr,
            beta1: t.beta1,
            beta2: t.beta2,
            eps: t.eps,
            weight_decay: t.weight_decay,
            max_grad_norm: (t.clip_grad_norm > 0.0).then_some(t.clip_grad_norm),
        }
    }
}

impl RunConfig {
    /// Reads a run config file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Input(format!("config {}: cannot be read ({e})", path.display())))?;
        Self::from_toml(&text, &path.display().to_string())
    }
}

/// What a masked LM refused on another task says.
pub(super) fn masked_lm_needs_text() -> Error {
    Error::Input(
        "[model] kind masked_lm learns from a text (task moby_dick or text_file); the prompted and pair \
         tasks are for causal LMs and seq2seq models"
            .into(),
    )
}
