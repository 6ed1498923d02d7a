//! One training step of a small Transformer (the peers' step, or a variant of it), timed on
//! any backend: natively for `posflow bench train`, in the page for `benchTrain`.

use std::rc::Rc;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use web_time::Instant;

use crate::backend::Backend;
use crate::backend::profile::Profile;
use crate::error::{Error, Result};
use crate::model::posenc::presets;
use crate::model::{Block, EmbedScale, Model, ModelConfig, ModelKind, Norm, PosEnc};
use crate::ops::unary::Activation;
use crate::optim::AdamW;
use crate::train::{BatchShape, TrainingProgram};

/// One training step to time: a model, the batch shape, the optimizer, and how many steps
/// to run untimed first (plan compilation, pipelines, caches).
#[derive(Clone, Debug, PartialEq)]
pub struct TrainBench {
    pub model: ModelConfig,
    pub batch: usize,
    pub len: usize,
    pub optimizer: AdamW,
    pub warmup: usize,
}

impl Default for TrainBench {
    /// The step the peers were measured on: a 4-layer pre-LN causal LM, d_model 128, 4 heads,
    /// FFN 512, vocab 65, learned positions, head tied to the token embeddings; batch 16 × 128
    /// tokens; AdamW (posflow's defaults: lr 1e-3, β 0.9/0.999, clipping at norm 1.0).
    fn default() -> Self {
        Self {
            model: ModelConfig {
                vocab: 65,
                d_model: 128,
                heads: 4,
                layers: 4,
                ffn: 512,
                dropout: 0.0,
                max_len: 128,
                kind: ModelKind::CausalLm { tied_head: true },
                posenc: PosEnc::from_inline_toml(r#"{ type = "learned" }"#).expect("a valid setting"),
                embed_scale: EmbedScale::None,
                block: Block::Residual,
                ..ModelConfig::default()
            },
            batch: 16,
            len: 128,
            optimizer: AdamW::default(),
            warmup: 2,
        }
    }
}

/// The model sizes `bench train` times: the peers' step, or a larger one where the products
/// dominate the step instead of the kernels' fixed costs (the GPU-targets issue's second model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrainShape {
    /// [`TrainBench::default`]: 4 layers, d_model 128, batch 16 × 128.
    Peers,
    /// 8 layers, d_model 512, 8 heads, FFN 2048, batch 32 × 256.
    Large,
    /// The studies' model (the Chomsky tasks'): 5 post-LN layers, d_model 64, 8 heads of width
    /// 8, FFN 256 with ReLU, dropout 0.1, embeddings × √d, no attention biases, every position
    /// classified into 2 classes; batch 32 × 40 tokens (`reverse_string` at its training lengths:
    /// 20 symbols and 20 placeholders).
    Study,
}

impl TrainShape {
    pub const NAMES: [&'static str; 3] = ["peers", "large", "study"];

    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "peers" => Ok(Self::Peers),
            "large" => Ok(Self::Large),
            "study" => Ok(Self::Study),
            other => Err(Error::Input(format!(
                "unknown bench shape `{other}`; expected one of {}",
                Self::NAMES.join(", ")
            ))),
        }
    }

    /// The peers' step at this size (learned positions, the rest as [`TrainBench::default`]).
    pub fn bench(self) -> TrainBench {
        let peers = TrainBench::default();
        match self {
            Self::Peers => peers,
            Self::Large => TrainBench {
                model: ModelConfig {
                    d_model: 512,
                    heads: 8,
                    layers: 8,
                    ffn: 2048,
                    max_len: 256,
                    ..peers.model
                },
                batch: 32,
                len: 256,
                ..peers
            },
            Self::Study => TrainBench {
                model: ModelConfig {
                    vocab: 8,
                    d_model: 64,
                    heads: 8,
                    layers: 5,
                    ffn: 256,
                    dropout: 0.1,
                    max_len: 40,
                    kind: ModelKind::TokenClassifier { n_classes: 2 },
                    norm: Norm::Post,
                    embedding_norm: Some(false),
                    attention_biases: Some(false),
                    activation: Activation::Relu,
                    embed_scale: EmbedScale::SqrtD,
                    ..peers.model
                },
                batch: 32,
                len: 40,
                ..peers
            },
        }
    }
}

/// The variants `bench train` has besides the registry's encoding presets (each by its preset's
/// name: `sinusoidal`, `floater`, …): FLOATER as its authors ran it solved at every step (the
/// compatible form: the sinusoidal model whose q/k/v biases one ODE generates; Δ 0.01, rk4 at
/// Δ/5), with backprop through the solver in place of the adjoint, its additive ablation, and the
/// Runge-Kutta blocks.
pub const OTHER_VARIANTS: [&str; 6] = [
    "floater_every_step",
    "floater_backprop",
    "floater_additive",
    "rk2",
    "rk2_gated",
    "rk4",
];

/// Every variant `bench train` compares with the peers' step, by name: the same sizes with each
/// encoding preset of the registry (`learned` is the peers' own), then [`OTHER_VARIANTS`].
pub fn train_variants() -> Vec<&'static str> {
    presets().map(|p| p.name).chain(OTHER_VARIANTS).collect()
}

impl TrainBench {
    /// The step of `shape` with one thing changed, by name (see [`train_variants`]).
    pub fn variant(shape: TrainShape, name: &str) -> Result<Self> {
        let mut bench = shape.bench();
        let m = &mut bench.model;
        match name {
            // As a config writes them: the registry reads them, so the bench names no encoding.
            "floater_every_step" => m.posenc = PosEnc::from_inline_toml(r#"{ type = "floater" }"#)?,
            "floater_backprop" => {
                m.posenc = PosEnc::from_inline_toml(r#"{ type = "floater", gradient = "backprop" }"#)?
            }
            "floater_additive" => {
                m.posenc = PosEnc::from_inline_toml(r#"{ type = "floater", form = "additive" }"#)?
            }
            "rk2" => m.block = Block::Rk2 { gamma: [0.5, 0.5] },
            "rk2_gated" => m.block = Block::Rk2Gated,
            "rk4" => m.block = Block::Rk4,
            preset if crate::model::posenc::preset(preset).is_some() => {
                m.posenc = PosEnc::from_preset(preset, false)?;
            }
            other => {
                return Err(Error::Input(format!(
                    "unknown bench variant `{other}`; expected one of {}",
                    train_variants().join(", ")
                )));
            }
        }
        if m.block != Block::Residual {
            // A Runge-Kutta block steps a pre-norm sub-block (the study shape is post-norm).
            m.norm = Norm::Pre;
        }
        if m.posenc.adds_a_fixed_table() {
            // The sinusoidal table needs scaled embeddings to be heard, as in every config.
            m.embed_scale = EmbedScale::SqrtD;
        }
        Ok(bench)
    }
}

/// The timing of [`train`].
#[derive(Clone, Debug, PartialEq)]
pub struct TrainBenchRow {
    /// Trained values in the model.
    pub parameters: usize,
    /// Timed steps.
    pub steps: usize,
    pub median_seconds: f64,
    /// What a step costs on average: with FLOATER's caching, one solving step in
    /// `resolve_every` is slower than the others, which the median does not show.
    pub mean_seconds: f64,
    pub best_seconds: f64,
    /// Batch × length over the mean step time.
    pub tokens_per_second: f64,
    /// The loss of the first and the last step, to show the steps trained something.
    pub first_loss: f32,
    pub last_loss: f32,
    /// Kernel dispatches of one step on a GPU (`None` on the CPU).
    pub dispatches: Option<usize>,
    /// Where the steps' time went, when profiling was requested.
    pub profile: Option<Profile>,
}

/// Times `steps` full training steps (forward, backward, clipping, AdamW update) of
/// `bench.model` on random token batches, after `bench.warmup` untimed ones. Each step is timed
/// from feeding its batch to reading its loss back, so queued GPU work is counted. Async because
/// a page cannot block on its GPU; natively `pollster::block_on` it.
pub async fn train(backend: &Rc<dyn Backend>, bench: &TrainBench, steps: usize) -> Result<TrainBenchRow> {
    if steps == 0 {
        return Err(Error::Input("bench train needs at least one timed step".into()));
    }
    let model = Model::new(bench.model.clone())?;
    let (batch, len, vocab) = (bench.batch, bench.len, bench.model.vocab);
    let mut program = TrainingProgram::new(
        &model,
        backend.clone(),
        BatchShape::Tokens { batch, len },
        0,
        bench.optimizer.clone(),
        &[],
    )?;
    let parameters = program.params().iter().map(|(_, p)| p.meta.numel()).sum();

    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut times = Vec::with_capacity(steps);
    let mut losses = Vec::with_capacity(steps);
    for step in 0..bench.warmup + steps {
        let row: Vec<i32> = (0..batch * (len + 1))
            .map(|_| rng.random_range(0..vocab as i32))
            .collect();
        let (tokens, mut targets): (Vec<i32>, Vec<i32>) = row
            .chunks(len + 1)
            .flat_map(|r| r[..len].iter().copied().zip(r[1..].iter().copied()))
            .unzip();
        if let ModelKind::TokenClassifier { n_classes } = bench.model.kind {
            targets.iter_mut().for_each(|t| *t %= n_classes as i32);
        }
        let start = Instant::now();
        program.launch(step, bench.optimizer.lr, |graph, exec| {
            graph.as_tokens()?.feed(exec, &tokens, &targets, None)
        })?;
        program.check().await?;
        let loss = program.loss().await?;
        if step >= bench.warmup {
            times.push(start.elapsed().as_secs_f64());
            losses.push(loss);
        }
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median_seconds = sorted[sorted.len() / 2];
    let mean_seconds = times.iter().sum::<f64>() / steps as f64;
    Ok(TrainBenchRow {
        parameters,
        steps,
        median_seconds,
        mean_seconds,
        best_seconds: sorted[0],
        tokens_per_second: (batch * len) as f64 / mean_seconds,
        first_loss: losses[0],
        last_loss: losses[losses.len() - 1],
        dispatches: program.dispatches(),
        profile: program.profile(),
    })
}

#[cfg(test)]
mod tests {
    use super::{TrainBench, TrainShape, train_variants};
    use crate::model::Model;

    /// Every variant is a valid model that differs from the peers' step; unknown names list them.
    #[test]
    fn every_variant_is_a_valid_model() {
        for shape in [TrainShape::Peers, TrainShape::Large, TrainShape::Study] {
            for name in train_variants() {
                let bench = TrainBench::variant(shape, name).unwrap();
                assert_eq!(name == "learned", bench.model == shape.bench().model, "{name}");
                assert!(bench.len <= bench.model.max_len, "{name}");
                match Model::new(bench.model.clone()) {
                    Ok(_) => {}
                    // FLOATER's solve keeps its state in one workgroup: d_model 512 is over it,
                    // and `bench train --shape large --variants floater` says so.
                    Err(e) if shape == TrainShape::Large && name.starts_with("floater") => {
                        assert!(e.to_string().contains("at most 256 values"), "{name}: {e}")
                    }
                    Err(e) => panic!("{shape:?} {name}: {e}"),
                }
            }
        }
        let err = TrainBench::variant(TrainShape::Peers, "xpos")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`xpos`") && err.contains("floater_additive"),
            "{err}"
        );
    }

    /// The large shape is the GPU-targets issue's model; an unknown shape is named.
    #[test]
    fn the_large_shape_is_the_issues_model() {
        let large = TrainShape::parse("large").unwrap().bench();
        let m = &large.model;
        assert_eq!((m.d_model, m.layers, large.batch, large.len), (512, 8, 32, 256));
        assert_eq!(TrainShape::parse("peers").unwrap().bench(), TrainBench::default());
        let err = TrainShape::parse("huge").unwrap_err().to_string();
        assert!(err.contains("`huge`") && err.contains("large"), "{err}");
    }

    /// The study shape is the model of the Chomsky studies (`configs/chomsky_reverse_string.toml`
    /// is one), at that config's training lengths.
    #[test]
    fn the_study_shape_is_the_studies_model() {
        let text = include_str!("../../configs/chomsky_reverse_string.toml");
        let run = crate::train::RunConfig::from_toml(text, "chomsky_reverse_string.toml").unwrap();
        let (study, bench) = (run.model, TrainShape::parse("study").unwrap().bench());
        let m = &bench.model;
        assert_eq!(
            (m.d_model, m.heads, m.layers, m.ffn, m.kind),
            (study.d_model, study.heads, study.layers, study.ffn, study.kind)
        );
        assert_eq!(
            (m.norm, m.activation, m.dropout),
            (study.norm, study.activation, study.dropout)
        );
        assert_eq!(
            (m.embed_scale, m.embedding_norm),
            (study.embed_scale, study.embedding_norm)
        );
        assert_eq!(m.attention_biases, study.attention_biases);
        let (_, train_max_len) = run.data.chomsky().unwrap();
        assert_eq!(
            bench.len,
            2 * train_max_len,
            "{} symbols and as many placeholders",
            train_max_len
        );
    }
}
