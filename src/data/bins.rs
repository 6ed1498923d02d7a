//! Evaluation by sequence length: loss and token accuracy per length bin (≤32, 33–64, 65–128, …),
//! the measure of how a position encoding extrapolates beyond its training lengths.

use std::fmt;
use std::ops::RangeInclusive;

use super::{Batch, IGNORE_INDEX, RatioMoments};
use crate::error::{Error, Result};
use crate::math;

/// The upper end of the first bin; each later bin doubles it.
const FIRST_BIN_MAX: usize = 32;

/// The bin of a source of `len` tokens when training reached `train_max_len`: bin 0 holds the
/// training lengths 1..=N, bin k ≥ 1 holds N·2^(k−1)+1 ..= N·2^k.
///
/// [`LengthBins`] is this with N fixed at 32, a fit for text windows. Anchored
/// at the training length instead, the trained lengths have a bin of their own, which every longer
/// bin is compared with, and short data gets bins at all: every word of the CMU dictionary (28
/// letters at most) falls in `LengthBins`' first bin.
pub fn source_bin(len: usize, train_max_len: usize) -> usize {
    let mut bin = 0;
    let mut end = train_max_len.max(1);
    while len > end {
        end = end.saturating_mul(2);
        bin += 1;
    }
    bin
}

/// The source lengths of bin `bin` (see [`source_bin`]).
pub fn source_bin_lengths(bin: usize, train_max_len: usize) -> RangeInclusive<usize> {
    let n = train_max_len.max(1);
    match bin {
        0 => 1..=n,
        _ => (n << (bin - 1)) + 1..=n << bin,
    }
}

/// Loss and correct predictions summed over the counted tokens of some sequences.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BinTotals {
    pub sequences: usize,
    pub tokens: usize,
    pub loss_sum: f64,
    pub correct: usize,
    /// Per sequence: correct tokens over tokens, for accuracy's error over the sequences.
    pub accuracy_items: RatioMoments,
    /// Per sequence: summed loss over tokens.
    pub loss_items: RatioMoments,
}

impl BinTotals {
    /// Mean loss per counted token (0 when none was counted).
    pub fn mean_loss(&self) -> f64 {
        if self.tokens == 0 {
            0.0
        } else {
            self.loss_sum / self.tokens as f64
        }
    }

    /// The fraction of counted tokens predicted right (argmax equal to the target).
    pub fn accuracy(&self) -> f64 {
        if self.tokens == 0 {
            0.0
        } else {
            self.correct as f64 / self.tokens as f64
        }
    }

    fn add(&mut self, other: &BinTotals) {
        self.sequences += other.sequences;
        self.tokens += other.tokens;
        self.loss_sum += other.loss_sum;
        self.correct += other.correct;
        self.accuracy_items.add(&other.accuracy_items);
        self.loss_items.add(&other.loss_items);
    }
}

/// Totals per length bin: bin 0 holds lengths 1–32, bin k ≥ 1 holds 32·2^(k−1)+1 to 32·2^k; or,
/// [`LengthBins::anchored`] at a training length N, 1–N and then doubling from N.
#[derive(Clone, Debug)]
pub struct LengthBins {
    bins: Vec<BinTotals>,
    first_bin_max: usize,
}

impl Default for LengthBins {
    fn default() -> Self {
        Self {
            bins: Vec::new(),
            first_bin_max: FIRST_BIN_MAX,
        }
    }
}

impl LengthBins {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bins anchored at the training length: 1..=N holds the trained lengths, each later bin
    /// doubles (see [`source_bin`]).
    pub fn anchored(train_max_len: usize) -> Self {
        Self {
            bins: Vec::new(),
            first_bin_max: train_max_len.max(1),
        }
    }

    /// No totals, binned as `self`.
    pub fn empty_like(&self) -> Self {
        Self {
            bins: Vec::new(),
            first_bin_max: self.first_bin_max,
        }
    }

    pub fn bin_of(len: usize) -> usize {
        source_bin(len, FIRST_BIN_MAX)
    }

    pub fn bin_lengths(bin: usize) -> RangeInclusive<usize> {
        source_bin_lengths(bin, FIRST_BIN_MAX)
    }

    /// Adds one sequence of length `len` with the given totals over its counted tokens.
    pub fn record(&mut self, len: usize, loss_sum: f64, tokens: usize, correct: usize) {
        let bin = source_bin(len, self.first_bin_max);
        if self.bins.len() <= bin {
            self.bins.resize(bin + 1, BinTotals::default());
        }
        let mut accuracy_items = RatioMoments::default();
        accuracy_items.record(correct as f64, tokens as f64);
        let mut loss_items = RatioMoments::default();
        loss_items.record(loss_sum, tokens as f64);
        self.bins[bin].add(&BinTotals {
            sequences: 1,
            tokens,
            loss_sum,
            correct,
            accuracy_items,
            loss_items,
        });
    }

    /// Adds every row of `batch` (binned by its length before padding, or all at `binned_at`)
    /// given the model's logits [B, L, vocab]: cross-entropy and argmax accuracy over the
    /// targets that count.
    pub fn record_logits(
        &mut self,
        batch: &Batch,
        logits: &[f32],
        vocab: usize,
        binned_at: Option<usize>,
    ) -> Result<()> {
        let [rows, len] = batch.shape();
        if vocab == 0 || logits.len() != rows * len * vocab {
            return Err(Error::Input(format!(
                "logits of {} values do not fit a batch [{rows}, {len}] with a vocabulary of {vocab}",
                logits.len()
            )));
        }
        for (row, &row_len) in batch.lengths().iter().enumerate() {
            let (mut loss_sum, mut tokens, mut correct) = (0.0, 0, 0);
            for position in row * len..(row + 1) * len {
                let target = batch.targets()[position];
                if target == IGNORE_INDEX {
                    continue;
                }
                let scores = &logits[position * vocab..(position + 1) * vocab];
                let target = usize::try_from(target)
                    .ok()
                    .filter(|&t| t < vocab)
                    .ok_or_else(|| {
                        Error::Input(format!(
                            "target {target} at row {row}, position {} is outside the vocabulary of {vocab}",
                            position - row * len
                        ))
                    })?;
                loss_sum += cross_entropy(scores, target);
                tokens += 1;
                correct += usize::from(argmax(scores) == target);
            }
            self.record(binned_at.unwrap_or(row_len), loss_sum, tokens, correct);
        }
        Ok(())
    }

    /// Adds every bin of `other`.
    pub fn merge(&mut self, other: &LengthBins) {
        debug_assert_eq!(self.first_bin_max, other.first_bin_max, "bins of two layouts");
        if self.bins.len() < other.bins.len() {
            self.bins.resize(other.bins.len(), BinTotals::default());
        }
        for (mine, theirs) in self.bins.iter_mut().zip(&other.bins) {
            mine.add(theirs);
        }
    }

    /// The bins that hold at least one sequence, with their lengths.
    pub fn bins(&self) -> impl Iterator<Item = (RangeInclusive<usize>, &BinTotals)> {
        self.bins
            .iter()
            .enumerate()
            .filter(|(_, t)| t.sequences > 0)
            .map(|(b, t)| (source_bin_lengths(b, self.first_bin_max), t))
    }

    /// All bins together.
    pub fn total(&self) -> BinTotals {
        let mut total = BinTotals::default();
        self.bins.iter().for_each(|bin| total.add(bin));
        total
    }
}

/// −log softmax(scores)`[target]`, computed stably in f64.
pub fn cross_entropy(scores: &[f32], target: usize) -> f64 {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = scores.iter().map(|&s| math::exp(s as f64 - max)).sum();
    max + math::ln(sum) - scores[target] as f64
}

/// The first index of the largest score.
pub fn argmax(scores: &[f32]) -> usize {
    scores
        .iter()
        .enumerate()
        .fold(0, |best, (i, &s)| if s > scores[best] { i } else { best })
}

impl fmt::Display for LengthBins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:>10} {:>9} {:>9} {:>8} {:>9}",
            "length", "sequences", "tokens", "loss", "accuracy"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, label: String, t: &BinTotals| {
            writeln!(
                f,
                "{label:>10} {:>9} {:>9} {:>8.4} {:>8.2}%",
                t.sequences,
                t.tokens,
                t.mean_loss(),
                100.0 * t.accuracy()
            )
        };
        for (lengths, totals) in self.bins() {
            let label = if *lengths.start() == 1 {
                format!("<={}", lengths.end())
            } else {
                format!("{}-{}", lengths.start(), lengths.end())
            };
            row(f, label, totals)?;
        }
        row(f, "all".into(), &self.total())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_double_from_the_training_length() {
        assert_eq!(
            [1, 8, 9, 16, 17, 32, 33].map(|len| source_bin(len, 8)),
            [0, 0, 1, 1, 2, 2, 3]
        );
        assert_eq!(source_bin_lengths(0, 8), 1..=8);
        assert_eq!(source_bin_lengths(1, 8), 9..=16);
        assert_eq!(source_bin_lengths(3, 8), 33..=64);
        // LengthBins' (N = 32): ⌈log2 len⌉ − 5 past the first bin, 33..=64 → 1, 65..=128 → 2.
        for len in [1usize, 32, 33, 64, 65, 200, 1000] {
            let log_formula = if len <= 32 {
                0
            } else {
                (usize::BITS - (len - 1).leading_zeros()) as usize - 5
            };
            assert_eq!(LengthBins::bin_of(len), log_formula, "{len}");
        }
        for bin in 0..5 {
            let first = if bin == 0 { 1 } else { (32 << (bin - 1)) + 1 };
            assert_eq!(LengthBins::bin_lengths(bin), first..=32 << bin);
        }
    }

    #[test]
    fn cross_entropy_and_argmax_of_known_scores() {
        // softmax([0, ln 3]) = [1/4, 3/4]
        let scores = [0.0, math::ln(3f32)];
        assert!((cross_entropy(&scores, 0) - math::ln(4f64)).abs() < 1e-6);
        assert!((cross_entropy(&scores, 1) - math::ln(4.0f64 / 3.0)).abs() < 1e-6);
        assert_eq!(argmax(&[1.0, 5.0, 5.0, -2.0]), 1);
        // Large scores do not overflow.
        assert!((cross_entropy(&[1000.0, 1000.0], 0) - math::ln(2f64)).abs() < 1e-6);
    }
}
