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
}
