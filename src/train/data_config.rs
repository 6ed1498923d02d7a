//! A run's `[data]`: which task the model trains on and its settings, read from TOML as a flat
//! table whose errors name the key (`DataSpec`), and checked before any data is read.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::task::LengthUnit;
use crate::data::chomsky::ChomskyTask;
use crate::data::{ClassTask, PairTask, Tokenization};
use crate::error::{Error, Result};

/// The longest sequence posflow builds a graph for (a million tokens).
pub const MAX_SEQUENCE: usize = 1 << 20;
/// The most pairs a synthetic pair task generates (lengths × per_length).
const MAX_SYNTHETIC_PAIRS: usize = 1 << 24;

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
    /// Data a program supplies itself (a `Task` of its own, trained through
    /// `Trainer::with_task`): its name and what it is, so that the run and its checkpoints record
    /// the data they were trained on. posflow cannot load it: a checkpoint of it resumes from that
    /// program, and `posflow train --resume` says so.
    Custom { source: String, description: String },
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
    /// Data a program supplies itself ([`DataConfig::Custom`]): its name and what it is.
    pub fn custom(source: &str, description: &str) -> Self {
        Self::Custom {
            source: source.into(),
            description: description.into(),
        }
    }

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
    source: Option<String>,
    description: Option<String>,
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
    Custom,
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
            ("source", spec.source.is_some()),
            ("description", spec.description.is_some()),
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
            T::Custom => &["source", "description"],
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
            T::Custom => Self::Custom {
                source: match needs("source", spec.source)? {
                    source if source.trim().is_empty() => {
                        return Err("source must name the data (e.g. \"my-corpus\")".into());
                    }
                    source => source,
                },
                description: spec.description.unwrap_or_default(),
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

impl DataConfig {
    pub(super) fn validate(&self) -> Result<()> {
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
            // Every length's pairs are generated up front: their count is checked, not wrapped.
            Self::SyntheticPairs {
                min_len,
                max_len,
                per_length,
                ..
            } if per_length
                .checked_mul(max_len - min_len + 1)
                .is_none_or(|pairs| pairs > MAX_SYNTHETIC_PAIRS) =>
            {
                return Err(Error::Input(format!(
                    "[data] per_length {per_length} × {} lengths is over posflow's limit of \
                     {MAX_SYNTHETIC_PAIRS} synthetic pairs",
                    max_len - min_len + 1
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

    /// Whether its sequences begin with `<bos>`: the prompted tasks' do, text windows and the
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
            // The program's own task says (`Task::train_len`).
            Self::Custom { .. } => None,
        }
    }

    /// Refused where posflow would load the data itself: a custom source is a program's own.
    pub(super) fn custom_source_error(&self) -> Option<Error> {
        let Self::Custom { source, .. } = self else {
            return None;
        };
        Some(Error::Input(format!(
            "[data] task = \"custom\" (source \"{source}\") is data a program of its own supplies \
             (a `Task`, trained through `Trainer::with_task`); posflow cannot load it: train or \
             resume this run from that program"
        )))
    }

    /// The longest training length in the unit its evaluation bins count, and that unit: a
    /// Chomsky task's input symbols (its sets are input lengths), every other task's tokens
    /// ([`DataConfig::train_len`]). Bins that start past it measure extrapolation.
    pub fn binned_train_len(&self) -> Option<(usize, LengthUnit)> {
        match *self {
            Self::Chomsky { train_max_len, .. } => Some((train_max_len, LengthUnit::InputSymbols)),
            _ => self.train_len().map(|len| (len, LengthUnit::Tokens)),
        }
    }
}
