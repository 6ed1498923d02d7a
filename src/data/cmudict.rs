//! Grapheme-to-phoneme from the CMU pronouncing dictionary: one sequence per word,
//! `hello=HH AH0 L OW1`, the loss on the phonemes.

use rand::{Rng, RngExt};

use super::{Batch, CMUDICT, CharTokenizer, Example};
use crate::error::{Error, Result};

/// The separator between a word and its phonemes.
const SEPARATOR: char = '=';

/// A word (lower case, so it shares no character with the upper-case ARPAbet phonemes) and its
/// phonemes separated by single spaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pronunciation {
    pub word: String,
    pub phonemes: String,
}

impl Pronunciation {
    /// The example `word=phonemes`.
    pub fn example(&self) -> Example {
        Example {
            prompt: self.word.clone(),
            separator: SEPARATOR,
            answer: self.phonemes.clone(),
        }
    }
}

/// Parses dictionary lines `WORD  PH1 PH2 ...` (cmudict's format). An alternate pronunciation
/// `WORD(1)` keeps the word without the marker. Blank lines are skipped; any other line that
/// does not fit is an error naming its line number.
pub fn parse_cmudict(text: &str) -> Result<Vec<Pronunciation>> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = line.split_once("  ").and_then(|(word, phonemes)| {
            let word = strip_variant(word);
            let phonemes: Vec<&str> = phonemes.split_whitespace().collect();
            let fits = !word.is_empty() && !word.contains(SEPARATOR) && !phonemes.is_empty();
            fits.then(|| Pronunciation {
                word: word.to_lowercase(),
                phonemes: phonemes.join(" "),
            })
        });
        let entry = parsed.ok_or_else(|| {
            Error::Input(format!(
                "cmudict line {}: expected `WORD  PH1 PH2 ...` (two spaces after the word), got {line:?}",
                index + 1
            ))
        })?;
        entries.push(entry);
    }
    Ok(entries)
}

/// `WORD(2)` → `WORD`.
fn strip_variant(word: &str) -> &str {
    word.strip_suffix(')')
        .and_then(|w| w.rsplit_once('('))
        .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map_or(word, |(w, _)| w)
}

/// Pronunciations split into training and validation words, with the tokenizer of both.
///
/// A word's split is decided by a hash of the word alone: it does not move when the dictionary
/// changes, and alternate pronunciations of one word land in the same split.
#[derive(Clone, Debug)]
pub struct Pronunciations {
    train: Vec<Pronunciation>,
    valid: Vec<Pronunciation>,
    tokenizer: CharTokenizer,
}

impl Pronunciations {
    pub fn new(entries: Vec<Pronunciation>, valid_fraction: f64) -> Result<Self> {
        if !(valid_fraction > 0.0 && valid_fraction < 1.0) {
            return Err(Error::Input(format!(
                "the validation fraction must lie strictly between 0 and 1, got {valid_fraction}"
            )));
        }
        let texts: Vec<String> = entries.iter().map(|e| e.example().text()).collect();
        let tokenizer = CharTokenizer::from_texts(texts.iter().map(String::as_str));
        let (valid, train): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .partition(|e| word_position(&e.word) < valid_fraction);
        if train.is_empty() || valid.is_empty() {
            return Err(Error::Input(format!(
                "splitting {} words with validation fraction {valid_fraction} left {} for training and \
                 {} for validation; both need at least one",
                train.len() + valid.len(),
                train.len(),
                valid.len()
            )));
        }
        Ok(Self {
            train,
            valid,
            tokenizer,
        })
    }

    /// The dictionary shipped in `data/cmudict.txt`.
    pub fn cmudict(valid_fraction: f64) -> Result<Self> {
        Self::new(parse_cmudict(CMUDICT)?, valid_fraction)
    }

    /// Built from every word and phoneme (both splits), so validation never meets an unknown character.
    pub fn tokenizer(&self) -> &CharTokenizer {
        &self.tokenizer
    }

    pub fn train(&self) -> &[Pronunciation] {
        &self.train
    }

    pub fn valid(&self) -> &[Pronunciation] {
        &self.valid
    }

    /// `batch` training words drawn uniformly (with replacement), padded to the longest.
    pub fn sample_batch<R: Rng + ?Sized>(&self, rng: &mut R, batch: usize) -> Result<Batch> {
        let examples: Vec<Example> = (0..batch)
            .map(|_| self.train[rng.random_range(0..self.train.len())].example())
            .collect();
        Example::batch(&examples, &self.tokenizer)
    }

    /// Every validation word once, in dictionary order, `batch` per batch (the last may hold fewer).
    pub fn eval_batches(&self, batch: usize) -> Result<Vec<Batch>> {
        if batch == 0 {
            return Err(Error::Input("a batch needs at least one word".into()));
        }
        self.valid
            .chunks(batch)
            .map(|chunk| {
                let examples: Vec<Example> = chunk.iter().map(Pronunciation::example).collect();
                Example::batch(&examples, &self.tokenizer)
            })
            .collect()
    }
}

/// The word's place in [0, 1), from its FNV-1a hash: fixed for a word on every platform and
/// version, unlike `std`'s hasher. FNV-1a alone leaves the high bits of similar short words
/// correlated (400 of `w0`..`w999` fall below 0.5), so MurmurHash3's finalizer mixes them.
fn word_position(word: &str) -> f64 {
    let mut hash = word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_alternates_and_reports_bad_lines() {
        let entries = parse_cmudict("HELLO  HH AH0 L OW1\n\nTOMATO(1)  T AH0 M AA1 T OW2\n").unwrap();
        assert_eq!(
            entries,
            vec![
                Pronunciation {
                    word: "hello".into(),
                    phonemes: "HH AH0 L OW1".into()
                },
                Pronunciation {
                    word: "tomato".into(),
                    phonemes: "T AH0 M AA1 T OW2".into()
                },
            ]
        );
        let err = parse_cmudict("A  AH0\nB EY1\n").unwrap_err().to_string();
        assert_eq!(
            err,
            "cmudict line 2: expected `WORD  PH1 PH2 ...` (two spaces after the word), got \"B EY1\""
        );
        assert!(parse_cmudict("A=B  AH0").is_err());
        assert!(parse_cmudict("AB  ").is_err());
        assert_eq!(strip_variant("A(B)"), "A(B)");
    }

    #[test]
    fn word_positions_are_fixed_and_spread() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c (the published test vector), mixed 0x82a2a958a9bece5b.
        assert_eq!(
            word_position("a"),
            (0x82a2_a958_a9be_ce5b_u64 >> 11) as f64 / (1u64 << 53) as f64
        );
        let below_half = (0..1000)
            .filter(|i| word_position(&format!("w{i}")) < 0.5)
            .count();
        assert!((450..550).contains(&below_half), "{below_half}");
    }
}
