//! Scores of decoded sequences (a seq2seq model's generated output against its references), per
//! length bin of the source: token accuracy, exact matches, the edit-distance error rate (the
//! phoneme error rate when tokens are phonemes, the word error rate when they are words) and
//! corpus BLEU as sacrebleu computes it. A classifier's predictions: a [`Confusion`] matrix, its
//! accuracy and macro-F1.
//!
//! Teacher-forced accuracy (`data::LengthBins`) says how well a model predicts the next token
//! given the right prefix; these say how good what it actually generates is, where one early
//! mistake or a missing end token shifts everything after it.

mod bleu;
mod confusion;
mod edit;
#[cfg(test)]
mod tests;
mod tokenize;

use std::ops::RangeInclusive;

pub use bleu::{Bleu, MAX_ORDER, corpus_bleu};
pub use confusion::Confusion;
pub use edit::edit_distance;
pub use tokenize::tokenize_13a;

use crate::data::{RatioMoments, source_bin, source_bin_lengths};

/// The sums behind the scores of some decoded sequences, and their texts for BLEU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SequenceTotals {
    pub sequences: usize,
    /// Hypotheses equal to their reference, token for token.
    pub exact: usize,
    /// Positions where hypothesis and reference hold the same token.
    pub matched: usize,
    /// Σ max(hypothesis length, reference length): the positions token accuracy is over.
    pub positions: usize,
    /// Σ edit distance between hypothesis and reference.
    pub edits: usize,
    pub hypothesis_tokens: usize,
    pub reference_tokens: usize,
    /// Per sequence, for each score's error over the sequences: exact (1 or 0) over 1.
    pub exact_items: RatioMoments,
    /// Matched positions over positions.
    pub token_items: RatioMoments,
    /// Edits over reference tokens.
    pub error_items: RatioMoments,
    hypotheses: Vec<String>,
    references: Vec<String>,
}

impl SequenceTotals {
    /// matched / positions: position i counts as right when both sequences have a token there and
    /// the two are equal. Missing tokens (a hypothesis that stops early) and extra ones (one that
    /// runs on) are errors, so this equals matches / reference length unless the hypothesis is
    /// longer, and a run-on output cannot score 100%. Positional, not aligned: one inserted token
    /// makes the rest wrong, which the edit-distance [`error_rate`](Self::error_rate) forgives.
    /// 0 when no position was counted.
    pub fn token_accuracy(&self) -> f64 {
        ratio(self.matched, self.positions)
    }

    /// The fraction of sequences decoded exactly (0 when none was recorded).
    pub fn exact_match(&self) -> f64 {
        ratio(self.exact, self.sequences)
    }

    /// Σ edit distance / Σ reference length (corpus-level, as WER and PER are reported, so long
    /// references weigh more than short ones). Can exceed 1 when hypotheses run on. 0 when no
    /// reference token was counted.
    pub fn error_rate(&self) -> f64 {
        ratio(self.edits, self.reference_tokens)
    }

    /// Corpus BLEU of the recorded texts.
    pub fn bleu(&self) -> Bleu {
        bleu::bleu_of_pairs(
            self.hypotheses
                .iter()
                .map(String::as_str)
                .zip(self.references.iter().map(String::as_str)),
        )
    }

    /// The recorded hypothesis texts, in recording order.
    pub fn hypotheses(&self) -> &[String] {
        &self.hypotheses
    }

    /// The recorded reference texts, paired with [`hypotheses`](Self::hypotheses).
    pub fn references(&self) -> &[String] {
        &self.references
    }

    fn add(&mut self, other: &SequenceTotals) {
        self.sequences += other.sequences;
        self.exact += other.exact;
        self.matched += other.matched;
        self.positions += other.positions;
        self.edits += other.edits;
        self.hypothesis_tokens += other.hypothesis_tokens;
        self.reference_tokens += other.reference_tokens;
        self.exact_items.add(&other.exact_items);
        self.token_items.add(&other.token_items);
        self.error_items.add(&other.error_items);
        self.hypotheses.extend_from_slice(&other.hypotheses);
        self.references.extend_from_slice(&other.references);
    }
}

fn ratio(numerator: usize, denominator: usize) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        numerator as f64 / denominator as f64
    }
}

/// [`SequenceTotals`] per bin of source length, the bins of the pair data
/// ([`crate::data::source_bin`]): the training lengths 1..=N, then N+1..=2N, 2N+1..=4N, …, so
/// that each bin past the first is a step further from what the model was trained on. With
/// N = 32 they are [`crate::data::LengthBins`]' bins, so that generated output and
/// teacher-forced loss line up by length.
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceScores {
    /// N: the longest source trained on.
    train_max_len: usize,
    bins: Vec<SequenceTotals>,
}

impl SequenceScores {
    /// Scores binned from sources of up to `train_max_len` tokens (the training lengths).
    pub fn new(train_max_len: usize) -> Self {
        Self {
            train_max_len,
            bins: Vec::new(),
        }
    }

    /// Adds one decoded sequence whose source had `source_len` tokens: its tokens (for accuracy,
    /// exact match and edit distance) and its text (for BLEU, which tokenizes text its own way).
    /// An empty source counts in the first bin.
    pub fn record<T: PartialEq>(
        &mut self,
        source_len: usize,
        hypothesis: &[T],
        reference: &[T],
        hypothesis_text: &str,
        reference_text: &str,
    ) {
        let bin = source_bin(source_len, self.train_max_len);
        if self.bins.len() <= bin {
            self.bins.resize(bin + 1, SequenceTotals::default());
        }
        let totals = &mut self.bins[bin];
        let exact = usize::from(hypothesis == reference);
        let matched = hypothesis.iter().zip(reference).filter(|(h, r)| h == r).count();
        let positions = hypothesis.len().max(reference.len());
        let edits = edit_distance(hypothesis, reference);
        totals.sequences += 1;
        totals.exact += exact;
        totals.matched += matched;
        totals.positions += positions;
        totals.edits += edits;
        totals.exact_items.record(exact as f64, 1.0);
        totals.token_items.record(matched as f64, positions as f64);
        totals.error_items.record(edits as f64, reference.len() as f64);
        totals.hypothesis_tokens += hypothesis.len();
        totals.reference_tokens += reference.len();
        totals.hypotheses.push(hypothesis_text.to_owned());
        totals.references.push(reference_text.to_owned());
    }

    /// [`record`](Self::record) with the whitespace-separated words of each text as its tokens
    /// (phonemes of `HH AH0 L OW1`, words of a sentence).
    pub fn record_words(&mut self, source_len: usize, hypothesis: &str, reference: &str) {
        let hypothesis_words: Vec<&str> = hypothesis.split_whitespace().collect();
        let reference_words: Vec<&str> = reference.split_whitespace().collect();
        self.record(
            source_len,
            &hypothesis_words,
            &reference_words,
            hypothesis,
            reference,
        );
    }

    /// Adds every bin of `other` (binned from the same training length), its texts after this
    /// one's.
    pub fn merge(&mut self, other: &SequenceScores) {
        assert_eq!(
            self.train_max_len, other.train_max_len,
            "merging scores binned from different training lengths"
        );
        if self.bins.len() < other.bins.len() {
            self.bins.resize(other.bins.len(), SequenceTotals::default());
        }
        for (mine, theirs) in self.bins.iter_mut().zip(&other.bins) {
            mine.add(theirs);
        }
    }

    /// The bins that hold at least one sequence, with their source lengths, shortest first.
    pub fn bins(&self) -> impl Iterator<Item = (RangeInclusive<usize>, &SequenceTotals)> {
        self.bins
            .iter()
            .enumerate()
            .filter(|(_, t)| t.sequences > 0)
            .map(|(b, t)| (source_bin_lengths(b, self.train_max_len), t))
    }

    /// All bins together.
    pub fn total(&self) -> SequenceTotals {
        let mut total = SequenceTotals::default();
        self.bins.iter().for_each(|bin| total.add(bin));
        total
    }
}
