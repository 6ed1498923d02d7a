//! Every run config shipped in configs/ parses, validates and builds its trainer, and saves its
//! outputs under runs/ by its own name, so two runs never overwrite each other.

use std::path::Path;
use std::rc::Rc;

use posflow::backend::CpuBackend;
use posflow::train::{DEFAULT_RUN, RunConfig, Trainer};

#[test]
fn every_shipped_config_builds_a_trainer() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let run = RunConfig::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let t = &run.train;
        for output in t.checkpoint.iter().chain(&t.metrics) {
            assert_eq!(
                output.parent().zip(output.file_stem()),
                Some((Path::new("runs"), name.as_ref())),
                "{name}: outputs go to runs/{name}.*"
            );
        }
        Trainer::new(Rc::new(CpuBackend::new()), run).unwrap_or_else(|e| panic!("{name}: {e}"));
        names.push(name);
    }
    names.sort();
    for expected in [
        "moby_dick",
        "moby_learned",
        "moby_none",
        "moby_sinusoidal",
        "copy",
        "cmudict",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "configs/{expected}.toml is missing: {names:?}"
        );
    }
}

#[test]
fn the_built_in_default_is_configs_moby_dick() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/moby_dick.toml");
    assert_eq!(std::fs::read_to_string(path).unwrap(), DEFAULT_RUN);
}

/// The Moby Dick FLOATER configs use the authors' Δ = 0.01, and `moby_floater` is their form:
/// the compatible form, rk4 at Δ/5, adjoint gradients.
#[test]
fn the_floater_configs_use_the_authors_delta() {
    use posflow::model::{FloaterForm, GradientMethod, PosEnc, SolverMethod};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("moby_floater") {
            continue;
        }
        let run = RunConfig::load(&path).unwrap();
        let PosEnc::Floater(floater) = run.model.posenc else {
            panic!("{name}: not FLOATER")
        };
        assert_eq!(floater.delta, 0.01, "{name}");
        if name == "moby_floater" {
            assert_eq!(floater.form, FloaterForm::Bias);
            assert_eq!((floater.method, floater.substeps), (SolverMethod::Rk4, 5));
            assert_eq!(floater.gradient, GradientMethod::Adjoint);
        }
        seen += 1;
    }
    assert_eq!(
        seen, 3,
        "moby_floater, moby_floater_additive, moby_floater_cached"
    );
}

/// The configs that claim an authors' whole model use their FFN activation and init: the ODE
/// Transformer's code form ReLU (`F.relu(self.fc1(x))` in their layers) and fairseq's
/// Xavier-uniform init and sinusoid; TUPE's BERT GELU and `init_bert_params`.
#[test]
fn the_authors_form_configs_use_their_activation_and_init() {
    use posflow::model::{Activation, InitScheme};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let expected = [
        ("moby_residual_code", Activation::Relu, InitScheme::Fairseq),
        ("moby_rk2_code", Activation::Relu, InitScheme::Fairseq),
        ("moby_rk4_code", Activation::Relu, InitScheme::Fairseq),
        ("mlm_tupe_a_post", Activation::Gelu, InitScheme::Bert),
        ("mlm_bert_r", Activation::Gelu, InitScheme::Bert),
    ];
    for (name, activation, init) in expected {
        let run = RunConfig::load(&dir.join(format!("{name}.toml"))).unwrap();
        assert_eq!(run.model.activation, activation, "{name}");
        assert_eq!(run.model.init_scheme(), init, "{name}");
        if init == InitScheme::Fairseq {
            let posenc = serde_json::to_string(&run.model.posenc).unwrap();
            assert!(posenc.contains(r#""layout":"fairseq""#), "{name}: {posenc}");
        }
    }
}

/// Token embeddings are scaled by √d by default where the encoding adds a fixed table to them
/// (the sinusoid, FLOATER's): at std 0.02 they are drowned by a table of amplitude 1. A config
/// that says `embed_scale` keeps it, and other encodings keep unscaled embeddings.
#[test]
fn a_fixed_table_scales_the_embeddings_unless_the_config_says_otherwise() {
    use posflow::model::EmbedScale;
    let run = |posenc: &str, scale: &str| {
        let text = format!(
            "[data]\ntask = \"moby_dick\"\nseq_len = 32\n[model]\nd_model = 32\nheads = 2\nlayers = 1\n\
             ffn = 64\nmax_len = 32\nkind = {{ type = \"causal_lm\" }}\nposenc = {posenc}\n{scale}\n\
             [train]\nsteps = 1\nbatch = 1\nlr = 1e-3\n"
        );
        RunConfig::from_toml(&text, "test").unwrap().model.embed_scale
    };
    let sinusoidal = "{ type = \"sinusoidal\" }";
    let floater = "{ type = \"floater\" }";
    assert_eq!(run(sinusoidal, ""), EmbedScale::SqrtD);
    assert_eq!(run(floater, ""), EmbedScale::SqrtD);
    assert_eq!(run(sinusoidal, "embed_scale = \"none\""), EmbedScale::None);
    assert_eq!(run("{ type = \"learned\" }", ""), EmbedScale::None);
    assert_eq!(run("{ type = \"rope\" }", ""), EmbedScale::None);
}

/// A run built in code (`RunConfig::new`, `TrainConfig::new`, `PosEnc::from_preset`) is the run
/// the same settings in TOML give, defaults included, and is checked as a file is.
#[test]
fn a_run_built_in_code_is_the_run_its_toml_gives() {
    use posflow::prelude::*;
    let model = ModelConfig {
        vocab: VOCAB_FROM_DATA,
        d_model: 32,
        heads: 2,
        layers: 2,
        ffn: 64,
        max_len: 64,
        posenc: PosEnc::from_preset("alibi", false).unwrap(),
        ..ModelConfig::default()
    };
    let built = RunConfig::new(
        DataConfig::Copy {
            min_len: 1,
            max_len: 8,
        },
        model.clone(),
        TrainConfig::new(200, 16, 3e-3),
    )
    .unwrap();
    let read = RunConfig::from_toml(
        r#"
data = { task = "copy", min_len = 1, max_len = 8 }
[model]
d_model = 32
heads = 2
layers = 2
ffn = 64
max_len = 64
kind = { type = "causal_lm", tied_head = true }
posenc = { type = "alibi" }
[train]
steps = 200
batch = 16
lr = 3e-3
"#,
        "code",
    )
    .unwrap();
    assert_eq!(built, read);
    let err = PosEnc::from_preset("wavelets", false).unwrap_err().to_string();
    assert!(
        err.contains("no position encoding preset `wavelets`; the presets are none, sinusoidal"),
        "{err}"
    );
    let bad = RunConfig::new(
        DataConfig::Copy {
            min_len: 1,
            max_len: 8,
        },
        ModelConfig { heads: 3, ..model },
        TrainConfig::new(200, 16, 3e-3),
    );
    assert!(bad.is_err());
}
