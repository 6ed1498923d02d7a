//! A character tokenizer: one id per character of the corpus, after a few special tokens.
//!
//! Special tokens, and why each exists:
//! - `<pad>` ([`PAD`]) fills a batch's shorter rows; attention masks it out and the loss ignores it.
//! - `<bos>` ([`BOS`]) starts every example of a prompted task. It is the `[CLS]` of an encoder (the
//!   position a classification head reads) and gives a decoder's first character a context.
//! - `<eos>` ([`EOS`]) ends every example. It is the `[SEP]` that closes a sequence and a counted
//!   target: a seq2seq answer must learn where to stop.
//!
//! The separator between a prompt and its answer (`=` in `hello=HH AH0 L OW1`, `|` in `abc|cba`)
//! is an ordinary character, so decoded sequences read as the task is written.
//!
//! A masked LM's tokenizer has two more ([`MASKED_LM_TOKENS`]), so that the plain tokenizers and
//! every checkpoint written before masked LMs keep their ids:
//! - `<mask>` ([`MASK`]) stands for a hidden token the model is trained to fill (BERT's `[MASK]`).
//! - `<unk>` ([`UNK`]) stands for a character the pretraining text never had, so a classifier
//!   fine-tuned from the masked LM reads any text (a name with an accent, an e-mail's symbols).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub const PAD: i32 = 0;
pub const BOS: i32 = 1;
pub const EOS: i32 = 2;
/// In a masked LM's tokenizer only: a hidden token.
pub const MASK: i32 = 3;
/// In a masked LM's tokenizer only: a character outside the vocabulary.
pub const UNK: i32 = 4;
/// The special tokens' names, in id order; characters take the ids after them.
pub const SPECIAL_TOKENS: [&str; 3] = ["<pad>", "<bos>", "<eos>"];
/// A masked LM's special tokens: [`SPECIAL_TOKENS`], then `<mask>` and `<unk>`.
pub const MASKED_LM_TOKENS: [&str; 5] = ["<pad>", "<bos>", "<eos>", "<mask>", "<unk>"];

/// The special tokens as a stored tokenizer lists them.
pub(super) fn stored_specials(specials: &[&str]) -> Vec<String> {
    specials.iter().map(|s| s.to_string()).collect()
}

/// A stored tokenizer's special tokens must be one of this build's lists; returns it.
pub(super) fn check_specials(specials: &[String]) -> std::result::Result<&'static [&'static str], String> {
    if specials == SPECIAL_TOKENS {
        return Ok(&SPECIAL_TOKENS);
    }
    if specials == MASKED_LM_TOKENS {
        return Ok(&MASKED_LM_TOKENS);
    }
    Err(format!(
        "tokenizer special tokens {specials:?} differ from this build's {SPECIAL_TOKENS:?} (or a \
         masked LM's {MASKED_LM_TOKENS:?})"
    ))
}

/// A stored tokenizer's entries must be sorted and unique (lookups are binary searches); `kind`
/// names them in the error.
pub(super) fn check_sorted<T: PartialOrd + fmt::Debug>(
    entries: &[T],
    kind: &str,
) -> std::result::Result<(), String> {
    match entries.windows(2).find(|pair| pair[0] >= pair[1]) {
        Some(pair) => Err(format!(
            "tokenizer {kind} must be sorted and unique, but {:?} comes before {:?}",
            pair[0], pair[1]
        )),
        None => Ok(()),
    }
}

/// What an id decodes to: a special token, or entry `i` of the vocabulary after them.
pub(super) enum Token {
    Special(&'static str),
    Entry(usize),
}

/// Token `id` at `position` of a sequence, in a vocabulary of `vocab_size` ids starting with
/// `specials`; an id outside it is an error naming both.
pub(super) fn token_of(
    id: i32,
    position: usize,
    vocab_size: usize,
    specials: &'static [&'static str],
) -> Result<Token> {
    let index = usize::try_from(id)
        .ok()
        .filter(|&i| i < vocab_size)
        .ok_or_else(|| {
            Error::Input(format!(
                "token id {id} at position {position} is outside the vocabulary of {vocab_size} ids"
            ))
        })?;
    Ok(match index.checked_sub(specials.len()) {
        Some(entry) => Token::Entry(entry),
        None => Token::Special(specials[index]),
    })
}

/// Maps characters to ids after its special tokens, in sorted order, and back.
///
/// Serialized (serde) as `{"specials": [...], "chars": "..."}` so a checkpoint can store it;
/// loading checks that the specials match this build and that the characters are sorted and unique.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredTokenizer", into = "StoredTokenizer")]
pub struct CharTokenizer {
    /// Sorted and unique: lookups are binary searches.
    chars: Vec<char>,
    /// [`SPECIAL_TOKENS`], or a masked LM's [`MASKED_LM_TOKENS`].
    specials: &'static [&'static str],
}

#[derive(Clone, Serialize, Deserialize)]
struct StoredTokenizer {
    specials: Vec<String>,
    chars: String,
}

impl From<CharTokenizer> for StoredTokenizer {
    fn from(tokenizer: CharTokenizer) -> Self {
        Self {
            specials: stored_specials(tokenizer.specials),
            chars: tokenizer.chars.into_iter().collect(),
        }
    }
}

impl TryFrom<StoredTokenizer> for CharTokenizer {
    type Error = String;

    fn try_from(stored: StoredTokenizer) -> Result<Self, String> {
        let specials = check_specials(&stored.specials)?;
        let chars: Vec<char> = stored.chars.chars().collect();
        check_sorted(&chars, "characters")?;
        Ok(Self { chars, specials })
    }
}

impl CharTokenizer {
    /// The vocabulary of every character in `texts`.
    pub fn from_texts<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut chars: Vec<char> = texts.into_iter().flat_map(str::chars).collect();
        chars.sort_unstable();
        chars.dedup();
        Self {
            chars,
            specials: &SPECIAL_TOKENS,
        }
    }

    pub fn from_text(text: &str) -> Self {
        Self::from_texts([text])
    }

    /// The same characters with a masked LM's special tokens (`<mask>`, `<unk>`) before them.
    pub fn for_masked_lm(self) -> Self {
        Self {
            specials: &MASKED_LM_TOKENS,
            ..self
        }
    }

    /// Whether it has `<mask>` and `<unk>`.
    pub fn is_masked_lm(&self) -> bool {
        self.specials.len() == MASKED_LM_TOKENS.len()
    }

    /// The special tokens' names, in id order.
    pub fn specials(&self) -> &'static [&'static str] {
        self.specials
    }

    /// Special tokens plus characters: the size of the embedding and of the output layer.
    pub fn vocab_size(&self) -> usize {
        self.specials.len() + self.chars.len()
    }

    /// The characters, sorted; character `chars()[i]` has id `specials().len() + i`.
    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    pub fn id(&self, c: char) -> Option<i32> {
        let index = self.chars.binary_search(&c).ok()?;
        Some((self.specials.len() + index) as i32)
    }

    /// The name of token `id`: a special token's (`<mask>`) or its character.
    pub fn token_name(&self, id: i32) -> Result<String> {
        Ok(match token_of(id, 0, self.vocab_size(), self.specials)? {
            Token::Entry(i) => self.chars[i].to_string(),
            Token::Special(name) => name.to_string(),
        })
    }

    /// One id per character, every character outside the vocabulary read as `<unk>`; also returns
    /// how many were. Only a masked LM's tokenizer has `<unk>`: the others refuse such text as
    /// [`CharTokenizer::encode`] does.
    pub fn encode_with_unknown(&self, text: &str) -> Result<(Vec<i32>, usize)> {
        if !self.is_masked_lm() {
            return self.encode(text).map(|ids| (ids, 0));
        }
        let mut unknown = 0;
        let ids = text
            .chars()
            .map(|c| {
                self.id(c).unwrap_or_else(|| {
                    unknown += 1;
                    UNK
                })
            })
            .collect();
        Ok((ids, unknown))
    }

    /// [`CharTokenizer::encode`], reading each `<mask>` written in `text` as the mask token (a
    /// masked LM's tokenizer only: in others `<mask>` is five characters).
    pub fn encode_with_masks(&self, text: &str) -> Result<Vec<i32>> {
        let name = MASKED_LM_TOKENS[MASK as usize];
        if !self.is_masked_lm() {
            return self.encode(text);
        }
        let mut ids = Vec::with_capacity(text.len());
        for (i, part) in text.split(name).enumerate() {
            if i > 0 {
                ids.push(MASK);
            }
            ids.extend(self.encode(part)?);
        }
        Ok(ids)
    }

    /// One id per character; a character outside the vocabulary is an error naming it and its
    /// position (in characters, from 0).
    pub fn encode(&self, text: &str) -> Result<Vec<i32>> {
        text.chars()
            .enumerate()
            .map(|(position, c)| {
                self.id(c).ok_or_else(|| {
                    Error::Input(format!(
                        "unknown character {c:?} (U+{:04X}) at position {position}; the vocabulary has {} \
                         characters",
                        c as u32,
                        self.chars.len()
                    ))
                })
            })
            .collect()
    }

    /// The text of `ids`, special tokens written as their names (`<pad>`, `<bos>`, `<eos>`).
    pub fn decode(&self, ids: &[i32]) -> Result<String> {
        let mut text = String::with_capacity(ids.len());
        for (position, &id) in ids.iter().enumerate() {
            match token_of(id, position, self.vocab_size(), self.specials)? {
                Token::Entry(i) => text.push(self.chars[i]),
                Token::Special(name) => text.push_str(name),
            }
        }
        Ok(text)
    }

    /// The JSON form stored in checkpoint metadata.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a tokenizer always serializes")
    }

    pub fn from_json(json: &str) -> Result<Self> {
        serde_json::from_str(json).map_err(|e| Error::Input(format!("tokenizer JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_special_tokens_in_sorted_order() {
        let tokenizer = CharTokenizer::from_text("hello world");
        assert_eq!(tokenizer.chars(), &[' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w']);
        assert_eq!(tokenizer.vocab_size(), 11);
        assert_eq!(tokenizer.encode("hold").unwrap(), vec![6, 8, 7, 4]);
        assert_eq!(tokenizer.id('z'), None);
    }

    #[test]
    fn decode_names_special_tokens_and_rejects_unknown_ids() {
        let tokenizer = CharTokenizer::from_text("ab");
        assert_eq!(
            tokenizer.decode(&[BOS, 3, 4, EOS, PAD]).unwrap(),
            "<bos>ab<eos><pad>"
        );
        let err = tokenizer.decode(&[3, 5]).unwrap_err().to_string();
        assert_eq!(err, "token id 5 at position 1 is outside the vocabulary of 5 ids");
        assert!(tokenizer.decode(&[-1]).is_err());
    }

    #[test]
    fn json_form_is_readable_and_checked_on_load() {
        let tokenizer = CharTokenizer::from_text("b a");
        let json = tokenizer.to_json();
        assert_eq!(json, r#"{"specials":["<pad>","<bos>","<eos>"],"chars":" ab"}"#);
        assert_eq!(CharTokenizer::from_json(&json).unwrap(), tokenizer);

        let unsorted = r#"{"specials":["<pad>","<bos>","<eos>"],"chars":"ba"}"#;
        let err = CharTokenizer::from_json(unsorted).unwrap_err().to_string();
        assert!(
            err.contains("sorted and unique, but 'b' comes before 'a'"),
            "{err}"
        );
        let other_specials = r#"{"specials":["<pad>"],"chars":"ab"}"#;
        let err = CharTokenizer::from_json(other_specials).unwrap_err().to_string();
        assert!(err.contains("special tokens [\"<pad>\"] differ"), "{err}");
    }
}
