//! Training part of a model: `[train] trainable` prefixes in a run, and `FineTune` on a text of
//! one's own over a loaded model's shared parameters (what the browser demo does with FLOATER).

use std::collections::BTreeMap;
use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend};
use posflow::data::CharTokenizer;
use posflow::inference::Generator;
use posflow::model::Model;
use posflow::params::ParamStore;
use posflow::train::{FineTune, FineTuneSettings, RunConfig, Trainer};

use crate::common;

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

fn values(params: &ParamStore) -> BTreeMap<String, Vec<f32>> {
    params
        .iter()
        .map(|(name, _)| (name.to_string(), pollster::block_on(params.read(name)).unwrap()))
        .collect()
}

fn run(posenc: &str, trainable: &str) -> RunConfig {
    common::moby_run(
        posenc,
        &format!("steps = 3\nbatch = 2\nlr = 1e-2\ntrainable = {trainable}"),
    )
}

/// Only the parameters under the given prefixes change; a prefix no parameter has is an error
/// listing the names.
#[test]
fn a_run_trains_only_its_trainable_parameters() {
    let mut trainer = Trainer::new(cpu(), run(r#"{ type = "learned" }"#, r#"["pos_emb."]"#)).unwrap();
    let before = values(trainer.params());
    for _ in 0..3 {
        trainer.step().unwrap();
    }
    for (name, after) in values(trainer.params()) {
        assert_eq!(after != before[&name], name == "pos_emb.weight", "{name}");
    }
    let err = Trainer::new(cpu(), run(r#"{ type = "learned" }"#, r#"["posenc.floater."]"#))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("`posenc.floater.`") && err.contains("pos_emb.weight"),
        "{err}"
    );
}

const TEXT: &str = "the sea, the sea, the whale and the sea; the ship and the sea and the whale. ";

/// FLOATER's dynamics and initial values alone, fine-tuned on a short text: the loss falls, no
/// other parameter moves, and a generator over the same parameters sees the new encodings. The
/// additive form at Δ 0.1, as the web demo's model: there the encodings are the whole position
/// signal, so tuning them alone moves the loss most.
#[test]
fn fine_tuning_floater_alone_lowers_the_loss_and_moves_nothing_else() {
    let additive =
        r#"{ type = "floater", form = "additive", delta = 0.1, method = "midpoint", substeps = 1 }"#;
    let trainer = Trainer::new(cpu(), run(additive, "[]")).unwrap();
    let (model, params) = (trainer.model(), trainer.params());
    let tokenizer = trainer.tokenizer().chars().unwrap().clone();
    let before = values(params);
    let generator = Generator::new(model, params, tokenizer.clone(), 16).unwrap();
    let context = tokenizer.encode("the sea").unwrap();
    let probs_before = pollster::block_on(generator.next_probabilities(&context)).unwrap();

    let settings = FineTuneSettings {
        seq_len: 16,
        batch: 4,
        lr: 3e-2,
        ..FineTuneSettings::default()
    };
    let mut tune = FineTune::new(model, params, &tokenizer, &TEXT.repeat(4), settings).unwrap();
    let losses: Vec<f32> = (0..30)
        .map(|_| pollster::block_on(tune.step()).unwrap())
        .collect();
    assert_eq!(tune.steps(), 30);
    let (first, last) = (losses[..5].iter().sum::<f32>(), losses[25..].iter().sum::<f32>());
    assert!(last < 0.9 * first, "{losses:?}");
    for (name, after) in values(params) {
        assert_eq!(after != before[&name], name.starts_with("posenc."), "{name}");
    }
    generator.refresh_encodings();
    let probs_after = pollster::block_on(generator.next_probabilities(&context)).unwrap();
    assert_ne!(probs_after, probs_before);
}

#[test]
fn fine_tuning_input_errors_are_explained() {
    let model = Model::new(run(r#"{ type = "floater" }"#, "[]").model).unwrap();
    let g = model.declare_params().unwrap();
    let params = ParamStore::init(cpu(), &g, 0).unwrap();
    let tokenizer = CharTokenizer::from_text(TEXT);
    let tune = |text: &str, settings| {
        FineTune::new(&model, &params, &tokenizer, text, settings)
            .err()
            .unwrap()
            .to_string()
    };

    let err = tune("the sea", FineTuneSettings::default());
    assert!(
        err.contains("7 characters") && err.contains("at least 65"),
        "{err}"
    );
    let err = tune("the Pequod", FineTuneSettings::default());
    assert!(err.contains("never saw") && err.contains('P'), "{err}");
    let err = tune(
        &TEXT.repeat(2),
        FineTuneSettings {
            trainable: vec!["posenc.tupe.".into()],
            ..FineTuneSettings::default()
        },
    );
    assert!(err.contains("`posenc.tupe.`"), "{err}");
}
