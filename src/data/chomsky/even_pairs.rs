//! Even pairs (regular): is the number of unequal neighbours (`01` and `10`) in a binary string
//! odd? Class 1 if odd, 0 if even (`tasks/regular/even_pairs.py`).

use super::{Generator, Level};

pub struct EvenPairs;

impl Generator for EvenPairs {
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
        let unequal = input.windows(2).filter(|pair| pair[0] != pair[1]).count();
        vec![(unequal % 2) as u8]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_examples() {
        // 001110: one 01 and one 10, even; 0101001: three 01 and two 10, odd.
        assert_eq!(EvenPairs.answer(&[0, 0, 1, 1, 1, 0]), vec![0]);
        assert_eq!(EvenPairs.answer(&[0, 1, 0, 1, 0, 0, 1]), vec![1]);
        assert_eq!(EvenPairs.answer(&[1]), vec![0]);
    }
}
