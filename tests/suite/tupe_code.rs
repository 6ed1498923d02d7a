//! TUPE as its authors ran it and the paper's baselines around it: the code form's parameters
//! (`form = "code"`), the post-LN backbone (`norm = "post"`), BERT-R (`learned_absolute`), the
//! word-temperature control (`word_scale`), and the shipped configs trained and evaluated as a
//! user runs them. Fidelity against the authors' encoder is `tests/suite/model_reference.rs`'s
//! `mlm_code_*` cases (`tests/reference/authors_tupe.py`).

use crate::common::binary;
use crate::common::models;
use crate::common::scratch as scratch_dir;

use std::path::Path;

use binary::posflow_in;
use models::{params, with_prefix};
use posflow::backend::gpu_for_tests;
use posflow::model::Tokens;
use posflow::model::{Model, ModelConfig, ModelKind, Norm, PosEnc, TupeForm};
use posflow::model::{NoEncoding, Relative, TupeR};
use scratch_dir::scratch;

/// A masked LM of width 32 (2 heads), 2 layers, a table of 16.
fn mlm(posenc: PosEnc, norm: Norm) -> ModelConfig {
    ModelConfig {
        vocab: 30,
        max_len: 16,
        kind: ModelKind::MaskedLm {},
        posenc,
        norm,
        ..ModelConfig::default()
    }
}

const CODE_TUPE_R: PosEnc = PosEnc::TupeR(TupeR {
    untie_cls: true,
    buckets: 8,
    max_distance: 20,
    form: TupeForm::Code,
});

/// The code form: U_Q and U_K with biases, one more table row (θ's), no free θ parameters, and
/// TUPE-R's relative table one bucket longer; the paper's form keeps its free θ1, θ2.
#[test]
fn the_code_form_s_parameters_are_the_documented_ones() {
    let code = params(mlm(CODE_TUPE_R, Norm::Pre));
    assert_eq!(
        with_prefix(&code, "posenc."),
        [
            "posenc.relative.weight [9, 2]",
            "posenc.tupe.key.bias [32]",
            "posenc.tupe.key.weight [32, 32]",
            "posenc.tupe.ln.bias [32]",
            "posenc.tupe.ln.gain [32]",
            "posenc.tupe.query.bias [32]",
            "posenc.tupe.query.weight [32, 32]",
            "posenc.tupe.weight [17, 32]",
        ]
    );
    let paper_tupe_r = PosEnc::TupeR(TupeR {
        untie_cls: true,
        buckets: 8,
        max_distance: 20,
        form: TupeForm::Paper,
    });
    let paper = params(mlm(paper_tupe_r, Norm::Pre));
    assert_eq!(
        with_prefix(&paper, "posenc."),
        [
            "posenc.relative.weight [8, 2]",
            "posenc.tupe.cls_to_others [2]",
            "posenc.tupe.key.weight [32, 32]",
            "posenc.tupe.ln.bias [32]",
            "posenc.tupe.ln.gain [32]",
            "posenc.tupe.others_to_cls [2]",
            "posenc.tupe.query.weight [32, 32]",
            "posenc.tupe.weight [16, 32]",
        ]
    );
}

/// Post-LN: the same block parameters, a layer norm on the embeddings, no final norm; BERT-R: the
/// learned table and T5's.
#[test]
fn post_norm_and_bert_r_declare_their_parameters() {
    let bert_r = PosEnc::Relative(Relative {
        buckets: 8,
        max_distance: 20,
        learned_absolute: true,
    });
    let post = params(mlm(bert_r, Norm::Post));
    let pre = params(mlm(bert_r, Norm::Pre));
    assert_eq!(
        with_prefix(&post, "emb_ln"),
        ["emb_ln.bias [32]", "emb_ln.gain [32]"]
    );
    assert!(with_prefix(&post, "ln_f").is_empty(), "{post:?}");
    assert!(with_prefix(&pre, "emb_ln").is_empty(), "{pre:?}");
    assert_eq!(with_prefix(&pre, "ln_f"), ["ln_f.bias [32]", "ln_f.gain [32]"]);
    assert_eq!(with_prefix(&post, "blocks."), with_prefix(&pre, "blocks."));
    for names in [&post, &pre] {
        assert_eq!(
            with_prefix(names, "pos"),
            ["pos_emb.weight [16, 32]", "posenc.relative.weight [8, 2]"]
        );
    }
}

/// BERT-R's learned table bounds the length as a learned encoding's does, with the same error.
#[test]
fn bert_r_refuses_a_sequence_over_its_table() {
    let config = ModelConfig {
        posenc: PosEnc::Relative(Relative {
            buckets: 8,
            max_distance: 20,
            learned_absolute: true,
        }),
        ..mlm(PosEnc::None(NoEncoding {}), Norm::Post)
    };
    let model = Model::new(config).unwrap();
    let mut g = posflow::Graph::new();
    let err = model
        .build(
            &mut g,
            Tokens { batch: 1, len: 17 },
            posflow::model::GraphOptions::default(),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sequence length 17 is over the learned position table's max_len 16"),
        "{err}"
    );
}

/// configs/mlm_tupe_a_post.toml and configs/mlm_bert_r.toml train (two steps of two rows, with
/// their dropout) and evaluate, and `posflow eval` scores the checkpoint: on the CPU and, when
/// there is one, the GPU.
#[test]
fn the_shipped_authors_form_configs_train_and_evaluate() {
    let dir = scratch("tupe_code", "shipped_configs");
    let mut devices = vec!["cpu"];
    if gpu_for_tests().is_some() {
        devices.push("gpu");
    }
    for device in devices {
        for name in ["mlm_tupe_a_post", "mlm_bert_r"] {
            let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("configs/{name}.toml"));
            // Batches of 2, one evaluation batch and no end-of-run sample: lavapipe takes
            // minutes a config as shipped.
            let text = std::fs::read_to_string(shipped).unwrap();
            let sample = text.lines().find(|l| l.starts_with("sample_prompt")).unwrap();
            let text = text
                .replace(sample, "")
                .replace("batch = 32", "batch = 2")
                .replace("eval_batches = 8", "eval_batches = 1");
            let config = format!("{device}_{name}.toml");
            std::fs::write(dir.join(&config), text).unwrap();
            let run = format!("{device}_{name}");
            let checkpoint = format!("{run}.safetensors");
            let args = [
                "train",
                "--config",
                &config,
                "--steps",
                "2",
                "--device",
                device,
                "--out",
                &checkpoint,
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
            for part in ["evaluation after step 2", "post-LN", "1-32", "33-64"] {
                assert!(
                    out.contains(part),
                    "{device} {name}: expected {part:?} in:\n{out}"
                );
            }
            let args = [
                "eval",
                "--checkpoint",
                &checkpoint,
                "--lengths",
                "32",
                "--batches",
                "1",
                "--device",
                device,
            ];
            let o = posflow_in(&dir, &args);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(out.contains("1-32"), "{device} {name}: {out}");
        }
    }
}
