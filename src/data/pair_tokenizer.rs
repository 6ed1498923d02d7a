//! The tokenizer of a seq2seq task: one vocabulary shared by sources and targets, and how each
//! side's text is cut into its tokens (characters or whitespace-separated words).
//!
//! Why one shared vocabulary rather than one per side:
//! - a symbol means the same on both sides. Reverse, sort and copy-like tasks map source symbols
//!   to the same target symbols, and parallel text in related languages shares much of its
//!   alphabet; one table lets the model tie its encoder, decoder and output embeddings, as the ODE
//!   Transformer's translation models do with their shared vocabulary.
//! - one `vocab_size`, one table to store in a checkpoint, and ids that never mean two things: any
//!   id decodes without knowing which side it came from.
//!
//! The cost is a few embedding rows that only one side uses, nothing at these sizes.

use serde::{Deserialize, Serialize};

use super::{CharTokenizer, WordTokenizer};
use crate::error::{Error, Result};

/// One vocabulary for sources and targets, and the segmentation of each side.
///
/// Serialized (serde) as the inner tokenizer's JSON with a `segmentation` tag, e.g.
/// `{"segmentation":"chars","specials":[...],"chars":"abc"}`, so a checkpoint carries it whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "segmentation", rename_all = "snake_case")]
pub enum PairTokenizer {
    /// Both sides cut into characters (the synthetic tasks, `text_pairs` by character).
    Chars(CharTokenizer),
    /// Both sides cut into whitespace-separated words (`text_pairs` by word).
    Words(WordTokenizer),
    /// The source cut into characters, the target into words, both in one word table where a
    /// source character is a one-character word: spelling → pronunciation, each ARPAbet phoneme
    /// one token. (Two tables would give a letter and a phoneme the same id.)
    CharsToWords(WordTokenizer),
}

impl PairTokenizer {
    /// The [`CharsToWords`](Self::CharsToWords) vocabulary of every character of `sources` and
    /// every word of `targets`. A whitespace character in a source is an error: the table holds
    /// words, and a source that needs spaces is text for [`Chars`](Self::Chars).
    pub fn chars_to_words<'a>(
        sources: impl IntoIterator<Item = &'a str>,
        targets: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self> {
        let mut chars: Vec<char> = sources.into_iter().flat_map(str::chars).collect();
        chars.sort_unstable();
        chars.dedup();
        if let Some(c) = chars.iter().find(|c| c.is_whitespace()) {
            return Err(Error::Input(format!(
                "a source holds the whitespace character {c:?} (U+{:04X}): sources cut into characters \
                 for word targets cannot hold whitespace",
                *c as u32
            )));
        }
        let letters: Vec<String> = chars.iter().map(char::to_string).collect();
        let words: Vec<&str> = targets.into_iter().flat_map(str::split_whitespace).collect();
        let tokenizer = WordTokenizer::from_words(letters.iter().map(String::as_str).chain(words))?;
        Ok(Self::CharsToWords(tokenizer))
    }

    /// Special tokens plus the shared vocabulary: the size of every embedding and of the output
    /// layer.
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Chars(chars) => chars.vocab_size(),
            Self::Words(words) | Self::CharsToWords(words) => words.vocab_size(),
        }
    }

    /// A source's ids; an unknown character or word is an error naming it and its position.
    pub fn encode_source(&self, text: &str) -> Result<Vec<i32>> {
        match self {
            Self::Chars(chars) => chars.encode(text),
            Self::Words(words) => words.encode(text),
            Self::CharsToWords(words) => encode_chars_as_words(words, text),
        }
    }

    /// A target's ids; an unknown character or word is an error naming it and its position.
    pub fn encode_target(&self, text: &str) -> Result<Vec<i32>> {
        match self {
            Self::Chars(chars) => chars.encode(text),
            Self::Words(words) | Self::CharsToWords(words) => words.encode(text),
        }
    }

    /// The text of source ids (special tokens by name).
    pub fn decode_source(&self, ids: &[i32]) -> Result<String> {
        match self {
            Self::Chars(chars) => chars.decode(ids),
            Self::Words(words) => words.decode(ids),
            Self::CharsToWords(words) => words.decode_joined(ids, ""),
        }
    }

    /// The text of target ids (special tokens by name; words separated by single spaces).
    pub fn decode_target(&self, ids: &[i32]) -> Result<String> {
        match self {
            Self::Chars(chars) => chars.decode(ids),
            Self::Words(words) | Self::CharsToWords(words) => words.decode(ids),
        }
    }

    /// The JSON form stored in checkpoint metadata.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a tokenizer always serializes")
    }

    pub fn from_json(json: &str) -> Result<Self> {
        serde_json::from_str(json).map_err(|e| Error::Input(format!("pair tokenizer JSON: {e}")))
    }
}

/// Each character of `text` as the one-character word of `words`.
fn encode_chars_as_words(words: &WordTokenizer, text: &str) -> Result<Vec<i32>> {
    let mut buffer = [0; 4];
    text.chars()
        .enumerate()
        .map(|(position, c)| {
            words.id(c.encode_utf8(&mut buffer)).ok_or_else(|| {
                Error::Input(format!(
                    "unknown character {c:?} (U+{:04X}) at position {position}; the vocabulary has {} \
                     tokens",
                    c as u32,
                    words.words().len()
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chars_to_words_keeps_each_phoneme_one_token() {
        let tokenizer = PairTokenizer::chars_to_words(["hello", "hi"], ["HH AH0 L OW1", "HH AY1"]).unwrap();
        // Letters e h i l o and phonemes AH0 AY1 HH L OW1 sorted together: uppercase first.
        let PairTokenizer::CharsToWords(words) = &tokenizer else {
            panic!("{tokenizer:?}")
        };
        assert_eq!(
            words.words(),
            &["AH0", "AY1", "HH", "L", "OW1", "e", "h", "i", "l", "o"]
        );
        assert_eq!(tokenizer.vocab_size(), 13);
        let source = tokenizer.encode_source("hello").unwrap();
        assert_eq!(source, vec![9, 8, 11, 11, 12]);
        let target = tokenizer.encode_target("HH AH0 L OW1").unwrap();
        assert_eq!(target, vec![5, 3, 6, 7]);
        assert_eq!(tokenizer.decode_source(&source).unwrap(), "hello");
        assert_eq!(tokenizer.decode_target(&target).unwrap(), "HH AH0 L OW1");
    }

    #[test]
    fn unknown_characters_and_words_are_named() {
        let tokenizer = PairTokenizer::chars_to_words(["ab"], ["AH0 B"]).unwrap();
        let err = tokenizer.encode_source("abz").unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown character 'z' (U+007A) at position 2; the vocabulary has 4 tokens"
        );
        let err = tokenizer.encode_target("B ZH").unwrap_err().to_string();
        assert!(err.starts_with("unknown word \"ZH\" at position 1"), "{err}");
        let chars = PairTokenizer::Chars(CharTokenizer::from_text("ab"));
        let err = chars.encode_target("aé").unwrap_err().to_string();
        assert!(
            err.starts_with("unknown character 'é' (U+00E9) at position 1"),
            "{err}"
        );

        let err = PairTokenizer::chars_to_words(["a b"], ["B"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("whitespace character ' ' (U+0020)"), "{err}");
    }

    #[test]
    fn json_round_trips_every_segmentation() {
        let chars = PairTokenizer::Chars(CharTokenizer::from_text("ba"));
        assert_eq!(
            chars.to_json(),
            r#"{"segmentation":"chars","specials":["<pad>","<bos>","<eos>"],"chars":"ab"}"#
        );
        let words = PairTokenizer::Words(WordTokenizer::from_texts(["le chat", "the cat"]));
        let to_words = PairTokenizer::chars_to_words(["ab"], ["AH0 B"]).unwrap();
        assert_eq!(
            to_words.to_json(),
            r#"{"segmentation":"chars_to_words","specials":["<pad>","<bos>","<eos>"],"words":["AH0","B","a","b"]}"#
        );
        for tokenizer in [chars, words, to_words] {
            assert_eq!(PairTokenizer::from_json(&tokenizer.to_json()).unwrap(), tokenizer);
        }
        let unsorted = r#"{"segmentation":"words","specials":["<pad>","<bos>","<eos>"],"words":["b","a"]}"#;
        let err = PairTokenizer::from_json(unsorted).unwrap_err().to_string();
        assert!(err.contains("sorted and unique"), "{err}");
        let unknown = r#"{"segmentation":"bytes","specials":["<pad>","<bos>","<eos>"],"chars":"ab"}"#;
        assert!(PairTokenizer::from_json(unknown).is_err());
    }
}
