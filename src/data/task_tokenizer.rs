//! The tokenizer a model was trained with, whichever kind its task has: a checkpoint stores it as
//! JSON, and a loaded model turns text into its ids with it.

use super::{CharTokenizer, PairTokenizer, SPECIAL_TOKENS};
use crate::error::{Error, Result};

/// The tokenizer of a task: characters for the language-model tasks, the shared vocabulary of
/// sources and targets for the pair tasks. A checkpoint stores it as JSON.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskTokenizer {
    Chars(CharTokenizer),
    Pairs(PairTokenizer),
}

impl TaskTokenizer {
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Chars(t) => t.vocab_size(),
            Self::Pairs(t) => t.vocab_size(),
        }
    }

    pub fn to_json(&self) -> String {
        match self {
            Self::Chars(t) => t.to_json(),
            Self::Pairs(t) => t.to_json(),
        }
    }
}

impl TaskTokenizer {
    /// Reads a checkpoint's tokenizer: a pair tokenizer's JSON carries its `segmentation`, a
    /// character tokenizer's does not.
    pub fn from_json(json: &str) -> Result<Self> {
        let tagged = serde_json::from_str::<serde_json::Value>(json)
            .map_err(|e| Error::Input(format!("the tokenizer does not parse: {e}")))?
            .get("segmentation")
            .is_some();
        Ok(if tagged {
            Self::Pairs(PairTokenizer::from_json(json)?)
        } else {
            Self::Chars(CharTokenizer::from_json(json)?)
        })
    }

    /// The text of `ids` (a target's, for a pair tokenizer).
    pub fn decode(&self, ids: &[i32]) -> Result<String> {
        match self {
            Self::Chars(chars) => chars.decode(ids),
            Self::Pairs(pairs) => pairs.decode_target(ids),
        }
    }

    /// The special tokens' names, in id order (a masked LM's character tokenizer has two more).
    pub fn specials(&self) -> &'static [&'static str] {
        match self {
            Self::Chars(chars) => chars.specials(),
            Self::Pairs(_) => &SPECIAL_TOKENS,
        }
    }

    /// The character tokenizer of a language model; an error for a seq2seq model's.
    pub fn chars(&self) -> Result<&CharTokenizer> {
        match self {
            Self::Chars(chars) => Ok(chars),
            Self::Pairs(_) => Err(Error::Input(
                "this is a seq2seq model's tokenizer (sources and targets): the model translates, \
                 with `posflow translate`"
                    .into(),
            )),
        }
    }
}
