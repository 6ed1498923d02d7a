//! Missing duplicate (context-sensitive): a binary string w of ⌊n/2⌋ symbols written twice, ww,
//! with one symbol hidden (`?`), and `_` after it when n is odd; the answer is the hidden bit
//! (`tasks/cs/missing_duplicate_string.py`). For n = 1 the code gives the input 1 and the
//! answer 1.

use rand::{Rng, RngExt};

use super::{Generator, Level, uniform_symbols};

pub struct MissingDuplicateString;

const HIDDEN: u8 = 2;
const PAD: u8 = 3;

impl Generator for MissingDuplicateString {
    fn level(&self) -> Level {
        Level::ContextSensitive
    }

    fn input_symbols(&self) -> &'static str {
        "01?_"
    }

    fn output_symbols(&self) -> &'static str {
        "01"
    }

    fn input(&self, rng: &mut dyn Rng, n: usize) -> Vec<u8> {
        if n == 1 {
            return vec![1];
        }
        let mut input = uniform_symbols(rng, n / 2, 2).repeat(2);
        let hidden = rng.random_range(0..input.len());
        input[hidden] = HIDDEN;
        if n % 2 == 1 {
            input.push(PAD);
        }
        input
    }

    fn answer(&self, input: &[u8]) -> Vec<u8> {
        let Some(hidden) = input.iter().position(|&s| s == HIDDEN) else {
            return vec![1];
        };
        let half = input.iter().filter(|&&s| s != PAD).count() / 2;
        let twin = if hidden < half {
            hidden + half
        } else {
            hidden - half
        };
        vec![input[twin]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_examples() {
        // 0110 0?10 -> 1
        assert_eq!(
            MissingDuplicateString.answer(&[0, 1, 1, 0, 0, HIDDEN, 1, 0]),
            vec![1]
        );
        // 101 1?1 _ -> 0
        assert_eq!(
            MissingDuplicateString.answer(&[1, 0, 1, 1, HIDDEN, 1, PAD]),
            vec![0]
        );
        // The hidden symbol in the first copy.
        assert_eq!(MissingDuplicateString.answer(&[HIDDEN, 1, 0, 1]), vec![0]);
        assert_eq!(MissingDuplicateString.answer(&[1]), vec![1]);
    }
}
