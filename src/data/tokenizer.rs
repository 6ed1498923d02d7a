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

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub const PAD: i32 = 0;
pub const BOS: i32 = 1;
pub const EOS: i32 = 2;
/// The special tokens' names, in id order; characters take the ids after them.
pub const SPECIAL_TOKENS: [&str; 3] = ["<pad>", "<bos>", "<eos>"];

/// The special tokens as a stored tokenizer lists them.
pub(super) fn stored_specials() -> Vec<String> {
    SPECIAL_TOKENS.iter().map(|s| s.to_string()).collect()
}

/// A stored tokenizer's special tokens must be this build's.
pub(super) fn check_specials(specials: &[String]) -> std::result::Result<(), String> {
    if specials == SPECIAL_TOKENS {
        return Ok(());
    }
    Err(format!(
        "tokenizer special tokens {specials:?} differ from this build's {SPECIAL_TOKENS:?}"
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

/// Token `id` at `position` of a sequence, in a vocabulary of `vocab_size` ids; an id outside it
/// is an error naming both.
pub(super) fn token_of(id: i32, position: usize, vocab_size: usize) -> Result<Token> {
    let index = usize::try_from(id)
        .ok()
        .filter(|&i| i < vocab_size)
        .ok_or_else(|| {
            Error::Input(format!(
                "token id {id} at position {position} is outside the vocabulary of {vocab_size} ids"
            ))
        })?;
    Ok(match index.checked_sub(SPECIAL_TOKENS.len()) {
        Some(entry) => Token::Entry(entry),
        None => Token::Special(SPECIAL_TOKENS[index]),
    })
}

/// Maps characters to ids `SPECIAL_TOKENS.len()..` in sorted order, and back.
///
/// Serialized (serde) as `{"specials": [...], "chars": "..."}` so a checkpoint can store it;
/// loading checks that the specials match this build and that the characters are sorted and unique.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredTokenizer", into = "StoredTokenizer")]
pub struct CharTokenizer {
    /// Sorted and unique: lookups are binary searches.
    chars: Vec<char>,
}

#[derive(Clone, Serialize, Deserialize)]
struct StoredTokenizer {
    specials: Vec<String>,
    chars: String,
}

impl From<CharTokenizer> for StoredTokenizer {
    fn from(tokenizer: CharTokenizer) -> Self {
        Self {
            specials: stored_specials(),
            chars: tokenizer.chars.into_iter().collect(),
        }
    }
}

impl TryFrom<StoredTokenizer> for CharTokenizer {
    type Error = String;

    fn try_from(stored: StoredTokenizer) -> Result<Self, String> {
        check_specials(&stored.specials)?;
        let chars: Vec<char> = stored.chars.chars().collect();
        check_sorted(&chars, "characters")?;
        Ok(Self { chars })
    }
}

impl CharTokenizer {
    /// The vocabulary of every character in `texts`.
    pub fn from_texts<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut chars: Vec<char> = texts.into_iter().flat_map(str::chars).collect();
        chars.sort_unstable();
        chars.dedup();
        Self { chars }
    }

    pub fn from_text(text: &str) -> Self {
        Self::from_texts([text])
    }

    /// Special tokens plus characters: the size of the embedding and of the output layer.
    pub fn vocab_size(&self) -> usize {
        SPECIAL_TOKENS.len() + self.chars.len()
    }

    /// The characters, sorted; character `chars()[i]` has id `SPECIAL_TOKENS.len() + i`.
    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    pub fn id(&self, c: char) -> Option<i32> {
        let index = self.chars.binary_search(&c).ok()?;
        Some((SPECIAL_TOKENS.len() + index) as i32)
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
            match token_of(id, position, self.vocab_size())? {
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
