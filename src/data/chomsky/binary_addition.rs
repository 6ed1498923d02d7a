//! Binary addition (context-sensitive): two little-endian binary numbers joined by `+` (n symbols
//! in all); the answer is their sum, little-endian without trailing zeros, a termination token,
//! and zeros to n + 1 symbols (`tasks/cs/binary_addition.py`). Only the symbols up to the
//! termination token are scored. As in the code, each number has a length drawn first (the
//! first 1..n−2 bits, the second the rest) and is then uniform among the nonzero numbers of that
//! many bits, trailing zeros allowed; for n ≤ 2 the input is one number below 2ⁿ − 1.

use rand::{Rng, RngExt};

use super::{Generator, Level, terminated, uniform_symbols, up_to_terminator};

pub struct BinaryAddition;

const PLUS: u8 = 2;
const END: u8 = 2;

impl Generator for BinaryAddition {
    fn level(&self) -> Level {
        Level::ContextSensitive
    }

    fn input_symbols(&self) -> &'static str {
        "01+"
    }

    fn output_symbols(&self) -> &'static str {
        "01$"
    }

    fn input(&self, rng: &mut dyn Rng, n: usize) -> Vec<u8> {
        if n <= 2 {
            // The code's randint(0, 2^n − 1) excludes its upper bound: every n-bit pattern but
            // all ones.
            return draw_until(rng, n, |bits| bits.contains(&0));
        }
        let first = rng.random_range(1..n - 1);
        let nonzero = |bits: &[u8]| bits.contains(&1);
        let mut input = draw_until(rng, first, nonzero);
        input.push(PLUS);
        input.extend(draw_until(rng, n - 1 - first, nonzero));
        input
    }

    fn answer(&self, input: &[u8]) -> Vec<u8> {
        let mut sum: Vec<u8> = Vec::new();
        for number in input.split(|&s| s == PLUS) {
            let mut carry = 0;
            for i in 0..number.len().max(sum.len()) {
                let total = sum.get(i).copied().unwrap_or(0) + number.get(i).copied().unwrap_or(0) + carry;
                match sum.get_mut(i) {
                    Some(bit) => *bit = total % 2,
                    None => sum.push(total % 2),
                }
                carry = total / 2;
            }
            if carry == 1 {
                sum.push(1);
            }
        }
        while sum.len() > 1 && sum.last() == Some(&0) {
            sum.pop();
        }
        if sum.is_empty() {
            sum.push(0);
        }
        terminated(sum, END, input.len() + 1)
    }

    fn scored(&self, answer: &[u8]) -> usize {
        up_to_terminator(answer, END)
    }
}

/// `n` uniform bits, drawn again until `accept` takes them: uniform over the accepted patterns.
fn draw_until(rng: &mut dyn Rng, n: usize, accept: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    loop {
        let bits = uniform_symbols(rng, n, 2);
        if accept(&bits) {
            return bits;
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    #[test]
    fn the_codes_examples() {
        // 001 + 01101 = 01011 $ 000 (4 + 22 = 26)
        let answer = BinaryAddition.answer(&[0, 0, 1, PLUS, 0, 1, 1, 0, 1]);
        assert_eq!(answer, vec![0, 1, 0, 1, 1, END, 0, 0, 0, 0]);
        assert_eq!(BinaryAddition.scored(&answer), 6);
        // 1001 + 000001 = 100101 $ 0000 (9 + 32 = 41)
        let answer = BinaryAddition.answer(&[1, 0, 0, 1, PLUS, 0, 0, 0, 0, 0, 1]);
        assert_eq!(answer, vec![1, 0, 0, 1, 0, 1, END, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn carries_run_past_both_numbers_and_zero_is_one_symbol() {
        // 3 + 1 = 4: 11 + 1 = 001.
        assert_eq!(BinaryAddition.answer(&[1, 1, PLUS, 1]), vec![0, 0, 1, END, 0]);
        // A lone number (n ≤ 2): 0 is written "0".
        assert_eq!(BinaryAddition.answer(&[0, 0]), vec![0, END, 0]);
        assert_eq!(BinaryAddition.answer(&[0, 1]), vec![0, 1, END]);
    }

    #[test]
    fn numbers_are_nonzero_and_fill_n_symbols() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        for n in 3..30 {
            let input = BinaryAddition.input(&mut rng, n);
            assert_eq!(input.len(), n);
            let numbers: Vec<&[u8]> = input.split(|&s| s == PLUS).collect();
            assert_eq!(numbers.len(), 2);
            assert!(numbers.iter().all(|bits| !bits.is_empty() && bits.contains(&1)));
        }
        for _ in 0..50 {
            assert_ne!(BinaryAddition.input(&mut rng, 2), vec![1, 1]);
        }
    }
}
