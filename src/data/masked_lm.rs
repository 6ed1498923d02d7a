//! Masked-language-model data (BERT): windows of a text behind a [CLS], some of their tokens
//! hidden, the loss on the hidden ones alone.
//!
//! The masking is BERT's (Devlin et al. 2019, §3.1 and appendix A.1; `create_pretraining_data.py`):
//! 15% of a sequence's tokens are chosen (a fixed count per sequence, never [CLS]); of those, 80%
//! become `<mask>`, 10% a random character and 10% stay as they are, so the model cannot learn that
//! only `<mask>` positions matter.

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{BOS, Batch, CharTokenizer, IGNORE_INDEX, LanguageModelData, MASK};
use crate::error::{Error, Result};

/// The share of a sequence's tokens that are predicted.
pub const MASKED_SHARE: f64 = 0.15;
/// Of the predicted tokens, the share replaced by `<mask>`; then the share replaced by a random
/// character; the rest stay.
const REPLACED_BY_MASK: f64 = 0.8;
const REPLACED_BY_RANDOM: f64 = 0.1;

/// A text split for training and validation, cut into masked sequences of any length.
#[derive(Clone, Debug)]
pub struct MaskedText {
    data: LanguageModelData,
    /// The ids of the characters, the random replacements' range.
    chars: std::ops::Range<i32>,
}

impl MaskedText {
    /// `data` encoded with `tokenizer`, which must be a masked LM's (it has `<mask>`).
    pub fn new(data: LanguageModelData, tokenizer: &CharTokenizer) -> Result<Self> {
        if !tokenizer.is_masked_lm() {
            return Err(Error::Input(
                "masked-LM data needs a masked LM's tokenizer (with <mask> and <unk>)".into(),
            ));
        }
        if tokenizer.chars().is_empty() {
            return Err(Error::Input(
                "masked-LM data needs a text with at least one character".into(),
            ));
        }
        let first = tokenizer.specials().len() as i32;
        Ok(Self {
            data,
            chars: first..tokenizer.vocab_size() as i32,
        })
    }

    /// `batch` sequences of `len` tokens: `[CLS]` and `len − 1` characters from a uniformly random
    /// place in the training part, masked.
    pub fn sample_batch<R: Rng + ?Sized>(&self, rng: &mut R, batch: usize, len: usize) -> Result<Batch> {
        let window = window_len(len)?;
        let train = self.data.train();
        if batch == 0 {
            return Err(Error::Input("a batch needs at least one sequence".into()));
        }
        if train.len() < window {
            return Err(too_short("training", train.len(), len));
        }
        let mut tokens = Vec::with_capacity(batch * len);
        let mut targets = Vec::with_capacity(batch * len);
        for _ in 0..batch {
            let start = rng.random_range(0..=train.len() - window);
            let (t, y) = self.hide(rng, &train[start..start + window]);
            tokens.extend(t);
            targets.extend(y);
        }
        Ok(Batch::full(len, tokens, targets))
    }

    /// The validation part cut into consecutive sequences of `len` tokens (`[CLS]` and `len − 1`
    /// characters), `batch` per batch (the last may hold fewer), masked by a generator seeded with
    /// the length alone: every run and every seed is scored on the same hidden tokens.
    pub fn eval_batches(&self, len: usize, batch: usize) -> Result<Vec<Batch>> {
        let window = window_len(len)?;
        let valid = self.data.valid();
        if batch == 0 {
            return Err(Error::Input("a batch needs at least one sequence".into()));
        }
        if valid.len() < window {
            return Err(too_short("validation", valid.len(), len));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(len as u64);
        rng.set_stream(u64::MAX);
        let windows: Vec<&[i32]> = valid.chunks_exact(window).collect();
        let batches = windows
            .chunks(batch)
            .map(|rows| {
                let (mut tokens, mut targets) = (Vec::new(), Vec::new());
                for row in rows {
                    let (t, y) = self.hide(&mut rng, row);
                    tokens.extend(t);
                    targets.extend(y);
                }
                Batch::full(len, tokens, targets)
            })
            .collect();
        Ok(batches)
    }

    /// [CLS] then `window`, with BERT's share of its characters chosen to predict: the inputs and
    /// the targets (the chosen characters, `IGNORE_INDEX` elsewhere).
    fn hide<R: Rng + ?Sized>(&self, rng: &mut R, window: &[i32]) -> (Vec<i32>, Vec<i32>) {
        let mut tokens = Vec::with_capacity(window.len() + 1);
        tokens.push(BOS);
        tokens.extend_from_slice(window);
        let mut targets = vec![IGNORE_INDEX; tokens.len()];
        // The first `count` of a partial Fisher-Yates shuffle: distinct, uniformly chosen.
        let count = masked_count(window.len());
        let mut positions: Vec<usize> = (1..tokens.len()).collect();
        for i in 0..count {
            let j = rng.random_range(i..positions.len());
            positions.swap(i, j);
        }
        for &position in &positions[..count] {
            targets[position] = tokens[position];
            let draw: f64 = rng.random();
            if draw < REPLACED_BY_MASK {
                tokens[position] = MASK;
            } else if draw < REPLACED_BY_MASK + REPLACED_BY_RANDOM {
                tokens[position] = rng.random_range(self.chars.clone());
            }
        }
        (tokens, targets)
    }
}

/// How many of `tokens` characters are predicted: 15%, rounded, at least one (BERT's
/// `max(1, round(len × masked_lm_prob))`).
pub fn masked_count(tokens: usize) -> usize {
    ((tokens as f64 * MASKED_SHARE).round() as usize).clamp(1, tokens)
}

/// The characters in a sequence of `len` tokens, after its [CLS].
fn window_len(len: usize) -> Result<usize> {
    if len < 2 {
        return Err(Error::Input(format!(
            "a masked-LM sequence holds [CLS] and at least one character: a length of at least 2, got {len}"
        )));
    }
    Ok(len - 1)
}

fn too_short(part: &str, available: usize, len: usize) -> Error {
    Error::Input(format!(
        "a masked-LM sequence of {len} tokens needs {} characters of text, the {part} part has {available}",
        len - 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::MOBY_DICK;

    fn moby() -> (CharTokenizer, MaskedText) {
        let tokenizer = CharTokenizer::from_text(MOBY_DICK).for_masked_lm();
        let data = LanguageModelData::from_text(&tokenizer, MOBY_DICK, 0.05).unwrap();
        let masked = MaskedText::new(data, &tokenizer).unwrap();
        (tokenizer, masked)
    }

    /// Over many sequences: 15% of the characters predicted (exactly per sequence), of those 80%
    /// shown as <mask>, 10% as another character, 10% as themselves; [CLS] never.
    #[test]
    fn masking_follows_bert_shares() {
        let (_, data) = moby();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let len = 101;
        let batch = data.sample_batch(&mut rng, 200, len).unwrap();
        let (mut predicted, mut masked, mut kept, mut replaced) = (0, 0, 0, 0);
        for row in 0..200 {
            let tokens = &batch.tokens()[row * len..(row + 1) * len];
            let targets = &batch.targets()[row * len..(row + 1) * len];
            assert_eq!(tokens[0], BOS);
            assert_eq!(targets[0], IGNORE_INDEX);
            let row_predicted = targets.iter().filter(|&&t| t != IGNORE_INDEX).count();
            assert_eq!(row_predicted, 15, "row {row}");
            for (&t, &y) in tokens.iter().zip(targets).filter(|(_, y)| **y != IGNORE_INDEX) {
                predicted += 1;
                match t {
                    MASK => masked += 1,
                    t if t == y => kept += 1,
                    _ => replaced += 1,
                }
            }
            // Unpredicted positions show their own character.
            assert!(
                tokens
                    .iter()
                    .zip(targets)
                    .all(|(&t, &y)| y != IGNORE_INDEX || t != MASK)
            );
        }
        assert_eq!(predicted, 3000);
        let share = |n: usize| n as f64 / predicted as f64;
        assert!((share(masked) - 0.8).abs() < 0.03, "{}", share(masked));
        // A random replacement can draw the character itself (1 in 83), counted as kept.
        assert!((share(replaced) - 0.1).abs() < 0.02, "{}", share(replaced));
        assert!((share(kept) - 0.1).abs() < 0.02, "{}", share(kept));
    }

    #[test]
    fn evaluation_masks_depend_on_the_length_only() {
        let (tokenizer, data) = moby();
        let a = data.eval_batches(64, 8).unwrap();
        let b = data.eval_batches(64, 8).unwrap();
        assert_eq!(a, b);
        let valid_chars = (MOBY_DICK.chars().count() as f64 * 0.05).round() as usize;
        let windows: usize = a.iter().map(|b| b.shape()[0]).sum();
        assert_eq!(windows, valid_chars / 63);
        // The first sequence is [CLS] and the validation part's first 63 characters, some hidden.
        let first = &a[0];
        let shown: Vec<i32> = first.tokens()[1..64]
            .iter()
            .zip(&first.targets()[1..64])
            .map(|(&t, &y)| if y == IGNORE_INDEX { t } else { y })
            .collect();
        let start = MOBY_DICK.chars().count() - valid_chars;
        let expected: String = MOBY_DICK.chars().skip(start).take(63).collect();
        assert_eq!(tokenizer.decode(&shown).unwrap(), expected);
        assert_ne!(a[0].targets(), data.eval_batches(65, 8).unwrap()[0].targets());
    }

    #[test]
    fn bad_lengths_and_tokenizers_are_errors() {
        let (tokenizer, data) = moby();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(
            data.sample_batch(&mut rng, 2, 1).unwrap_err().to_string(),
            "a masked-LM sequence holds [CLS] and at least one character: a length of at least 2, got 1"
        );
        assert!(
            data.eval_batches(100_000, 2)
                .unwrap_err()
                .to_string()
                .contains("the validation part has")
        );
        assert!(data.sample_batch(&mut rng, 0, 8).is_err());
        let plain = CharTokenizer::from_text("ab");
        let plain_data = LanguageModelData::from_text(&plain, "abab", 0.5).unwrap();
        assert!(MaskedText::new(plain_data, &plain).is_err());
        assert_eq!(masked_count(1), 1);
        assert_eq!(masked_count(63), 9);
        assert!(tokenizer.is_masked_lm());
    }
}
