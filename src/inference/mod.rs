//! Using a trained model: load it from a checkpoint, then predict the next character, continue
//! a prompt, or fill a masked LM's `<mask>`s. The same code runs natively and in the browser.

mod decode;
#[cfg(test)]
mod decode_tests;
mod encodings;
mod fill;
mod generate;
mod saved;

pub use decode::{DecodeOptions, Hypothesis, MAX_BEAM, Seq2SeqDecoder};
pub use encodings::EncodingCache;
pub use fill::{Filled, MaskFiller};
pub use generate::Generator;
pub use saved::SavedModel;

/// The seed of the randomized positions (`random_positions`) that generation and mask filling
/// read: a text of n tokens sits at one fixed sorted sample of n positions, as Ruoss et al. test
/// (a draw for the sequence's own length), fixed so that the same prompt gives the same answer.
pub const INFERENCE_POSITIONS_SEED: u64 = 0;
