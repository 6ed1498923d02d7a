//! Tasks posed as language modelling: a prompt, a separator and an answer in one sequence, with the
//! loss on the answer only, so one decoder serves seq2seq tasks (as in the copy-task literature).

use super::{BOS, Batch, CharTokenizer, EOS, IGNORE_INDEX};
use crate::error::Result;

/// One example, the sequence `<bos> prompt separator answer <eos>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    pub prompt: String,
    pub separator: char,
    pub answer: String,
}

impl Example {
    /// `prompt`, `separator`, `answer` as one text, e.g. `hello=HH AH0 L OW1`.
    pub fn text(&self) -> String {
        format!("{}{}{}", self.prompt, self.separator, self.answer)
    }

    /// One batch row: inputs are the sequence without its last token, targets the sequence
    /// shifted by one, `IGNORE_INDEX` up to and including the separator: the prompt is given,
    /// the answer and the end token are what the model learns.
    pub fn encode(&self, tokenizer: &CharTokenizer) -> Result<(Vec<i32>, Vec<i32>)> {
        let mut sequence = vec![BOS];
        sequence.extend(tokenizer.encode(&self.text())?);
        sequence.push(EOS);
        let inputs = sequence[..sequence.len() - 1].to_vec();
        // Targets sequence[1..=given] are the prompt and the separator: given, not learned.
        let given = 1 + self.prompt.chars().count();
        let targets = (1..sequence.len())
            .map(|i| if i <= given { IGNORE_INDEX } else { sequence[i] })
            .collect();
        Ok((inputs, targets))
    }

    /// The examples as one batch, padded to the longest.
    pub fn batch(examples: &[Example], tokenizer: &CharTokenizer) -> Result<Batch> {
        let rows = examples
            .iter()
            .map(|e| e.encode(tokenizer))
            .collect::<Result<Vec<_>>>()?;
        Batch::padded(&rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_counts_the_answer_and_the_end_token() {
        let tokenizer = CharTokenizer::from_text("ab|");
        // ids: 'a' 3, 'b' 4, '|' 5
        let example = Example {
            prompt: "ab".into(),
            separator: '|',
            answer: "ba".into(),
        };
        let (inputs, targets) = example.encode(&tokenizer).unwrap();
        assert_eq!(inputs, vec![BOS, 3, 4, 5, 4, 3]);
        assert_eq!(targets, vec![IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 4, 3, EOS]);
    }
}
