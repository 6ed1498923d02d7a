//! Odds first (context-sensitive): a binary string's symbols at the code's odd 0-based indices
//! first, then those at even ones: s2 s4 … s1 s3 … in 1-based terms (`tasks/cs/odds_first.py`,
//! `[1::2]` then `[::2]`). Its docstring and Delétang et al.'s text give the other order.

use super::{Generator, Level};

pub struct OddsFirst;

impl Generator for OddsFirst {
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
        let odd = input.iter().skip(1).step_by(2);
        let even = input.iter().step_by(2);
        odd.chain(even).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_indices_then_even_ones() {
        // indices 0..5 hold 0 1 1 0 1 1: odd indices (1, 3, 5) hold 1 0 1, even ones 0 1 1.
        assert_eq!(OddsFirst.answer(&[0, 1, 1, 0, 1, 1]), vec![1, 0, 1, 0, 1, 1]);
        assert_eq!(OddsFirst.answer(&[1, 1, 0]), vec![1, 1, 0]);
        assert_eq!(OddsFirst.answer(&[0]), vec![0]);
    }
}
