//! A batch of sequences as the model takes it: token ids, targets and padding, each [B, L].

use std::iter::repeat_n;

use super::{IGNORE_INDEX, PAD};
use crate::error::{Error, Result};

/// Row-major [B, L] token ids and targets (`IGNORE_INDEX` where no loss counts), and a key padding
/// mask when rows were padded.
///
/// The mask is f32 (1 = token, 0 = pad) because attention consumes it arithmetically, as a
/// multiplier or turned into an additive bias. It is present for every batch of a task that pads
/// (even one whose rows happen to be equally long), so the model's graph for a task has one shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    batch: usize,
    len: usize,
    tokens: Vec<i32>,
    targets: Vec<i32>,
    mask: Option<Vec<f32>>,
    lengths: Vec<usize>,
}

impl Batch {
    /// Rows of (tokens, targets), padded at the end to the longest row with `PAD` tokens and
    /// `IGNORE_INDEX` targets.
    pub fn padded(rows: &[(Vec<i32>, Vec<i32>)]) -> Result<Self> {
        let longest = rows.iter().map(|(tokens, _)| tokens.len()).max().unwrap_or(0);
        Self::padded_to(rows, longest)
    }

    /// The batch padded further, to length `len`. A model builds one graph per shape, so padding
    /// every batch of a task to one length (or a few, e.g. multiples of 32) avoids rebuilding it.
    pub fn pad_to(self, len: usize) -> Result<Self> {
        if len < self.len {
            return Err(Error::Input(format!(
                "cannot pad a batch of length {} to the shorter length {len}",
                self.len
            )));
        }
        let rows: Vec<(Vec<i32>, Vec<i32>)> = (0..self.batch)
            .map(|row| {
                let real = row * self.len..row * self.len + self.lengths[row];
                (self.tokens[real.clone()].to_vec(), self.targets[real].to_vec())
            })
            .collect();
        Self::padded_to(&rows, len)
    }

    /// Pads rows to `len`, at least as long as the longest row.
    fn padded_to(rows: &[(Vec<i32>, Vec<i32>)], len: usize) -> Result<Self> {
        if rows.is_empty() {
            return Err(Error::Input("a batch needs at least one row".into()));
        }
        for (row, (tokens, targets)) in rows.iter().enumerate() {
            if tokens.is_empty() || tokens.len() != targets.len() {
                return Err(Error::Input(format!(
                    "batch row {row} has {} tokens and {} targets; a row needs as many targets as \
                     tokens, at least one",
                    tokens.len(),
                    targets.len()
                )));
            }
        }
        let mut all_tokens = Vec::with_capacity(rows.len() * len);
        let mut all_targets = Vec::with_capacity(rows.len() * len);
        let mut mask = Vec::with_capacity(rows.len() * len);
        for (tokens, targets) in rows {
            let pad = len - tokens.len();
            all_tokens.extend(tokens.iter().copied().chain(repeat_n(PAD, pad)));
            all_targets.extend(targets.iter().copied().chain(repeat_n(IGNORE_INDEX, pad)));
            mask.extend(repeat_n(1.0, tokens.len()).chain(repeat_n(0.0, pad)));
        }
        Ok(Self {
            batch: rows.len(),
            len,
            tokens: all_tokens,
            targets: all_targets,
            mask: Some(mask),
            lengths: rows.iter().map(|(tokens, _)| tokens.len()).collect(),
        })
    }

    /// A language model's rows from one stream of token ids: for each of `starts`, the `len` ids
    /// from it, and as targets the `len` ids one further on. No padding, no mask.
    pub fn next_tokens(ids: &[i32], starts: impl IntoIterator<Item = usize>, len: usize) -> Result<Self> {
        let (mut tokens, mut targets) = (Vec::new(), Vec::new());
        for start in starts {
            let window = start.checked_add(len + 1).and_then(|end| ids.get(start..end));
            let Some(window) = window else {
                return Err(Error::Input(format!(
                    "a window of {len} tokens from {start} needs {} ids, the stream has {}",
                    start.saturating_add(len + 1),
                    ids.len()
                )));
            };
            tokens.extend_from_slice(&window[..len]);
            targets.extend_from_slice(&window[1..]);
        }
        if len == 0 || tokens.is_empty() {
            return Err(Error::Input(
                "a batch needs at least one window of at least one token".into(),
            ));
        }
        Ok(Self::full(len, tokens, targets))
    }

    /// Rows that all have length `len` (language-model windows): no padding, no mask.
    pub(crate) fn full(len: usize, tokens: Vec<i32>, targets: Vec<i32>) -> Self {
        debug_assert!(len > 0 && tokens.len() == targets.len() && tokens.len().is_multiple_of(len));
        let batch = tokens.len() / len;
        Self {
            batch,
            len,
            tokens,
            targets,
            mask: None,
            lengths: vec![len; batch],
        }
    }

    /// [B, L].
    pub fn shape(&self) -> [usize; 2] {
        [self.batch, self.len]
    }

    pub fn tokens(&self) -> &[i32] {
        &self.tokens
    }

    pub fn targets(&self) -> &[i32] {
        &self.targets
    }

    /// 1 = token, 0 = pad; `None` for tasks that never pad.
    pub fn mask(&self) -> Option<&[f32]> {
        self.mask.as_deref()
    }

    /// Each row's length before padding.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// The number of targets that carry loss.
    pub fn counted_targets(&self) -> usize {
        self.targets.iter().filter(|&&t| t != IGNORE_INDEX).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_mismatched_or_zero_length_are_errors() {
        let err = Batch::padded(&[(vec![5, 6], vec![6])]).unwrap_err().to_string();
        assert_eq!(
            err,
            "batch row 0 has 2 tokens and 1 targets; a row needs as many targets as tokens, at least one"
        );
        assert!(Batch::padded(&[(vec![], vec![])]).is_err());
        assert!(Batch::padded(&[]).is_err());
    }

    #[test]
    fn full_rows_have_no_mask() {
        let batch = Batch::full(3, vec![1, 2, 3, 4, 5, 6], vec![2, 3, 4, 5, 6, 7]);
        assert_eq!(batch.shape(), [2, 3]);
        assert_eq!(batch.mask(), None);
        assert_eq!(batch.lengths(), &[3, 3]);
        assert_eq!(batch.counted_targets(), 6);
    }

    #[test]
    fn next_token_rows_are_windows_and_their_shifts() {
        let ids: Vec<i32> = (10..20).collect();
        let batch = Batch::next_tokens(&ids, [0, 5, 2], 4).unwrap();
        assert_eq!(batch.shape(), [3, 4]);
        assert_eq!(batch.tokens(), &[10, 11, 12, 13, 15, 16, 17, 18, 12, 13, 14, 15]);
        assert_eq!(batch.targets(), &[11, 12, 13, 14, 16, 17, 18, 19, 13, 14, 15, 16]);
        assert_eq!(batch.mask(), None);
        // A window whose targets run past the stream, one at the end of usize, none, or empty.
        let err = Batch::next_tokens(&ids, [6], 4).unwrap_err().to_string();
        assert_eq!(err, "a window of 4 tokens from 6 needs 11 ids, the stream has 10");
        assert!(Batch::next_tokens(&ids, [usize::MAX], 4).is_err());
        assert!(Batch::next_tokens(&ids, [], 4).is_err());
        assert!(Batch::next_tokens(&ids, [0], 0).is_err());
    }
}
