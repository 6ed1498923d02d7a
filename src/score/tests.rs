//! SequenceScores on hand-made sequences, every sum and ratio exact.

use super::*;
use crate::math;

/// Records `hypothesis` against `reference` (one character per token) with the same strings as
/// texts.
fn record(scores: &mut SequenceScores, source_len: usize, hypothesis: &str, reference: &str) {
    let tokens = |s: &str| s.chars().collect::<Vec<_>>();
    scores.record(
        source_len,
        &tokens(hypothesis),
        &tokens(reference),
        hypothesis,
        reference,
    );
}

/// Two sequences in the first bin (sources of 5 and 32) and two in the second (33 and 64).
fn four_sequences() -> SequenceScores {
    let mut scores = SequenceScores::new(32);
    record(&mut scores, 5, "abc", "abc"); // exact: 3 of 3 positions, no edit
    record(&mut scores, 32, "ab", "abc"); // stops early: 2 of 3 positions, 1 deletion
    record(&mut scores, 33, "axcd", "abc"); // runs on: a, c of 4 positions; 1 substitution, 1 insertion
    record(&mut scores, 64, "bc", "abc"); // shifted: no position right, yet 1 edit
    scores
}

#[test]
fn sums_per_bin() {
    let scores = four_sequences();
    let bins: Vec<_> = scores.bins().collect();
    assert_eq!(bins.len(), 2);
    let (lengths, first) = &bins[0];
    assert_eq!(*lengths, 1..=32);
    assert_eq!(
        (
            first.sequences,
            first.exact,
            first.matched,
            first.positions,
            first.edits
        ),
        (2, 1, 5, 6, 1)
    );
    assert_eq!((first.hypothesis_tokens, first.reference_tokens), (5, 6));
    assert_eq!(first.hypotheses(), ["abc", "ab"]);
    assert_eq!(first.references(), ["abc", "abc"]);
    let (lengths, second) = &bins[1];
    assert_eq!(*lengths, 33..=64);
    assert_eq!(
        (
            second.sequences,
            second.exact,
            second.matched,
            second.positions,
            second.edits
        ),
        (2, 0, 2, 7, 3)
    );
    assert_eq!((second.hypothesis_tokens, second.reference_tokens), (6, 6));
}

#[test]
fn ratios_per_bin_and_in_total() {
    let scores = four_sequences();
    let bins: Vec<_> = scores.bins().map(|(_, t)| t).collect();
    assert_eq!(bins[0].token_accuracy(), 5.0 / 6.0);
    assert_eq!(bins[0].exact_match(), 0.5);
    assert_eq!(bins[0].error_rate(), 1.0 / 6.0);
    assert_eq!(bins[1].token_accuracy(), 2.0 / 7.0);
    assert_eq!(bins[1].exact_match(), 0.0);
    assert_eq!(bins[1].error_rate(), 0.5);
    let total = scores.total();
    assert_eq!(total.sequences, 4);
    assert_eq!(total.token_accuracy(), 7.0 / 13.0);
    assert_eq!(total.exact_match(), 0.25);
    assert_eq!(total.error_rate(), 4.0 / 12.0);
    assert_eq!(total.hypotheses(), ["abc", "ab", "axcd", "bc"]);
}

#[test]
fn empty_bins_are_skipped_and_nothing_counts_as_zero() {
    let mut scores = SequenceScores::new(32);
    assert_eq!(scores.bins().count(), 0);
    let empty = scores.total();
    assert_eq!(
        (empty.token_accuracy(), empty.exact_match(), empty.error_rate()),
        (0.0, 0.0, 0.0)
    );
    assert_eq!(empty.bleu().score, 0.0);
    record(&mut scores, 3, "a", "a");
    record(&mut scores, 200, "a", "b");
    let lengths: Vec<_> = scores.bins().map(|(lengths, _)| lengths).collect();
    assert_eq!(lengths, [1..=32, 129..=256]);
}

#[test]
fn merging_equals_recording_in_one() {
    let all = four_sequences();
    let mut first = SequenceScores::new(32);
    record(&mut first, 5, "abc", "abc");
    record(&mut first, 32, "ab", "abc");
    // The second accumulator has more bins than the first: merge grows it.
    let mut second = SequenceScores::new(32);
    record(&mut second, 33, "axcd", "abc");
    record(&mut second, 64, "bc", "abc");
    let mut merged = SequenceScores::new(32);
    merged.merge(&first);
    merged.merge(&second);
    assert_eq!(merged, all);
    first.merge(&second);
    assert_eq!(first, all);
}

#[test]
fn words_are_the_tokens_and_texts_go_to_bleu() {
    let mut scores = SequenceScores::new(32);
    scores.record_words(5, "HH AH0 L OW1", "HH AH0 L OW1");
    scores.record_words(5, "W ER1 L D", "W ER1 L D Z");
    scores.record_words(40, "the cat sat on the mat", "the cat sat on the mat");
    let total = scores.total();
    // Phonemes and words, not characters: 14 of 15 positions, one deletion over 15 reference tokens.
    assert_eq!((total.matched, total.positions), (14, 15));
    assert_eq!(total.error_rate(), 1.0 / 15.0);
    assert_eq!(total.exact_match(), 2.0 / 3.0);
    let (_, phonemes) = scores.bins().next().unwrap();
    assert_eq!(phonemes.token_accuracy(), 8.0 / 9.0);
    // The bins' BLEU is corpus BLEU of their texts; an exact bin scores 100.
    let (_, sentence) = scores.bins().nth(1).unwrap();
    assert!((sentence.bleu().score - 100.0).abs() < 1e-12);
    let expected = corpus_bleu(phonemes.hypotheses(), phonemes.references()).unwrap();
    assert_eq!(phonemes.bleu(), expected);
    // Every n-gram of the hypotheses matches; only the brevity penalty, exp(1 − 9/8), is left.
    assert_eq!((expected.counts, expected.totals), ([8, 6, 4, 2], [8, 6, 4, 2]));
    assert!((expected.score - 100.0 * math::exp(1.0f64 - 9.0 / 8.0)).abs() < 1e-9);
}

/// Bins start at the training length: trained on words of up to 8 letters, a 9-letter word is
/// in the second bin (9–16) and a 20-letter one in the third (17–32).
#[test]
fn bins_follow_the_training_length() {
    let mut scores = SequenceScores::new(8);
    for (len, hypothesis) in [(3, "A B"), (8, "A B"), (9, "A C"), (20, "A")] {
        scores.record_words(len, hypothesis, "A B");
    }
    let bins: Vec<(std::ops::RangeInclusive<usize>, usize, usize)> = scores
        .bins()
        .map(|(lengths, t)| (lengths, t.sequences, t.exact))
        .collect();
    assert_eq!(bins, [(1..=8, 2, 2), (9..=16, 1, 0), (17..=32, 1, 0)]);
}
