//! What the trainer asks of a run's data: [`Task`]. posflow's own tasks, named by a config's
//! `[data]`, are [`super::DataTask`]; a Rust user's data is any type that implements the trait,
//! handed to [`super::Trainer::with_task`].

use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};

use crate::data::{
    Batch, ClassBatch, ClassData, LengthBins, PairBatch, PairData, TaskTokenizer, source_bin,
    source_bin_lengths,
};
use crate::error::Result;

/// A task's data: its tokenizer, seeded training batches of one fixed shape, and evaluation
/// batches at the lengths asked for. A causal or masked LM's task gives token batches
/// ([`TrainBatch::Tokens`], evaluated per length by [`Task::eval_sets`]); a seq2seq model's
/// gives pairs and its [`PairData`] (evaluated by decoding, bin by bin); a classifier's gives
/// classified sequences and its [`ClassData`].
pub trait Task {
    /// The tokenizer: its size is the model's vocabulary, and a checkpoint keeps it.
    fn tokenizer(&self) -> TaskTokenizer;

    /// The length of every training batch (shorter rows padded); a pair task's longest training
    /// source.
    fn train_len(&self) -> usize;

    /// Training batch number `step` of a run seeded with `seed`, `rows` rows. A function of the
    /// three alone, so that a resumed run sees exactly the batches of the uninterrupted one.
    fn train_batch(&self, seed: u64, step: usize, rows: usize) -> Result<TrainBatch>;

    /// The evaluation batches for each of `lengths`, at most `max_batches` of `rows` each; a
    /// length the data cannot serve is an error for that length only. Empty for a task scored
    /// otherwise (pairs, classes).
    fn eval_sets(&self, lengths: &[usize], rows: usize, max_batches: usize) -> Vec<EvalSet>;

    /// `[source_len, target_len]` of every training batch of a pair task; `None` for the others.
    fn pair_shape(&self) -> Option<[usize; 2]> {
        None
    }

    /// A pair task's data, scored by decoding its held-out pairs.
    fn pair_data(&self) -> Option<&PairData> {
        None
    }

    /// A classification task's data, scored per length bin.
    fn class_data(&self) -> Option<&ClassData> {
        None
    }

    /// How [`Task::eval_sets`]' rows are binned.
    fn eval_bins(&self) -> EvalBins {
        EvalBins::RowLength
    }
}

/// How the rows of evaluation sets are binned by length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalBins {
    /// Each row by its own length (before padding), in bins doubling from 32 tokens: text
    /// windows and prompted sequences.
    RowLength,
    /// Each set's rows at the set's length, a task's own measure (a Chomsky task's input length,
    /// whatever its answer adds), in bins doubling from the longest training length.
    SetLength { train_max_len: usize },
}

/// What the lengths of a task's evaluation bins count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthUnit {
    /// A row's tokens ([`EvalBins::RowLength`]).
    #[default]
    Tokens,
    /// A Chomsky task's input symbols ([`EvalBins::SetLength`]): its answer's placeholders are
    /// not counted, so an input of 10 symbols is a row of 20 tokens in one task and 30 in another.
    InputSymbols,
}

impl LengthUnit {
    /// The unit in prose: "tokens", "input symbols".
    pub fn name(self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::InputSymbols => "input symbols",
        }
    }
}

impl EvalBins {
    /// Empty totals with these bins.
    pub fn empty(self) -> LengthBins {
        match self {
            Self::RowLength => LengthBins::new(),
            Self::SetLength { train_max_len } => LengthBins::anchored(train_max_len),
        }
    }

    /// The lengths of the bin a row of `row_len` tokens in the set for `set_len` falls in.
    pub fn bin_lengths(self, row_len: usize, set_len: usize) -> RangeInclusive<usize> {
        match self {
            Self::RowLength => LengthBins::bin_lengths(LengthBins::bin_of(row_len)),
            Self::SetLength { train_max_len } => {
                source_bin_lengths(source_bin(set_len, train_max_len), train_max_len)
            }
        }
    }

    /// The length every row of the set for `set_len` is recorded at, if not its own.
    pub fn binned_at(self, set_len: usize) -> Option<usize> {
        match self {
            Self::RowLength => None,
            Self::SetLength { .. } => Some(set_len),
        }
    }
}

/// One training batch: token sequences for a causal or masked LM, pairs for a seq2seq model,
/// classified sequences for an encoder.
pub enum TrainBatch {
    Tokens(Batch),
    Pairs(PairBatch),
    Classes(ClassBatch),
}

/// The batches of one requested evaluation length, or why the data cannot serve it.
pub struct EvalSet {
    /// The length asked for (for the dictionary, the longest padded batch).
    pub length: usize,
    pub batches: Result<Vec<Batch>>,
}

impl EvalSet {
    /// The set of `length`: its batches, or why the data cannot serve that length.
    pub fn new(length: usize, batches: Result<Vec<Batch>>) -> Self {
        Self { length, batches }
    }
}
