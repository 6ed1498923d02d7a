//! Next-token prediction over one long token stream: a contiguous train/valid split, random
//! training windows and evaluation windows of any length.

use rand::{Rng, RngExt};

use super::{Batch, CharTokenizer};
use crate::error::{Error, Result};

/// A corpus split into a training part and, after it, a validation part.
///
/// The split is contiguous (the last fraction of the text), not by random windows: random
/// windows would overlap the training text and make validation loss meaningless.
#[derive(Clone, Debug)]
pub struct LanguageModelData {
    train: Vec<i32>,
    valid: Vec<i32>,
}

impl LanguageModelData {
    /// The last `valid_fraction` of `tokens` (rounded to the nearest token) is for validation.
    pub fn split(mut tokens: Vec<i32>, valid_fraction: f64) -> Result<Self> {
        if !(valid_fraction > 0.0 && valid_fraction < 1.0) {
            return Err(Error::Input(format!(
                "the validation fraction must lie strictly between 0 and 1, got {valid_fraction}"
            )));
        }
        let valid_len = (tokens.len() as f64 * valid_fraction).round() as usize;
        let valid = tokens.split_off(tokens.len() - valid_len);
        Ok(Self { train: tokens, valid })
    }

    /// All of `tokens` for training, none for validation (fine-tuning on a short text).
    pub fn training_only(tokens: Vec<i32>) -> Self {
        Self {
            train: tokens,
            valid: Vec::new(),
        }
    }

    pub fn from_text(tokenizer: &CharTokenizer, text: &str, valid_fraction: f64) -> Result<Self> {
        Self::split(tokenizer.encode(text)?, valid_fraction)
    }

    pub fn train(&self) -> &[i32] {
        &self.train
    }

    pub fn valid(&self) -> &[i32] {
        &self.valid
    }

    /// `batch` windows from uniformly random positions in the training part: inputs `x[s..s+len]`
    /// and targets `x[s+1..s+len+1]`.
    pub fn sample_batch<R: Rng + ?Sized>(&self, rng: &mut R, batch: usize, len: usize) -> Result<Batch> {
        let positions = windows_that_fit("training", self.train.len(), len)?;
        if batch == 0 {
            return Err(Error::Input("a batch needs at least one window".into()));
        }
        let starts: Vec<usize> = (0..batch).map(|_| rng.random_range(0..positions)).collect();
        Batch::next_tokens(&self.train, starts, len)
    }

    /// The validation part cut into consecutive windows of `len` (any length, longer than in
    /// training too), `batch` windows per batch; the last batch may hold fewer. Tokens after the
    /// last whole window are left out.
    pub fn eval_batches(&self, len: usize, batch: usize) -> Result<Vec<Batch>> {
        windows_that_fit("validation", self.valid.len(), len)?;
        if batch == 0 {
            return Err(Error::Input("a batch needs at least one window".into()));
        }
        let windows = (self.valid.len() - 1) / len;
        (0..windows)
            .step_by(batch)
            .map(|first| {
                Batch::next_tokens(
                    &self.valid,
                    (first..windows.min(first + batch)).map(|w| w * len),
                    len,
                )
            })
            .collect()
    }
}

/// How many start positions a window of `len` inputs (and `len` targets, shifted by one) has in a
/// part of `available` tokens.
fn windows_that_fit(part: &str, available: usize, len: usize) -> Result<usize> {
    if len == 0 || available < len + 1 {
        return Err(Error::Input(format!(
            "a window of {len} tokens needs {} tokens of text, the {part} part has {available}",
            len + 1
        )));
    }
    Ok(available - len)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn windows_longer_than_the_part_are_errors() {
        let data = LanguageModelData::split((0..100).collect(), 0.1).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let err = data.eval_batches(10, 4).unwrap_err().to_string();
        assert_eq!(
            err,
            "a window of 10 tokens needs 11 tokens of text, the validation part has 10"
        );
        assert!(data.sample_batch(&mut rng, 2, 90).is_err());
        assert!(data.sample_batch(&mut rng, 2, 89).is_ok());
        assert!(data.sample_batch(&mut rng, 0, 8).is_err());
        assert!(LanguageModelData::split((0..100).collect(), 1.0).is_err());
    }
}
