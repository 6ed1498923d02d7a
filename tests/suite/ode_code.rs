//! The ODE Transformer in the form of its authors' code (`rk_stage = "layer"`, the layer
//! histories, learned RK2 coefficients) and the dropout sites their code has (attention
//! probabilities, FFN activations): parameters, the configs' refusals, and dropout drawn per
//! seed at each site. Fidelity against the authors' loop is
//! `tests/suite/model_reference.rs`'s `*_code_*` cases (`tests/reference/authors_ode.py`).

use crate::common::binary;
use crate::common::models;
use crate::common::scratch as scratch_dir;

use std::path::Path;

use binary::posflow_in;
use models::{params, with_prefix};
use posflow::backend::gpu_for_tests;
use posflow::model::Learned;
use posflow::model::{Block, Coefficients, History, ModelConfig, ModelKind, PosEnc, RkStage};
use scratch_dir::scratch;

/// Three layers of width 32, vocabulary 30, no position encoding.
fn tiny(block: Block, rk_stage: RkStage, history: History) -> ModelConfig {
    ModelConfig {
        vocab: 30,
        d_model: 32,
        heads: 2,
        layers: 3,
        ffn: 64,
        max_len: 16,
        block,
        rk_stage,
        history,
        ..ModelConfig::default()
    }
}

/// The names of `src/model/mod.rs`'s table: a layer norm per block in a history, no `ln_f` in a
/// causal LM with one (an encoder keeps it), a mixing row per block and one for the output in
/// `learnable_dense`, and in the code form one gate and one coefficient pair for the stack.
#[test]
fn the_code_form_s_parameters_are_the_documented_ones() {
    let dense = params(tiny(Block::Residual, RkStage::Layer, History::Dense));
    assert_eq!(
        with_prefix(&dense, "history."),
        [
            "history.ln.0.bias [32]",
            "history.ln.0.gain [32]",
            "history.ln.1.bias [32]",
            "history.ln.1.gain [32]",
            "history.ln.2.bias [32]",
            "history.ln.2.gain [32]",
        ]
    );
    assert!(with_prefix(&dense, "ln_f").is_empty(), "{dense:?}");
    let encoder = params(ModelConfig {
        kind: ModelKind::Encoder { n_classes: 2 },
        posenc: PosEnc::Learned(Learned {}),
        ..tiny(Block::Residual, RkStage::Layer, History::Dense)
    });
    assert_eq!(
        with_prefix(&encoder, "ln_f"),
        ["ln_f.bias [32]", "ln_f.gain [32]"]
    );
    let learnable = params(tiny(Block::Rk4, RkStage::Layer, History::LearnableDense));
    assert_eq!(
        with_prefix(&learnable, "history.mix"),
        [
            "history.mix.0 [1]",
            "history.mix.1 [2]",
            "history.mix.2 [3]",
            "history.mix.3 [4]",
        ]
    );
    let gated = params(tiny(Block::Rk2Gated, RkStage::Layer, History::Dense));
    assert_eq!(
        with_prefix(&gated, "rk."),
        ["rk.gate.bias [1]", "rk.gate.weight [64, 1]"]
    );
    assert!(!gated.iter().any(|n| n.contains("blocks.0.gate")), "{gated:?}");
    let paper = params(tiny(Block::Rk2Gated, RkStage::SubBlock, History::None));
    assert!(
        paper.contains(&"blocks.2.gate.weight [64, 1]".to_string()),
        "{paper:?}"
    );
    assert!(paper.contains(&"ln_f.gain [32]".to_string()), "{paper:?}");
    let learned = |coefficients| Block::Rk2Learned {
        gamma: [1.0, 1.0],
        coefficients,
    };
    let channel = params(tiny(
        learned(Coefficients::Channel),
        RkStage::Layer,
        History::Dense,
    ));
    assert_eq!(with_prefix(&channel, "rk."), ["rk.alpha1 [32]", "rk.alpha2 [32]"]);
    let scalar = params(tiny(
        learned(Coefficients::Scalar),
        RkStage::SubBlock,
        History::None,
    ));
    assert_eq!(
        with_prefix(&scalar, "blocks.1.alpha"),
        ["blocks.1.alpha1 [1]", "blocks.1.alpha2 [1]"]
    );
}

#[test]
fn code_form_settings_read_from_toml_and_bad_ones_are_refused() {
    let model = |extra: &str| -> posflow::Result<ModelConfig> {
        let text = format!(
            "vocab = 30\nd_model = 32\nheads = 2\nlayers = 2\nffn = 64\nmax_len = 16\n\
             kind = {{ type = \"causal_lm\" }}\nposenc = {{ type = \"none\" }}\n{extra}"
        );
        let config: ModelConfig = toml::from_str(&text).map_err(|e| posflow::Error::Input(e.to_string()))?;
        config.validate()?;
        Ok(config)
    };
    let config = model(
        "block = { type = \"rk2\", learned = \"channel\" }\nrk_stage = \"layer\"\n\
         history = \"learnable_dense\"\nattention_dropout = 0.1\nactivation_dropout = 0.2",
    )
    .unwrap();
    assert_eq!(
        config.block,
        Block::Rk2Learned {
            gamma: [1.0, 1.0],
            coefficients: Coefficients::Channel
        }
    );
    assert_eq!(
        (config.rk_stage, config.history),
        (RkStage::Layer, History::LearnableDense)
    );
    assert_eq!((config.attention_dropout, config.activation_dropout), (0.1, 0.2));
    // The learned coefficients start at gamma when it is given.
    let started = model("block = { type = \"rk2\", learned = \"scalar\", gamma = [0.5, 2.0] }").unwrap();
    assert_eq!(
        started.block,
        Block::Rk2Learned {
            gamma: [0.5, 2.0],
            coefficients: Coefficients::Scalar
        }
    );
    // Older configs mean what they meant, and the new options stay out of saved configs unset.
    let plain = model("").unwrap();
    assert_eq!(
        (plain.rk_stage, plain.history),
        (RkStage::SubBlock, History::None)
    );
    let json = serde_json::to_string(&plain).unwrap();
    for key in ["rk_stage", "history", "attention_dropout", "activation_dropout"] {
        assert!(!json.contains(key), "{json}");
    }
    let json = serde_json::to_string(&config).unwrap();
    assert_eq!(ModelConfig::from_json(&json).unwrap(), config, "{json}");
    let refused = |extra: &str| model(extra).unwrap_err().to_string();
    let e = refused("block = { type = \"rk4\", learned = \"scalar\" }");
    assert!(e.contains("block.learned is a setting of type rk2 only"), "{e}");
    let e = refused("block = { type = \"rk2\", learned = \"vector\" }");
    assert!(
        e.contains("unknown variant `vector`, expected `scalar` or `channel`"),
        "{e}"
    );
    let e = refused("history = \"gru\"");
    assert!(e.contains("unknown variant `gru`"), "{e}");
    let e = refused("rk_stage = \"stage\"");
    assert!(
        e.contains("unknown variant `stage`, expected `sub_block` or `layer`"),
        "{e}"
    );
    let e = refused("attention_dropout = 1.0");
    assert_eq!(e, "model config: attention_dropout must be in [0, 1), got 1");
    let e = refused("activation_dropout = -0.1");
    assert_eq!(e, "model config: activation_dropout must be in [0, 1), got -0.1");
    let seq2seq = ModelConfig {
        kind: ModelKind::Seq2Seq {
            tied_head: true,
            decoder_layers: 1,
            decoder_block: Block::Residual,
        },
        ..tiny(Block::Residual, RkStage::SubBlock, History::Dense)
    };
    let e = seq2seq.validate().unwrap_err().to_string();
    assert!(e.contains("a seq2seq model cannot have one yet"), "{e}");
}

/// Each dropout site alone (attention probabilities, FFN activations, with the authors' code
/// form around them) draws its masks from the seed in training graphs only, the same on the GPU.
#[test]
fn each_dropout_site_follows_the_seed_in_training_graphs_only() {
    let base = tiny(Block::Rk2Gated, RkStage::Layer, History::Dense);
    for config in [
        ModelConfig {
            attention_dropout: 0.3,
            ..base.clone()
        },
        ModelConfig {
            activation_dropout: 0.3,
            ..base
        },
    ] {
        models::assert_dropout_follows_the_seed(&config);
    }
}

/// configs/moby_{residual,rk2,rk4}_code.toml train (two steps of two windows) and evaluate (one
/// batch at the training length and at twice it), on the CPU and, when there is one, the GPU.
#[test]
fn the_shipped_code_form_configs_train_and_evaluate() {
    let dir = scratch("ode_code", "shipped_configs");
    let mut devices = vec!["cpu"];
    if gpu_for_tests().is_some() {
        devices.push("gpu");
    }
    for device in devices {
        for kind in ["residual", "rk2", "rk4"] {
            let shipped =
                Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("configs/moby_{kind}_code.toml"));
            // Batches of 2, one evaluation batch at two lengths and no end-of-run sample (200
            // tokens, a whole forward each): lavapipe takes minutes a config as shipped.
            let text = std::fs::read_to_string(shipped)
                .unwrap()
                .replace("batch = 16", "batch = 2")
                .replace("sample_prompt = \"Call me Ishmael. \"\n", "")
                .replace("eval_batches = 4", "eval_batches = 1")
                .replace("eval_lengths = [64, 128, 256, 512]", "eval_lengths = [64, 256]");
            let config = format!("{device}_{kind}.toml");
            std::fs::write(dir.join(&config), text).unwrap();
            let run = format!("{device}_{kind}");
            let args = [
                "train",
                "--config",
                &config,
                "--steps",
                "2",
                "--device",
                device,
                "--out",
                &format!("{run}.safetensors"),
                "--metrics",
                &format!("{run}.jsonl"),
            ];
            let o = posflow_in(&dir, &args);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            for part in ["evaluation after step 2", "33-64", "129-256"] {
                assert!(
                    out.contains(part),
                    "{device} {kind}: expected {part:?} in:\n{out}"
                );
            }
            assert!(dir.join(format!("{run}.safetensors")).exists());
        }
    }
}
