//! Training part of a loaded model on a text of one's own, one step at a time: e.g. only FLOATER's
//! dynamics and initial values (a few thousand values) of a model trained on Moby Dick, live in
//! the browser while its encodings are drawn. The parameters are shared with whoever else holds
//! the store (a generator: call [`crate::inference::Generator::refresh_encodings`] after steps).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::program::{BatchShape, TrainingProgram};
use super::trainer::positions_seed;
use crate::data::{CharTokenizer, LanguageModelData};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::optim::AdamW;
use crate::params::ParamStore;

/// What a fine-tuning run trains, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct FineTuneSettings {
    /// Name prefixes of the parameters to train; the others stay as they are.
    pub trainable: Vec<String>,
    /// Characters per training window.
    pub seq_len: usize,
    /// Windows per step.
    pub batch: usize,
    /// AdamW's learning rate, constant.
    pub lr: f32,
    /// Seeds the windows drawn at each step.
    pub seed: u64,
}

impl Default for FineTuneSettings {
    /// The position encoding alone, 8 windows of 64 characters, lr 3e-3.
    fn default() -> Self {
        Self {
            trainable: vec!["posenc.".into()],
            seq_len: 64,
            batch: 8,
            lr: 3e-3,
            seed: 0,
        }
    }
}

pub struct FineTune {
    program: TrainingProgram,
    data: LanguageModelData,
    settings: FineTuneSettings,
    step: usize,
}

impl FineTune {
    /// Fine-tunes `params` (shared, not copied) of `model` on `text`, which must use only
    /// characters of `tokenizer` and be longer than one window.
    pub fn new(
        model: &Model,
        params: &ParamStore,
        tokenizer: &CharTokenizer,
        text: &str,
        settings: FineTuneSettings,
    ) -> Result<Self> {
        let tokens = tokenizer.encode(text).map_err(|e| {
            Error::Input(format!(
                "the fine-tuning text has a character the model never saw: {e}"
            ))
        })?;
        if tokens.len() <= settings.seq_len {
            return Err(Error::Input(format!(
                "the fine-tuning text has {} characters; windows of {} need at least {}",
                tokens.len(),
                settings.seq_len,
                settings.seq_len + 1
            )));
        }
        let adamw = AdamW {
            lr: settings.lr,
            ..AdamW::default()
        };
        let program = TrainingProgram::with_params(
            model,
            params.clone(),
            BatchShape::Tokens {
                batch: settings.batch,
                len: settings.seq_len,
            },
            adamw,
            &settings.trainable,
        )?;
        Ok(Self {
            program,
            data: LanguageModelData::training_only(tokens),
            settings,
            step: 0,
        })
    }

    /// Steps taken.
    pub fn steps(&self) -> usize {
        self.step
    }

    /// One step on windows drawn from the text; returns its loss. A non-finite loss or solve is an
    /// error (AdamW skips a step whose gradient is not finite).
    pub async fn step(&mut self) -> Result<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.settings.seed);
        rng.set_stream(self.step as u64);
        let batch = self
            .data
            .sample_batch(&mut rng, self.settings.batch, self.settings.seq_len)?;
        let positions_seed = positions_seed(self.settings.seed, self.step);
        self.program.launch(self.step, self.settings.lr, |graph, exec| {
            let graph = graph.as_tokens()?;
            graph.draw_positions(exec, positions_seed)?;
            graph.feed_batch(exec, &batch)
        })?;
        self.program.check().await.map_err(|e| {
            Error::Training(format!(
                "{e}, at fine-tuning step {}; the update was skipped",
                self.step
            ))
        })?;
        let loss = self.program.loss().await?;
        if !loss.is_finite() {
            return Err(Error::Training(format!(
                "the loss is {loss} at fine-tuning step {}; lower the learning rate",
                self.step
            )));
        }
        self.step += 1;
        Ok(loss)
    }
}
