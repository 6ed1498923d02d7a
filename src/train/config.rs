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

use super::{Decay, Schedule};
use crate::data::chomsky::ChomskyTask;
use crate::data::{ClassTask, PairTask, Tokenization};
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
/// The longest sequence posflow builds a graph for (a million tokens).
pub const MAX_SEQUENCE: usize = 1 << 20;

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

/// For a table read as a flat spec (the data spec): an error naming the first setting `given`
/// (key, whether given) that its type, which `takes`, does not have, worded as serde's
/// `deny_unknown_fields`.
fn refuse_other_settings(given: &[(&str, bool)], takes: &[&str]) -> std::result::Result<(), String> {
    match given.iter().find(|(key, given)| *given && !takes.contains(key)) {
        None => Ok(()),
        Some((key, _)) if takes.is_empty() => Err(format!("unknown field `{key}`, there are no fields")),
        Some((key, _)) => {
            let keys: Vec<String> = takes.iter().map(|k| format!("`{k}`")).collect();
            Err(format!("unknown field `{key}`, expected {}", keys.join(", ")))
        }
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

/// The task the model trains on: next-token prediction by a causal LM (the prompted tasks are
/// written as one sequence with the loss on the answer), a text for a masked LM, pairs for a
/// seq2seq model, classes for an encoder. `valid_fraction` defaults to 0.05.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "snake_case", try_from = "DataSpec")]
pub enum DataConfig {
    /// Moby Dick (shipped in `data/`), windows of `seq_len` characters.
    MobyDick { seq_len: usize, valid_fraction: f64 },
    /// A UTF-8 text file of your own, windows of `seq_len` characters.
    TextFile {
        path: PathBuf,
        seq_len: usize,
        valid_fraction: f64,
    },
    /// `word=phonemes` from the CMU pronouncing dictionary (shipped), loss on the phonemes.
    Cmudict { valid_fraction: f64 },
    /// `abc|abc` with strings of `min_len..=max_len` symbols.
    Copy { min_len: usize, max_len: usize },
    /// `abc|cba` with strings of `min_len..=max_len` symbols.
    Reverse { min_len: usize, max_len: usize },
    /// Seq2seq: spelling → pronunciation pairs of the CMU dictionary (letters → ARPAbet
    /// phonemes), trained on words of up to `train_max_len` letters and evaluated on held-out
    /// words of those lengths and on every longer word, in bins (FLOATER's short-to-long
    /// experiment on real data). Needs a `seq2seq` model.
    CmudictPairs {
        train_max_len: usize,
        valid_fraction: f64,
    },
    /// Seq2seq: synthetic pairs (`reverse`, `sort` or `addition`), `per_length` of each source
    /// length in `min_len..=max_len`, trained on sources up to `train_max_len`.
    SyntheticPairs {
        pairs: PairTask,
        min_len: usize,
        max_len: usize,
        per_length: usize,
        train_max_len: usize,
        valid_fraction: f64,
    },
    /// Seq2seq: a tab-separated file of one's own (`source<TAB>target` per line), cut into
    /// characters or whitespace-separated words (`tokenization`).
    TextPairs {
        path: PathBuf,
        tokenization: Tokenization,
        train_max_len: usize,
        valid_fraction: f64,
    },
    /// Classification: a first name → its listed gender (shipped, `data/README.md`). Needs an
    /// `encoder` with 2 classes.
    Names(ClassSettings),
    /// Classification: an e-mail body → ham or spam (shipped). An `encoder` with 2 classes.
    Spam(ClassSettings),
    /// Classification: a word's spelling → the syllable of its primary stress (from the shipped
    /// CMU dictionary). An `encoder` with 4 classes.
    Stress(ClassSettings),
    /// A Chomsky-hierarchy task of Delétang et al. (`name`, e.g. `parity_check`), read as they
    /// read it: the input, then a placeholder per answer symbol, classified at the placeholders.
    /// Each training batch has one input length, uniform in `1..=train_max_len` (their
    /// curriculum); `eval_lengths` are input lengths. Needs a `token_classifier` with the task's
    /// output classes.
    Chomsky { name: ChomskyTask, train_max_len: usize },
}

/// How a classification set is split and read.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassSettings {
    /// Texts of at most this many characters are trained on (less the held-out share); every
    /// longer one is evaluated, in bins that double in length.
    pub train_max_len: usize,
    pub valid_fraction: f64,
    pub vocabulary: Vocabulary,
}

/// The characters a classification set is read with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Vocabulary {
    /// The set's own characters.
    #[default]
    Own,
    /// A masked LM's vocabulary of Moby Dick (`configs/moby_mlm.toml`'s), every other character
    /// read as `<unk>`: to fine-tune that model (`--warm-start`).
    MobyDick,
}

impl DataConfig {
    /// A classification task's set and settings.
    pub fn classes(&self) -> Option<(ClassTask, ClassSettings)> {
        match *self {
            Self::Names(s) => Some((ClassTask::Names, s)),
            Self::Spam(s) => Some((ClassTask::Spam, s)),
            Self::Stress(s) => Some((ClassTask::Stress, s)),
            _ => None,
        }
    }

    /// A Chomsky-hierarchy task and its longest training input.
    pub fn chomsky(&self) -> Option<(ChomskyTask, usize)> {
        match *self {
            Self::Chomsky { name, train_max_len } => Some((name, train_max_len)),
            _ => None,
        }
    }

    /// Whether the task is pairs of sequences, for a seq2seq model.
    pub fn is_pairs(&self) -> bool {
        matches!(
            self,
            Self::CmudictPairs { .. } | Self::SyntheticPairs { .. } | Self::TextPairs { .. }
        )
    }
}

/// The longest Chomsky-task input: its sequence (up to three times as long with the duplicated
/// answer) stays far below [`MAX_SEQUENCE`].
const MAX_CHOMSKY_LEN: usize = 1 << 16;

/// Synthetic pairs of each source length when the config does not say.
const DEFAULT_PER_LENGTH: usize = 500;

/// The share of the text or dictionary held out for validation when the config does not say.
const DEFAULT_VALID_FRACTION: f64 = 0.05;

/// A [`DataConfig`] as read: the task and every setting of any task, each present or not, so
/// that an error in a value names its key (see `PosEncSpec` in the model config for why serde's
/// tagged enums lose it: `min_len = -1` was reported at `[data]`, line 1).
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "the data: a table with its `task` and settings"
)]
struct DataSpec {
    task: TaskName,
    path: Option<PathBuf>,
    seq_len: Option<usize>,
    valid_fraction: Option<f64>,
    min_len: Option<usize>,
    max_len: Option<usize>,
    train_max_len: Option<usize>,
    per_length: Option<usize>,
    pairs: Option<PairTask>,
    tokenization: Option<Tokenization>,
    vocabulary: Option<Vocabulary>,
    name: Option<ChomskyTask>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TaskName {
    MobyDick,
    TextFile,
    Cmudict,
    Copy,
    Reverse,
    CmudictPairs,
    SyntheticPairs,
    TextPairs,
    Names,
    Spam,
    Stress,
    Chomsky,
}

impl TryFrom<DataSpec> for DataConfig {
    type Error = String;

    fn try_from(spec: DataSpec) -> std::result::Result<Self, String> {
        use TaskName as T;
        let given = [
            ("path", spec.path.is_some()),
            ("seq_len", spec.seq_len.is_some()),
            ("valid_fraction", spec.valid_fraction.is_some()),
            ("min_len", spec.min_len.is_some()),
            ("max_len", spec.max_len.is_some()),
            ("train_max_len", spec.train_max_len.is_some()),
            ("per_length", spec.per_length.is_some()),
            ("pairs", spec.pairs.is_some()),
            ("tokenization", spec.tokenization.is_some()),
            ("vocabulary", spec.vocabulary.is_some()),
            ("name", spec.name.is_some()),
        ];
        let takes: &[&str] = match spec.task {
            T::MobyDick => &["seq_len", "valid_fraction"],
            T::TextFile => &["path", "seq_len", "valid_fraction"],
            T::Cmudict => &["valid_fraction"],
            T::Copy | T::Reverse => &["min_len", "max_len"],
            T::CmudictPairs => &["train_max_len", "valid_fraction"],
            T::SyntheticPairs => &[
                "pairs",
                "min_len",
                "max_len",
                "per_length",
                "train_max_len",
                "valid_fraction",
            ],
            T::TextPairs => &["path", "tokenization", "train_max_len", "valid_fraction"],
            T::Names | T::Spam | T::Stress => &["train_max_len", "valid_fraction", "vocabulary"],
            T::Chomsky => &["name", "train_max_len"],
        };
        refuse_other_settings(&given, takes)?;
        fn needs<V>(key: &str, value: Option<V>) -> std::result::Result<V, String> {
            value.ok_or_else(|| format!("missing field `{key}`"))
        }
        let valid_fraction = spec.valid_fraction.unwrap_or(DEFAULT_VALID_FRACTION);
        Ok(match spec.task {
            T::MobyDick => Self::MobyDick {
                seq_len: needs("seq_len", spec.seq_len)?,
                valid_fraction,
            },
            T::TextFile => Self::TextFile {
                path: needs("path", spec.path)?,
                seq_len: needs("seq_len", spec.seq_len)?,
                valid_fraction,
            },
            T::Cmudict => Self::Cmudict { valid_fraction },
            T::Copy => Self::Copy {
                min_len: needs("min_len", spec.min_len)?,
                max_len: needs("max_len", spec.max_len)?,
            },
            T::Reverse => Self::Reverse {
                min_len: needs("min_len", spec.min_len)?,
                max_len: needs("max_len", spec.max_len)?,
            },
            T::CmudictPairs => Self::CmudictPairs {
                train_max_len: needs("train_max_len", spec.train_max_len)?,
                valid_fraction,
            },
            T::SyntheticPairs => Self::SyntheticPairs {
                pairs: needs("pairs", spec.pairs)?,
                min_len: needs("min_len", spec.min_len)?,
                max_len: needs("max_len", spec.max_len)?,
                per_length: spec.per_length.unwrap_or(DEFAULT_PER_LENGTH),
                train_max_len: needs("train_max_len", spec.train_max_len)?,
                valid_fraction,
            },
            T::TextPairs => Self::TextPairs {
                path: needs("path", spec.path)?,
                tokenization: spec.tokenization.unwrap_or(Tokenization::Chars),
                train_max_len: needs("train_max_len", spec.train_max_len)?,
                valid_fraction,
            },
            T::Chomsky => Self::Chomsky {
                name: needs("name", spec.name)?,
                train_max_len: match needs("train_max_len", spec.train_max_len)? {
                    0 => return Err("train_max_len must be at least 1".into()),
                    n if n > MAX_CHOMSKY_LEN => {
                        return Err(format!(
                            "train_max_len {n} is over posflow's limit of {MAX_CHOMSKY_LEN}"
                        ));
                    }
                    n => n,
                },
            },
            T::Names | T::Spam | T::Stress => {
                let settings = ClassSettings {
                    train_max_len: needs("train_max_len", spec.train_max_len)?,
                    valid_fraction,
                    vocabulary: spec.vocabulary.unwrap_or_default(),
                };
                match spec.task {
                    T::Names => Self::Names(settings),
                    T::Spam => Self::Spam(settings),
                    _ => Self::Stress(settings),
                }
            }
        })
    }
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
        ] {
            if value > limit {
                return Err(Error::Input(format!(
                    "[train] {key} is {value}, over posflow's limit of {limit}"
                )));
            }
        }
        if t.eval_batches == 0 {
            return Err(Error::Input("[train] eval_batches must be at least 1".into()));
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

impl DataConfig {
    fn validate(&self) -> Result<()> {
        let fraction_ok = |f: f64| f > 0.0 && f < 1.0;
        match *self {
            Self::MobyDick {
                seq_len,
                valid_fraction,
            }
            | Self::TextFile {
                seq_len,
                valid_fraction,
                ..
            } if !(1..=MAX_SEQUENCE).contains(&seq_len) || !fraction_ok(valid_fraction) => {
                return Err(Error::Input(format!(
                    "[data] needs 1 <= seq_len <= {MAX_SEQUENCE} and 0 < valid_fraction < 1, got \
                     {seq_len} and {valid_fraction}"
                )));
            }
            Self::Cmudict { valid_fraction } if !fraction_ok(valid_fraction) => {
                return Err(Error::Input(format!(
                    "[data] valid_fraction must be in (0, 1), got {valid_fraction}"
                )));
            }
            Self::Copy { min_len, max_len } | Self::Reverse { min_len, max_len }
                if min_len == 0 || min_len > max_len || max_len > MAX_SEQUENCE / 2 =>
            {
                return Err(Error::Input(format!(
                    "[data] needs 1 <= min_len <= max_len <= {}, got {min_len} and {max_len}",
                    MAX_SEQUENCE / 2
                )));
            }
            Self::CmudictPairs {
                train_max_len,
                valid_fraction,
            }
            | Self::TextPairs {
                train_max_len,
                valid_fraction,
                ..
            }
            | Self::SyntheticPairs {
                train_max_len,
                valid_fraction,
                ..
            } if !(1..=MAX_SEQUENCE).contains(&train_max_len) || !(0.0..1.0).contains(&valid_fraction) => {
                return Err(Error::Input(format!(
                    "[data] needs 1 <= train_max_len <= {MAX_SEQUENCE} and 0 <= valid_fraction < 1, got \
                     {train_max_len} and {valid_fraction}"
                )));
            }
            Self::SyntheticPairs {
                min_len,
                max_len,
                per_length,
                ..
            } if min_len == 0 || min_len > max_len || max_len > MAX_SEQUENCE / 2 || per_length == 0 => {
                return Err(Error::Input(format!(
                    "[data] needs 1 <= min_len <= max_len <= {} and per_length >= 1, got {min_len}, \
                     {max_len} and {per_length}",
                    MAX_SEQUENCE / 2
                )));
            }
            _ => {}
        }
        if let Some((_, s)) = self.classes()
            && (!(1..=MAX_SEQUENCE).contains(&s.train_max_len) || !(0.0..1.0).contains(&s.valid_fraction))
        {
            return Err(Error::Input(format!(
                "[data] needs 1 <= train_max_len <= {MAX_SEQUENCE} and 0 <= valid_fraction < 1, got {} \
                 and {}",
                s.train_max_len, s.valid_fraction
            )));
        }
        Ok(())
    }

    /// Whether its sequences begin with <bos>: the prompted tasks' do, text windows and the
    /// Chomsky tasks' inputs do not.
    pub fn starts_with_bos(&self) -> bool {
        !matches!(
            self,
            Self::MobyDick { .. } | Self::TextFile { .. } | Self::Chomsky { .. }
        )
    }

    /// The length every training batch is padded to, where the config fixes it (the CMU
    /// dictionary's longest word is only known once it is read).
    pub fn train_len(&self) -> Option<usize> {
        match *self {
            Self::MobyDick { seq_len, .. } | Self::TextFile { seq_len, .. } => Some(seq_len),
            // <bos> string | string: the inputs leave out the final <eos>.
            Self::Copy { max_len, .. } | Self::Reverse { max_len, .. } => Some(2 * max_len + 2),
            Self::Cmudict { .. } => None,
            // A seq2seq model's longest training source (its targets are another length).
            Self::CmudictPairs { train_max_len, .. }
            | Self::SyntheticPairs { train_max_len, .. }
            | Self::TextPairs { train_max_len, .. } => Some(train_max_len),
            // [CLS] and the longest training text (its classifier pads to the longest it has).
            Self::Names(s) | Self::Spam(s) | Self::Stress(s) => Some(s.train_max_len + 1),
            // The longest input and its placeholders.
            Self::Chomsky { name, train_max_len } => Some(name.sequence_len(train_max_len)),
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
