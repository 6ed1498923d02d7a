//! The Chomsky-hierarchy tasks end to end: a config names one, a token classifier trains on it
//! at its placeholders, and evaluation reports accuracy per band of input lengths, the first band
//! the training lengths.

use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend, gpu_for_tests};
use posflow::train::{EvalReport, RunConfig, Trainer};

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

fn run(name: &str, classes: usize, steps: usize) -> RunConfig {
    run_with(name, classes, steps, r#"{ type = "sinusoidal" }"#, "")
}

/// [`run`] with another encoding and more `[model]` settings.
fn run_with(name: &str, classes: usize, steps: usize, posenc: &str, model: &str) -> RunConfig {
    let warmup = steps / 10;
    let toml = format!(
        r#"
[data]
task = "chomsky"
name = "{name}"
train_max_len = 8

[model]
d_model = 32
heads = 4
layers = 2
ffn = 64
max_len = 256
embed_scale = "sqrt_d"
kind = {{ type = "token_classifier", n_classes = {classes} }}
posenc = {posenc}
{model}

[train]
steps = {steps}
batch = 32
lr = 3e-3
warmup = {warmup}
eval_lengths = [3, 8, 12, 20]
eval_batches = 2
"#
    );
    RunConfig::from_toml(&toml, "chomsky test").unwrap()
}

/// (bin, accuracy, scored tokens) of every bin.
fn bins(report: &EvalReport) -> Vec<(String, f64, usize)> {
    report
        .bins
        .bins()
        .map(|(lengths, totals)| {
            let name = format!("{}-{}", lengths.start(), lengths.end());
            (name, totals.accuracy(), totals.tokens)
        })
        .collect()
}

#[test]
fn a_token_classifier_learns_even_pairs_on_its_training_lengths() {
    let mut trainer = Trainer::new(cpu(), run("even_pairs", 2, 1000)).unwrap();
    while !trainer.is_done() {
        trainer.step().unwrap();
    }
    let report = pollster::block_on(trainer.evaluate());
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let bins = bins(&report);
    let names: Vec<&str> = bins.iter().map(|(name, ..)| name.as_str()).collect();
    // Lengths 3 and 8 are trained; 12 falls in 9–16 and 20 in 17–32.
    assert_eq!(names, ["1-8", "9-16", "17-32"]);
    // One placeholder per example: 2 batches of 32 per length, two lengths in the first bin.
    assert_eq!(bins[0].2, 2 * 2 * 32);
    assert!(bins[0].1 >= 0.9, "{report}");
}

#[test]
fn the_gpu_trains_and_evaluates_as_the_cpu_does() {
    let Some(gpu) = gpu_for_tests() else {
        return;
    };
    // A task with a termination token: accuracy counts only the symbols up to it.
    let config = run("binary_addition", 3, 3);
    let mut on_cpu = Trainer::new(cpu(), config.clone()).unwrap();
    let mut on_gpu = Trainer::new(gpu, config).unwrap();
    for _ in 0..3 {
        let a = on_cpu.step().unwrap();
        let b = on_gpu.step().unwrap();
        assert!(
            (a.loss - b.loss).abs() < 1e-4 * a.loss.abs().max(1.0),
            "{a:?} {b:?}"
        );
    }
    let (a, b) = (
        bins(&pollster::block_on(on_cpu.evaluate())),
        bins(&pollster::block_on(on_gpu.evaluate())),
    );
    assert_eq!(a.len(), 3);
    for ((name_a, acc_a, tokens_a), (name_b, acc_b, tokens_b)) in a.iter().zip(&b) {
        assert_eq!((name_a, tokens_a), (name_b, tokens_b));
        assert!((acc_a - acc_b).abs() < 0.02, "{a:?} {b:?}");
    }
}

/// Every encoding the Chomsky studies randomize trains and evaluates at randomized positions on
/// the CPU and the GPU alike; evaluation draws the same positions every time (the paper's fixed
/// evaluation generator), so a model evaluated twice scores the same.
#[test]
fn every_randomized_encoding_trains_and_evaluates_on_the_cpu_and_the_gpu() {
    let Some(gpu) = gpu_for_tests() else {
        return;
    };
    let encodings = [
        r#"{ type = "sinusoidal" }"#,
        r#"{ type = "learned" }"#,
        r#"{ type = "relative" }"#,
        r#"{ type = "rope" }"#,
        r#"{ type = "alibi" }"#,
        r#"{ type = "tupe_a", untie_cls = false }"#,
        r#"{ type = "floater" }"#,
    ];
    for posenc in encodings {
        let config = run_with("reverse_string", 2, 2, posenc, "random_positions = 256");
        let mut on_cpu = Trainer::new(cpu(), config.clone()).unwrap();
        let mut on_gpu = Trainer::new(gpu.clone(), config).unwrap();
        for _ in 0..2 {
            let a = on_cpu.step().unwrap();
            let b = on_gpu.step().unwrap();
            assert!(
                a.loss.is_finite() && (a.loss - b.loss).abs() < 1e-4 * a.loss.abs().max(1.0),
                "{posenc}: {a:?} {b:?}"
            );
        }
        let (a, b) = (
            pollster::block_on(on_cpu.evaluate()),
            pollster::block_on(on_gpu.evaluate()),
        );
        assert!(
            a.failures.is_empty() && b.failures.is_empty(),
            "{posenc}: {a} {b}"
        );
        let (a, b) = (bins(&a), bins(&b));
        assert_eq!(a.len(), 3, "{posenc}");
        for ((name_a, acc_a, tokens_a), (name_b, acc_b, tokens_b)) in a.iter().zip(&b) {
            assert_eq!((name_a, tokens_a), (name_b, tokens_b), "{posenc}");
            assert!((acc_a - acc_b).abs() < 0.02, "{posenc}: {a:?} {b:?}");
        }
        assert_eq!(bins(&pollster::block_on(on_cpu.evaluate())), a, "{posenc}");
    }
}

#[test]
fn a_chomsky_config_names_what_is_wrong() {
    let err = |toml: &str| RunConfig::from_toml(toml, "bad").unwrap_err().to_string();
    let model = r#"
[model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 64
posenc = { type = "sinusoidal" }
"#;
    let train = "[train]\nsteps = 1\nbatch = 2\nlr = 1e-3\n";
    let with = |data: &str, kind: &str| format!("[data]\n{data}\n{model}kind = {kind}\n{train}");
    let parity = r#"task = "chomsky"
name = "parity_check"
train_max_len = 8"#;
    let e = err(&with(parity, r#"{ type = "token_classifier", n_classes = 3 }"#));
    assert!(e.contains("n_classes = 2"), "{e}");
    let e = err(&with(parity, r#"{ type = "causal_lm" }"#));
    assert!(e.contains("token_classifier"), "{e}");
    let e = err(&with(
        "task = \"moby_dick\"\nseq_len = 16",
        r#"{ type = "token_classifier", n_classes = 2 }"#,
    ));
    assert!(e.contains("task = \"chomsky\""), "{e}");
    let e = err(&with(
        "task = \"chomsky\"\nname = \"solve_equation\"\ntrain_max_len = 8",
        r#"{ type = "token_classifier", n_classes = 5 }"#,
    ));
    assert!(e.contains("solve_equation"), "{e}");
    let e = err(&with(
        "task = \"chomsky\"\nname = \"parity_check\"\ntrain_max_len = 0",
        r#"{ type = "token_classifier", n_classes = 2 }"#,
    ));
    assert!(e.contains("train_max_len must be at least 1"), "{e}");
}
