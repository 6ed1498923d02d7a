//! Reverse string (deterministic context-free): a binary string, reversed
//! (`tasks/dcf/reverse_string.py`).

use super::{Generator, Level};

pub struct ReverseString;

impl Generator for ReverseString {
    fn level(&self) -> Level {
        Level::ContextFree
    }

    fn input_symbols(&self) -> &'static str {
        "01"
    }

    fn output_symbols(&self) -> &'static str {
        "01"
    }

    fn answer(&self, input: &[u8]) -> Vec<u8> {
        input.iter().rev().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_string_backwards() {
        assert_eq!(ReverseString.answer(&[0, 1, 1, 0, 1, 0]), vec![0, 1, 0, 1, 1, 0]);
        assert_eq!(ReverseString.answer(&[1]), vec![1]);
    }
}
