//! (source, target) pairs of token ids and the batches an encoder-decoder takes: padded sources
//! with their mask, decoder inputs `<bos> target` and outputs `target <eos>`.

use std::iter::repeat_n;

use super::{BOS, EOS, IGNORE_INDEX, PAD};
use crate::error::{Error, Result};

/// One example of a seq2seq task: token ids without special tokens (batching adds them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub source: Vec<i32>,
    pub target: Vec<i32>,
}

/// Row-major batches of pairs, padded at the end to one shape: sources [rows, source_len], decoder
/// inputs and outputs [rows, target_len] where `target_len` ≥ 1 + the longest target.
///
/// - `source`: the source ids, then `PAD`; `source_mask` 1 = token, 0 = pad, f32 as
///   [`Batch`](super::Batch)'s mask is, because attention consumes it arithmetically. The encoder
///   needs it (its attention is not causal) and so does the decoder's cross-attention.
/// - `target_in`: `BOS`, the target, then `PAD`: what the decoder reads (teacher forcing).
/// - `target_out`: the target, `EOS`, then `IGNORE_INDEX`: what it learns to predict. The end token
///   is counted, so a model learns where to stop. The decoder is causal and padding comes last, so
///   it needs no mask of its own: padded positions are never attended to by real ones and carry no
///   loss.
///
/// A pair longer than the shape is refused, never truncated: a cut target would teach a wrong
/// answer and a cut source an unanswerable question, silently.
#[derive(Clone, Debug, PartialEq)]
pub struct PairBatch {
    rows: usize,
    source_len: usize,
    target_len: usize,
    source: Vec<i32>,
    source_mask: Vec<f32>,
    target_in: Vec<i32>,
    target_out: Vec<i32>,
    source_lengths: Vec<usize>,
    target_lengths: Vec<usize>,
}

impl PairBatch {
    /// `pairs` padded to sources of `source_len` and decoder sequences of `target_len` (a target
    /// of n tokens takes n + 1). Padding every batch of a task to one shape lets the model build its
    /// graph once. No pairs, an empty source or target, or a pair that does not fit is an error
    /// naming the row.
    pub fn new<'a>(
        pairs: impl IntoIterator<Item = &'a Pair>,
        source_len: usize,
        target_len: usize,
    ) -> Result<Self> {
        let pairs: Vec<&Pair> = pairs.into_iter().collect();
        if pairs.is_empty() {
            return Err(Error::Input("a batch needs at least one pair".into()));
        }
        for (row, pair) in pairs.iter().enumerate() {
            fits(pair, source_len, target_len).map_err(|e| Error::Input(format!("batch row {row}: {e}")))?;
        }
        let rows = pairs.len();
        let mut batch = Self {
            rows,
            source_len,
            target_len,
            source: Vec::with_capacity(rows * source_len),
            source_mask: Vec::with_capacity(rows * source_len),
            target_in: Vec::with_capacity(rows * target_len),
            target_out: Vec::with_capacity(rows * target_len),
            source_lengths: pairs.iter().map(|p| p.source.len()).collect(),
            target_lengths: pairs.iter().map(|p| p.target.len()).collect(),
        };
        for Pair { source, target } in pairs {
            let source_pad = source_len - source.len();
            batch
                .source
                .extend(source.iter().copied().chain(repeat_n(PAD, source_pad)));
            batch
                .source_mask
                .extend(repeat_n(1.0, source.len()).chain(repeat_n(0.0, source_pad)));
            let target_pad = target_len - target.len() - 1;
            batch.target_in.push(BOS);
            batch
                .target_in
                .extend(target.iter().copied().chain(repeat_n(PAD, target_pad)));
            batch.target_out.extend(target.iter().copied());
            batch.target_out.push(EOS);
            batch.target_out.extend(repeat_n(IGNORE_INDEX, target_pad));
        }
        Ok(batch)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Positions per source row: the encoder's length.
    pub fn source_len(&self) -> usize {
        self.source_len
    }

    /// Positions per decoder row: the decoder's length.
    pub fn target_len(&self) -> usize {
        self.target_len
    }

    /// [rows, source_len] source ids, `PAD` after each row's tokens.
    pub fn source(&self) -> &[i32] {
        &self.source
    }

    /// [rows, source_len]: 1 = token, 0 = pad.
    pub fn source_mask(&self) -> &[f32] {
        &self.source_mask
    }

    /// [rows, target_len]: `BOS`, the target, `PAD`.
    pub fn target_in(&self) -> &[i32] {
        &self.target_in
    }

    /// [rows, target_len]: the target, `EOS`, `IGNORE_INDEX`.
    pub fn target_out(&self) -> &[i32] {
        &self.target_out
    }

    /// Each row's source length before padding: what evaluation bins a row by.
    pub fn source_lengths(&self) -> &[usize] {
        &self.source_lengths
    }

    /// Each row's target length before padding, without the end token.
    pub fn target_lengths(&self) -> &[usize] {
        &self.target_lengths
    }

    /// The number of outputs that carry loss: every target token and every end token.
    pub fn counted_targets(&self) -> usize {
        self.target_lengths.iter().map(|n| n + 1).sum()
    }
}

/// Why `pair` does not fit a batch of `source_len` and `target_len`, if it does not; also used
/// where pairs are made, to name their origin (a file's line) in the message.
pub(super) fn fits(pair: &Pair, source_len: usize, target_len: usize) -> Result<(), String> {
    if pair.source.is_empty() {
        return Err("the source is empty".into());
    }
    if pair.target.is_empty() {
        return Err("the target is empty".into());
    }
    if pair.source.len() > source_len {
        return Err(format!(
            "the source has {} tokens, more than the {source_len} source positions (pairs are never \
             truncated)",
            pair.source.len()
        ));
    }
    if pair.target.len() + 1 > target_len {
        return Err(format!(
            "the target has {} tokens, which with the end token need {} target positions, more than the \
             {target_len} (pairs are never truncated)",
            pair.target.len(),
            pair.target.len() + 1
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(source: &[i32], target: &[i32]) -> Pair {
        Pair {
            source: source.to_vec(),
            target: target.to_vec(),
        }
    }

    #[test]
    fn rows_are_padded_with_start_and_end_tokens() {
        let pairs = [pair(&[3, 4, 5], &[6]), pair(&[7], &[8, 9, 10])];
        let batch = PairBatch::new(&pairs, 4, 5).unwrap();
        assert_eq!((batch.rows(), batch.source_len(), batch.target_len()), (2, 4, 5));
        #[rustfmt::skip]
        assert_eq!(batch.source(), &[
            3, 4, 5, PAD,
            7, PAD, PAD, PAD,
        ]);
        #[rustfmt::skip]
        assert_eq!(batch.source_mask(), &[
            1.0, 1.0, 1.0, 0.0,
            1.0, 0.0, 0.0, 0.0,
        ]);
        #[rustfmt::skip]
        assert_eq!(batch.target_in(), &[
            BOS, 6, PAD, PAD, PAD,
            BOS, 8, 9, 10, PAD,
        ]);
        #[rustfmt::skip]
        assert_eq!(batch.target_out(), &[
            6, EOS, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX,
            8, 9, 10, EOS, IGNORE_INDEX,
        ]);
        assert_eq!(batch.source_lengths(), &[3, 1]);
        assert_eq!(batch.target_lengths(), &[1, 3]);
        assert_eq!(batch.counted_targets(), 6);
    }

    #[test]
    fn a_pair_that_does_not_fit_is_refused_not_truncated() {
        let pairs = [pair(&[3], &[4]), pair(&[3, 4, 5], &[6])];
        let err = PairBatch::new(&pairs, 2, 4).unwrap_err().to_string();
        assert_eq!(
            err,
            "batch row 1: the source has 3 tokens, more than the 2 source positions (pairs are never \
             truncated)"
        );
        // A target of 3 tokens needs 4 positions with its end token.
        let err = PairBatch::new(&[pair(&[3], &[4, 5, 6])], 1, 3)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("batch row 0: the target has 3 tokens, which with the end token need 4"),
            "{err}"
        );
        assert!(PairBatch::new(&[pair(&[3], &[4, 5, 6])], 1, 4).is_ok());
    }

    #[test]
    fn empty_pairs_and_empty_batches_are_errors() {
        let err = PairBatch::new(&[pair(&[], &[4])], 2, 2).unwrap_err().to_string();
        assert_eq!(err, "batch row 0: the source is empty");
        let err = PairBatch::new(&[pair(&[3], &[4]), pair(&[3], &[])], 2, 2)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "batch row 1: the target is empty");
        assert!(PairBatch::new(&[], 2, 2).is_err());
    }
}
