//! Next-character distributions and sampled continuations from a causal LM.
//!
//! One graph of a fixed window runs for every prediction: the context is right-padded, which a
//! causal model cannot see, and a context longer than the window keeps its last characters.

use rand::{Rng, RngExt};

use super::{EncodingCache, INFERENCE_POSITIONS_SEED};
use crate::data::{BOS, CharTokenizer, EOS, IGNORE_INDEX, PAD};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::Graph;
use crate::math;
use crate::model::GraphOptions;
use crate::model::Tokens;
use crate::model::posenc::sample_positions;
use crate::model::{Model, ModelGraph, ModelKind};
use crate::params::ParamStore;

pub struct Generator {
    tokenizer: CharTokenizer,
    /// Whether the model was trained on sequences that begin with `<bos>` (the prompted tasks).
    starts_with_bos: bool,
    vocab: usize,
    graph: ModelGraph,
    exec: Executor,
    /// FLOATER's encodings for the window, solved once.
    encodings: Option<EncodingCache>,
}

impl Generator {
    /// A generator for `model` with the parameters in `params` (read at every prediction, so
    /// training in between is seen; FLOATER's encodings are solved once, so call
    /// [`Generator::refresh_encodings`] after training its dynamics), conditioning on at most
    /// `window` tokens (for a learned position table, at most its length).
    pub fn new(model: &Model, params: &ParamStore, tokenizer: CharTokenizer, window: usize) -> Result<Self> {
        if !matches!(model.config().kind, ModelKind::CausalLm { .. }) {
            return Err(Error::Input(
                "only a causal language model generates text; this model is an encoder".into(),
            ));
        }
        let mut g = Graph::new();
        let graph = model.build(
            &mut g,
            Tokens {
                batch: 1,
                len: window,
            },
            GraphOptions::default().cached_encodings(),
        )?;
        let exec = Executor::new(&g, &[graph.logits, graph.loss], params)?;
        Ok(Self {
            tokenizer,
            starts_with_bos: false,
            vocab: model.config().vocab,
            graph,
            exec,
            // At randomized positions the window reads the flow anywhere in their range.
            encodings: EncodingCache::new(model, params, model.config().random_positions.unwrap_or(window))?,
        })
    }

    /// Prompts get a `<bos>` in front, as the prompted tasks' training sequences have (`word=`
    /// for the dictionary, `abc|` for copy).
    pub fn starting_with_bos(mut self) -> Self {
        self.starts_with_bos = true;
        self
    }

    /// Solves FLOATER's encodings again at the next prediction: after its dynamics trained.
    pub fn refresh_encodings(&self) {
        if let Some(cache) = &self.encodings {
            cache.invalidate();
        }
    }

    /// The probabilities of every token following `context` (token ids, at least one).
    pub async fn next_probabilities(&self, context: &[i32]) -> Result<Vec<f32>> {
        let window = self.graph.len;
        let Some(last) = context.len().checked_sub(1) else {
            return Err(Error::Input(
                "the context is empty: give at least one character".into(),
            ));
        };
        let context = &context[context.len().saturating_sub(window)..];
        let last = last.min(window - 1);
        let mut tokens = context.to_vec();
        tokens.resize(window, PAD);
        if let Some(range) = self.graph.random_range() {
            // As Ruoss et al. test: the context's n tokens at a sorted sample of n positions; the
            // padding after them, which a causal model cannot see, at the last of them.
            let mut positions = sample_positions(INFERENCE_POSITIONS_SEED, context.len(), range);
            let last_position = positions[positions.len() - 1];
            positions.resize(window, last_position);
            self.graph.set_positions(&self.exec, &positions)?;
        }
        self.graph
            .feed(&self.exec, &tokens, &vec![IGNORE_INDEX; window], None)?;
        if let Some(cache) = &self.encodings {
            self.graph.feed_encodings(&self.exec, &cache.values().await?)?;
        }
        self.exec.run()?;
        self.exec.check().await?;
        let vocab = self.vocab;
        let logits = self.exec.read(self.graph.logits).await?;
        Ok(softmax(&logits[last * vocab..(last + 1) * vocab]))
    }

    /// `prompt` continued by up to `chars` sampled characters (at `temperature`; 0 takes the most
    /// likely one every time), stopping early at `<eos>`. Characters outside the model's vocabulary
    /// are an error naming them.
    pub async fn complete<R: Rng + ?Sized>(
        &self,
        prompt: &str,
        chars: usize,
        temperature: f32,
        rng: &mut R,
    ) -> Result<String> {
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(Error::Input(format!(
                "the temperature must be 0 or positive, got {temperature}"
            )));
        }
        let tokenizer = &self.tokenizer;
        let mut context = if self.starts_with_bos {
            vec![BOS]
        } else {
            Vec::new()
        };
        context.extend(
            tokenizer
                .encode(prompt)
                .map_err(|e| Error::Input(format!("the prompt has a character the model never saw: {e}")))?,
        );
        let mut text = String::new();
        for _ in 0..chars {
            let probs = self.next_probabilities(&context).await?;
            let next = pick(&probs, temperature, rng);
            if next == EOS {
                break;
            }
            context.push(next);
            // A special token (never in training text) has no character to show.
            if next as usize >= tokenizer.specials().len() {
                text.push_str(&tokenizer.decode(&[next])?);
            }
        }
        Ok(text)
    }
}

/// The probabilities of `logits`, computed from their maximum so that none overflows.
pub(super) fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = logits.iter().map(|&l| math::exp(l - max)).collect();
    let total: f32 = exps.iter().sum();
    exps.iter().map(|e| e / total).collect()
}

/// A token id drawn from `probs` sharpened by `temperature` (p^(1/T), renormalised); the argmax
/// at temperature 0.
fn pick<R: Rng + ?Sized>(probs: &[f32], temperature: f32, rng: &mut R) -> i32 {
    let argmax = probs
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i);
    if temperature == 0.0 {
        return argmax as i32;
    }
    let weights: Vec<f64> = probs
        .iter()
        .map(|&p| math::powf(f64::from(p), 1.0 / f64::from(temperature)))
        .collect();
    let total: f64 = weights.iter().sum();
    let mut target = rng.random::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        target -= w;
        if target < 0.0 {
            return i as i32;
        }
    }
    argmax as i32
}
