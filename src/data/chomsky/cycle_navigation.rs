//! Cycle navigation (regular): moves on a cycle of 5 states from state 0; the answer is the final
//! state. The code's symbols 0, 1, 2 move by −1, 0, +1 (`tasks/regular/cycle_navigation.py`,
//! `actions - 1`); Delétang et al.'s text maps them otherwise (0 stay, 1 right, 2 left).

use super::{Generator, Level};

pub struct CycleNavigation;

const CYCLE: i64 = 5;

impl Generator for CycleNavigation {
    fn level(&self) -> Level {
        Level::Regular
    }

    /// Move −1, stay, move +1.
    fn input_symbols(&self) -> &'static str {
        "-0+"
    }

    fn output_symbols(&self) -> &'static str {
        "01234"
    }

    fn answer(&self, input: &[u8]) -> Vec<u8> {
        let moved: i64 = input.iter().map(|&s| i64::from(s) - 1).sum();
        vec![moved.rem_euclid(CYCLE) as u8]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_wrap_around_the_cycle() {
        // The docstring's "1 -1 0 -1 -1 -> class 3" in the code's symbols (move + 1).
        assert_eq!(CycleNavigation.answer(&[2, 0, 1, 0, 0]), vec![3]);
        // "1 1 1 -1 -> 2".
        assert_eq!(CycleNavigation.answer(&[2, 2, 2, 0]), vec![2]);
        // Six steps right: once round and one more.
        assert_eq!(CycleNavigation.answer(&[2; 6]), vec![1]);
        assert_eq!(CycleNavigation.answer(&[1, 1]), vec![0]);
    }
}
