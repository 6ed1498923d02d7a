//! The `posflow` binary as a user runs it: commands, the global --device flag, errors.

use crate::common::binary;
use crate::common::scratch as scratch_dir;

use binary::posflow_in;
use scratch_dir::scratch;
use std::path::Path;
use std::process::Output;

fn posflow(args: &[&str]) -> Output {
    posflow_in(Path::new("."), args)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_device_flag_goes_before_or_after_the_command() {
    for args in [
        &[
            "--device",
            "cpu",
            "bench",
            "matmul",
            "--sizes",
            "64",
            "--repeats",
            "1",
        ][..],
        &[
            "bench",
            "matmul",
            "--device",
            "cpu",
            "--sizes",
            "64",
            "--repeats",
            "1",
        ],
    ] {
        let o = posflow(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("device: cpu") && out.contains("GFLOP/s"), "{out}");
        assert!(out.lines().any(|l| l.trim_start().starts_with("64 ")), "{out}");
    }
}

#[test]
fn the_mlp_demo_runs() {
    let o = posflow(&["--device", "cpu", "mlp", "--steps", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("loss 0.13788 ->"), "{}", stdout(&o));
}

/// With no command, `posflow` trains the default run (configs/moby_dick.toml): here for two steps,
/// which still evaluates at every length, saves under runs/ and prints a sample.
#[test]
fn no_command_trains_the_default_moby_dick_run() {
    let dir = scratch("cli", "default_run");
    let o = posflow_in(&dir, &["--device", "cpu", "--steps", "2", "--sample-chars", "20"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for part in [
        "device: cpu",
        "position encoding {\"type\":\"relative\"",
        "evaluation after step 2:",
        "257-512",
        "> trained",
        "saved step 2 to runs/moby_dick.safetensors",
        "trained 2 steps",
        "Call me Ishmael. ",
    ] {
        assert!(out.contains(part), "expected {part:?} in:\n{out}");
    }
    assert!(dir.join("runs/moby_dick.safetensors").exists());
    assert!(dir.join("runs/moby_dick.jsonl").exists());
}

const TINY_RUN: &str = r#"
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
posenc = { type = "learned" }

[train]
steps = 6
batch = 4
lr = 1e-2
eval_every = 3
eval_lengths = [32]
checkpoint = "tiny.safetensors"
metrics = "tiny.jsonl"
sample_prompt = "Call me "
"#;

/// Writes `toml` to `<name>.toml` in `dir` and trains it for `steps` steps on the CPU; the run
/// must succeed.
fn train_run(dir: &Path, name: &str, toml: &str, steps: &str) -> Output {
    let config = format!("{name}.toml");
    std::fs::write(dir.join(&config), toml).unwrap();
    let o = posflow_in(
        dir,
        &["train", "--config", &config, "--device", "cpu", "--steps", steps],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    o
}

#[test]
fn train_resume_eval_and_sample_a_checkpoint() {
    let dir = scratch("cli", "train_eval_sample");
    let o = train_run(&dir, "tiny", TINY_RUN, "3");
    assert!(
        stdout(&o).contains("saved step 3 to tiny.safetensors"),
        "{}",
        stdout(&o)
    );

    // Resume without the config: the checkpoint holds it. The log then holds one line per step.
    let o = posflow_in(
        &dir,
        &[
            "train",
            "--resume",
            "tiny.safetensors",
            "--device",
            "cpu",
            "--steps",
            "6",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("resuming at step 3"), "{}", stdout(&o));
    let log = std::fs::read_to_string(dir.join("tiny.jsonl")).unwrap();
    assert_eq!(
        log.lines().filter(|l| l.contains(r#""kind":"train""#)).count(),
        6,
        "{log}"
    );

    // The learned table holds 32 positions: 64 is reported as not evaluated, not a crash.
    let o = posflow_in(
        &dir,
        &[
            "eval",
            "--checkpoint",
            "tiny.safetensors",
            "--lengths",
            "16,32,64",
            "--device",
            "cpu",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("at step 6") && out.contains("1-32"), "{out}");
    assert!(out.contains("64  not evaluated:") && out.contains("32"), "{out}");

    let o = posflow_in(
        &dir,
        &[
            "sample",
            "--checkpoint",
            "tiny.safetensors",
            "--prompt",
            "Call me",
            "--chars",
            "12",
            "--device",
            "cpu",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let line = stdout(&o)
        .lines()
        .find(|l| l.starts_with("Call me"))
        .map(str::to_owned);
    assert!(
        line.is_some_and(|l| l.chars().count() > "Call me".len()),
        "{}",
        stdout(&o)
    );

    // A character Moby Dick never uses.
    let o = posflow_in(
        &dir,
        &[
            "sample",
            "--checkpoint",
            "tiny.safetensors",
            "--prompt",
            "Call me €",
            "--device",
            "cpu",
        ],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("prompt") && err.contains("'€'") && err.contains("position 8"),
        "{err}"
    );

    let o = posflow_in(
        &dir,
        &["eval", "--checkpoint", "missing.safetensors", "--device", "cpu"],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("missing.safetensors") && stderr(&o).contains("cannot be read"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_arguments_are_explained() {
    let o = posflow(&["--device", "tpu"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("unknown device `tpu`: expected auto, cpu or gpu"),
        "{}",
        stderr(&o)
    );
    let o = posflow(&["mlp", "--steps", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("must be at least 1"), "{}", stderr(&o));
    let o = posflow(&["--device", "cpu", "bench", "matmul", "--kernels"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("bench matmul --kernels times the GPU kernels: use --device gpu"),
        "{}",
        stderr(&o)
    );
}

/// FLOATER runs at any length: trained on 32 characters, `posflow eval` prints every bin up to 128.
#[test]
fn eval_prints_every_bin_for_a_floater_checkpoint() {
    let dir = scratch("cli", "floater_eval");
    let run = TINY_RUN
        .replace(
            r#"posenc = { type = "learned" }"#,
            r#"posenc = { type = "floater", method = "rk4" }"#,
        )
        .replace("tiny.", "floater.");
    train_run(&dir, "floater", &run, "2");
    let o = posflow_in(
        &dir,
        &[
            "eval",
            "--checkpoint",
            "floater.safetensors",
            "--lengths",
            "32,64,128",
            "--batches",
            "1",
            "--device",
            "cpu",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for bin in ["1-32", "33-64", "65-128"] {
        assert!(out.contains(bin), "{bin} missing:\n{out}");
    }
    assert!(!out.contains("not evaluated"), "{out}");
    assert_eq!(out.matches("> trained").count(), 2, "{out}");
}

/// A Chomsky task at randomized positions: training says so, the checkpoint keeps the setting,
/// and `posflow eval` scores it per band of input lengths (FLOATER's flow solved once per
/// evaluation, through the whole range).
#[test]
fn a_randomized_run_trains_saves_and_evaluates() {
    let dir = scratch("cli", "randomized");
    let run = r#"
[data]
task = "chomsky"
name = "reverse_string"
train_max_len = 4

[model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 64
random_positions = 64
kind = { type = "token_classifier", n_classes = 2 }
posenc = { type = "floater", resolve_every = 2 }

[train]
steps = 3
batch = 4
lr = 1e-2
eval_every = 3
eval_lengths = [4, 8]
checkpoint = "randomized.safetensors"
metrics = "randomized.jsonl"
"#;
    let out = stdout(&train_run(&dir, "randomized", run, "3"));
    assert!(
        out.contains(
            "randomized positions: each batch's tokens at a sorted sample of distinct positions of 0..64"
        ),
        "{out}"
    );
    let o = posflow_in(
        &dir,
        &[
            "eval",
            "--checkpoint",
            "randomized.safetensors",
            "--lengths",
            "4,8,16",
            "--batches",
            "1",
            "--device",
            "cpu",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for bin in ["1-4", "5-8", "9-16"] {
        assert!(out.contains(bin), "{bin} missing:\n{out}");
    }
    assert!(!out.contains("not evaluated"), "{out}");
}

/// A causal LM at randomized positions (FLOATER as its authors ran it): trains, is scored per
/// length bin past its training windows, and samples the same text twice at temperature 0 (the
/// context at a fixed draw for its own length).
#[test]
fn a_randomized_language_model_trains_evaluates_and_samples() {
    let dir = scratch("cli", "randomized_lm");
    let run = TINY_RUN
        .replace("max_len = 32", "max_len = 128\nrandom_positions = 128")
        .replace(
            r#"posenc = { type = "learned" }"#,
            r#"posenc = { type = "floater", form = "bias", delta = 0.01 }"#,
        )
        .replace("steps = 6", "steps = 3")
        .replace("eval_lengths = [32]", "eval_lengths = [32, 64]")
        .replace("tiny.", "rlm.");
    let out = stdout(&train_run(&dir, "rlm", &run, "3"));
    assert!(
        out.contains(
            "randomized positions: each batch's tokens at a sorted sample of distinct positions of 0..128"
        ),
        "{out}"
    );
    let o = posflow_in(
        &dir,
        &[
            "eval",
            "--checkpoint",
            "rlm.safetensors",
            "--lengths",
            "32,64",
            "--device",
            "cpu",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("1-32") && out.contains("33-64") && !out.contains("not evaluated"),
        "{out}"
    );
    let sample = || {
        let o = posflow_in(
            &dir,
            &[
                "sample",
                "--checkpoint",
                "rlm.safetensors",
                "--prompt",
                "Call me",
                "--chars",
                "8",
                "--temperature",
                "0",
                "--device",
                "cpu",
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let first = sample();
    assert!(
        first
            .lines()
            .any(|l| l.starts_with("Call me") && l.chars().count() > 7),
        "{first}"
    );
    assert_eq!(first, sample());
}

/// `--warm-start` starts a new run from the parameters a checkpoint shares with the model and
/// says which are new.
#[test]
fn warm_start_loads_the_shared_parameters() {
    let dir = scratch("cli", "warm_start");
    train_run(&dir, "tiny", TINY_RUN, "1");
    let bias_form = TINY_RUN
        .replace(
            r#"posenc = { type = "learned" }"#,
            r#"posenc = { type = "floater", form = "bias" }"#,
        )
        .replace("tiny.", "bias.");
    std::fs::write(dir.join("bias.toml"), bias_form).unwrap();
    let args = [
        "train",
        "--config",
        "bias.toml",
        "--warm-start",
        "tiny.safetensors",
        "--device",
        "cpu",
        "--steps",
        "1",
    ];
    let o = posflow_in(&dir, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("warm start from tiny.safetensors")
            && out.contains("4 new")
            && out.contains("posenc.floater.qkv_initial from the checkpoint's q/k/v biases"),
        "{out}"
    );
    let o = posflow_in(
        &dir,
        &["train", "--warm-start", "tiny.safetensors", "--device", "cpu"],
    );
    assert!(
        !o.status.success() && stderr(&o).contains("--config"),
        "{}",
        stderr(&o)
    );
}

/// `posflow export` drops AdamW's state: a smaller file with the same model (same next-character
/// distribution), which `--resume` refuses; a file that is no checkpoint writes nothing.
#[test]
fn export_writes_the_model_without_its_optimizer_state() {
    let dir = scratch("cli", "export");
    train_run(&dir, "tiny", TINY_RUN, "2");
    let o = posflow_in(
        &dir,
        &[
            "export",
            "--checkpoint",
            "tiny.safetensors",
            "--output",
            "weights.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let size = |name: &str| std::fs::metadata(dir.join(name)).unwrap().len();
    assert!(
        size("weights.safetensors") * 2 < size("tiny.safetensors"),
        "{} vs {}",
        size("weights.safetensors"),
        size("tiny.safetensors")
    );
    let probabilities = |checkpoint: &str| {
        let o = posflow_in(
            &dir,
            &[
                "sample",
                "--checkpoint",
                checkpoint,
                "--prompt",
                "Call me",
                "--probabilities",
                "--device",
                "cpu",
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o).lines().last().unwrap().to_owned()
    };
    assert_eq!(
        probabilities("weights.safetensors"),
        probabilities("tiny.safetensors")
    );

    let o = posflow_in(
        &dir,
        &["train", "--resume", "weights.safetensors", "--device", "cpu"],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("optimizer"), "{}", stderr(&o));

    std::fs::write(dir.join("junk.safetensors"), b"not a checkpoint").unwrap();
    let o = posflow_in(
        &dir,
        &[
            "export",
            "--checkpoint",
            "junk.safetensors",
            "--output",
            "out.safetensors",
        ],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("junk.safetensors"), "{}", stderr(&o));
    assert!(!dir.join("out.safetensors").exists());
}

/// `posflow prepare` writes what another trainer needs, as posflow's trainer draws it: the
/// initial checkpoint and each step's batch, on which `posflow forward` gives the loss `posflow
/// train` logged at that step. `posflow eval --as-in-training --metrics` appends the run's own
/// evaluation to a metrics log, at the checkpoint's step.
#[test]
fn prepare_writes_the_batches_training_reads_and_eval_logs_as_training_does() {
    let dir = scratch("cli", "prepare");
    let run = TINY_RUN
        .replace("steps = 6", "steps = 2")
        .replace("eval_lengths = [32]", "eval_lengths = [16, 32]")
        .replace("tiny.", "prep.");
    train_run(&dir, "prep", &run, "2");
    let o = posflow_in(
        &dir,
        &[
            "prepare",
            "--config",
            "prep.toml",
            "--steps",
            "2",
            "--out",
            "prepared",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(dir.join("prepared/batches.safetensors")).unwrap();
    let batches = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names = batches.names();
    names.sort();
    assert_eq!(
        names,
        [
            "0/mask",
            "0/targets",
            "0/tokens",
            "1/mask",
            "1/targets",
            "1/tokens"
        ]
    );
    // Step 0's batch, under the names `posflow forward --batch` reads.
    let step0: Vec<(String, safetensors::tensor::TensorView)> = ["tokens", "targets", "mask"]
        .iter()
        .map(|name| (name.to_string(), batches.tensor(&format!("0/{name}")).unwrap()))
        .collect();
    std::fs::write(
        dir.join("step0.safetensors"),
        safetensors::serialize(step0, None).unwrap(),
    )
    .unwrap();
    let o = posflow_in(
        &dir,
        &[
            "forward",
            "--checkpoint",
            "prepared/init.safetensors",
            "--batch",
            "step0.safetensors",
            "--out",
            "values.safetensors",
            "--device",
            "cpu",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let values = std::fs::read(dir.join("values.safetensors")).unwrap();
    let values = safetensors::SafeTensors::deserialize(&values).unwrap();
    let loss: Vec<f32> = bytemuck::pod_collect_to_vec(values.tensor("loss").unwrap().data());
    let log = std::fs::read_to_string(dir.join("prep.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(first["kind"], "train");
    assert!(
        (f64::from(loss[0]) - first["loss"].as_f64().unwrap()).abs() < 1e-6,
        "forward {} vs train {}",
        loss[0],
        first["loss"]
    );

    let o = posflow_in(
        &dir,
        &[
            "eval",
            "--checkpoint",
            "prep.safetensors",
            "--as-in-training",
            "--metrics",
            "eval.jsonl",
            "--device",
            "cpu",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let records: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("eval.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bins: Vec<(&str, u64)> = records
        .iter()
        .map(|r| (r["bin"].as_str().unwrap(), r["step"].as_u64().unwrap()))
        .collect();
    assert_eq!(bins, [("1-32", 2)]);
    // The same bins and losses as training's own last evaluation.
    let trained: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["kind"] == "eval" && r["step"] == 2)
        .collect();
    assert_eq!(trained.len(), 1);
    for (ours, theirs) in records.iter().zip(&trained) {
        assert_eq!(ours["bin"], theirs["bin"]);
        assert_eq!(ours["loss"], theirs["loss"]);
    }
}
