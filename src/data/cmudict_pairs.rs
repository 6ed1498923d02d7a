//! The CMU dictionary as seq2seq pairs, spelling → pronunciation (`hello` → `HH AH0 L OW1`), split
//! by word length: train on words up to N letters, evaluate on longer ones (the short-to-long
//! experiment of FLOATER's Figure 2, on real data).

use super::{CMUDICT, LengthSplit, MaxLengths, Pair, PairData, PairTokenizer, Pronunciation, parse_cmudict};
use crate::error::Result;

/// Pairs of every entry: the word's characters (letters and apostrophes, so a word's length is its
/// spelling's) as the source, its phonemes as the target, each ARPAbet symbol (stress digit
/// included) one token. One vocabulary holds both, [`PairTokenizer::CharsToWords`]: the words are
/// lower case and the phonemes upper case, so no letter is mistaken for a phoneme.
pub fn pronunciation_pairs(
    entries: &[Pronunciation],
    split: &LengthSplit,
    max: MaxLengths,
) -> Result<PairData> {
    let tokenizer = PairTokenizer::chars_to_words(
        entries.iter().map(|e| e.word.as_str()),
        entries.iter().map(|e| e.phonemes.as_str()),
    )?;
    let pairs = entries
        .iter()
        .map(|entry| {
            Ok(Pair {
                source: tokenizer.encode_source(&entry.word)?,
                target: tokenizer.encode_target(&entry.phonemes)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    PairData::new(tokenizer, pairs, split, max)
}

/// The pairs of the dictionary shipped in `data/cmudict.txt` (30,969 words of 1 to 28 letters).
pub fn cmudict_pairs(split: &LengthSplit, max: MaxLengths) -> Result<PairData> {
    pronunciation_pairs(&parse_cmudict(CMUDICT)?, split, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMY: MaxLengths = MaxLengths {
        source_len: 64,
        target_len: 64,
    };

    #[test]
    fn the_dictionary_splits_by_word_length() {
        let split = LengthSplit {
            train_max_len: 8,
            valid_fraction: 0.05,
            seed: 0,
        };
        let data = cmudict_pairs(&split, ROOMY).unwrap();
        let tokenizer = data.tokenizer();
        // 26 letters, the apostrophe and the 69 phonemes with their stress digits.
        assert_eq!(tokenizer.vocab_size(), 3 + 27 + 69);
        let hello = tokenizer.encode_source("hello").unwrap();
        let all = data
            .train()
            .iter()
            .chain(data.eval().iter().flat_map(|bin| bin.pairs()));
        let found: Vec<&Pair> = all.filter(|p| p.source == hello).collect();
        assert_eq!(found.len(), 1);
        assert_eq!(tokenizer.decode_target(&found[0].target).unwrap(), "HH AH0 L OW1");
        assert_eq!(found[0].target.len(), 4);

        assert!(data.train().iter().all(|p| p.source.len() <= 8));
        let lengths: Vec<_> = data.eval().iter().map(|bin| bin.lengths()).collect();
        assert_eq!(lengths, vec![1..=8, 9..=16, 17..=32]);
        let pairs: usize = data.eval().iter().map(|bin| bin.pairs().len()).sum();
        assert_eq!(data.train().len() + pairs, 30_969);
    }

    #[test]
    fn a_word_beyond_the_model_is_refused() {
        let entries = parse_cmudict("CAT  K AE1 T\nCATAMARAN  K AE1 T AH0 M ER0 AE2 N\n").unwrap();
        let max = MaxLengths {
            source_len: 8,
            target_len: 16,
        };
        let split = LengthSplit {
            train_max_len: 3,
            valid_fraction: 0.0,
            seed: 0,
        };
        let err = pronunciation_pairs(&entries, &split, max)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("pair 1: the source has 9 tokens, more than the 8"),
            "{err}"
        );
    }
}
