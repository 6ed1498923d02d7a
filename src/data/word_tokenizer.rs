//! A word tokenizer: one id per whitespace-separated word, after the special tokens that
//! [`CharTokenizer`](super::CharTokenizer) has too, for parallel text cut into words and for
//! phonemes (each ARPAbet symbol one token).

use serde::{Deserialize, Serialize};

use super::SPECIAL_TOKENS;
use super::tokenizer::{Token, check_sorted, check_specials, stored_specials, token_of};
use crate::error::{Error, Result};

/// Maps words (non-empty, without whitespace) to ids `SPECIAL_TOKENS.len()..` in sorted order,
/// and back.
///
/// Serialized (serde) as `{"specials": [...], "words": [...]}`, as
/// [`CharTokenizer`](super::CharTokenizer) is, so a checkpoint can store it; loading checks that the specials match
/// this build and that the words are sorted, unique, non-empty and free of whitespace (which
/// [`encode`](Self::encode) could never produce, so such a word would be a corrupt file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredWordTokenizer", into = "StoredWordTokenizer")]
pub struct WordTokenizer {
    /// Sorted and unique: lookups are binary searches.
    words: Vec<String>,
}

#[derive(Clone, Serialize, Deserialize)]
struct StoredWordTokenizer {
    specials: Vec<String>,
    words: Vec<String>,
}

impl From<WordTokenizer> for StoredWordTokenizer {
    fn from(tokenizer: WordTokenizer) -> Self {
        Self {
            specials: stored_specials(&SPECIAL_TOKENS),
            words: tokenizer.words,
        }
    }
}

impl TryFrom<StoredWordTokenizer> for WordTokenizer {
    type Error = String;

    fn try_from(stored: StoredWordTokenizer) -> Result<Self, String> {
        if check_specials(&stored.specials)?.len() != SPECIAL_TOKENS.len() {
            return Err("a word tokenizer has no <mask> or <unk>".into());
        }
        if let Some(word) = stored.words.iter().find(|w| !is_word(w)) {
            return Err(format!("tokenizer word {word:?} is empty or holds whitespace"));
        }
        check_sorted(&stored.words, "words")?;
        Ok(Self { words: stored.words })
    }
}

/// A word the tokenizer can hold: what splitting a text at whitespace yields.
fn is_word(word: &str) -> bool {
    !word.is_empty() && !word.chars().any(char::is_whitespace)
}

impl WordTokenizer {
    /// The vocabulary of every whitespace-separated word in `texts`.
    pub fn from_texts<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut words: Vec<String> = texts
            .into_iter()
            .flat_map(str::split_whitespace)
            .map(str::to_owned)
            .collect();
        words.sort_unstable();
        words.dedup();
        Self { words }
    }

    /// The vocabulary of exactly `words` (in any order, repeats allowed); an empty word or one
    /// holding whitespace is an error naming it.
    pub fn from_words<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<Self> {
        let mut words: Vec<String> = words.into_iter().map(str::to_owned).collect();
        if let Some(word) = words.iter().find(|w| !is_word(w)) {
            return Err(Error::Input(format!(
                "the word {word:?} cannot be a token: a word is non-empty and holds no whitespace"
            )));
        }
        words.sort_unstable();
        words.dedup();
        Ok(Self { words })
    }

    /// Special tokens plus words: the size of the embedding and of the output layer.
    pub fn vocab_size(&self) -> usize {
        SPECIAL_TOKENS.len() + self.words.len()
    }

    /// The words, sorted; word `words()[i]` has id `SPECIAL_TOKENS.len() + i`.
    pub fn words(&self) -> &[String] {
        &self.words
    }

    pub fn id(&self, word: &str) -> Option<i32> {
        let index = self.words.binary_search_by(|w| w.as_str().cmp(word)).ok()?;
        Some((SPECIAL_TOKENS.len() + index) as i32)
    }

    /// One id per whitespace-separated word; a word outside the vocabulary is an error naming it
    /// and its position (in words, from 0).
    pub fn encode(&self, text: &str) -> Result<Vec<i32>> {
        text.split_whitespace()
            .enumerate()
            .map(|(position, word)| {
                self.id(word).ok_or_else(|| {
                    Error::Input(format!(
                        "unknown word {word:?} at position {position} (in words); the vocabulary has {} words",
                        self.words.len()
                    ))
                })
            })
            .collect()
    }

    /// The words of `ids` separated by single spaces, special tokens written as their names.
    pub fn decode(&self, ids: &[i32]) -> Result<String> {
        self.decode_joined(ids, " ")
    }

    /// The tokens of `ids` with `separator` between them: `" "` for words, `""` where each
    /// token is one character of a text (a pair's source cut into characters).
    pub(super) fn decode_joined(&self, ids: &[i32], separator: &str) -> Result<String> {
        let tokens = ids
            .iter()
            .enumerate()
            .map(|(position, &id)| self.token(position, id))
            .collect::<Result<Vec<_>>>()?;
        Ok(tokens.join(separator))
    }

    /// The word or special token's name of `id`, found at `position`.
    fn token(&self, position: usize, id: i32) -> Result<&str> {
        Ok(
            match token_of(id, position, self.vocab_size(), &SPECIAL_TOKENS)? {
                Token::Entry(i) => &self.words[i],
                Token::Special(name) => name,
            },
        )
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
    use crate::data::{BOS, EOS, PAD};

    #[test]
    fn ids_follow_the_special_tokens_in_sorted_order() {
        let tokenizer = WordTokenizer::from_texts(["the cat  sat", "on the\tmat\n"]);
        assert_eq!(tokenizer.words(), &["cat", "mat", "on", "sat", "the"]);
        assert_eq!(tokenizer.vocab_size(), 8);
        assert_eq!(tokenizer.encode(" the mat ").unwrap(), vec![7, 4]);
        assert_eq!(tokenizer.id("dog"), None);
    }

    #[test]
    fn unknown_words_are_named_with_their_position() {
        let tokenizer = WordTokenizer::from_texts(["the cat sat"]);
        let err = tokenizer.encode("the dog sat").unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown word \"dog\" at position 1 (in words); the vocabulary has 3 words"
        );
    }

    #[test]
    fn decode_joins_words_and_names_special_tokens() {
        let tokenizer = WordTokenizer::from_texts(["HH AH0 L OW1"]);
        let ids = tokenizer.encode("HH AH0 L OW1").unwrap();
        assert_eq!(tokenizer.decode(&ids).unwrap(), "HH AH0 L OW1");
        assert_eq!(
            tokenizer.decode(&[BOS, ids[0], EOS, PAD]).unwrap(),
            "<bos> HH <eos> <pad>"
        );
        let err = tokenizer.decode(&[3, 7]).unwrap_err().to_string();
        assert_eq!(err, "token id 7 at position 1 is outside the vocabulary of 7 ids");
        assert!(tokenizer.decode(&[-1]).is_err());
    }

    #[test]
    fn from_words_refuses_what_encode_could_never_produce() {
        let tokenizer = WordTokenizer::from_words(["b", "a", "b"]).unwrap();
        assert_eq!(tokenizer.words(), &["a", "b"]);
        let err = WordTokenizer::from_words(["a", "b c"]).unwrap_err().to_string();
        assert_eq!(
            err,
            "the word \"b c\" cannot be a token: a word is non-empty and holds no whitespace"
        );
        assert!(WordTokenizer::from_words([""]).is_err());
    }

    #[test]
    fn json_form_is_readable_and_checked_on_load() {
        let tokenizer = WordTokenizer::from_texts(["sat cat"]);
        let json = tokenizer.to_json();
        assert_eq!(
            json,
            r#"{"specials":["<pad>","<bos>","<eos>"],"words":["cat","sat"]}"#
        );
        assert_eq!(WordTokenizer::from_json(&json).unwrap(), tokenizer);

        let unsorted = r#"{"specials":["<pad>","<bos>","<eos>"],"words":["sat","cat"]}"#;
        let err = WordTokenizer::from_json(unsorted).unwrap_err().to_string();
        assert!(
            err.contains("sorted and unique, but \"sat\" comes before \"cat\""),
            "{err}"
        );
        let spaced = r#"{"specials":["<pad>","<bos>","<eos>"],"words":["a b"]}"#;
        let err = WordTokenizer::from_json(spaced).unwrap_err().to_string();
        assert!(err.contains("\"a b\" is empty or holds whitespace"), "{err}");
        let other_specials = r#"{"specials":["<pad>"],"words":["a"]}"#;
        let err = WordTokenizer::from_json(other_specials).unwrap_err().to_string();
        assert!(err.contains("special tokens [\"<pad>\"] differ"), "{err}");
    }
}
