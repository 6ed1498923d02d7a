//! Texts with a class each, for an encoder's classifier: the shipped sets (first names → gender,
//! e-mail bodies → spam or ham, a word's spelling → its stressed syllable; sources in
//! `data/README.md`), split by length as the pair tasks are, so accuracy can be read past the
//! lengths trained on.
//!
//! A sequence is [CLS] (the BOS token) then the text's characters; the class is the target.

use std::collections::HashSet;
use std::ops::RangeInclusive;

use rand::seq::SliceRandom;
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::corpus::{CMUDICT, FEMALE_FIRST_NAMES, MALE_FIRST_NAMES, SPAM};
use super::{
    BOS, Batch, CharTokenizer, IGNORE_INDEX, LengthSplit, parse_cmudict, source_bin, source_bin_lengths,
};
use crate::error::{Error, Result};

/// A shipped classification set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassTask {
    /// A first name → `female` or `male`, from the two stdlib lists: 4,944 and 3,897 distinct
    /// names (seven are listed twice, kept once); a name on both lists (419 of them) is left out,
    /// since either answer would be right: 4,525 + 3,478 names.
    Names,
    /// An e-mail body → `ham` or `spam` (SpamAssassin, `data/spam.tsv`).
    Spam,
    /// A word of the CMU dictionary, lower case → the syllable of its primary stress: `1st`,
    /// `2nd`, `3rd` or `4th+` (the first, for a compound with two); a word without one (14) is left
    /// out.
    Stress,
}

/// One text and its class (an index into the task's class names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Labelled {
    pub text: String,
    pub class: usize,
}

impl ClassTask {
    pub fn class_names(self) -> &'static [&'static str] {
        match self {
            Self::Names => &["female", "male"],
            Self::Spam => &["ham", "spam"],
            Self::Stress => &["1st", "2nd", "3rd", "4th+"],
        }
    }

    /// Every example of the set, in the shipped files' order.
    pub fn examples(self) -> Result<Vec<Labelled>> {
        match self {
            Self::Names => Ok(names()),
            Self::Spam => spam(),
            Self::Stress => stress(),
        }
    }
}

fn names() -> Vec<Labelled> {
    // Each list's distinct names, in its order.
    let list = |text: &'static str| -> Vec<&'static str> {
        let mut seen = HashSet::new();
        text.lines()
            .filter(|l| !l.is_empty() && seen.insert(*l))
            .collect()
    };
    let (female, male) = (list(FEMALE_FIRST_NAMES), list(MALE_FIRST_NAMES));
    let in_female: HashSet<&str> = female.iter().copied().collect();
    let in_male: HashSet<&str> = male.iter().copied().collect();
    let on_both = |name: &&str| in_female.contains(name) && in_male.contains(name);
    let labelled = |names: &[&str], class| -> Vec<Labelled> {
        names
            .iter()
            .filter(|n| !on_both(n))
            .map(|n| Labelled {
                text: n.to_string(),
                class,
            })
            .collect()
    };
    let mut all = labelled(&female, 0);
    all.extend(labelled(&male, 1));
    all
}

fn spam() -> Result<Vec<Labelled>> {
    SPAM.lines()
        .enumerate()
        .map(|(i, line)| {
            let parsed = line.split_once('\t').and_then(|(label, text)| {
                let class = ["ham", "spam"].iter().position(|&l| l == label)?;
                Some(Labelled {
                    text: text.to_string(),
                    class,
                })
            });
            parsed
                .ok_or_else(|| Error::Input(format!("data/spam.tsv line {}: not `ham|spam<TAB>text`", i + 1)))
        })
        .collect()
}

fn stress() -> Result<Vec<Labelled>> {
    let entries = parse_cmudict(CMUDICT)?;
    Ok(entries
        .into_iter()
        .filter_map(|entry| {
            let vowels = entry.phonemes.split(' ').filter(|p| p.ends_with(['0', '1', '2']));
            let stressed = vowels.enumerate().find(|(_, p)| p.ends_with('1'))?.0;
            Some(Labelled {
                text: entry.word,
                class: stressed.min(3),
            })
        })
        .collect())
}

/// A bin of held-out examples, by text length.
#[derive(Clone, Debug)]
pub struct ClassBin {
    /// Text lengths (characters) of the bin.
    pub lengths: RangeInclusive<usize>,
    /// Token sequences (`[CLS]` + characters) and their classes.
    pub examples: Vec<(Vec<i32>, i32)>,
}

/// A batch of classified sequences: the tokens (padded, with a key mask) and one class per row.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassBatch {
    /// Tokens `[B, L]` and the padding mask; its targets are all `IGNORE_INDEX`.
    pub batch: Batch,
    pub classes: Vec<i32>,
}

impl ClassBatch {
    /// Rows of (tokens, class), padded to `len` tokens.
    pub fn padded_to(rows: &[(Vec<i32>, i32)], len: usize) -> Result<Self> {
        let unlabelled: Vec<(Vec<i32>, Vec<i32>)> = rows
            .iter()
            .map(|(tokens, _)| (tokens.clone(), vec![IGNORE_INDEX; tokens.len()]))
            .collect();
        Ok(Self {
            batch: Batch::padded(&unlabelled)?.pad_to(len)?,
            classes: rows.iter().map(|&(_, class)| class).collect(),
        })
    }
}

/// A classification set encoded and split by length: training texts of at most `train_max_len`
/// characters (less a held-out share), every longer text in bins that double in length.
#[derive(Clone, Debug)]
pub struct ClassData {
    class_names: Vec<String>,
    train: Vec<(Vec<i32>, i32)>,
    bins: Vec<ClassBin>,
    train_max_len: usize,
    /// Characters read as `<unk>`: outside the tokenizer's vocabulary.
    unknown: usize,
}

impl ClassData {
    /// `examples` encoded with `tokenizer` (a masked LM's reads characters it lacks as `<unk>`; any
    /// other refuses them) and split as `split` says.
    pub fn new(
        examples: Vec<Labelled>,
        class_names: &[&str],
        tokenizer: &CharTokenizer,
        split: &LengthSplit,
    ) -> Result<Self> {
        let mut unknown = 0;
        let mut short = Vec::new();
        let mut bins: Vec<ClassBin> = Vec::new();
        for example in examples {
            let len = example.text.chars().count();
            if len == 0 {
                continue;
            }
            if example.class >= class_names.len() {
                return Err(Error::Input(format!(
                    "an example's class {} is not one of the {} classes",
                    example.class,
                    class_names.len()
                )));
            }
            let (ids, unseen) = tokenizer.encode_with_unknown(&example.text)?;
            unknown += unseen;
            let mut tokens = Vec::with_capacity(ids.len() + 1);
            tokens.push(BOS);
            tokens.extend(ids);
            let row = (tokens, example.class as i32);
            match source_bin(len, split.train_max_len) {
                0 => short.push(row),
                bin => {
                    if bins.len() < bin {
                        bins.extend((bins.len() + 1..=bin).map(|b| ClassBin {
                            lengths: source_bin_lengths(b, split.train_max_len),
                            examples: Vec::new(),
                        }));
                    }
                    bins[bin - 1].examples.push(row);
                }
            }
        }
        let mut rng = ChaCha8Rng::seed_from_u64(split.seed);
        short.shuffle(&mut rng);
        let held_out = (short.len() as f64 * split.valid_fraction).round() as usize;
        let valid = short.split_off(short.len() - held_out);
        if short.is_empty() {
            return Err(Error::Input(format!(
                "no text of at most {} characters is left to train on",
                split.train_max_len
            )));
        }
        for bin in &mut bins {
            bin.examples.shuffle(&mut rng);
        }
        bins.insert(
            0,
            ClassBin {
                lengths: source_bin_lengths(0, split.train_max_len),
                examples: valid,
            },
        );
        bins.retain(|bin| !bin.examples.is_empty());
        Ok(Self {
            class_names: class_names.iter().map(|s| s.to_string()).collect(),
            train: short,
            bins,
            train_max_len: split.train_max_len,
            unknown,
        })
    }

    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// The training sequences' longest, in tokens (`[CLS]` included): every training batch is padded
    /// to it, so training builds one graph.
    pub fn train_len(&self) -> usize {
        self.train
            .iter()
            .map(|(tokens, _)| tokens.len())
            .max()
            .unwrap_or(1)
    }

    pub fn train_max_len(&self) -> usize {
        self.train_max_len
    }

    /// How many training examples there are.
    pub fn train_examples(&self) -> usize {
        self.train.len()
    }

    /// The held-out bins: the training lengths' first, then each longer one.
    pub fn bins(&self) -> &[ClassBin] {
        &self.bins
    }

    /// Characters of the texts read as `<unk>`.
    pub fn unknown_chars(&self) -> usize {
        self.unknown
    }

    /// `rows` training examples drawn uniformly, padded to [`ClassData::train_len`].
    pub fn sample_batch<R: Rng + ?Sized>(&self, rng: &mut R, rows: usize) -> Result<ClassBatch> {
        if rows == 0 {
            return Err(Error::Input("a batch needs at least one example".into()));
        }
        let picked: Vec<(Vec<i32>, i32)> = (0..rows)
            .map(|_| self.train[rng.random_range(0..self.train.len())].clone())
            .collect();
        ClassBatch::padded_to(&picked, self.train_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::MOBY_DICK;

    #[test]
    fn shipped_sets_have_their_documented_sizes_and_classes() {
        let names = ClassTask::Names.examples().unwrap();
        // 4,944 + 3,897 distinct names, 419 on both lists left out of each.
        assert_eq!(names.len(), 4944 + 3897 - 2 * 419);
        assert_eq!(names.iter().filter(|n| n.class == 0).count(), 4944 - 419);
        assert_eq!(names.iter().filter(|n| n.text == "Ann").count(), 1);
        assert!(!names.iter().any(|n| n.text == "Alexis"));
        assert!(names.contains(&Labelled {
            text: "Abigail".into(),
            class: 0
        }));
        let spam = ClassTask::Spam.examples().unwrap();
        assert_eq!(spam.len(), 1436);
        assert_eq!(spam.iter().filter(|s| s.class == 1).count(), 718);
        assert!(spam.iter().all(|s| (1..=2048).contains(&s.text.chars().count())));
        let stress = ClassTask::Stress.examples().unwrap();
        assert_eq!(stress.len(), 30969 - 14);
        let counts: Vec<usize> = (0..4)
            .map(|c| stress.iter().filter(|s| s.class == c).count())
            .collect();
        assert_eq!(
            counts,
            [22025 + 234 + 21 + 3, 6434 + 8, 1830, 329 + 58 + 10 + 2 + 1]
        );
        // ELEPHANT  EH1 L AH0 F AH0 N T; ABAD  AH0 B AA1 D; ADOREE  AE0 D ER0 IY1.
        let class_of = |word: &str| stress.iter().find(|s| s.text == word).unwrap().class;
        assert_eq!(
            [class_of("elephant"), class_of("abad"), class_of("adoree")],
            [0, 1, 2]
        );
    }

    #[test]
    fn split_by_length_with_unknown_characters_read_as_unk() {
        let tokenizer = CharTokenizer::from_text(MOBY_DICK).for_masked_lm();
        let split = LengthSplit {
            train_max_len: 6,
            valid_fraction: 0.1,
            seed: 0,
        };
        let examples = vec![
            Labelled {
                text: "Zoë".into(),
                class: 0,
            },
            Labelled {
                text: "Bob".into(),
                class: 1,
            },
            Labelled {
                text: "Alexandra".into(),
                class: 0,
            },
            Labelled {
                text: "Bartholomew".into(),
                class: 1,
            },
            Labelled {
                text: "Christopher-John".into(),
                class: 1,
            },
        ];
        let data = ClassData::new(examples, &["f", "m"], &tokenizer, &split).unwrap();
        assert_eq!(data.unknown_chars(), 1);
        assert_eq!(data.train_examples(), 2);
        assert_eq!(data.train_len(), 4);
        let lengths: Vec<_> = data.bins().iter().map(|b| b.lengths.clone()).collect();
        assert_eq!(lengths, [7..=12, 13..=24]);
        assert_eq!(data.bins()[0].examples.len(), 2);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let batch = data.sample_batch(&mut rng, 3).unwrap();
        assert_eq!(batch.batch.shape(), [3, 4]);
        assert!(batch.batch.tokens().chunks(4).all(|row| row[0] == BOS));
        let plain = CharTokenizer::from_text("abc");
        let err = ClassData::new(
            vec![Labelled {
                text: "abd".into(),
                class: 0,
            }],
            &["x"],
            &plain,
            &split,
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown character 'd'"), "{err}");
    }
}
