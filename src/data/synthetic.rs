//! Copy and reverse of random symbol strings (`abc|abc`, `abc|cba`): tasks whose difficulty is
//! only the length, to test extrapolation by training on short strings and evaluating on long.

use std::ops::RangeInclusive;

use rand::{Rng, RngExt};

use super::{Batch, CharTokenizer, Example};
use crate::error::{Error, Result};

/// The symbols the strings are drawn from (here and in the seq2seq tasks of `synthetic_pairs`).
pub(super) const SYMBOLS: &str = "abcdefghijklmnopqrstuvwxyz";
const SEPARATOR: char = '|';

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyntheticTask {
    /// `abc|abc`
    Copy,
    /// `abc|cba`
    Reverse,
}

impl SyntheticTask {
    /// The symbols and the separator; the same for both tasks.
    pub fn tokenizer() -> CharTokenizer {
        CharTokenizer::from_texts([SYMBOLS, "|"])
    }

    /// A string of uniformly random symbols, its length uniform in `lengths`, and its answer.
    pub fn example<R: Rng + ?Sized>(self, rng: &mut R, lengths: RangeInclusive<usize>) -> Result<Example> {
        if lengths.is_empty() || *lengths.start() == 0 {
            return Err(Error::Input(format!(
                "string lengths {lengths:?} must be a non-empty range of positive lengths"
            )));
        }
        let symbols: Vec<char> = SYMBOLS.chars().collect();
        let len = rng.random_range(lengths);
        let prompt: String = (0..len)
            .map(|_| symbols[rng.random_range(0..symbols.len())])
            .collect();
        let answer = match self {
            SyntheticTask::Copy => prompt.clone(),
            SyntheticTask::Reverse => prompt.chars().rev().collect(),
        };
        Ok(Example {
            prompt,
            separator: SEPARATOR,
            answer,
        })
    }

    /// `batch` examples, padded to the longest.
    pub fn sample_batch<R: Rng + ?Sized>(
        self,
        rng: &mut R,
        batch: usize,
        lengths: RangeInclusive<usize>,
    ) -> Result<Batch> {
        let examples = (0..batch)
            .map(|_| self.example(rng, lengths.clone()))
            .collect::<Result<Vec<_>>>()?;
        Example::batch(&examples, &Self::tokenizer())
    }
}
