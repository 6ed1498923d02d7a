//! The tasks a run's `[data]` names ([`DataConfig`]), loaded: posflow's own [`Task`]s (a text,
//! a masked text, the dictionary, the synthetic and pair tasks, the classification sets).

use std::io::Read;
use std::ops::RangeInclusive;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::config::{RunConfig, masked_lm_needs_text};
use super::data_config::{DataConfig, Vocabulary};
use super::task::{EvalBins, EvalSet, Task, TrainBatch};
use crate::data::chomsky::{ChomskyTask, Scoring};
use crate::data::{
    Batch, CharTokenizer, ClassData, Labelled, LanguageModelData, LengthBins, LengthSplit, MOBY_DICK,
    MaskedText, MaxLengths, PairData, Pronunciations, SyntheticTask, TaskTokenizer, cmudict_pairs,
    text_pairs,
};
use crate::error::{Error, Result};
use crate::model::ModelKind;

/// The loaded data of the task a `[data]` config names.
pub enum DataTask {
    /// Next-character prediction over a text.
    Text {
        tokenizer: CharTokenizer,
        data: LanguageModelData,
        seq_len: usize,
    },
    /// A masked LM's text: sequences of `seq_len` tokens, `[CLS]` first, some hidden.
    MaskedText {
        tokenizer: CharTokenizer,
        data: MaskedText,
        seq_len: usize,
    },
    Pronunciations {
        data: Pronunciations,
        /// The longest training example, which every training batch is padded to.
        train_len: usize,
    },
    Synthetic {
        task: SyntheticTask,
        lengths: RangeInclusive<usize>,
    },
    /// Pairs of sequences for a seq2seq model, split by source length.
    Pairs(PairData),
    /// Texts with a class each, for an encoder, split by length.
    Classes {
        tokenizer: CharTokenizer,
        data: ClassData,
    },
    /// A Chomsky-hierarchy task, for a token classifier; generated, so nothing is held out.
    Chomsky {
        task: ChomskyTask,
        tokenizer: CharTokenizer,
        train_max_len: usize,
    },
}

/// The split of every pair task: the held-out pairs do not depend on the run's seed, so that runs
/// of several seeds are scored on the same pairs.
const PAIR_SPLIT_SEED: u64 = 0;

/// The longest pair a pair task takes: far past what these models train on; a learned position
/// table's own limit is checked when the graph is built, naming it.
const PAIR_MAX_LENGTHS: MaxLengths = MaxLengths {
    source_len: 4096,
    target_len: 4096,
};

impl RunConfig {
    /// This run with `[model] vocab` settled from its data's tokenizer (which reads the data's
    /// file, if it has one): for code that needs the whole model before a trainer loads the data.
    pub fn with_data_vocab(mut self) -> Result<Self> {
        let masked = matches!(self.model.kind, ModelKind::MaskedLm {});
        let vocab = self.data.tokenizer(masked)?.vocab_size();
        self.settle_vocab(vocab)?;
        Ok(self)
    }
}

impl DataConfig {
    /// The task's tokenizer, without loading more than it needs; a masked LM's (`masked`) has
    /// `<mask>` and `<unk>` as well.
    pub fn tokenizer(&self, masked: bool) -> Result<TaskTokenizer> {
        let text = |text: &str| {
            let tokenizer = CharTokenizer::from_text(text);
            if masked {
                tokenizer.for_masked_lm()
            } else {
                tokenizer
            }
        };
        Ok(TaskTokenizer::Chars(match self {
            Self::MobyDick { .. } => text(MOBY_DICK),
            Self::TextFile { path, .. } => text(&read_text(path)?),
            Self::Cmudict { valid_fraction } => Pronunciations::cmudict(*valid_fraction)?.tokenizer().clone(),
            Self::Copy { .. } | Self::Reverse { .. } => SyntheticTask::tokenizer(),
            Self::Chomsky { name, .. } => name.tokenizer(),
            Self::SyntheticPairs { pairs, .. } => return Ok(TaskTokenizer::Pairs(pairs.tokenizer())),
            Self::Names(s) | Self::Spam(s) | Self::Stress(s) => {
                let (set, _) = self.classes().expect("a classification task");
                let examples = match s.vocabulary {
                    Vocabulary::MobyDick => Vec::new(),
                    Vocabulary::Own => set.examples()?,
                };
                class_tokenizer(s.vocabulary, &examples)
            }
            Self::CmudictPairs { .. } | Self::TextPairs { .. } => {
                return Ok(TaskTokenizer::Pairs(self.pairs()?.tokenizer().clone()));
            }
            Self::Custom { .. } => return Err(self.custom_source_error().expect("a custom source")),
        }))
    }

    /// A pair task's data.
    fn pairs(&self) -> Result<PairData> {
        let split = |train_max_len, valid_fraction| LengthSplit {
            train_max_len,
            valid_fraction,
            seed: PAIR_SPLIT_SEED,
        };
        match self {
            &Self::CmudictPairs {
                train_max_len,
                valid_fraction,
            } => cmudict_pairs(&split(train_max_len, valid_fraction), PAIR_MAX_LENGTHS),
            &Self::SyntheticPairs {
                pairs,
                min_len,
                max_len,
                per_length,
                train_max_len,
                valid_fraction,
            } => pairs.data(
                min_len..=max_len,
                per_length,
                &split(train_max_len, valid_fraction),
                PAIR_MAX_LENGTHS,
            ),
            Self::TextPairs {
                path,
                tokenization,
                train_max_len,
                valid_fraction,
            } => text_pairs(
                &read_text(path)?,
                *tokenization,
                &split(*train_max_len, *valid_fraction),
                PAIR_MAX_LENGTHS,
            ),
            _ => Err(Error::Input("this task is not a task of pairs".into())),
        }
    }
}

fn read_text(path: &std::path::Path) -> Result<String> {
    if path.as_os_str().is_empty() {
        return Err(Error::Input(
            "[data] text_file: no file given (posflow never reads the data path stored in a \
             checkpoint): name it with --data FILE"
                .into(),
        ));
    }
    let cannot = |e: &dyn std::fmt::Display| {
        Error::Input(format!(
            "[data] text file {}: cannot be read ({e})",
            path.display()
        ))
    };
    // A device or pipe (/dev/zero) may never end: only a file has a size to check.
    if !std::fs::metadata(path).map_err(|e| cannot(&e))?.is_file() {
        return Err(cannot(&"it is not a regular file"));
    }
    let mut text = String::new();
    // Bounded as well: the file may grow while it is read.
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_TEXT_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| cannot(&e))?;
    if text.len() as u64 > MAX_TEXT_BYTES {
        return Err(cannot(&format!(
            "it is longer than posflow's limit of {} for a character-level corpus",
            crate::memory::gib(MAX_TEXT_BYTES)
        )));
    }
    Ok(text)
}

/// The largest text file a run reads: far beyond a character-level corpus (Moby Dick is 1.2 MB).
const MAX_TEXT_BYTES: u64 = 1 << 30;

impl DataTask {
    /// The data of `run`: its `[data]`, read as its model kind takes it (a masked LM reads a text
    /// as masked sequences).
    pub fn load(run: &RunConfig) -> Result<Self> {
        let config = &run.data;
        if matches!(run.model.kind, ModelKind::MaskedLm {}) {
            return Self::masked_text(config);
        }
        Ok(match config {
            DataConfig::MobyDick {
                seq_len,
                valid_fraction,
            } => Self::text(MOBY_DICK, *seq_len, *valid_fraction)?,
            DataConfig::TextFile {
                path,
                seq_len,
                valid_fraction,
            } => Self::text(&read_text(path)?, *seq_len, *valid_fraction)?,
            DataConfig::Cmudict { valid_fraction } => {
                let data = Pronunciations::cmudict(*valid_fraction)?;
                let train_len = data
                    .train()
                    .iter()
                    .map(|p| {
                        p.example()
                            .encode(data.tokenizer())
                            .map(|(tokens, _)| tokens.len())
                    })
                    .try_fold(0, |longest, len| len.map(|len| longest.max(len)))?;
                Self::Pronunciations { data, train_len }
            }
            &DataConfig::Copy { min_len, max_len } => Self::Synthetic {
                task: SyntheticTask::Copy,
                lengths: min_len..=max_len,
            },
            &DataConfig::Reverse { min_len, max_len } => Self::Synthetic {
                task: SyntheticTask::Reverse,
                lengths: min_len..=max_len,
            },
            DataConfig::CmudictPairs { .. }
            | DataConfig::SyntheticPairs { .. }
            | DataConfig::TextPairs { .. } => Self::Pairs(config.pairs()?),
            &DataConfig::Chomsky { name, train_max_len } => Self::Chomsky {
                task: name,
                tokenizer: name.tokenizer(),
                train_max_len,
            },
            DataConfig::Names(_) | DataConfig::Spam(_) | DataConfig::Stress(_) => {
                let (set, settings) = config.classes().expect("a classification task");
                let examples = set.examples()?;
                let tokenizer = class_tokenizer(settings.vocabulary, &examples);
                let split = LengthSplit {
                    train_max_len: settings.train_max_len,
                    valid_fraction: settings.valid_fraction,
                    seed: PAIR_SPLIT_SEED,
                };
                let data = ClassData::new(examples, set.class_names(), &tokenizer, &split)?;
                Self::Classes { tokenizer, data }
            }
            DataConfig::Custom { .. } => return Err(config.custom_source_error().expect("a custom source")),
        })
    }

    fn masked_text(config: &DataConfig) -> Result<Self> {
        let (text, seq_len, valid_fraction) = match config {
            &DataConfig::MobyDick {
                seq_len,
                valid_fraction,
            } => (MOBY_DICK.to_string(), seq_len, valid_fraction),
            DataConfig::TextFile {
                path,
                seq_len,
                valid_fraction,
            } => (read_text(path)?, *seq_len, *valid_fraction),
            _ => return Err(masked_lm_needs_text()),
        };
        let tokenizer = CharTokenizer::from_text(&text).for_masked_lm();
        let data = LanguageModelData::from_text(&tokenizer, &text, valid_fraction)?;
        Ok(Self::MaskedText {
            data: MaskedText::new(data, &tokenizer)?,
            tokenizer,
            seq_len,
        })
    }

    fn text(text: &str, seq_len: usize, valid_fraction: f64) -> Result<Self> {
        let tokenizer = CharTokenizer::from_text(text);
        let data = LanguageModelData::from_text(&tokenizer, text, valid_fraction)?;
        Ok(Self::Text {
            tokenizer,
            data,
            seq_len,
        })
    }
}

impl Task for DataTask {
    fn tokenizer(&self) -> TaskTokenizer {
        TaskTokenizer::Chars(match self {
            Self::Text { tokenizer, .. }
            | Self::MaskedText { tokenizer, .. }
            | Self::Classes { tokenizer, .. }
            | Self::Chomsky { tokenizer, .. } => tokenizer.clone(),
            Self::Pronunciations { data, .. } => data.tokenizer().clone(),
            Self::Synthetic { .. } => SyntheticTask::tokenizer(),
            Self::Pairs(data) => return TaskTokenizer::Pairs(data.tokenizer().clone()),
        })
    }

    /// The length of every training batch (shorter rows are padded; a causal LM needs no mask for
    /// padding at the end of a row); a pair task's longest training source.
    fn train_len(&self) -> usize {
        match self {
            Self::Text { seq_len, .. } | Self::MaskedText { seq_len, .. } => *seq_len,
            Self::Pronunciations { train_len, .. } => *train_len,
            Self::Synthetic { lengths, .. } => 2 * lengths.end() + 2,
            Self::Pairs(data) => data.train_shape()[0],
            Self::Classes { data, .. } => data.train_len(),
            Self::Chomsky {
                task, train_max_len, ..
            } => task.sequence_len(*train_max_len),
        }
    }

    /// `[source_len, target_len]` of every training batch of a pair task; `None` for the others.
    fn pair_shape(&self) -> Option<[usize; 2]> {
        match self {
            Self::Pairs(data) => Some(data.train_shape()),
            _ => None,
        }
    }

    /// A classification task's data.
    fn class_data(&self) -> Option<&ClassData> {
        match self {
            Self::Classes { data, .. } => Some(data),
            _ => None,
        }
    }

    /// A pair task's data.
    fn pair_data(&self) -> Option<&PairData> {
        match self {
            Self::Pairs(data) => Some(data),
            _ => None,
        }
    }

    /// Training batch number `step` of a run seeded with `seed`: a function of the two alone, so a
    /// resumed run sees exactly the batches the uninterrupted one would have.
    fn train_batch(&self, seed: u64, step: usize, rows: usize) -> Result<TrainBatch> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(step as u64);
        let batch = match self {
            Self::Text { data, seq_len, .. } => data.sample_batch(&mut rng, rows, *seq_len)?,
            Self::MaskedText { data, seq_len, .. } => data.sample_batch(&mut rng, rows, *seq_len)?,
            Self::Pronunciations { data, .. } => data.sample_batch(&mut rng, rows)?,
            Self::Synthetic { task, lengths } => task.sample_batch(&mut rng, rows, lengths.clone())?,
            Self::Pairs(data) => return Ok(TrainBatch::Pairs(data.sample_batch(&mut rng, rows)?)),
            Self::Classes { data, .. } => return Ok(TrainBatch::Classes(data.sample_batch(&mut rng, rows)?)),
            Self::Chomsky {
                task,
                tokenizer,
                train_max_len,
            } => {
                // One input length per batch, as the authors' curriculum draws it.
                let n = rng.random_range(1..=*train_max_len);
                task.batch(&mut rng, tokenizer, rows, n, Scoring::Loss)?
            }
        };
        Ok(TrainBatch::Tokens(batch.pad_to(self.train_len())?))
    }

    /// The evaluation batches for each of `lengths` (the dictionary ignores them: its words have
    /// the lengths they have, binned), at most `max_batches` of `rows` each. A length the data
    /// cannot serve is an error for that length only.
    fn eval_sets(&self, lengths: &[usize], rows: usize, max_batches: usize) -> Vec<EvalSet> {
        match self {
            Self::Text { data, .. } => {
                windows(lengths, max_batches, |length| data.eval_batches(length, rows))
            }
            Self::MaskedText { data, .. } => {
                windows(lengths, max_batches, |length| data.eval_batches(length, rows))
            }
            Self::Synthetic { task, .. } => lengths
                .iter()
                .map(|&length| {
                    // <bos> + n + separator + n inputs: strings of (L − 2)/2 symbols.
                    let n = (length.saturating_sub(2) / 2).max(1);
                    let mut rng = eval_rng(length);
                    let batches = (0..max_batches)
                        .map(|_| task.sample_batch(&mut rng, rows, n..=n))
                        .collect();
                    EvalSet { length, batches }
                })
                .collect(),
            Self::Pronunciations { data, .. } => vec![dictionary_eval_set(data, rows, max_batches)],
            // Scored by decoding, bin by bin: see `Evaluator::evaluate_pairs`.
            Self::Pairs(_) => Vec::new(),
            // Scored bin by bin: see `Evaluator::evaluate_classes`.
            Self::Classes { .. } => Vec::new(),
            Self::Chomsky { task, tokenizer, .. } => lengths
                .iter()
                .map(|&length| {
                    let mut rng = eval_rng(length);
                    let batches = (0..max_batches)
                        .map(|_| task.batch(&mut rng, tokenizer, rows, length, Scoring::Accuracy))
                        .collect();
                    EvalSet { length, batches }
                })
                .collect(),
        }
    }

    /// A Chomsky task's sets are input lengths, binned from its longest training input.
    fn eval_bins(&self) -> EvalBins {
        match self {
            &Self::Chomsky { train_max_len, .. } => EvalBins::SetLength { train_max_len },
            _ => EvalBins::RowLength,
        }
    }
}

/// The generator of a generated task's evaluation batches at `length`: fixed per length and apart
/// from every training stream (those are streams `step` of the run's seed).
fn eval_rng(length: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(length as u64);
    rng.set_stream(u64::MAX);
    rng
}

/// `max_batches` validation batches spread over the dictionary (it is sorted, so the first few
/// would all start with `a`), each padded to its length bin's end so that they share graphs.
fn dictionary_eval_set(data: &Pronunciations, rows: usize, max_batches: usize) -> EvalSet {
    let all = match data.eval_batches(rows) {
        Ok(all) => all,
        Err(e) => {
            return EvalSet {
                length: 0,
                batches: Err(e),
            };
        }
    };
    let picked = max_batches.min(all.len());
    let mut batches = Vec::with_capacity(picked);
    let mut longest = 0;
    for i in 0..picked {
        let batch = all[i * all.len() / picked].clone();
        let bin_end = *LengthBins::bin_lengths(LengthBins::bin_of(batch.shape()[1])).end();
        longest = longest.max(bin_end);
        batches.push(batch.pad_to(bin_end));
    }
    EvalSet {
        length: longest,
        batches: batches.into_iter().collect(),
    }
}

/// The validation windows of a text at each of `lengths`, at most `max_batches` batches each.
fn windows(
    lengths: &[usize],
    max_batches: usize,
    eval_batches: impl Fn(usize) -> Result<Vec<Batch>>,
) -> Vec<EvalSet> {
    lengths
        .iter()
        .map(|&length| EvalSet {
            length,
            batches: eval_batches(length).map(|mut batches| {
                batches.truncate(max_batches);
                batches
            }),
        })
        .collect()
}

/// A classification set's tokenizer: its own characters (those of `examples`), or the Moby Dick
/// masked LM's (then `examples` are not read).
fn class_tokenizer(vocabulary: Vocabulary, examples: &[Labelled]) -> CharTokenizer {
    match vocabulary {
        Vocabulary::MobyDick => CharTokenizer::from_text(MOBY_DICK).for_masked_lm(),
        Vocabulary::Own => CharTokenizer::from_texts(examples.iter().map(|e| e.text.as_str())),
    }
}
