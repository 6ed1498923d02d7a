//! Filling the `<mask>`s of a text with a masked LM: its pretraining task, run as inference. Every
//! mask is predicted at once from the whole text around it (BERT's way, not left to right).

use super::INFERENCE_POSITIONS_SEED;
use super::generate::softmax;
use crate::data::{BOS, CharTokenizer, IGNORE_INDEX, MASK};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::Graph;
use crate::model::Tokens;
use crate::model::{GraphOptions, Model, ModelKind};
use crate::params::ParamStore;

/// A text with its masks filled.
#[derive(Clone, Debug, PartialEq)]
pub struct Filled {
    /// The text, each `<mask>` replaced by its most likely character.
    pub text: String,
    /// For each mask in order: the most likely characters and their probabilities, best first.
    pub guesses: Vec<Vec<(char, f32)>>,
}

/// Fills masks with one masked LM.
pub struct MaskFiller<'a> {
    model: &'a Model,
    params: &'a ParamStore,
    tokenizer: &'a CharTokenizer,
}

impl<'a> MaskFiller<'a> {
    /// `model` must be a masked LM and `tokenizer` its own (with `<mask>`).
    pub fn new(model: &'a Model, params: &'a ParamStore, tokenizer: &'a CharTokenizer) -> Result<Self> {
        if !matches!(model.config().kind, ModelKind::MaskedLm {}) || !tokenizer.is_masked_lm() {
            return Err(Error::Input(
                "only a masked LM fills <mask>s; this model continues text (posflow sample without \
                 <mask> in the prompt)"
                    .into(),
            ));
        }
        Ok(Self {
            model,
            params,
            tokenizer,
        })
    }

    /// `text` with each `<mask>` written in it filled, and the `top` most likely characters of
    /// each. A text without a mask, or with a character outside the vocabulary, is an error.
    pub async fn fill(&self, text: &str, top: usize) -> Result<Filled> {
        let mut tokens = vec![BOS];
        tokens.extend(self.tokenizer.encode_with_masks(text)?);
        let masks: Vec<usize> = (0..tokens.len()).filter(|&i| tokens[i] == MASK).collect();
        if masks.is_empty() {
            return Err(Error::Input(
                "the text has no <mask> to fill: write <mask> where a character should be guessed".into(),
            ));
        }
        let len = tokens.len();
        let mut g = Graph::new();
        let graph = self
            .model
            .build(&mut g, Tokens { batch: 1, len }, GraphOptions::default())?;
        let exec = Executor::new(&g, &[graph.logits], self.params)?;
        graph.draw_positions(&exec, INFERENCE_POSITIONS_SEED)?;
        graph.feed(&exec, &tokens, &vec![IGNORE_INDEX; len], None)?;
        exec.run()?;
        exec.check().await?;
        let logits = exec.read(graph.logits).await?;
        let vocab = self.model.config().vocab;
        let first_char = self.tokenizer.specials().len();
        let mut guesses = Vec::with_capacity(masks.len());
        for &position in &masks {
            // Over the characters alone: a special token is never the answer.
            let row = &logits[position * vocab + first_char..(position + 1) * vocab];
            let mut ranked: Vec<(char, f32)> =
                self.tokenizer.chars().iter().copied().zip(softmax(row)).collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
            ranked.truncate(top.max(1));
            guesses.push(ranked);
        }
        let mut filled = String::with_capacity(text.len());
        let mut best = guesses.iter().map(|ranked| ranked[0].0);
        for &id in &tokens[1..] {
            if id == MASK {
                filled.extend(best.next());
            } else {
                filled.push_str(&self.tokenizer.token_name(id)?);
            }
        }
        Ok(Filled {
            text: filled,
            guesses,
        })
    }
}
