//! Synthetic seq2seq tasks whose difficulty is the length alone: reverse (`abc` → `cba`), sort
//! (`cab` → `abc`) and decimal addition (`123+45` → `168`), generated at every length of a range
//! and split by length (train short, evaluate long).

use std::ops::RangeInclusive;

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::synthetic::SYMBOLS;
use super::{CharTokenizer, LengthSplit, MaxLengths, Pair, PairData, PairTokenizer};
use crate::error::{Error, Result};

const DIGITS: &str = "0123456789";
const PLUS: char = '+';

/// A task's length is its source's, in characters, so that one [`LengthSplit`] means the same for
/// every task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairTask {
    /// `abc` → `cba`: random lower-case letters, reversed.
    Reverse,
    /// `cab` → `abc`: random lower-case letters, sorted.
    Sort,
    /// `123+45` → `168`: two decimal numbers (no leading zeros) whose digits fill the length, and
    /// their sum.
    Addition,
}

impl PairTask {
    /// The task's characters, shared by sources and targets.
    pub fn tokenizer(self) -> PairTokenizer {
        let chars = match self {
            Self::Reverse | Self::Sort => CharTokenizer::from_text(SYMBOLS),
            Self::Addition => CharTokenizer::from_texts([DIGITS, "+"]),
        };
        PairTokenizer::Chars(chars)
    }

    /// The shortest source the task has: a symbol, or `d+d`.
    pub fn min_len(self) -> usize {
        match self {
            Self::Reverse | Self::Sort => 1,
            Self::Addition => 3,
        }
    }

    /// A random source of exactly `len` characters and its answer.
    pub fn texts<R: Rng + ?Sized>(self, rng: &mut R, len: usize) -> Result<(String, String)> {
        if len < self.min_len() {
            return Err(Error::Input(format!(
                "{self:?} sources have at least {} characters, not {len}",
                self.min_len()
            )));
        }
        let letters = |rng: &mut R| -> Vec<char> {
            let symbols: Vec<char> = SYMBOLS.chars().collect();
            (0..len)
                .map(|_| symbols[rng.random_range(0..symbols.len())])
                .collect()
        };
        Ok(match self {
            Self::Reverse => {
                let source = letters(rng);
                (source.iter().collect(), source.iter().rev().collect())
            }
            Self::Sort => {
                let source = letters(rng);
                let mut sorted = source.clone();
                sorted.sort_unstable();
                (source.iter().collect(), sorted.iter().collect())
            }
            Self::Addition => {
                // len = digits of a + 1 + digits of b, each at least 1.
                let a_digits = rng.random_range(1..=len - 2);
                let (a, b) = (number(rng, a_digits), number(rng, len - 1 - a_digits));
                let sum = add_decimal(&a, &b);
                (format!("{a}{PLUS}{b}"), sum)
            }
        })
    }

    /// `per_length` random pairs at every length of `lengths` (so each length is as common),
    /// generated from `split.seed` and split by it: sources up to `split.train_max_len` for
    /// training, longer ones evaluated. Short lengths repeat pairs (there are 26 one-letter
    /// strings), so held-out short pairs may also be trained on: the tasks are functions, and the
    /// held-out bin measures fitting them, as the longer bins measure extrapolating them.
    pub fn data(
        self,
        lengths: RangeInclusive<usize>,
        per_length: usize,
        split: &LengthSplit,
        max: MaxLengths,
    ) -> Result<PairData> {
        if lengths.is_empty() || *lengths.start() < self.min_len() || per_length == 0 {
            return Err(Error::Input(format!(
                "{self:?} pairs need a non-empty range of lengths from {} and at least one pair per \
                 length, got lengths {lengths:?} and {per_length} per length",
                self.min_len()
            )));
        }
        let tokenizer = self.tokenizer();
        let mut rng = ChaCha8Rng::seed_from_u64(split.seed);
        // Apart from the stream of the split's shuffle (stream 0 of the same seed).
        rng.set_stream(1);
        let mut pairs = Vec::with_capacity(lengths.clone().count() * per_length);
        for len in lengths {
            for _ in 0..per_length {
                let (source, target) = self.texts(&mut rng, len)?;
                pairs.push(Pair {
                    source: tokenizer.encode_source(&source)?,
                    target: tokenizer.encode_target(&target)?,
                });
            }
        }
        PairData::new(tokenizer, pairs, split, max)
    }
}

/// A random decimal number of exactly `digits` digits, without leading zeros (`0` is one digit).
fn number<R: Rng + ?Sized>(rng: &mut R, digits: usize) -> String {
    let digit = |rng: &mut R, from: u8| char::from(b'0' + rng.random_range(from..=9));
    (0..digits)
        .map(|i| digit(rng, u8::from(i == 0 && digits > 1)))
        .collect()
}

/// The sum of two decimal numbers of any length, digit by digit (no integer type holds a sum of
/// 60-digit numbers).
fn add_decimal(a: &str, b: &str) -> String {
    let (mut a, mut b) = (a.bytes().rev(), b.bytes().rev());
    let mut digits = Vec::new();
    let mut carry = 0;
    loop {
        let (x, y) = (a.next(), b.next());
        if x.is_none() && y.is_none() && carry == 0 {
            break;
        }
        let sum = x.map_or(0, |d| d - b'0') + y.map_or(0, |d| d - b'0') + carry;
        digits.push(char::from(b'0' + sum % 10));
        carry = sum / 10;
    }
    digits.iter().rev().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMY: MaxLengths = MaxLengths {
        source_len: 1000,
        target_len: 1000,
    };

    fn split(seed: u64) -> LengthSplit {
        LengthSplit {
            train_max_len: 8,
            valid_fraction: 0.1,
            seed,
        }
    }

    /// Every pair of `data`, decoded.
    fn texts(data: &PairData) -> Vec<(String, String)> {
        let tokenizer = data.tokenizer();
        data.train()
            .iter()
            .chain(data.eval().iter().flat_map(|bin| bin.pairs()))
            .map(|p| {
                (
                    tokenizer.decode_source(&p.source).unwrap(),
                    tokenizer.decode_target(&p.target).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn reverse_pairs_are_reversed() {
        let data = PairTask::Reverse.data(1..=20, 30, &split(0), ROOMY).unwrap();
        for (source, target) in texts(&data) {
            let (s, t) = (source.as_bytes(), target.as_bytes());
            assert_eq!(s.len(), t.len());
            assert!(
                (0..s.len()).all(|i| t[i] == s[s.len() - 1 - i]),
                "{source} → {target}"
            );
            assert!(s.iter().all(u8::is_ascii_lowercase));
        }
    }

    #[test]
    fn sort_pairs_are_sorted_permutations() {
        let data = PairTask::Sort.data(1..=20, 30, &split(0), ROOMY).unwrap();
        for (source, target) in texts(&data) {
            let count = |text: &str| {
                let mut counts = [0; 26];
                text.bytes().for_each(|b| counts[usize::from(b - b'a')] += 1);
                counts
            };
            assert_eq!(count(&source), count(&target), "{source} → {target}");
            assert!(target.as_bytes().windows(2).all(|w| w[0] <= w[1]), "{target}");
        }
    }

    #[test]
    fn addition_pairs_are_sums() {
        let data = PairTask::Addition.data(3..=38, 20, &split(0), ROOMY).unwrap();
        let all = texts(&data);
        assert_eq!(all.len(), 36 * 20);
        for (source, target) in all {
            let (a, b) = source.split_once('+').unwrap();
            for number in [a, b] {
                assert!(number == "0" || !number.starts_with('0'), "{source}");
            }
            let sum = a.parse::<u128>().unwrap() + b.parse::<u128>().unwrap();
            assert_eq!(target, sum.to_string(), "{source}");
        }
        assert_eq!(add_decimal("999", "1"), "1000");
        assert_eq!(add_decimal("0", "0"), "0");
        assert_eq!(add_decimal(&"9".repeat(60), "1"), format!("1{}", "0".repeat(60)));
    }

    #[test]
    fn every_length_is_as_common_and_split_at_the_training_length() {
        for task in [PairTask::Reverse, PairTask::Sort, PairTask::Addition] {
            let data = task.data(3..=20, 10, &split(0), ROOMY).unwrap();
            let mut per_length = [0; 21];
            for (source, _) in texts(&data) {
                per_length[source.chars().count()] += 1;
            }
            assert!(
                per_length[3..].iter().all(|&n| n == 10),
                "{task:?} {per_length:?}"
            );
            assert!(data.train().iter().all(|p| p.source.len() <= 8));
            assert!(data.eval()[1..].iter().all(|bin| bin.lengths().start() > &8));
            assert_eq!(
                data.eval().iter().map(|b| b.pairs().len()).sum::<usize>(),
                6 + 120
            );
        }
    }

    #[test]
    fn pairs_follow_the_seed() {
        let a = PairTask::Addition.data(3..=12, 5, &split(3), ROOMY).unwrap();
        let b = PairTask::Addition.data(3..=12, 5, &split(3), ROOMY).unwrap();
        let c = PairTask::Addition.data(3..=12, 5, &split(4), ROOMY).unwrap();
        assert_eq!(texts(&a), texts(&b));
        assert_ne!(texts(&a), texts(&c));
    }

    #[test]
    fn lengths_below_the_task_minimum_are_errors() {
        let err = PairTask::Addition
            .data(2..=5, 1, &split(0), ROOMY)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "Addition pairs need a non-empty range of lengths from 3 and at least one pair per length, \
             got lengths 2..=5 and 1 per length"
        );
        assert!(PairTask::Reverse.data(1..=5, 0, &split(0), ROOMY).is_err());
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!(PairTask::Addition.texts(&mut rng, 2).is_err());
        assert!(PairTask::Sort.texts(&mut rng, 0).is_err());
    }
}
