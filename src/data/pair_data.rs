//! A seq2seq task's pairs split by source length: train on sources up to N tokens, evaluate on
//! held-out pairs of those lengths and on every longer pair, in bins of doubling length (the
//! short-to-long experiment of FLOATER's Figure 2).

use std::ops::RangeInclusive;

use rand::seq::SliceRandom;
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::pairs::fits;
use super::{Pair, PairBatch, PairTokenizer, SPECIAL_TOKENS, source_bin, source_bin_lengths};
use crate::error::{Error, Result};

/// How pairs are divided between training and evaluation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LengthSplit {
    /// Pairs whose source has at most this many tokens are trained on (less the held-out ones);
    /// every longer pair is evaluated.
    pub train_max_len: usize,
    /// The fraction of the pairs at training lengths held out for evaluation, in [0, 1): the
    /// in-distribution bin that longer bins are compared with. 0 evaluates longer pairs only.
    pub valid_fraction: f64,
    /// Seeds the shuffle that picks the held-out pairs and orders every bin.
    pub seed: u64,
}

/// The largest batch a model takes: positions of its encoder (`source_len`, source tokens) and of
/// its decoder (`target_len`, target tokens + 1). A longer pair is refused when the data is made,
/// naming it, rather than cut or skipped: a run then trains and evaluates on exactly the data given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxLengths {
    pub source_len: usize,
    pub target_len: usize,
}

impl MaxLengths {
    /// Why `pair` cannot be batched under these limits, if it cannot.
    pub(super) fn check(&self, pair: &Pair) -> Result<(), String> {
        fits(pair, self.source_len, self.target_len)
    }
}

/// Training pairs, evaluation bins and the tokenizer of both.
#[derive(Clone, Debug)]
pub struct PairData {
    tokenizer: PairTokenizer,
    train_max_len: usize,
    train: Vec<Pair>,
    /// `[source_len, target_len]` of every training batch: the longest training pair's.
    train_shape: [usize; 2],
    /// Ordered by bin, none empty.
    eval: Vec<PairBin>,
}

impl PairData {
    /// Splits `pairs` by source length (see [`LengthSplit`]). Every pair is checked first: an empty
    /// source or target, a special token or an id outside the vocabulary, or a pair beyond `max`
    /// is an error naming the pair (its index, from 0). So is a split that leaves no pair to train
    /// on or none to evaluate.
    ///
    /// The pairs are shuffled (seeded) before they are divided, so the held-out pairs are a random
    /// sample and any prefix of a bin is one too: an evaluation that reads a few batches per bin
    /// does not see only words starting with `a` when the input was sorted.
    pub fn new(
        tokenizer: PairTokenizer,
        mut pairs: Vec<Pair>,
        split: &LengthSplit,
        max: MaxLengths,
    ) -> Result<Self> {
        if split.train_max_len == 0 {
            return Err(Error::Input(
                "the longest training source must be at least 1 token".into(),
            ));
        }
        if !(0.0..1.0).contains(&split.valid_fraction) {
            return Err(Error::Input(format!(
                "the held-out fraction must lie in [0, 1), got {}",
                split.valid_fraction
            )));
        }
        let vocab = tokenizer.vocab_size();
        for (index, pair) in pairs.iter().enumerate() {
            check_ids(pair, vocab)
                .and_then(|()| max.check(pair))
                .map_err(|e| Error::Input(format!("pair {index}: {e}")))?;
        }

        pairs.shuffle(&mut ChaCha8Rng::seed_from_u64(split.seed));
        let (short, long): (Vec<Pair>, Vec<Pair>) = pairs
            .into_iter()
            .partition(|p| p.source.len() <= split.train_max_len);
        let held_out = (short.len() as f64 * split.valid_fraction).round() as usize;
        let mut short = short.into_iter();
        let eval_pairs: Vec<Pair> = short.by_ref().take(held_out).chain(long).collect();
        let train: Vec<Pair> = short.collect();
        if train.is_empty() || eval_pairs.is_empty() {
            return Err(Error::Input(format!(
                "splitting {} pairs at sources of {} tokens with held-out fraction {} left {} for \
                 training and {} for evaluation; both need at least one",
                train.len() + eval_pairs.len(),
                split.train_max_len,
                split.valid_fraction,
                train.len(),
                eval_pairs.len()
            )));
        }

        let train_shape = shape(&train);
        Ok(Self {
            tokenizer,
            train_max_len: split.train_max_len,
            train,
            train_shape,
            eval: PairBin::group(eval_pairs, split.train_max_len),
        })
    }

    /// Shared by sources and targets; every pair's ids are in it.
    pub fn tokenizer(&self) -> &PairTokenizer {
        &self.tokenizer
    }

    /// The split's limit on training sources, in tokens (`LengthSplit::train_max_len`); the bins
    /// are anchored at it.
    pub fn train_max_len(&self) -> usize {
        self.train_max_len
    }

    pub fn train(&self) -> &[Pair] {
        &self.train
    }

    /// The evaluation pairs by bin of source length, shortest first; no bin is empty.
    pub fn eval(&self) -> &[PairBin] {
        &self.eval
    }

    /// `[source_len, target_len]` of every training batch.
    pub fn train_shape(&self) -> [usize; 2] {
        self.train_shape
    }

    /// `rows` training pairs drawn uniformly (with replacement), padded to
    /// [`train_shape`](Self::train_shape) so that every training batch has one shape.
    pub fn sample_batch<R: Rng + ?Sized>(&self, rng: &mut R, rows: usize) -> Result<PairBatch> {
        let [source_len, target_len] = self.train_shape;
        let picked: Vec<&Pair> = (0..rows)
            .map(|_| &self.train[rng.random_range(0..self.train.len())])
            .collect();
        PairBatch::new(picked, source_len, target_len)
    }
}

/// Evaluation pairs whose sources fall in one bin of lengths.
#[derive(Clone, Debug, PartialEq)]
pub struct PairBin {
    bin: usize,
    lengths: RangeInclusive<usize>,
    pairs: Vec<Pair>,
    shape: [usize; 2],
}

impl PairBin {
    /// `pairs` by bin (keeping their order within one), shortest bin first.
    fn group(pairs: Vec<Pair>, train_max_len: usize) -> Vec<PairBin> {
        let mut by_bin: Vec<Vec<Pair>> = Vec::new();
        for pair in pairs {
            let bin = source_bin(pair.source.len(), train_max_len);
            if by_bin.len() <= bin {
                by_bin.resize_with(bin + 1, Vec::new);
            }
            by_bin[bin].push(pair);
        }
        by_bin
            .into_iter()
            .enumerate()
            .filter(|(_, pairs)| !pairs.is_empty())
            .map(|(bin, pairs)| PairBin {
                bin,
                lengths: source_bin_lengths(bin, train_max_len),
                shape: shape(&pairs),
                pairs,
            })
            .collect()
    }

    /// The bin's index (see [`source_bin`]).
    pub fn bin(&self) -> usize {
        self.bin
    }

    /// The source lengths the bin covers (its pairs need not reach either end).
    pub fn lengths(&self) -> RangeInclusive<usize> {
        self.lengths.clone()
    }

    /// In a seeded random order: any prefix is a fair sample of the bin.
    pub fn pairs(&self) -> &[Pair] {
        &self.pairs
    }

    /// `[source_len, target_len]` of every batch of the bin: its longest pair's, so that the bin's
    /// batches share one graph.
    pub fn shape(&self) -> [usize; 2] {
        self.shape
    }

    /// Every pair of the bin once, in order, `rows` per batch (the last may hold fewer).
    pub fn batches(&self, rows: usize) -> Result<Vec<PairBatch>> {
        if rows == 0 {
            return Err(Error::Input("a batch needs at least one pair".into()));
        }
        let [source_len, target_len] = self.shape;
        self.pairs
            .chunks(rows)
            .map(|chunk| PairBatch::new(chunk, source_len, target_len))
            .collect()
    }
}

/// `[longest source, longest target + 1]` of `pairs`.
fn shape(pairs: &[Pair]) -> [usize; 2] {
    let longest = |side: fn(&Pair) -> usize| pairs.iter().map(side).max().unwrap_or(0);
    [longest(|p| p.source.len()), longest(|p| p.target.len()) + 1]
}

/// Why `pair` holds an id that is not an ordinary token of a vocabulary of `vocab`, if it does.
fn check_ids(pair: &Pair, vocab: usize) -> Result<(), String> {
    for (side, ids) in [("source", &pair.source), ("target", &pair.target)] {
        if let Some((position, id)) = ids.iter().enumerate().find(|&(_, &id)| {
            !usize::try_from(id).is_ok_and(|id| (SPECIAL_TOKENS.len()..vocab).contains(&id))
        }) {
            return Err(format!(
                "the {side} holds id {id} at position {position}, not a token of the vocabulary's {} \
                 (special tokens are added by batching)",
                vocab - SPECIAL_TOKENS.len()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{CharTokenizer, EOS, IGNORE_INDEX, PAD};

    /// Pairs of sources 1..=`longest` tokens of `copies` kinds each, target = source: id 3 + kind.
    fn pairs(longest: usize, copies: i32) -> Vec<Pair> {
        (1..=longest)
            .flat_map(|len| {
                (0..copies).map(move |kind| Pair {
                    source: vec![3 + kind; len],
                    target: vec![3 + kind; len],
                })
            })
            .collect()
    }

    fn tokenizer() -> PairTokenizer {
        PairTokenizer::Chars(CharTokenizer::from_text("abcd"))
    }

    const ROOMY: MaxLengths = MaxLengths {
        source_len: 1000,
        target_len: 1000,
    };

    fn split(train_max_len: usize, valid_fraction: f64, seed: u64) -> LengthSplit {
        LengthSplit {
            train_max_len,
            valid_fraction,
            seed,
        }
    }

    #[test]
    fn longer_sources_are_only_evaluated() {
        let data = PairData::new(tokenizer(), pairs(20, 4), &split(5, 0.0, 0), ROOMY).unwrap();
        assert_eq!(data.train().len(), 20);
        assert!(data.train().iter().all(|p| p.source.len() <= 5));
        assert_eq!(data.train_shape(), [5, 6]);
        let bins: Vec<_> = data
            .eval()
            .iter()
            .map(|b| (b.bin(), b.lengths(), b.pairs().len()))
            .collect();
        assert_eq!(bins, vec![(1, 6..=10, 20), (2, 11..=20, 40)]);
        for bin in data.eval() {
            assert!(
                bin.pairs()
                    .iter()
                    .all(|p| bin.lengths().contains(&p.source.len()))
            );
        }
        let evaluated = data.eval().iter().flat_map(|b| b.pairs());
        assert!(evaluated.clone().all(|p| p.source.len() > 5));
        assert_eq!(evaluated.count(), 60);
        assert_eq!(data.eval()[0].shape(), [10, 11]);
    }

    #[test]
    fn held_out_pairs_at_training_lengths_form_bin_zero() {
        let all = pairs(10, 4);
        let data = PairData::new(tokenizer(), all.clone(), &split(5, 0.25, 7), ROOMY).unwrap();
        assert_eq!(data.train().len(), 15);
        let held_out = &data.eval()[0];
        assert_eq!((held_out.bin(), held_out.pairs().len()), (0, 5));
        // Every pair lands exactly once, and none both trained on and evaluated.
        let evaluated: Vec<&Pair> = data.eval().iter().flat_map(|b| b.pairs()).collect();
        assert_eq!(data.train().len() + evaluated.len(), all.len());
        assert!(evaluated.iter().all(|p| !data.train().contains(p)));
    }

    #[test]
    fn the_split_and_batches_follow_the_seed() {
        let make = |seed| PairData::new(tokenizer(), pairs(10, 4), &split(5, 0.25, seed), ROOMY).unwrap();
        let (a, b, c) = (make(1), make(1), make(2));
        assert_eq!(a.train(), b.train());
        assert_eq!(a.eval(), b.eval());
        assert_ne!(a.train(), c.train());
        let batch = |data: &PairData| data.sample_batch(&mut ChaCha8Rng::seed_from_u64(9), 8).unwrap();
        assert_eq!(batch(&a), batch(&b));
    }

    #[test]
    fn training_batches_have_the_training_shape_and_eval_batches_their_bins() {
        let data = PairData::new(tokenizer(), pairs(12, 3), &split(4, 0.0, 0), ROOMY).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        for _ in 0..5 {
            let batch = data.sample_batch(&mut rng, 3).unwrap();
            assert_eq!([batch.source_len(), batch.target_len()], [4, 5]);
            assert!(batch.source_lengths().iter().all(|&len| len <= 4));
        }
        let bin = &data.eval()[1];
        assert_eq!((bin.lengths(), bin.shape()), (9..=16, [12, 13]));
        let batches = bin.batches(4).unwrap();
        assert_eq!(
            batches.iter().map(PairBatch::rows).collect::<Vec<_>>(),
            vec![4, 4, 4]
        );
        let rows: Vec<usize> = batches.iter().flat_map(|b| b.source_lengths().to_vec()).collect();
        let expected: Vec<usize> = bin.pairs().iter().map(|p| p.source.len()).collect();
        assert_eq!(rows, expected);
        // A row of 9 tokens in a batch of 12: padded, with its end token counted.
        let first = &batches[0];
        let len = first.source_lengths()[0];
        assert_eq!(first.source()[len..12], vec![PAD; 12 - len][..]);
        assert_eq!(first.target_out()[len], EOS);
        assert!(first.target_out()[len + 1..13].iter().all(|&t| t == IGNORE_INDEX));
        assert!(bin.batches(0).is_err());
    }

    #[test]
    fn bad_pairs_and_empty_splits_are_errors() {
        let bad = |pairs: Vec<Pair>, max| {
            PairData::new(tokenizer(), pairs, &split(2, 0.0, 0), max)
                .unwrap_err()
                .to_string()
        };
        let mut with_empty = pairs(3, 1);
        with_empty[1].source.clear();
        assert_eq!(bad(with_empty, ROOMY), "pair 1: the source is empty");
        let mut with_special = pairs(3, 1);
        with_special[2].target[1] = EOS;
        assert_eq!(
            bad(with_special, ROOMY),
            "pair 2: the target holds id 2 at position 1, not a token of the vocabulary's 4 (special \
             tokens are added by batching)"
        );
        let mut outside = pairs(3, 1);
        outside[0].source[0] = 7;
        assert!(bad(outside, ROOMY).starts_with("pair 0: the source holds id 7"));
        let tight = MaxLengths {
            source_len: 2,
            target_len: 10,
        };
        assert!(bad(pairs(3, 1), tight).starts_with("pair 2: the source has 3 tokens, more than the 2"));
        let err = bad(pairs(2, 1), ROOMY);
        assert!(err.contains("left 2 for training and 0 for evaluation"), "{err}");
        let zero = PairData::new(tokenizer(), pairs(3, 1), &split(0, 0.0, 0), ROOMY);
        assert!(zero.is_err());
        let whole = PairData::new(tokenizer(), pairs(3, 1), &split(2, 1.0, 0), ROOMY);
        assert!(whole.is_err());
    }
}
