//! Modular arithmetic without brackets (regular): digits 0–4 alternating with `+`, `−` and `×`,
//! evaluated with the usual precedence, modulo 5 (`tasks/regular/modular_arithmetic.py`,
//! modulus 5, all three operators). An input has odd length: the code draws n − 1 symbols for an
//! even n (Delétang et al.'s text says n + 1).

use rand::{Rng, RngExt};

use super::{Generator, Level};

pub struct ModularArithmetic;

const MODULUS: u8 = 5;
const PLUS: u8 = MODULUS;
const MINUS: u8 = MODULUS + 1;
const TIMES: u8 = MODULUS + 2;
/// The code's blank `_`: in its alphabet, never drawn; read as `+` between terms and 0 in place
/// of a digit, as the code's `_replace_blanks` does.
const BLANK: u8 = MODULUS + 3;

impl Generator for ModularArithmetic {
    fn level(&self) -> Level {
        Level::Regular
    }

    fn input_symbols(&self) -> &'static str {
        "01234+-*_"
    }

    fn output_symbols(&self) -> &'static str {
        "01234"
    }

    fn input(&self, rng: &mut dyn Rng, n: usize) -> Vec<u8> {
        let len = if n % 2 == 1 { n } else { n - 1 };
        (0..len)
            .map(|i| match i % 2 {
                0 => rng.random_range(0..MODULUS),
                _ => [PLUS, TIMES, MINUS][rng.random_range(0..3usize)],
            })
            .collect()
    }

    fn answer(&self, input: &[u8]) -> Vec<u8> {
        let digit = |s: u8| if s == BLANK { 0 } else { i64::from(s) };
        let mut total = 0i64;
        let mut sign = 1i64;
        let mut product = input.first().map_or(0, |&s| digit(s));
        for pair in input.get(1..).unwrap_or_default().chunks(2) {
            let (op, value) = (pair[0], pair.get(1).map_or(0, |&s| digit(s)));
            if op == TIMES {
                product = product * value % i64::from(MODULUS);
            } else {
                total = (total + sign * product).rem_euclid(i64::from(MODULUS));
                sign = if op == MINUS { -1 } else { 1 };
                product = value;
            }
        }
        total += sign * product;
        vec![total.rem_euclid(i64::from(MODULUS)) as u8]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "1 + 2 * 3" as symbols.
    fn parse(text: &str) -> Vec<u8> {
        let symbols = ModularArithmetic.input_symbols();
        text.chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| symbols.find(c).unwrap() as u8)
            .collect()
    }

    #[test]
    fn the_codes_examples_with_precedence() {
        assert_eq!(ModularArithmetic.answer(&parse("1 + 2 * 3")), vec![2]);
        assert_eq!(ModularArithmetic.answer(&parse("1 - 1 - 1")), vec![4]);
        assert_eq!(ModularArithmetic.answer(&parse("0 * 1 + 4 * 3 - 2")), vec![0]);
        // A minus negates the whole product after it: 4 − 2·3 = −2 ≡ 3.
        assert_eq!(ModularArithmetic.answer(&parse("4 - 2 * 3")), vec![3]);
        assert_eq!(ModularArithmetic.answer(&parse("3")), vec![3]);
        // Blanks: `_` between terms adds, in place of a digit it is 0.
        assert_eq!(ModularArithmetic.answer(&parse("2 _ 2 * _")), vec![2]);
    }

    #[test]
    fn digits_and_operators_alternate_over_an_odd_length() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let input = ModularArithmetic.input(&mut rng, 10);
        assert_eq!(input.len(), 9);
        for (i, &s) in input.iter().enumerate() {
            assert_eq!(s < MODULUS, i % 2 == 0, "{input:?}");
            assert_ne!(s, BLANK);
        }
    }
}
