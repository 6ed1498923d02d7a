//! The trainer: a resumed run continues exactly (CPU) or within f32 noise (GPU), the loop writes
//! its metrics log and checkpoint and evaluates per length bin past the training length, a
//! diverging run stops with a clear error and leaves the last checkpoint intact, and bad run
//! configs are explained.

use crate::common::scratch as scratch_dir;

use posflow::model::GraphOptions;

use scratch_dir::scratch;
use std::path::Path;
use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend, gpu_for_tests};
use posflow::checkpoint::Checkpoint;
use posflow::inference::SavedModel;
use posflow::model::Tokens;
use posflow::train::{MetricsLog, Progress, Record, RunConfig, Trainer, VOCAB_FROM_DATA, fit};
use rand::SeedableRng;

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

/// A run small enough for a debug build: a one-layer char LM on windows of 32 characters of Moby
/// Dick. `posenc` and `train_extra` are TOML lines spliced into `[model]` and `[train]`.
fn tiny_run(posenc: &str, train_extra: &str) -> RunConfig {
    let toml = format!(
        r#"
[data]
task = "moby_dick"
seq_len = 32

[model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 32
kind = {{ type = "causal_lm" }}
posenc = {posenc}

[train]
steps = 12
batch = 4
seed = 5
lr = 1e-2
warmup = 3
{train_extra}
"#
    );
    RunConfig::from_toml(&toml, "tiny run").unwrap()
}

fn losses(trainer: &mut Trainer, steps: usize) -> Vec<f32> {
    (0..steps).map(|_| trainer.step().unwrap().loss).collect()
}

/// The uninterrupted curve, and the curve of a run checkpointed after `first` steps, written to
/// bytes, read back and resumed on a fresh trainer.
fn curves(backend: &Rc<dyn Backend>, first: usize) -> (Vec<f32>, Vec<f32>) {
    // With dropout, whose masks must follow the step too.
    let mut run = tiny_run(r#"{ type = "relative", buckets = 8, max_distance = 32 }"#, "");
    run.model.dropout = 0.1;
    let steps = run.train.steps;
    let uninterrupted = losses(&mut Trainer::new(backend.clone(), run.clone()).unwrap(), steps);

    let mut before = Trainer::new(backend.clone(), run.clone()).unwrap();
    let mut resumed_curve = losses(&mut before, first);
    let bytes = pollster::block_on(before.checkpoint())
        .unwrap()
        .to_bytes()
        .unwrap();
    drop(before);
    let checkpoint = Checkpoint::from_bytes(&bytes, "resume test").unwrap();
    let mut after = Trainer::resume(backend.clone(), run, &checkpoint).unwrap();
    assert_eq!(after.steps_done(), first);
    resumed_curve.extend(losses(&mut after, steps - first));
    assert!(after.is_done());
    (uninterrupted, resumed_curve)
}

#[test]
fn a_resumed_run_matches_the_uninterrupted_one_exactly_on_the_cpu() {
    let (uninterrupted, resumed) = curves(&cpu(), 5);
    assert_eq!(resumed, uninterrupted);
    assert!(
        uninterrupted[11] < uninterrupted[0] - 0.5,
        "the run should learn something: {uninterrupted:?}"
    );
}

#[test]
fn a_resumed_run_matches_the_uninterrupted_one_on_the_gpu() {
    let Some(gpu) = gpu_for_tests() else { return };
    let (uninterrupted, resumed) = curves(&gpu, 5);
    for (step, (a, b)) in uninterrupted.iter().zip(&resumed).enumerate() {
        assert!((a - b).abs() <= 1e-4 * a.abs(), "step {step}: {a} vs {b}");
    }
    // And the GPU follows the CPU's curve.
    let (cpu_curve, _) = curves(&cpu(), 5);
    for (step, (g, c)) in uninterrupted.iter().zip(&cpu_curve).enumerate() {
        assert!((g - c).abs() <= 1e-3 * c.abs(), "step {step}: GPU {g} vs CPU {c}");
    }
}

#[derive(Default)]
struct Recorder {
    steps: Vec<usize>,
    evaluated_at: Vec<usize>,
    saved_at: Vec<usize>,
}

impl Progress for Recorder {
    fn step(&mut self, stats: &posflow::train::StepStats, tokens_per_s: f64) {
        assert!(tokens_per_s > 0.0);
        self.steps.push(stats.step);
    }

    fn evaluated(&mut self, step: usize, _: &posflow::train::EvalReport) {
        self.evaluated_at.push(step);
    }

    fn saved(&mut self, _: &Path, step: usize) {
        self.saved_at.push(step);
    }
}

fn outputs(dir: &Path) -> String {
    format!(
        "checkpoint = {:?}\nmetrics = {:?}\neval_every = 6\neval_lengths = [16, 32, 64]\neval_batches = 2",
        dir.join("out/run.safetensors"),
        dir.join("out/run.jsonl")
    )
}

#[test]
fn fit_evaluates_logs_and_checkpoints_on_schedule() {
    let dir = scratch("train", "fit");
    let run = tiny_run(r#"{ type = "sinusoidal" }"#, &outputs(&dir));
    let mut trainer = Trainer::new(cpu(), run).unwrap();
    let mut recorder = Recorder::default();
    let summary = fit(&mut trainer, &mut recorder).unwrap();
    assert_eq!(recorder.steps, (0..12).collect::<Vec<_>>());
    assert_eq!(
        (recorder.evaluated_at, recorder.saved_at),
        (vec![6, 12], vec![6, 12])
    );
    assert!(summary.last_loss < summary.first_loss - 0.5, "{summary:?}");

    // Lengths 16 and 32 were trained on, 64 is twice the training length: both bins are
    // there (a sinusoidal table has any length), the last one marked as beyond training.
    let report = summary.last_eval.unwrap();
    let bins: Vec<_> = report
        .bins
        .bins()
        .map(|(lengths, t)| (lengths, t.tokens))
        .collect();
    assert_eq!(
        bins,
        vec![(1..=32, 2 * 4 * 16 + 2 * 4 * 32), (33..=64, 2 * 4 * 64)]
    );
    assert!(report.failures.is_empty());
    let table = report.to_string();
    assert!(table.contains("33-64") && table.contains("> trained"), "{table}");

    let records = MetricsLog::read(&dir.join("out/run.jsonl")).unwrap();
    let trains = records
        .iter()
        .filter(|r| matches!(r, Record::Train { .. }))
        .count();
    let evals: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Eval { step, bin, .. } => Some((*step, bin.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(trains, 12);
    assert_eq!(
        evals,
        vec![(6, "1-32"), (6, "33-64"), (12, "1-32"), (12, "33-64")]
    );

    // The checkpoint holds the trained model, ready to generate.
    let saved = SavedModel::load(cpu(), dir.join("out/run.safetensors")).unwrap();
    assert_eq!(saved.metadata.training.step, 12);
    let greedy = pollster::block_on(saved.generator().unwrap().complete(
        "Call me ",
        5,
        0.0,
        &mut rand_chacha::ChaCha8Rng::seed_from_u64(0),
    ))
    .unwrap();
    assert_eq!(greedy.chars().count(), 5);
}

#[test]
fn a_learned_table_reports_lengths_past_its_end_instead_of_failing() {
    let dir = scratch("train", "learned");
    let run = tiny_run(r#"{ type = "learned" }"#, &outputs(&dir));
    let mut trainer = Trainer::new(cpu(), run).unwrap();
    let report = pollster::block_on(trainer.evaluate());
    assert_eq!(report.bins.bins().count(), 1, "{report}");
    assert_eq!(report.failures.len(), 1);
    let (length, why) = &report.failures[0];
    assert_eq!(*length, 64);
    assert!(why.contains("64") && why.contains("32"), "{why}");
}

#[test]
fn a_diverging_run_stops_with_a_clear_error_and_keeps_the_last_checkpoint() {
    let dir = scratch("train", "diverge");
    let mut run = tiny_run(r#"{ type = "none" }"#, &outputs(&dir));
    run.train.clip_grad_norm = 0.0;
    run.train.steps = 6;
    let mut trainer = Trainer::new(cpu(), run.clone()).unwrap();
    fit(&mut trainer, &mut Recorder::default()).unwrap();
    let path = dir.join("out/run.safetensors");
    let saved = std::fs::read(&path).unwrap();

    // Resume with a learning rate that blows the weights up to infinity.
    run.train.steps = 12;
    run.train.lr = 1e35;
    let checkpoint = Checkpoint::load(&path).unwrap();
    let mut trainer = Trainer::resume(cpu(), run, &checkpoint).unwrap();
    let err = fit(&mut trainer, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("training: the loss is") && err.contains("at step") && err.contains("lr"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        saved,
        "the last checkpoint must be untouched"
    );
}

/// Reading a config touches no data file: a text file that is not there is found missing when
/// the trainer loads the data, and the vocabulary is settled then, from the file's characters;
/// a `[model] vocab` that is not the data's is refused then, naming both.
#[test]
fn a_config_reads_no_data_and_the_trainer_settles_the_vocabulary() {
    let dir = scratch("train", "settle");
    let path = dir.join("text.txt");
    let text_run = |vocab: &str| {
        VALID_RUN
            .replace(
                "task = \"moby_dick\"",
                &format!("task = \"text_file\"\npath = {:?}", path.display().to_string()),
            )
            .replace("d_model = 16", &format!("d_model = 16\n{vocab}"))
    };
    let run = RunConfig::from_toml(&text_run(""), "text.toml").unwrap();
    assert_eq!(run.model.vocab, VOCAB_FROM_DATA);
    let err = Trainer::new(cpu(), run.clone()).err().unwrap().to_string();
    assert!(err.contains("text.txt"), "{err}");
    std::fs::write(&path, "abcab cab ".repeat(20)).unwrap();
    let trainer = Trainer::new(cpu(), run).unwrap();
    // a, b, c and the space, after the tokenizer's special tokens.
    let specials = posflow::data::CharTokenizer::from_text("").vocab_size();
    assert_eq!(trainer.run().model.vocab, specials + 4);
    let stated = RunConfig::from_toml(&text_run("vocab = 40"), "text.toml").unwrap();
    let err = Trainer::new(cpu(), stated).err().unwrap().to_string();
    assert!(
        err.contains(&format!(
            "[model] vocab is 40, but the data's tokenizer has {} ids",
            specials + 4
        )),
        "{err}"
    );
}

const VALID_RUN: &str = r#"
[data]
task = "moby_dick"
seq_len = 32

[model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 32
kind = { type = "causal_lm" }
posenc = { type = "none" }

[train]
steps = 12
batch = 4
lr = 1e-2
"#;

#[test]
fn bad_run_configs_name_the_problem() {
    let run = RunConfig::from_toml(VALID_RUN, "good.toml").unwrap();
    let moby = posflow::data::CharTokenizer::from_text(posflow::data::MOBY_DICK);
    assert_eq!(
        run.model.vocab, VOCAB_FROM_DATA,
        "reading the config reads no data"
    );
    let settled = run.clone().with_data_vocab().unwrap();
    assert_eq!(
        settled.model.vocab,
        moby.vocab_size(),
        "vocab comes from the data"
    );
    // (text replaced, replacement, what the error must say)
    let cases: [(&str, &str, &[&str]); 11] = [
        (
            "lr = 1e-2",
            "lr = 1e-2\nlearning_rate = 1",
            &["bad.toml", "unknown field `learning_rate`", "line 19"],
        ),
        (
            "d_model = 16",
            "d_model = 16\nwidth = 3",
            &["bad.toml: [model]", "unknown field `width`"],
        ),
        (
            "d_model = 16",
            "d_model = 16\nvocab = 0",
            &["[model] vocab must be positive, got 0; leave it out"],
        ),
        (
            "\"causal_lm\" }",
            "\"encoder\", n_classes = 2 }",
            &["an encoder classifies, so its task must be a classification set"],
        ),
        (
            "seq_len = 32",
            "seq_len = 64",
            &["64 tokens long ([data] seq_len)", "max_len 32"],
        ),
        (
            "lr = 1e-2",
            "lr = 1e-2\nwarmup = 50",
            &["warmup_steps (50)", "total_steps (12)"],
        ),
        ("moby_dick", "wikipedia", &["unknown variant `wikipedia`"]),
        // A bad value inside the tagged tables ([data], posenc) names its key.
        (
            "seq_len = 32",
            "seq_len = -32",
            &["line 4", "seq_len = -32", "expected usize"],
        ),
        (
            "{ type = \"none\" }",
            "{ type = \"floater\", substeps = -1 }",
            &[
                "bad.toml: [model]",
                "floater: `substeps`",
                "expected usize",
                "in `posenc`",
            ],
        ),
        (
            "lr = 1e-2",
            "lr = 1e-2\nfinal_lr_fraction = 2.0",
            &["[train] final_lr_fraction must be in [0, 1], got 2"],
        ),
        (
            "lr = 1e-2",
            "lr = 1e-2\neval_lengths = [64, 1]",
            &["[train] eval_lengths: evaluation length 1 is out of range"],
        ),
    ];
    for (from, to, expected) in cases {
        let err = RunConfig::from_toml(&VALID_RUN.replace(from, to), "bad.toml")
            .unwrap_err()
            .to_string();
        for part in expected {
            assert!(err.contains(part), "{to:?}: expected {part:?} in: {err}");
        }
    }
}

/// The generator pads the context on the right to its window; a causal model cannot see the
/// padding, so its next-character distribution equals that of a graph exactly as long as the
/// context. A context longer than the window keeps its last characters.
#[test]
fn generation_sees_only_the_context_and_slides_past_the_window() {
    use posflow::exec::Executor;
    use posflow::graph::Graph;
    use posflow::inference::Generator;

    let run = tiny_run(r#"{ type = "relative", buckets = 8, max_distance = 32 }"#, "");
    let mut trainer = Trainer::new(cpu(), run).unwrap();
    losses(&mut trainer, 3);
    let tokenizer = trainer.tokenizer().chars().unwrap().clone();
    let generator = Generator::new(trainer.model(), trainer.params(), tokenizer.clone(), 16).unwrap();
    let exact = |context: &[i32]| -> Vec<f32> {
        let mut g = Graph::new();
        let graph = trainer
            .model()
            .build(
                &mut g,
                Tokens {
                    batch: 1,
                    len: context.len(),
                },
                GraphOptions::default(),
            )
            .unwrap();
        let exec = Executor::new(&g, &[graph.logits, graph.loss], trainer.params()).unwrap();
        let targets = vec![posflow::data::IGNORE_INDEX; context.len()];
        graph.feed(&exec, context, &targets, None).unwrap();
        exec.run().unwrap();
        let logits = exec.read_blocking(graph.logits).unwrap();
        let vocab = trainer.model().config().vocab;
        let last = &logits[(context.len() - 1) * vocab..];
        let max = last.iter().copied().fold(f32::MIN, f32::max);
        // posflow's own exp (the standard library's may round some values otherwise).
        let total: f32 = last.iter().map(|l| posflow::math::exp(l - max)).sum();
        last.iter().map(|l| posflow::math::exp(l - max) / total).collect()
    };
    let text = tokenizer.encode("Call me Ishmael. Some years ago").unwrap();
    for context in [&text[..5], &text[..16]] {
        let probs = pollster::block_on(generator.next_probabilities(context)).unwrap();
        assert!((probs.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        for (a, b) in probs.iter().zip(exact(context)) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
    let slid = pollster::block_on(generator.next_probabilities(&text)).unwrap();
    assert_eq!(slid, exact(&text[text.len() - 16..]));
    let err = pollster::block_on(generator.next_probabilities(&[])).unwrap_err();
    assert!(err.to_string().contains("context is empty"), "{err}");
}

/// `final_eval_batches`: the evaluations during training read `eval_batches` batches of each
/// length, the final one as many as it says; every evaluated bin logs its scores' errors over
/// its sequences.
#[test]
fn the_final_evaluation_may_read_more_batches_and_logs_its_errors_over_sequences() {
    let dir = scratch("train", "final_eval");
    let extra = format!("{}\nfinal_eval_batches = 5", outputs(&dir));
    let mut trainer = Trainer::new(cpu(), tiny_run(r#"{ type = "sinusoidal" }"#, &extra)).unwrap();
    fit(&mut trainer, &mut Recorder::default()).unwrap();
    let records = MetricsLog::read(&dir.join("out/run.jsonl")).unwrap();
    let of = |at: usize| -> Vec<(String, usize, Option<f64>)> {
        records
            .iter()
            .filter_map(|r| match r {
                Record::Eval {
                    step,
                    bin,
                    tokens,
                    item_errors,
                    ..
                } if *step == at => Some((bin.clone(), *tokens, item_errors.and_then(|e| e.accuracy))),
                _ => None,
            })
            .collect()
    };
    let (during, last) = (of(6), of(12));
    assert_eq!(during[0].1, 2 * 4 * 16 + 2 * 4 * 32);
    assert_eq!(last[0].1, 5 * 4 * 16 + 5 * 4 * 32);
    assert_eq!(last[1].1, 5 * 4 * 64);
    for (bin, _, error) in during.iter().chain(&last) {
        let error = error.unwrap_or_else(|| panic!("{bin}: no error over sequences"));
        assert!(error > 0.0 && error < 0.5, "{bin}: {error}");
    }
    // More sequences, a smaller error (the same model's bins, 40 sequences against 16).
    assert!(
        last[1].2.unwrap() < during[1].2.unwrap() * 1.2,
        "{last:?} {during:?}"
    );
    let mut bad = tiny_run(r#"{ type = "sinusoidal" }"#, "");
    bad.train.final_eval_batches = Some(0);
    let err = Trainer::new(cpu(), bad).err().expect("refused").to_string();
    assert!(err.contains("final_eval_batches must be at least 1"), "{err}");
}
