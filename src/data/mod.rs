//! Data for training and evaluation: a character tokenizer, the corpora shipped under `data/`,
//! and the tasks built from them, each producing [`Batch`]es of token ids and targets.
//!
//! - [`LanguageModelData`]: next-character prediction over a corpus (Moby Dick).
//! - [`MaskedText`]: the same corpus for a masked LM, BERT's share of each sequence hidden.
//! - [`Pronunciations`]: `word=phonemes` from the CMU dictionary, loss on the phonemes only.
//! - [`SyntheticTask`]: copy (`abc|abc`) and reverse (`abc|cba`), to test length extrapolation.
//! - [`ClassData`]: texts with a class each ([`ClassTask`]: names, spam, stress), for a classifier.
//! - [`LengthBins`]: loss and accuracy per sequence-length bin, for evaluation.
//!
//! For an encoder-decoder, (source, target) [`Pair`]s in [`PairBatch`]es, split by source length
//! into training pairs and evaluation bins ([`PairData`]), with one [`PairTokenizer`] for both sides:
//!
//! - [`cmudict_pairs`]: spelling → phonemes (`hello` → `HH AH0 L OW1`), each phoneme one token.
//! - [`PairTask`]: reverse, sort and decimal addition of generated strings.
//! - [`text_pairs`]: a tab-separated file of one's own, by character or by [`WordTokenizer`] word.
//!
//! For length generalization as Delétang et al. and Ruoss et al. measure it, the algorithmic tasks
//! of [`chomsky`]: parity, stacks, copies, sums and sorts, read by an encoder at placeholders.

mod batch;
mod bins;
pub mod chomsky;
mod classes;
mod cmudict;
mod cmudict_pairs;
mod corpus;
mod language_model;
mod masked_lm;
mod pair_data;
mod pair_tokenizer;
mod pairs;
mod prompted;
mod ratio_error;
mod synthetic;
mod synthetic_pairs;
mod task_tokenizer;
mod text_pairs;
mod tokenizer;
mod word_tokenizer;

pub use batch::Batch;
pub use bins::{BinTotals, LengthBins, argmax, cross_entropy, source_bin, source_bin_lengths};
pub use classes::{ClassBatch, ClassBin, ClassData, ClassTask, Labelled};
pub use cmudict::{Pronunciation, Pronunciations, parse_cmudict};
pub use cmudict_pairs::{cmudict_pairs, pronunciation_pairs};
pub use corpus::{CMUDICT, MOBY_DICK};
pub use language_model::LanguageModelData;
pub use masked_lm::{MASKED_SHARE, MaskedText, masked_count};
pub use pair_data::{LengthSplit, MaxLengths, PairBin, PairData};
pub use pair_tokenizer::PairTokenizer;
pub use pairs::{Pair, PairBatch};
pub use prompted::Example;
pub use ratio_error::RatioMoments;
pub use synthetic::SyntheticTask;
pub use synthetic_pairs::PairTask;
pub use task_tokenizer::TaskTokenizer;
pub use text_pairs::{Tokenization, text_pairs};
pub use tokenizer::{BOS, CharTokenizer, EOS, MASK, MASKED_LM_TOKENS, PAD, SPECIAL_TOKENS, UNK};
pub use word_tokenizer::WordTokenizer;

/// The target of a position that carries no loss (a prompt or padding), shared by the data and
/// the cross-entropy loss (`Graph::cross_entropy`'s `ignore_index`). -100 as in PyTorch, so
/// batches exported to PyTorch need no translation.
pub const IGNORE_INDEX: i32 = -100;
