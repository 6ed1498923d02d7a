//! Stack manipulation (deterministic context-free): a stack of bits given bottom to top, then
//! actions (pop, push 0, push 1; a pop on an empty stack does nothing); the answer is the final
//! stack top to bottom, a termination token, and zeros to n + 1 symbols
//! (`tasks/dcf/stack_manipulation.py`). Only the symbols up to the termination token are scored.

use rand::{Rng, RngExt};

use super::{Generator, Level, terminated, uniform_symbols, up_to_terminator};

pub struct StackManipulation;

const POP: u8 = 2;
const PUSH_0: u8 = 3;
const PUSH_1: u8 = 4;
const END: u8 = 2;

impl Generator for StackManipulation {
    fn level(&self) -> Level {
        Level::ContextFree
    }

    /// Bits, then `p` pop, `z` push 0, `o` push 1.
    fn input_symbols(&self) -> &'static str {
        "01pzo"
    }

    /// Bits, then `$` ends the stack.
    fn output_symbols(&self) -> &'static str {
        "01$"
    }

    fn input(&self, rng: &mut dyn Rng, n: usize) -> Vec<u8> {
        if n == 1 {
            return uniform_symbols(rng, 1, 2);
        }
        let stack = rng.random_range(1..n);
        let mut input = uniform_symbols(rng, stack, 2);
        input.extend((stack..n).map(|_| rng.random_range(POP..=PUSH_1)));
        input
    }

    fn answer(&self, input: &[u8]) -> Vec<u8> {
        let mut stack = Vec::new();
        for &symbol in input {
            match symbol {
                POP => {
                    stack.pop();
                }
                PUSH_0 => stack.push(0),
                PUSH_1 => stack.push(1),
                bit => stack.push(bit),
            }
        }
        stack.reverse();
        terminated(stack, END, input.len() + 1)
    }

    fn scored(&self, answer: &[u8]) -> usize {
        up_to_terminator(answer, END)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_examples() {
        // 0 1 1 0 PUSH 1 POP POP -> 1 1 0 $ 0 0 0 0
        let answer = StackManipulation.answer(&[0, 1, 1, 0, PUSH_1, POP, POP]);
        assert_eq!(answer, vec![1, 1, 0, END, 0, 0, 0, 0]);
        assert_eq!(StackManipulation.scored(&answer), 4);
        // 1 1 0 POP POP POP -> $ 0 0 0 0 0 0
        let answer = StackManipulation.answer(&[1, 1, 0, POP, POP, POP]);
        assert_eq!(answer, vec![END, 0, 0, 0, 0, 0, 0]);
        assert_eq!(StackManipulation.scored(&answer), 1);
    }

    #[test]
    fn a_pop_on_an_empty_stack_does_nothing() {
        assert_eq!(
            StackManipulation.answer(&[1, POP, POP, PUSH_0]),
            vec![0, END, 0, 0, 0]
        );
    }
}
