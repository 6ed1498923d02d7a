//! Duplicate string (context-sensitive): a binary string w, answered with ww
//! (`tasks/cs/duplicate_string.py`, duplication 2).

use super::{Generator, Level};

pub struct DuplicateString;

impl Generator for DuplicateString {
    fn level(&self) -> Level {
        Level::ContextSensitive
    }

    fn input_symbols(&self) -> &'static str {
        "01"
    }

    fn output_symbols(&self) -> &'static str {
        "01"
    }

    fn answer(&self, input: &[u8]) -> Vec<u8> {
        input.repeat(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_string_twice() {
        assert_eq!(DuplicateString.answer(&[1, 0, 1]), vec![1, 0, 1, 1, 0, 1]);
    }
}
