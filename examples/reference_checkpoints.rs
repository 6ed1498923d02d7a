//! Writes the small posflow checkpoints that `tests/reference/model_reference.py` rebuilds in
//! PyTorch, one per model variant, each with the batch it is evaluated on.
//!
//! `cargo run --example reference_checkpoints -- OUTDIR`
//!
//! Parameters start from posflow's own init, then every value gets a seeded uniform nudge in
//! ±0.1, so that unit gains, zero biases and near-zero tables cannot hide a transposed or
//! misplaced tensor, and TUPE's [CLS] values θ1, θ2 (0 at init) are not zero. The batch is in
//! the metadata's training state, under `reference_batch`:
//! `{ "batch": B, "len": L, "tokens": [B·L], "targets": [B·L] or [B], "mask": [B·L] or null }`.

use posflow::model::GraphOptions;

use std::path::PathBuf;
use std::rc::Rc;

use posflow::Graph;
use posflow::backend::CpuBackend;
use posflow::checkpoint::{Checkpoint, Metadata, TrainingState};
use posflow::data::{BOS, CharTokenizer, IGNORE_INDEX, PAD};
use posflow::model::{EmbedScale, Model, ModelConfig, ModelKind, PosEnc};
use posflow::params::ParamStore;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

/// 17 characters after the 3 special tokens: a vocabulary of 20.
const CHARS: &str = "abcdefghijklmnopq";
const BATCH: usize = 3;
const LEN: usize = 9;
const NUDGE: f32 = 0.1;

/// A model variant and the real length of each row (shorter rows are padded and masked).
struct Case {
    name: &'static str,
    config: ModelConfig,
    lengths: [usize; BATCH],
}

fn config(kind: ModelKind, posenc: PosEnc) -> ModelConfig {
    ModelConfig {
        vocab: 3 + CHARS.len(),
        d_model: 16,
        heads: 2,
        layers: 2,
        ffn: 32,
        dropout: 0.0,
        max_len: 12,
        kind,
        posenc,
        embed_scale: EmbedScale::None,
        block: posflow::model::Block::Residual,
    }
}

fn cases() -> Vec<Case> {
    let tied = ModelKind::CausalLm { tied_head: true };
    let relative = PosEnc::Relative {
        buckets: 8,
        max_distance: 20,
    };
    let full = [LEN; BATCH];
    vec![
        Case {
            name: "lm_tied_sinusoidal_sqrt_d",
            config: ModelConfig {
                embed_scale: EmbedScale::SqrtD,
                ..config(tied, PosEnc::Sinusoidal { every_block: false })
            },
            lengths: full,
        },
        Case {
            name: "lm_untied_learned_4_heads",
            config: ModelConfig {
                heads: 4,
                ..config(ModelKind::CausalLm { tied_head: false }, PosEnc::Learned)
            },
            lengths: full,
        },
        Case {
            name: "lm_sinusoidal_every_block",
            config: config(tied, PosEnc::Sinusoidal { every_block: true }),
            lengths: full,
        },
        Case {
            name: "lm_relative_padded",
            config: config(tied, relative),
            lengths: [LEN, 7, 4],
        },
        Case {
            name: "encoder_relative_padded",
            config: config(ModelKind::Encoder { n_classes: 3 }, relative),
            lengths: [LEN, 6, 3],
        },
        Case {
            name: "lm_no_posenc",
            config: config(tied, PosEnc::None),
            lengths: full,
        },
        // TUPE's table (max_len 12) is sliced to the batch's 9 positions; 4 heads (Dh = 4) here
        // and 2 (Dh = 8) below give the word and position terms two different scales.
        Case {
            name: "lm_tupe_a_4_heads",
            config: ModelConfig {
                heads: 4,
                ..config(tied, PosEnc::TupeA { untie_cls: false })
            },
            lengths: full,
        },
        Case {
            name: "encoder_tupe_r_untie_cls_padded",
            config: config(
                ModelKind::Encoder { n_classes: 3 },
                PosEnc::TupeR {
                    untie_cls: true,
                    buckets: 8,
                    max_distance: 20,
                },
            ),
            lengths: [LEN, 5, 2],
        },
        // FLOATER, solved by torchdiffeq in the reference. The additive form: per-block initial
        // values with shared dynamics; at the input only with RK4.
        Case {
            name: "lm_floater_every_block_midpoint",
            config: ModelConfig {
                embed_scale: EmbedScale::SqrtD,
                ..config(
                    tied,
                    floater(
                        r#"{"form": "additive", "delta": 0.1, "method": "midpoint", "substeps": 2, "gradient": "backprop"}"#,
                    ),
                )
            },
            lengths: full,
        },
        Case {
            name: "lm_floater_input_rk4_tanh",
            config: config(
                tied,
                floater(
                    r#"{"form": "additive", "every_block": false, "delta": 0.1, "method": "rk4", "substeps": 1, "gradient": "backprop", "activation": "tanh"}"#,
                ),
            ),
            lengths: full,
        },
        // The compatible form as the authors ran it (every default: one shared flow over the
        // learned q/k/v biases, Δ 0.01, rk4 at Δ/5, adjoint; torchdiffeq's odeint_adjoint), and
        // at Δ 0.1 with backprop through midpoint steps, where the biases move further.
        Case {
            name: "lm_floater_compatible",
            config: ModelConfig {
                embed_scale: EmbedScale::SqrtD,
                ..config(tied, floater("{}"))
            },
            lengths: full,
        },
        Case {
            name: "lm_floater_compatible_midpoint_delta_0_1",
            config: ModelConfig {
                embed_scale: EmbedScale::SqrtD,
                ..config(
                    tied,
                    floater(r#"{"delta": 0.1, "method": "midpoint", "substeps": 2, "gradient": "backprop"}"#),
                )
            },
            lengths: full,
        },
    ]
}

fn floater(settings: &str) -> PosEnc {
    PosEnc::Floater(serde_json::from_str(settings).expect("FLOATER settings"))
}

/// Tokens (BOS, then characters, then PAD), targets and, for padded rows, the key mask.
fn batch(case: &Case, rng: &mut ChaCha8Rng) -> serde_json::Value {
    let vocab = case.config.vocab as i32;
    let padded = case.lengths.iter().any(|&n| n < LEN);
    let (mut tokens, mut targets, mut mask) = (Vec::new(), Vec::new(), Vec::new());
    for (row, &n) in case.lengths.iter().enumerate() {
        let real: Vec<i32> = (0..n)
            .map(|p| if p == 0 { BOS } else { rng.random_range(3..vocab) })
            .collect();
        tokens.extend(real.iter().copied().chain(std::iter::repeat_n(PAD, LEN - n)));
        mask.extend((0..LEN).map(|p| i32::from(p < n)));
        if let ModelKind::CausalLm { .. } = case.config.kind {
            // Next tokens; the last real position and the padding count no loss, nor (as a
            // prompt would) the first target of row 0.
            targets.extend((0..LEN).map(|p| match p {
                0 if row == 0 => IGNORE_INDEX,
                p if p + 1 < n => real[p + 1],
                _ => IGNORE_INDEX,
            }));
        }
    }
    if let ModelKind::Encoder { n_classes } = case.config.kind {
        targets = (0..BATCH)
            .map(|_| rng.random_range(0..n_classes as i32))
            .collect();
    }
    json!({
        "batch": BATCH,
        "len": LEN,
        "tokens": tokens,
        "targets": targets,
        "mask": padded.then_some(mask),
    })
}

fn main() -> posflow::Result<()> {
    let Some(outdir) = std::env::args().nth(1).map(PathBuf::from) else {
        eprintln!("usage: cargo run --example reference_checkpoints -- OUTDIR");
        std::process::exit(2);
    };
    std::fs::create_dir_all(&outdir).map_err(|e| posflow::Error::Input(format!("{outdir:?}: {e}")))?;
    let tokenizer = serde_json::to_string(&CharTokenizer::from_text(CHARS)).expect("tokenizer JSON");
    for (seed, case) in cases().into_iter().enumerate() {
        let seed = seed as u64;
        let mut g = Graph::new();
        Model::new(case.config.clone())?.build(&mut g, BATCH, LEN, GraphOptions::default())?;
        let params = ParamStore::init(Rc::new(CpuBackend::new()), &g, seed)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let names: Vec<String> = params.iter().map(|(name, _)| name.to_string()).collect();
        for name in &names {
            let nudged: Vec<f32> = pollster::block_on(params.read(name))?
                .into_iter()
                .map(|v| v + (rng.random::<f32>() * 2.0 - 1.0) * NUDGE)
                .collect();
            params.set(name, &nudged)?;
        }
        let mut extra = serde_json::Map::new();
        extra.insert("reference_batch".into(), batch(&case, &mut rng));
        let metadata = Metadata {
            config: serde_json::to_string(&case.config).expect("config JSON"),
            training: TrainingState { step: 0, seed, extra },
            tokenizer: Some(tokenizer.clone()),
        };
        let path = outdir.join(format!("{}.safetensors", case.name));
        Checkpoint::save(&params, None, metadata, &path)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
