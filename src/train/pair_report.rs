//! What a seq2seq model's evaluation measured, bin by bin of source length, and its table.

use std::fmt;
use std::ops::RangeInclusive;

use crate::data::BinTotals;
use crate::score::SequenceScores;

/// What [`super::Evaluator::evaluate_pairs`] measured.
#[derive(Clone, Debug)]
pub struct PairReport {
    /// Training sources have at most this many tokens: later bins measure extrapolation.
    pub train_max_len: usize,
    /// Per bin: its source lengths and the teacher-forced totals.
    pub forced: Vec<(RangeInclusive<usize>, BinTotals)>,
    /// Greedy decoding's scores per bin.
    pub decoded: SequenceScores,
    /// A few (source, reference, hypothesis) of each bin, as text.
    pub examples: Vec<(String, String, String)>,
}

impl fmt::Display for PairReport {
    /// One row per bin of source lengths, marked past the training lengths, then examples.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(
            f,
            "{:>9}  {:>6}  {:>8}  {:>8}  {:>7}  {:>7}  {:>6}  {:>6}  {:>9}",
            "source", "pairs", "loss", "forced", "exact", "tokens", "error", "BLEU", ""
        )?;
        for ((lengths, forced), (_, decoded)) in self.forced.iter().zip(self.decoded.bins()) {
            let beyond = if *lengths.start() > self.train_max_len {
                "> trained"
            } else {
                ""
            };
            writeln!(
                f,
                "{:>9}  {:>6}  {:>8.4}  {:>7.1}%  {:>6.1}%  {:>6.1}%  {:>5.1}%  {:>6.2}  {beyond:>9}",
                format!("{}-{}", lengths.start(), lengths.end()),
                decoded.sequences,
                forced.mean_loss(),
                100.0 * forced.accuracy(),
                100.0 * decoded.exact_match(),
                100.0 * decoded.token_accuracy(),
                100.0 * decoded.error_rate(),
                decoded.bleu().score,
            )?;
        }
        writeln!(
            f,
            "(loss and forced: teacher-forced; exact, tokens, error, BLEU: greedy decoding)"
        )?;
        for (source, reference, hypothesis) in &self.examples {
            let mark = if reference == hypothesis { "=" } else { "≠" };
            writeln!(f, "  {source} → {hypothesis}  {mark} {reference}")?;
        }
        Ok(())
    }
}
