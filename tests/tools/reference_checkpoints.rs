//! Writes the small posflow checkpoints that `tests/reference/model_reference.py` rebuilds in
//! PyTorch (and `authors_ode.py`, the ODE Transformer's code form), one per model variant, each
//! with the batch it is evaluated on.
//!
//! `cargo run --example reference_checkpoints -- OUTDIR`
//!
//! Parameters start from posflow's own init, then every value gets a seeded uniform nudge in
//! ±0.1, so that unit gains, zero biases and near-zero tables cannot hide a transposed or
//! misplaced tensor, and TUPE's [CLS] values θ1, θ2 (0 at init) are not zero. The batch is in
//! the metadata's training state, under `reference_batch`:
//! `{ "batch": B, "len": L, "tokens": [B·L], "targets": [B·L] or [B], "mask": [B·L] or null }`
//! (and `"positions": [L]` for randomized positions),
//! or for a seq2seq model the arrays of its [`PairBatch`]: `{ "batch": B, "source_len": S,
//! "target_len": T, "source": [B·S], "source_mask": [B·S], "target_in": [B·T], "targets": [B·T] }`.

use std::path::PathBuf;
use std::rc::Rc;

use posflow::backend::CpuBackend;
use posflow::checkpoint::{Checkpoint, Metadata, TrainingState};
use posflow::data::{BOS, CharTokenizer, IGNORE_INDEX, MASK, PAD, Pair, PairBatch, PairTokenizer};
use posflow::model::posenc::sample_positions;
use posflow::model::{
    Activation, Block, Coefficients, EmbedScale, History, InitScheme, Model, ModelConfig, ModelKind, Norm,
    PosEnc, RkStage, TupeForm, WordScale,
};
use posflow::model::{Learned, NoEncoding, Relative, Sinusoidal, TupeA, TupeR};
use posflow::params::ParamStore;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

/// 17 characters after the 3 special tokens: a vocabulary of 20.
const CHARS: &str = "abcdefghijklmnopq";
const BATCH: usize = 3;
const LEN: usize = 9;
const NUDGE: f32 = 0.1;
/// The seq2seq batch: each row's source and target length, all padded to the longest (the
/// decoder takes one position more, for BOS in and EOS out).
const PAIR_LENGTHS: [(usize, usize); BATCH] = [(7, 5), (4, 2), (2, 3)];
const SOURCE_LEN: usize = 7;
const TARGET_LEN: usize = 6;
/// Randomized positions are drawn from 0..RANDOM_RANGE.
const RANDOM_RANGE: usize = 40;

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
        block: Block::Residual,
        ..ModelConfig::default()
    }
}

fn cases() -> Vec<Case> {
    let tied = ModelKind::CausalLm { tied_head: true };
    let relative = PosEnc::Relative(Relative {
        buckets: 8,
        max_distance: 20,
        learned_absolute: false,
    });
    let full = [LEN; BATCH];
    vec![
        Case {
            name: "lm_tied_sinusoidal_sqrt_d",
            config: ModelConfig {
                embed_scale: EmbedScale::SqrtD,
                ..config(
                    tied,
                    PosEnc::Sinusoidal(Sinusoidal {
                        every_block: false,
                        ..Sinusoidal::default()
                    }),
                )
            },
            lengths: full,
        },
        Case {
            name: "lm_untied_learned_4_heads",
            config: ModelConfig {
                heads: 4,
                ..config(
                    ModelKind::CausalLm { tied_head: false },
                    PosEnc::Learned(Learned {}),
                )
            },
            lengths: full,
        },
        Case {
            name: "lm_sinusoidal_every_block",
            config: config(
                tied,
                PosEnc::Sinusoidal(Sinusoidal {
                    every_block: true,
                    ..Sinusoidal::default()
                }),
            ),
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
            config: config(tied, PosEnc::None(NoEncoding {})),
            lengths: full,
        },
        // TUPE's table (max_len 12) is sliced to the batch's 9 positions; 4 heads (Dh = 4) here
        // and 2 (Dh = 8) below give the word and position terms two different scales.
        Case {
            name: "lm_tupe_a_4_heads",
            config: ModelConfig {
                heads: 4,
                ..config(
                    tied,
                    PosEnc::TupeA(TupeA {
                        untie_cls: false,
                        form: TupeForm::Paper,
                    }),
                )
            },
            lengths: full,
        },
        Case {
            name: "encoder_tupe_r_untie_cls_padded",
            config: config(
                ModelKind::Encoder { n_classes: 3 },
                PosEnc::TupeR(TupeR {
                    untie_cls: true,
                    buckets: 8,
                    max_distance: 20,
                    form: TupeForm::Paper,
                }),
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

/// The seq2seq variants, each evaluated on the padded [`PAIR_LENGTHS`] batch.
fn seq2seq_cases() -> Vec<(&'static str, ModelConfig)> {
    let seq2seq = |tied_head, decoder_layers, decoder_block, posenc| {
        let kind = ModelKind::Seq2Seq {
            tied_head,
            decoder_layers,
            decoder_block,
        };
        config(kind, posenc)
    };
    vec![
        (
            "seq2seq_sinusoidal_tied_sqrt_d",
            ModelConfig {
                embed_scale: EmbedScale::SqrtD,
                ..seq2seq(
                    true,
                    2,
                    Block::Residual,
                    PosEnc::Sinusoidal(Sinusoidal {
                        every_block: false,
                        ..Sinusoidal::default()
                    }),
                )
            },
        ),
        // T5's buckets both ways in the encoder and backward in the decoder, one table each.
        (
            "seq2seq_relative_untied_rk2_encoder",
            ModelConfig {
                block: Block::Rk2 { gamma: [0.5, 0.5] },
                ..seq2seq(
                    false,
                    1,
                    Block::Residual,
                    PosEnc::Relative(Relative {
                        buckets: 8,
                        max_distance: 20,
                        learned_absolute: false,
                    }),
                )
            },
        ),
        // The authors' translation model with every default: three flows, two decoder layers so
        // that the rows of each flow's blocks are told apart.
        (
            "seq2seq_floater_compatible",
            ModelConfig {
                embed_scale: EmbedScale::SqrtD,
                ..seq2seq(true, 2, Block::Residual, floater("{}"))
            },
        ),
        // TUPE-R on both sides (the decoder's buckets look back; untie_cls is an encoder-only
        // setting), RK4 steps in the decoder, and Dh = 4.
        (
            "seq2seq_tupe_r_rk4_decoder_4_heads",
            ModelConfig {
                heads: 4,
                ..seq2seq(
                    true,
                    1,
                    Block::Rk4,
                    PosEnc::TupeR(TupeR {
                        untie_cls: false,
                        buckets: 8,
                        max_distance: 20,
                        form: TupeForm::Paper,
                    }),
                )
            },
        ),
    ]
}

/// The ODE Transformer's code form (`tests/reference/authors_ode.py` runs the authors' loop and
/// history on these), three layers so that the history's rows differ: every block kind, both
/// histories, both shapes of learned coefficients, and an encoder (which keeps `ln_f`); each
/// with the authors' ReLU in its FFN.
fn code_cases() -> Vec<Case> {
    let lm = |block, history| ModelConfig {
        layers: 3,
        block,
        history,
        rk_stage: RkStage::Layer,
        activation: Activation::Relu,
        ..config(
            ModelKind::CausalLm { tied_head: true },
            PosEnc::None(NoEncoding {}),
        )
    };
    let full = [LEN; BATCH];
    let learned = |coefficients| Block::Rk2Learned {
        gamma: [1.0, 1.0],
        coefficients,
    };
    vec![
        Case {
            name: "lm_code_residual_dense",
            config: lm(Block::Residual, History::Dense),
            lengths: full,
        },
        Case {
            name: "lm_code_rk2_dense",
            config: lm(Block::Rk2 { gamma: [0.5, 0.5] }, History::Dense),
            lengths: full,
        },
        Case {
            name: "lm_code_rk2_scalar_learnable_dense",
            config: lm(learned(Coefficients::Scalar), History::LearnableDense),
            lengths: full,
        },
        Case {
            name: "lm_code_rk2_channel_dense",
            config: lm(learned(Coefficients::Channel), History::Dense),
            lengths: full,
        },
        Case {
            name: "lm_code_rk2_gated_dense",
            config: lm(Block::Rk2Gated, History::Dense),
            lengths: full,
        },
        // The authors' LM embeds as fairseq: × √D, sinusoidal positions at the input.
        Case {
            name: "lm_code_rk4_learnable_dense_sinusoidal",
            config: ModelConfig {
                embed_scale: EmbedScale::SqrtD,
                posenc: PosEnc::Sinusoidal(Sinusoidal {
                    every_block: false,
                    ..Sinusoidal::default()
                }),
                ..lm(Block::Rk4, History::LearnableDense)
            },
            lengths: full,
        },
        Case {
            name: "encoder_code_rk2_gated_dense_padded",
            config: ModelConfig {
                kind: ModelKind::Encoder { n_classes: 3 },
                posenc: PosEnc::Sinusoidal(Sinusoidal {
                    every_block: false,
                    ..Sinusoidal::default()
                }),
                ..lm(Block::Rk2Gated, History::Dense)
            },
            lengths: [LEN, 6, 3],
        },
    ]
}

/// TUPE as its authors ran it (`tests/reference/authors_tupe.py` runs their encoder, layer and
/// LM head on these): masked LMs with TUPE-A and TUPE-R in the code form, post-LN (their BERT, with
/// the embedding layer norm) and pre-LN (with the final norm); and the paper's baselines that are
/// not in their code, checked by `model_reference.py`: BERT-R (a learned table plus T5's bias)
/// with TUPE's word scale, TUPE's temperature control.
fn tupe_cases() -> Vec<Case> {
    let code = |untie_cls| {
        PosEnc::TupeA(TupeA {
            untie_cls,
            form: TupeForm::Code,
        })
    };
    let mlm = |posenc, norm| ModelConfig {
        norm,
        ..config(ModelKind::MaskedLm {}, posenc)
    };
    let full = [LEN; BATCH];
    vec![
        Case {
            name: "mlm_code_tupe_a_post",
            config: mlm(code(true), Norm::Post),
            lengths: full,
        },
        Case {
            name: "mlm_code_tupe_r_post_4_heads",
            config: ModelConfig {
                heads: 4,
                ..mlm(
                    PosEnc::TupeR(TupeR {
                        untie_cls: true,
                        buckets: 8,
                        max_distance: 20,
                        form: TupeForm::Code,
                    }),
                    Norm::Post,
                )
            },
            lengths: full,
        },
        Case {
            name: "mlm_code_tupe_a_pre",
            config: mlm(code(true), Norm::Pre),
            lengths: full,
        },
        Case {
            name: "lm_bert_r_word_scale_tupe_padded",
            config: ModelConfig {
                word_scale: Some(WordScale::SqrtTwoDh),
                ..config(
                    ModelKind::CausalLm { tied_head: true },
                    PosEnc::Relative(Relative {
                        buckets: 8,
                        max_distance: 20,
                        learned_absolute: true,
                    }),
                )
            },
            lengths: [LEN, 5, 7],
        },
    ]
}

/// fairseq's Transformer around FLOATER, as the authors' translation model: post-LN blocks (the
/// decoder's cross-attention between its self-attention and FFN), no embedding layer norm and no
/// final norms, ReLU, fairseq's sinusoid at the input, embeddings × √D (init does not matter
/// here: every value is nudged; the init's own test pins it).
fn fairseq_cases() -> Vec<(&'static str, ModelConfig)> {
    let kind = ModelKind::Seq2Seq {
        tied_head: true,
        decoder_layers: 2,
        decoder_block: Block::Residual,
    };
    vec![(
        "seq2seq_floater_fairseq_post",
        ModelConfig {
            embed_scale: EmbedScale::SqrtD,
            norm: Norm::Post,
            embedding_norm: Some(false),
            init: Some(InitScheme::Fairseq),
            activation: Activation::Relu,
            ..config(kind, floater(r#"{ "sinusoid": "fairseq" }"#))
        },
    )]
}

/// The forms the PyTorch package (`python/posflow_torch`) is checked on beyond the ones above:
/// RoPE, ALiBi (causal; an encoder's with the left offset; six heads, whose slopes are not one
/// geometric run), the token classifier, the masked LM with TUPE's paper form, the gated and the
/// learned RK2 in the paper's form, projections without biases, and randomized positions for
/// every encoding that reads them (a range of 40, the positions in the stored batch).
fn port_cases() -> Vec<Case> {
    let tied = ModelKind::CausalLm { tied_head: true };
    let tagger = ModelKind::TokenClassifier { n_classes: 3 };
    let posenc = |value: serde_json::Value| -> PosEnc { serde_json::from_value(value).expect("a posenc") };
    let full = [LEN; BATCH];
    let padded = [LEN, 6, 3];
    let randomized = |name, kind, encoding: serde_json::Value| Case {
        name,
        config: ModelConfig {
            random_positions: Some(RANDOM_RANGE),
            max_len: RANDOM_RANGE,
            ..config(kind, posenc(encoding))
        },
        lengths: padded,
    };
    vec![
        Case {
            name: "lm_rope",
            config: config(tied, posenc(json!({"type": "rope"}))),
            lengths: full,
        },
        Case {
            name: "lm_alibi_6_heads",
            config: ModelConfig {
                d_model: 24,
                heads: 6,
                ..config(tied, posenc(json!({"type": "alibi"})))
            },
            lengths: full,
        },
        Case {
            name: "encoder_alibi_left_offset_padded",
            config: config(
                ModelKind::Encoder { n_classes: 3 },
                posenc(json!({"type": "alibi", "left_offset": 0.5})),
            ),
            lengths: padded,
        },
        Case {
            name: "tagger_rk2_gated_no_attention_biases_padded",
            config: ModelConfig {
                block: Block::Rk2Gated,
                attention_biases: Some(false),
                activation: Activation::Relu,
                ..config(tagger, posenc(json!({"type": "sinusoidal"})))
            },
            lengths: padded,
        },
        Case {
            name: "lm_rk2_learned_channel",
            config: ModelConfig {
                block: Block::Rk2Learned {
                    gamma: [1.0, 1.0],
                    coefficients: Coefficients::Channel,
                },
                ..config(tied, posenc(json!({"type": "learned"})))
            },
            lengths: full,
        },
        Case {
            name: "mlm_tupe_a_untie_cls",
            config: config(
                ModelKind::MaskedLm {},
                posenc(json!({"type": "tupe_a", "untie_cls": true})),
            ),
            lengths: full,
        },
        randomized("tagger_random_sinusoidal", tagger, json!({"type": "sinusoidal"})),
        randomized("tagger_random_learned", tagger, json!({"type": "learned"})),
        randomized(
            "tagger_random_relative",
            tagger,
            json!({"type": "relative", "buckets": 8, "max_distance": 20}),
        ),
        randomized("tagger_random_rope", tagger, json!({"type": "rope"})),
        randomized(
            "tagger_random_alibi",
            tagger,
            json!({"type": "alibi", "left_offset": 0.5}),
        ),
        randomized(
            "tagger_random_tupe_r",
            tagger,
            json!({"type": "tupe_r", "untie_cls": false, "buckets": 8, "max_distance": 20}),
        ),
        randomized(
            "tagger_random_floater_compatible",
            tagger,
            json!({"type": "floater", "delta": 0.1, "method": "midpoint", "substeps": 2}),
        ),
        randomized(
            "lm_random_floater_additive",
            tied,
            json!({"type": "floater", "form": "additive", "delta": 0.1, "method": "rk4", "substeps": 1}),
        ),
    ]
}

fn floater(settings: &str) -> PosEnc {
    PosEnc::Floater(serde_json::from_str(settings).expect("FLOATER settings"))
}

/// Tokens (BOS, then characters, then PAD), targets and, for padded rows, the key mask.
fn batch(config: &ModelConfig, lengths: [usize; BATCH], rng: &mut ChaCha8Rng) -> serde_json::Value {
    let vocab = config.vocab as i32;
    let padded = lengths.iter().any(|&n| n < LEN);
    let (mut tokens, mut targets, mut mask) = (Vec::new(), Vec::new(), Vec::new());
    for (row, &n) in lengths.iter().enumerate() {
        let real: Vec<i32> = (0..n)
            .map(|p| if p == 0 { BOS } else { rng.random_range(3..vocab) })
            .collect();
        tokens.extend(real.iter().copied().chain(std::iter::repeat_n(PAD, LEN - n)));
        mask.extend((0..LEN).map(|p| i32::from(p < n)));
        if let ModelKind::MaskedLm {} = config.kind {
            // BERT's corruption, every third position hidden: <mask>, or a random token, or kept.
            let hidden = |p: usize| p > 0 && (p + row).is_multiple_of(3);
            targets.extend((0..LEN).map(|p| if hidden(p) { real[p] } else { IGNORE_INDEX }));
            let row_tokens = tokens.len() - LEN;
            for p in (0..n).filter(|&p| hidden(p)) {
                tokens[row_tokens + p] = match p % 3 {
                    0 if row != 1 => MASK,
                    _ => rng.random_range(3..vocab),
                };
            }
        }
        if let ModelKind::CausalLm { .. } = config.kind {
            // Next tokens; the last real position and the padding count no loss, nor (as a
            // prompt would) the first target of row 0.
            targets.extend((0..LEN).map(|p| match p {
                0 if row == 0 => IGNORE_INDEX,
                p if p + 1 < n => real[p + 1],
                _ => IGNORE_INDEX,
            }));
        }
    }
    if let ModelKind::Encoder { n_classes } = config.kind {
        targets = (0..BATCH)
            .map(|_| rng.random_range(0..n_classes as i32))
            .collect();
    }
    if let ModelKind::TokenClassifier { n_classes } = config.kind {
        // A class at every real position but the first (a Chomsky task scores its answer's).
        targets = (0..BATCH * LEN)
            .map(|k| match (k % LEN, mask[k]) {
                (p, 1) if p > 0 => rng.random_range(0..n_classes as i32),
                _ => IGNORE_INDEX,
            })
            .collect();
    }
    let mut stored = json!({
        "batch": BATCH,
        "len": LEN,
        "tokens": tokens,
        "targets": targets,
        "mask": padded.then_some(mask),
    });
    if let Some(range) = config.random_positions {
        stored["positions"] = json!(sample_positions(rng.random(), LEN, range));
    }
    stored
}

/// Random pairs of [`PAIR_LENGTHS`], as the model is fed them.
fn pair_batch(vocab: usize, rng: &mut ChaCha8Rng) -> posflow::Result<serde_json::Value> {
    let mut tokens = |n| -> Vec<i32> { (0..n).map(|_| rng.random_range(3..vocab as i32)).collect() };
    let pairs: Vec<Pair> = PAIR_LENGTHS
        .iter()
        .map(|&(source, target)| Pair {
            source: tokens(source),
            target: tokens(target),
        })
        .collect();
    let batch = PairBatch::new(&pairs, SOURCE_LEN, TARGET_LEN)?;
    let mask: Vec<i32> = batch.source_mask().iter().map(|&m| i32::from(m > 0.5)).collect();
    Ok(json!({
        "batch": BATCH,
        "source_len": SOURCE_LEN,
        "target_len": TARGET_LEN,
        "source": batch.source(),
        "source_mask": mask,
        "target_in": batch.target_in(),
        "targets": batch.target_out(),
    }))
}

fn main() -> posflow::Result<()> {
    let Some(outdir) = std::env::args().nth(1).map(PathBuf::from) else {
        eprintln!("usage: cargo run --example reference_checkpoints -- OUTDIR");
        std::process::exit(2);
    };
    std::fs::create_dir_all(&outdir).map_err(|e| posflow::Error::Input(format!("{outdir:?}: {e}")))?;
    let chars = CharTokenizer::from_text(CHARS);
    let tokenizer = serde_json::to_string(&chars).expect("tokenizer JSON");
    let pair_tokenizer = PairTokenizer::Chars(chars).to_json();
    // Decoder-only cases with their row lengths, then the seq2seq ones, then the ODE
    // Transformer's code form, then TUPE's, then fairseq's backbone, then the PyTorch package's
    // (seeds continue, so that adding a group leaves the others' files).
    let decoder_only = cases()
        .into_iter()
        .map(|case| (case.name, case.config, Some(case.lengths)));
    let seq2seq = seq2seq_cases()
        .into_iter()
        .map(|(name, config)| (name, config, None));
    let code = code_cases()
        .into_iter()
        .chain(tupe_cases())
        .map(|case| (case.name, case.config, Some(case.lengths)));
    let fairseq = fairseq_cases()
        .into_iter()
        .map(|(name, config)| (name, config, None));
    let port = port_cases()
        .into_iter()
        .map(|case| (case.name, case.config, Some(case.lengths)));
    let all = decoder_only.chain(seq2seq).chain(code).chain(fairseq).chain(port);
    for (seed, (name, config, lengths)) in all.enumerate() {
        let seed = seed as u64;
        let g = Model::new(config.clone())?.declare_params()?;
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
        let (batch, tokenizer) = match lengths {
            Some(lengths) => (batch(&config, lengths, &mut rng), &tokenizer),
            None => (pair_batch(config.vocab, &mut rng)?, &pair_tokenizer),
        };
        let mut extra = serde_json::Map::new();
        extra.insert("reference_batch".into(), batch);
        let metadata = Metadata {
            config: serde_json::to_string(&config).expect("config JSON"),
            training: TrainingState { step: 0, seed, extra },
            tokenizer: Some(tokenizer.clone()),
        };
        let path = outdir.join(format!("{name}.safetensors"));
        Checkpoint::save(&params, None, metadata, &path)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
