//! Masked-LM pretraining and classifier fine-tuning as a user runs them: the shipped configs on
//! the CPU and the GPU (lavapipe in CI), the loss on hidden tokens only, and the refusals.

use crate::common::binary;
use crate::common::scratch as scratch_dir;

use std::path::Path;
use std::process::Output;
use std::rc::Rc;

use binary::posflow_in;
use posflow::backend::{Backend, CpuBackend};
use posflow::data::IGNORE_INDEX;
use posflow::exec::Executor;
use posflow::graph::Graph;
use posflow::model::Tokens;
use posflow::model::{GraphOptions, Model};
use posflow::params::ParamStore;
use posflow::train::{DataTask, RunConfig, Task, TrainBatch, Trainer};
use scratch_dir::scratch;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The shipped config `name`, written into `dir` for `device`: on a GPU (lavapipe in CI, where
/// evaluating takes a minute a config) with one evaluation batch, otherwise as shipped.
fn config(dir: &Path, name: &str, device: &str) -> String {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs").join(name);
    let mut text = std::fs::read_to_string(shipped).unwrap();
    if device == "gpu" {
        let line = text
            .lines()
            .find(|l| l.starts_with("eval_batches = "))
            .unwrap()
            .to_string();
        text = text.replace(&line, "eval_batches = 1");
    }
    let path = format!("{device}_{name}");
    std::fs::write(dir.join(&path), text).unwrap();
    path
}

fn succeeds(dir: &Path, args: &[&str]) -> String {
    let o = posflow_in(dir, args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

fn has_all(out: &str, parts: &[&str]) {
    for part in parts {
        assert!(out.contains(part), "expected {part:?} in:\n{out}");
    }
}

/// configs/moby_mlm.toml pretrains, `posflow sample` fills its masks, configs/names_finetune.toml
/// fine-tunes it with --warm-start and `posflow eval` scores the classifier: on the CPU and, when
/// there is one, the GPU.
#[test]
fn the_shipped_masked_lm_and_fine_tuning_configs_run() {
    let dir = scratch("masked_lm", "shipped_configs");
    let mut devices = vec!["cpu"];
    if posflow::backend::gpu_for_tests().is_some() {
        devices.push("gpu");
    }
    for device in devices {
        let (mlm, names) = (format!("mlm_{device}"), format!("names_{device}"));
        let out = succeeds(
            &dir,
            &[
                "train",
                "--config",
                &config(&dir, "moby_mlm.toml", device),
                "--steps",
                "2",
                "--device",
                device,
                "--out",
                &format!("{mlm}.safetensors"),
                "--metrics",
                &format!("{mlm}.jsonl"),
            ],
        );
        has_all(
            &out,
            &[
                "evaluation after step 2",
                "65-128",
                "sample (each <mask> filled with its most likely character):",
                "<mask> 2: ",
            ],
        );
        let out = succeeds(
            &dir,
            &[
                "sample",
                "--checkpoint",
                &format!("{mlm}.safetensors"),
                "--prompt",
                "Call me <mask>shmael.",
                "--device",
                device,
            ],
        );
        let filled = out.lines().nth(1).unwrap_or_default();
        assert!(
            filled.starts_with("Call me ") && filled.ends_with("shmael.") && filled.chars().count() == 21,
            "{out}"
        );
        assert!(out.contains("<mask> 1: "), "{out}");

        let out = succeeds(
            &dir,
            &[
                "train",
                "--config",
                &config(&dir, "names_finetune.toml", device),
                "--warm-start",
                &format!("{mlm}.safetensors"),
                "--steps",
                "2",
                "--device",
                device,
                "--out",
                &format!("{names}.safetensors"),
                "--metrics",
                &format!("{names}.jsonl"),
            ],
        );
        has_all(
            &out,
            &[
                "2 new (cls_head.bias, cls_head.weight)",
                "macro-F1",
                "8-14",
                "> trained",
                "confusion, 1-7 characters (rows: true class, columns: predicted):",
                "female",
            ],
        );
        let log = std::fs::read_to_string(dir.join(format!("{names}.jsonl"))).unwrap();
        assert!(log.contains(r#""classified":{"macro_f1":"#), "{log}");
        let out = succeeds(
            &dir,
            &[
                "eval",
                "--checkpoint",
                &format!("{names}.safetensors"),
                "--batches",
                "1",
                "--device",
                device,
            ],
        );
        has_all(&out, &["at step 2", "macro-F1", "15-28"]);
    }
}

fn tiny_mlm(extra_model: &str) -> String {
    format!(
        r#"
[data]
task = "moby_dick"
seq_len = 24

[model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 24
kind = {{ type = "masked_lm" }}
{extra_model}

[train]
steps = 2
batch = 3
lr = 1e-2
eval_lengths = [24]
"#
    )
}

/// The masked LM's loss is the mean cross-entropy over the hidden tokens alone, every other
/// position ignored.
#[test]
fn the_loss_counts_the_hidden_tokens_only() {
    let run = RunConfig::from_toml(&tiny_mlm(r#"posenc = { type = "learned" }"#), "tiny")
        .and_then(RunConfig::with_data_vocab)
        .unwrap();
    let task = DataTask::load(&run).unwrap();
    let TrainBatch::Tokens(batch) = task.train_batch(0, 0, 3).unwrap() else {
        panic!("a masked LM trains on token batches")
    };
    let hidden = batch.counted_targets();
    assert_eq!(hidden, 3 * 3, "15% of 23 characters, rounded, per row");
    let model = Model::new(run.model.clone()).unwrap();
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let params = ParamStore::init(backend, &model.declare_params().unwrap(), 1).unwrap();
    let mut g = Graph::new();
    let graph = model
        .build(&mut g, Tokens { batch: 3, len: 24 }, GraphOptions::default())
        .unwrap();
    let exec = Executor::new(&g, &[graph.logits, graph.loss], &params).unwrap();
    graph.feed_batch(&exec, &batch).unwrap();
    exec.run().unwrap();
    let logits = pollster::block_on(exec.read(graph.logits)).unwrap();
    let loss = pollster::block_on(exec.read(graph.loss)).unwrap()[0];
    let vocab = run.model.vocab;
    let mut sum = 0.0f64;
    for (i, &target) in batch.targets().iter().enumerate() {
        if target == IGNORE_INDEX {
            continue;
        }
        let row = &logits[i * vocab..(i + 1) * vocab];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let log_total = row.iter().map(|&l| f64::from(l - max).exp()).sum::<f64>().ln();
        sum += log_total - f64::from(row[target as usize] - max);
    }
    let expected = sum / hidden as f64;
    assert!((f64::from(loss) - expected).abs() < 1e-5, "{loss} vs {expected}");
}

/// What a masked LM cannot be, said when the config is read.
#[test]
fn causal_only_settings_are_refused_for_a_masked_lm() {
    let err = |toml: &str| RunConfig::from_toml(toml, "run.toml").unwrap_err().to_string();
    let none = err(&tiny_mlm(r#"posenc = { type = "none" }"#));
    assert!(
        none.contains("masked_lm attends both ways, and without a position encoding (posenc \"none\")"),
        "{none}"
    );
    let copy = tiny_mlm(r#"posenc = { type = "learned" }"#).replace(
        "task = \"moby_dick\"\nseq_len = 24",
        "task = \"copy\"\nmin_len = 1\nmax_len = 4",
    );
    assert!(
        err(&copy).contains("kind masked_lm learns from a text (task moby_dick or text_file)"),
        "{}",
        err(&copy)
    );
    let prompt = tiny_mlm(r#"posenc = { type = "learned" }"#) + "sample_prompt = \"Call me \"\n";
    assert!(
        err(&prompt).contains("a masked LM fills the <mask>s of a text rather than continuing it"),
        "{}",
        err(&prompt)
    );
    let head = tiny_mlm(r#"posenc = { type = "learned" }"#).replace(
        r#"kind = { type = "masked_lm" }"#,
        r#"kind = { type = "masked_lm", tied_head = false }"#,
    );
    assert!(err(&head).contains("unknown field `tied_head`"), "{}", err(&head));
}

/// A classifier is an encoder with as many classes as its set, and fine-tunes only from a model
/// of its vocabulary and width; the refusals name what differs.
#[test]
fn classifier_settings_and_warm_starts_are_checked() {
    let mlm = tiny_mlm(r#"posenc = { type = "learned" }"#);
    let mut trainer = Trainer::new(
        Rc::new(CpuBackend::new()),
        RunConfig::from_toml(&mlm, "mlm").unwrap(),
    )
    .unwrap();
    trainer.step().unwrap();
    let checkpoint = pollster::block_on(trainer.checkpoint()).unwrap();

    let names = |vocabulary: &str, d_model: usize, n_classes: usize| {
        format!(
            r#"
[data]
task = "names"
train_max_len = 7
vocabulary = "{vocabulary}"

[model]
d_model = {d_model}
heads = 2
layers = 1
ffn = 32
max_len = 24
kind = {{ type = "encoder", n_classes = {n_classes} }}
posenc = {{ type = "learned" }}

[train]
steps = 1
batch = 4
lr = 1e-3
"#
        )
    };
    let load = |toml: String| RunConfig::from_toml(&toml, "names.toml");
    let err = load(names("moby_dick", 16, 3)).unwrap_err().to_string();
    assert!(
        err.contains("this set has 2 classes (female, male), but the encoder has n_classes = 3"),
        "{err}"
    );
    let warm = |toml: String| {
        Trainer::warm_start(Rc::new(CpuBackend::new()), load(toml).unwrap(), &checkpoint)
            .map(drop)
            .unwrap_err()
            .to_string()
    };
    let own = warm(names("own", 16, 2));
    assert!(
        own.contains("cannot warm-start: the checkpoint's model has vocab 88, this run's has 56")
            && own.contains("set [data] vocabulary = \"moby_dick\""),
        "{own}"
    );
    let wide = warm(names("moby_dick", 32, 2));
    assert!(
        wide.contains("the checkpoint's model has d_model 16, this run's has 32, so its matrices do not fit"),
        "{wide}"
    );
    let (trainer, start) = Trainer::warm_start(
        Rc::new(CpuBackend::new()),
        load(names("moby_dick", 16, 2)).unwrap(),
        &checkpoint,
    )
    .unwrap();
    assert_eq!(start.fresh, ["cls_head.bias", "cls_head.weight"]);
    assert!(trainer.task().class_data().is_some());

    let text = mlm.replace(
        r#"kind = { type = "masked_lm" }"#,
        r#"kind = { type = "encoder", n_classes = 2 }"#,
    );
    let err = RunConfig::from_toml(&text, "run.toml").unwrap_err().to_string();
    assert!(
        err.contains("an encoder classifies, so its task must be a classification set"),
        "{err}"
    );
}
