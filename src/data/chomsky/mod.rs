//! The algorithmic tasks of Delétang et al. ("Neural Networks and the Chomsky Hierarchy", ICLR
//! 2023) as Ruoss et al. ("Randomized Positional Encodings Boost Length Generalization of
//! Transformers", ACL 2023) train them: a file per task, each written from its definition in the
//! authors' code (google-deepmind/randomized_positional_encodings, `tasks/`); where that code and
//! the papers' text differ, the code's, since it produced the published numbers.
//!
//! An example of length n is an input of n symbols (modular arithmetic's even n one fewer, as the
//! code does) and an answer of a task-fixed number of symbols. The model reads the input followed
//! by one placeholder per answer symbol and is scored at the placeholders; tasks whose answer ends
//! with a termination token score only the symbols up to it ([`Generator::scored`]).

mod binary_addition;
mod bucket_sort;
mod cycle_navigation;
mod duplicate_string;
mod even_pairs;
mod missing_duplicate_string;
mod modular_arithmetic;
mod odds_first;
mod parity_check;
mod readout;
mod reverse_string;
mod stack_manipulation;

pub use readout::{PLACEHOLDER, Scoring};

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

/// The level of the Chomsky hierarchy a task's language sits at: the papers group their results
/// by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Regular,
    /// Deterministic context-free.
    ContextFree,
    ContextSensitive,
}

/// What a task is: its symbols, how an input of a length is drawn, and the answer to an input.
pub trait Generator {
    fn level(&self) -> Level;

    /// The input symbols, one character each, the i-th character being symbol i.
    fn input_symbols(&self) -> &'static str;

    /// The answer's symbols (the classes the model predicts at each placeholder).
    fn output_symbols(&self) -> &'static str;

    /// A random input of length `n` (at least 1), each symbol an index into `input_symbols`:
    /// by default, `n` symbols drawn uniformly from the whole input alphabet, as most tasks do.
    fn input(&self, rng: &mut dyn Rng, n: usize) -> Vec<u8> {
        let alphabet = self.input_symbols().chars().count();
        uniform_symbols(
            rng,
            n,
            u8::try_from(alphabet).expect("a task's alphabet fits a byte"),
        )
    }

    /// The answer to `input`, each symbol an index into `output_symbols`; its length depends on
    /// the input's length alone.
    fn answer(&self, input: &[u8]) -> Vec<u8>;

    /// How many leading symbols of `answer` the accuracy counts: all of them, except for the tasks
    /// whose answer ends with a termination token and zero padding, which count up to and
    /// including the first termination token (the code's `accuracy_mask`). The loss counts every
    /// symbol in either case, as the authors' loss does.
    fn scored(&self, answer: &[u8]) -> usize {
        answer.len()
    }
}

/// The tasks, by the names the authors' code gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChomskyTask {
    EvenPairs,
    /// Modular arithmetic without brackets ("simple"), modulus 5.
    ModularArithmetic,
    ParityCheck,
    CycleNavigation,
    ReverseString,
    StackManipulation,
    DuplicateString,
    MissingDuplicateString,
    OddsFirst,
    BinaryAddition,
    BucketSort,
}

/// One example: the input, the answer and how many of the answer's symbols are scored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChomskyExample {
    pub input: Vec<u8>,
    pub answer: Vec<u8>,
    pub scored: usize,
}

impl ChomskyTask {
    pub const ALL: [ChomskyTask; 11] = [
        Self::EvenPairs,
        Self::ModularArithmetic,
        Self::ParityCheck,
        Self::CycleNavigation,
        Self::ReverseString,
        Self::StackManipulation,
        Self::DuplicateString,
        Self::MissingDuplicateString,
        Self::OddsFirst,
        Self::BinaryAddition,
        Self::BucketSort,
    ];

    pub fn generator(self) -> &'static dyn Generator {
        match self {
            Self::EvenPairs => &even_pairs::EvenPairs,
            Self::ModularArithmetic => &modular_arithmetic::ModularArithmetic,
            Self::ParityCheck => &parity_check::ParityCheck,
            Self::CycleNavigation => &cycle_navigation::CycleNavigation,
            Self::ReverseString => &reverse_string::ReverseString,
            Self::StackManipulation => &stack_manipulation::StackManipulation,
            Self::DuplicateString => &duplicate_string::DuplicateString,
            Self::MissingDuplicateString => &missing_duplicate_string::MissingDuplicateString,
            Self::OddsFirst => &odds_first::OddsFirst,
            Self::BinaryAddition => &binary_addition::BinaryAddition,
            Self::BucketSort => &bucket_sort::BucketSort,
        }
    }

    /// A random example of length `n` (at least 1).
    pub fn example(self, rng: &mut dyn Rng, n: usize) -> ChomskyExample {
        let generator = self.generator();
        let input = generator.input(rng, n.max(1));
        let answer = generator.answer(&input);
        let scored = generator.scored(&answer);
        ChomskyExample {
            input,
            answer,
            scored,
        }
    }
}

/// `n` symbols drawn uniformly from `0..alphabet`.
fn uniform_symbols(rng: &mut dyn Rng, n: usize, alphabet: u8) -> Vec<u8> {
    (0..n).map(|_| rng.random_range(0..alphabet)).collect()
}

/// `answer` followed by the termination token and zeros, to `len` symbols: the answer layout of
/// the tasks that end theirs (stack manipulation, binary addition).
fn terminated(mut answer: Vec<u8>, terminator: u8, len: usize) -> Vec<u8> {
    answer.push(terminator);
    answer.resize(len.max(answer.len()), 0);
    answer
}

/// The symbols up to and including the first `terminator`: what the code's `accuracy_mask`
/// keeps (all of them if there is none).
fn up_to_terminator(answer: &[u8], terminator: u8) -> usize {
    answer
        .iter()
        .position(|&s| s == terminator)
        .map_or(answer.len(), |i| i + 1)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    #[test]
    fn every_example_uses_its_alphabets_and_a_length_fixed_by_n() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for task in ChomskyTask::ALL {
            let generator = task.generator();
            let inputs = generator.input_symbols().chars().count();
            let outputs = generator.output_symbols().chars().count();
            for n in 1..=30 {
                let first = task.example(&mut rng, n);
                for _ in 0..20 {
                    let example = task.example(&mut rng, n);
                    assert!(example.input.iter().all(|&s| usize::from(s) < inputs), "{task:?}");
                    assert!(
                        example.answer.iter().all(|&s| usize::from(s) < outputs),
                        "{task:?}"
                    );
                    assert_eq!(example.input.len(), first.input.len(), "{task:?} n {n}");
                    assert_eq!(example.answer.len(), first.answer.len(), "{task:?} n {n}");
                    assert!(example.scored >= 1 && example.scored <= example.answer.len());
                }
                let expected = if task == ChomskyTask::ModularArithmetic && n % 2 == 0 {
                    n - 1
                } else {
                    n
                };
                assert_eq!(first.input.len(), expected, "{task:?} n {n}");
            }
        }
    }

    #[test]
    fn answer_lengths_are_the_codes_output_lengths() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut answer_len = |task: ChomskyTask, n: usize| task.example(&mut rng, n).answer.len();
        for n in [1, 2, 7, 40] {
            assert_eq!(answer_len(ChomskyTask::ParityCheck, n), 1);
            assert_eq!(answer_len(ChomskyTask::ReverseString, n), n);
            assert_eq!(answer_len(ChomskyTask::DuplicateString, n), 2 * n);
            assert_eq!(answer_len(ChomskyTask::StackManipulation, n), n + 1);
            assert_eq!(answer_len(ChomskyTask::BinaryAddition, n), n + 1);
            assert_eq!(answer_len(ChomskyTask::BucketSort, n), n);
        }
    }

    #[test]
    fn names_read_as_the_authors_code_writes_them() {
        let task: ChomskyTask = serde_json::from_str("\"missing_duplicate_string\"").unwrap();
        assert_eq!(task, ChomskyTask::MissingDuplicateString);
        assert!(serde_json::from_str::<ChomskyTask>("\"solve_equation\"").is_err());
    }

    #[test]
    fn a_terminated_answer_is_scored_through_its_terminator() {
        assert_eq!(terminated(vec![1, 0], 2, 5), vec![1, 0, 2, 0, 0]);
        assert_eq!(up_to_terminator(&[1, 0, 2, 0, 0], 2), 3);
        assert_eq!(up_to_terminator(&[2, 0], 2), 1);
    }
}
