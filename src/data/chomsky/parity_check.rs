//! Parity check (regular): the number of 1s in a binary string, modulo 2
//! (`tasks/regular/parity_check.py`).

use super::{Generator, Level};

pub struct ParityCheck;

impl Generator for ParityCheck {
    fn level(&self) -> Level {
        Level::Regular
    }

    fn input_symbols(&self) -> &'static str {
        "01"
    }

    fn output_symbols(&self) -> &'static str {
        "01"
    }

    fn answer(&self, input: &[u8]) -> Vec<u8> {
        vec![(input.iter().filter(|&&s| s == 1).count() % 2) as u8]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_examples() {
        assert_eq!(ParityCheck.answer(&[1, 0, 1, 0, 1, 0, 0]), vec![1]);
        assert_eq!(ParityCheck.answer(&[0, 1, 1, 1, 1]), vec![0]);
    }
}
