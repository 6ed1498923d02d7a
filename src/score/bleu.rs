//! Corpus BLEU as sacrebleu 2.x computes it by default, so that the numbers posflow reports can
//! be set beside published ones: `corpus_bleu(hyps, [refs])` with the 13a tokenizer, mixed case,
//! n-grams up to 4, 'exp' smoothing, no effective order, one reference per hypothesis.

use std::collections::HashMap;

use super::tokenize_13a;
use crate::error::{Error, Result};
use crate::math;

/// The longest n-gram counted.
pub const MAX_ORDER: usize = 4;

/// A corpus BLEU score and the statistics it is made of (sacrebleu's `BLEUScore`).
#[derive(Clone, Debug, PartialEq)]
pub struct Bleu {
    /// 0–100.
    pub score: f64,
    /// Per order n = 1..=4, in percent: clipped matches / hypothesis n-grams, smoothed where no
    /// n-gram matched; 0 from the first order the hypotheses have no n-gram of, and for every
    /// order when nothing matched at all.
    pub precisions: [f64; MAX_ORDER],
    /// Per order, hypothesis n-grams that match the reference, each clipped to its count there.
    pub counts: [usize; MAX_ORDER],
    /// Per order, hypothesis n-grams.
    pub totals: [usize; MAX_ORDER],
    /// Brevity penalty: 1 when the hypotheses are at least as long as the references, else
    /// exp(1 − ref_len / sys_len) (0 for empty hypotheses).
    pub bp: f64,
    /// Tokens in all hypotheses.
    pub sys_len: usize,
    /// Tokens in all references.
    pub ref_len: usize,
}

/// BLEU of `hypotheses[i]` against `references[i]`, summed over the corpus before the score is
/// taken (corpus BLEU, not a mean of sentence scores). An empty corpus scores 0.
pub fn corpus_bleu<H: AsRef<str>, R: AsRef<str>>(hypotheses: &[H], references: &[R]) -> Result<Bleu> {
    if hypotheses.len() != references.len() {
        return Err(Error::Input(format!(
            "BLEU needs one reference per hypothesis; got {} hypotheses and {} references",
            hypotheses.len(),
            references.len()
        )));
    }
    Ok(bleu_of_pairs(
        hypotheses
            .iter()
            .map(AsRef::as_ref)
            .zip(references.iter().map(AsRef::as_ref)),
    ))
}

/// [`corpus_bleu`] over (hypothesis, reference) pairs, which cannot differ in number.
pub(super) fn bleu_of_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Bleu {
    let mut counts = [0; MAX_ORDER];
    let mut totals = [0; MAX_ORDER];
    let (mut sys_len, mut ref_len) = (0, 0);
    for (hypothesis, reference) in pairs {
        let hypothesis = tokenize_13a(hypothesis);
        let reference = tokenize_13a(reference);
        // The tokenizer joins tokens with single spaces and leaves no whitespace inside one.
        let hypothesis: Vec<&str> = hypothesis.split_whitespace().collect();
        let reference: Vec<&str> = reference.split_whitespace().collect();
        sys_len += hypothesis.len();
        ref_len += reference.len();
        let reference_ngrams = ngram_counts(&reference);
        for (ngram, count) in ngram_counts(&hypothesis) {
            let order = ngram.len() - 1;
            totals[order] += count;
            counts[order] += count.min(reference_ngrams.get(ngram).copied().unwrap_or(0));
        }
    }
    score(counts, totals, sys_len, ref_len)
}

/// How often each n-gram of order 1..=MAX_ORDER occurs in `tokens`.
fn ngram_counts<'t, 's>(tokens: &'t [&'s str]) -> HashMap<&'t [&'s str], usize> {
    let mut counts = HashMap::new();
    for n in 1..=MAX_ORDER {
        for ngram in tokens.windows(n) {
            *counts.entry(ngram).or_insert(0) += 1;
        }
    }
    counts
}

/// sacrebleu's `BLEU.compute_bleu` with 'exp' smoothing (mteval-v13a's): the k-th order without
/// a match, counting from the lowest, gets precision 100 / (2^k · totals), so one missing 4-gram
/// match does not zero a corpus. The operations follow sacrebleu's in order so the floats agree.
fn score(counts: [usize; MAX_ORDER], totals: [usize; MAX_ORDER], sys_len: usize, ref_len: usize) -> Bleu {
    let bp = if sys_len >= ref_len {
        1.0
    } else if sys_len > 0 {
        math::exp(1.0 - ref_len as f64 / sys_len as f64)
    } else {
        0.0
    };
    let mut precisions = [0.0; MAX_ORDER];
    // No match at any order: 0 with every precision 0 (sacrebleu's early stop).
    if counts.iter().any(|&c| c > 0) {
        let mut smooth = 1.0;
        for n in 0..MAX_ORDER {
            if totals[n] == 0 {
                break;
            }
            precisions[n] = if counts[n] == 0 {
                smooth *= 2.0;
                100.0 / (smooth * totals[n] as f64)
            } else {
                100.0 * counts[n] as f64 / totals[n] as f64
            };
        }
    }
    // sacrebleu takes log 0 as −9999999999, which makes the score 0 (exp underflows): an order
    // the hypotheses are too short to have, or no match at all.
    let score = if precisions.contains(&0.0) {
        0.0
    } else {
        bp * math::exp(precisions.iter().map(|&p| math::ln(p)).sum::<f64>() / MAX_ORDER as f64)
    };
    Bleu {
        score,
        precisions,
        counts,
        totals,
        bp,
        sys_len,
        ref_len,
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    /// One case of `tests/reference/bleu_vectors.json` (written by `gen_bleu.py` with sacrebleu).
    #[derive(Deserialize)]
    struct Vector {
        name: String,
        hypotheses: Vec<String>,
        references: Vec<String>,
        tokenized_hypotheses: Vec<String>,
        tokenized_references: Vec<String>,
        score: f64,
        counts: [usize; MAX_ORDER],
        totals: [usize; MAX_ORDER],
        precisions: [f64; MAX_ORDER],
        bp: f64,
        sys_len: usize,
        ref_len: usize,
    }

    fn vectors() -> Vec<Vector> {
        serde_json::from_str(include_str!("../../tests/reference/bleu_vectors.json")).unwrap()
    }

    fn assert_close(actual: f64, expected: f64, what: &str) {
        assert!(
            (actual - expected).abs() <= 1e-9 * expected.abs(),
            "{what}: {actual} vs sacrebleu's {expected}"
        );
    }

    #[test]
    fn tokenizer_agrees_with_sacrebleu_on_every_vector_line() {
        for v in vectors() {
            let lines = v.hypotheses.iter().chain(&v.references);
            let expected = v.tokenized_hypotheses.iter().chain(&v.tokenized_references);
            for (line, expected) in lines.zip(expected) {
                assert_eq!(&tokenize_13a(line), expected, "{}: {line:?}", v.name);
            }
        }
    }

    #[test]
    fn bleu_agrees_with_sacrebleu_on_every_vector() {
        let vectors = vectors();
        assert_eq!(vectors.len(), 31);
        for v in vectors {
            let bleu = corpus_bleu(&v.hypotheses, &v.references).unwrap();
            let name = &v.name;
            assert_eq!(bleu.counts, v.counts, "{name}: counts");
            assert_eq!(bleu.totals, v.totals, "{name}: totals");
            assert_eq!(
                (bleu.sys_len, bleu.ref_len),
                (v.sys_len, v.ref_len),
                "{name}: lengths"
            );
            assert_close(bleu.score, v.score, &format!("{name}: score"));
            assert_close(bleu.bp, v.bp, &format!("{name}: bp"));
            for (n, (&p, &expected)) in bleu.precisions.iter().zip(&v.precisions).enumerate() {
                assert_close(p, expected, &format!("{name}: precision {}", n + 1));
            }
        }
    }

    #[test]
    fn known_scores_by_hand() {
        let cat = "the cat sat on the mat";
        let bleu = corpus_bleu(&[cat], &[cat]).unwrap();
        assert!((bleu.score - 100.0).abs() < 1e-12);
        assert_eq!((bleu.counts, bleu.totals), ([6, 5, 4, 3], [6, 5, 4, 3]));
        // Papineni's clipping: "the" counts at most twice, as often as in the reference.
        let bleu = corpus_bleu(&["the the the the the the the"], &["the cat is on the mat"]).unwrap();
        assert_eq!(bleu.counts, [2, 0, 0, 0]);
        // Orders 2, 3, 4 have no match: smoothed to 100/(2·6), 100/(4·5), 100/(8·4).
        let expected = [200.0 / 7.0, 100.0 / 12.0, 100.0 / 20.0, 100.0 / 32.0];
        assert_eq!(bleu.precisions, expected);
        let geometric_mean = math::powf(expected.iter().product::<f64>(), 0.25);
        assert!((bleu.score - geometric_mean).abs() < 1e-9);
        // Four of six tokens: BP = exp(1 − 6/4), every precision 100.
        let bleu = corpus_bleu(&["the cat sat on"], &[cat]).unwrap();
        assert!((bleu.score - 100.0 * math::exp(-0.5f64)).abs() < 1e-9);
        // An empty corpus has nothing to match.
        assert_eq!(corpus_bleu::<&str, &str>(&[], &[]).unwrap().score, 0.0);
    }

    #[test]
    fn refuses_unpaired_corpora() {
        assert!(matches!(corpus_bleu(&["a", "b"], &["a"]), Err(Error::Input(_))));
    }
}
