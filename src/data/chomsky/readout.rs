//! A task's examples as the encoder reads them, Delétang et al.'s readout
//! (`make_model_with_empty_targets` in the authors' code): the input symbols, then one placeholder
//! per answer symbol, in one pass. A target (the answer symbol, a class of the task's output
//! alphabet) sits at each placeholder and none elsewhere, so the model's logits at the
//! placeholders are its answer.

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::ChomskyTask;
use crate::data::{Batch, CharTokenizer, IGNORE_INDEX};
use crate::error::{Error, Result};

/// The placeholder, the extra input symbol the code appends; in no task's input alphabet.
pub const PLACEHOLDER: char = '=';

/// Which answer symbols carry a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scoring {
    /// Every answer symbol, as the authors' loss counts them (training).
    Loss,
    /// The symbols the authors' accuracy counts: up to the termination token where a task has
    /// one (evaluation).
    Accuracy,
}

impl ChomskyTask {
    /// The task's input symbols and the placeholder, after posflow's special tokens (which no
    /// example uses: rows of one batch are equally long).
    pub fn tokenizer(self) -> CharTokenizer {
        let placeholder = PLACEHOLDER.to_string();
        CharTokenizer::from_texts([self.generator().input_symbols(), placeholder.as_str()])
    }

    /// The number of classes the model predicts at each placeholder.
    pub fn classes(self) -> usize {
        self.generator().output_symbols().chars().count()
    }

    /// How long the sequence the model reads for inputs of length `n` is: the input and one
    /// placeholder per answer symbol (both fixed by `n`).
    pub fn sequence_len(self, n: usize) -> usize {
        let example = self.example(&mut ChaCha8Rng::seed_from_u64(0), n);
        example.input.len() + example.answer.len()
    }

    /// A batch of `rows` examples of length `n`, their tokens from `tokenizer` (the task's).
    pub fn batch(
        self,
        rng: &mut dyn Rng,
        tokenizer: &CharTokenizer,
        rows: usize,
        n: usize,
        scoring: Scoring,
    ) -> Result<Batch> {
        if n == 0 {
            return Err(Error::Input(format!(
                "{self:?} examples need a length of at least 1"
            )));
        }
        let symbols: Vec<i32> = self
            .generator()
            .input_symbols()
            .chars()
            .map(|c| tokenizer.id(c))
            .collect::<Option<_>>()
            .ok_or_else(|| not_the_tasks(self))?;
        let placeholder = tokenizer.id(PLACEHOLDER).ok_or_else(|| not_the_tasks(self))?;
        let rows: Vec<(Vec<i32>, Vec<i32>)> = (0..rows)
            .map(|_| {
                let example = self.example(rng, n);
                let scored = match scoring {
                    Scoring::Loss => example.answer.len(),
                    Scoring::Accuracy => example.scored,
                };
                let mut tokens: Vec<i32> = example.input.iter().map(|&s| symbols[usize::from(s)]).collect();
                let mut targets = vec![IGNORE_INDEX; tokens.len()];
                tokens.extend(std::iter::repeat_n(placeholder, example.answer.len()));
                targets.extend(
                    example
                        .answer
                        .iter()
                        .enumerate()
                        .map(|(i, &s)| if i < scored { i32::from(s) } else { IGNORE_INDEX }),
                );
                (tokens, targets)
            })
            .collect();
        Batch::padded(&rows)
    }
}

fn not_the_tasks(task: ChomskyTask) -> Error {
    Error::Input(format!(
        "the tokenizer is not {task:?}'s: it lacks one of its symbols or the placeholder '{PLACEHOLDER}'"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_read_at_the_placeholders() {
        let task = ChomskyTask::StackManipulation;
        let tokenizer = task.tokenizer();
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let batch = task.batch(&mut rng, &tokenizer, 3, 6, Scoring::Loss).unwrap();
        assert_eq!(batch.shape(), [3, 6 + 7]);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        for row in 0..3 {
            let example = task.example(&mut rng, 6);
            let tokens = &batch.tokens()[row * 13..(row + 1) * 13];
            let targets = &batch.targets()[row * 13..(row + 1) * 13];
            let text = tokenizer.decode(tokens).unwrap();
            let symbols: Vec<char> = "01pzo".chars().collect();
            let input: String = example.input.iter().map(|&s| symbols[usize::from(s)]).collect();
            assert_eq!(text, format!("{input}======="));
            assert_eq!(&targets[..6], &[IGNORE_INDEX; 6]);
            let answer: Vec<i32> = example.answer.iter().map(|&s| i32::from(s)).collect();
            assert_eq!(&targets[6..], answer.as_slice());
        }
    }

    #[test]
    fn accuracy_scores_up_to_the_termination_token() {
        let task = ChomskyTask::BinaryAddition;
        let tokenizer = task.tokenizer();
        let batch = |scoring| {
            task.batch(&mut ChaCha8Rng::seed_from_u64(1), &tokenizer, 1, 9, scoring)
                .unwrap()
        };
        let (loss, accuracy) = (batch(Scoring::Loss), batch(Scoring::Accuracy));
        let example = task.example(&mut ChaCha8Rng::seed_from_u64(1), 9);
        assert_eq!(loss.counted_targets(), 10);
        assert_eq!(accuracy.counted_targets(), example.scored);
        assert!(example.scored < 10, "{example:?}");
        assert_eq!(
            &loss.targets()[..9 + example.scored],
            &accuracy.targets()[..9 + example.scored]
        );
    }

    #[test]
    fn lengths_and_classes_follow_the_task() {
        assert_eq!(ChomskyTask::DuplicateString.sequence_len(5), 15);
        assert_eq!(ChomskyTask::ModularArithmetic.sequence_len(6), 6);
        assert_eq!(ChomskyTask::ParityCheck.sequence_len(40), 41);
        assert_eq!(ChomskyTask::CycleNavigation.classes(), 5);
        assert_eq!(ChomskyTask::BucketSort.tokenizer().vocab_size(), 3 + 5 + 1);
        let other = ChomskyTask::ParityCheck.tokenizer();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let err = ChomskyTask::BucketSort
            .batch(&mut rng, &other, 1, 3, Scoring::Loss)
            .unwrap_err();
        assert!(err.to_string().contains("lacks one of its symbols"), "{err}");
    }
}
