//! Files and flags from someone else, through the `posflow` binary: a checkpoint never chooses a
//! path posflow reads or writes, absurd sizes are refused at once naming the field, every flag at
//! 0 is a usage error, NaN weights and escape sequences are caught. Each row of the README's
//! bad-input table has its test here or in tests/suite/cli.rs.

use crate::common::binary;
use crate::common::rewrite;
use crate::common::scratch as scratch_dir;

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use binary::posflow_in;

use rewrite::rewritten;
use scratch_dir::scratch;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs posflow in `dir`; it must fail, without a panic, with every one of `expected` in its
/// error. Returns the error text.
fn refused(dir: &Path, args: &[&str], expected: &[&str]) -> String {
    let o = posflow_in(dir, args);
    let err = stderr(&o);
    assert!(!o.status.success(), "{args:?} succeeded:\n{}", stdout(&o));
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for part in expected {
        assert!(err.contains(part), "{args:?}: expected `{part}` in: {err}");
    }
    err
}

const TINY: &str = r#"
[data]
task = "moby_dick"
seq_len = 16

[model]
d_model = 8
heads = 2
layers = 1
ffn = 16
max_len = 16
kind = { type = "causal_lm" }
posenc = { type = "learned" }

[train]
steps = 2
batch = 2
lr = 1e-2
eval_lengths = [16]
eval_batches = 1
checkpoint = "a/run.safetensors"
metrics = "a/run.jsonl"
"#;

/// Runs posflow in `dir`; it must succeed. Returns its output.
fn succeeds(dir: &Path, args: &[&str]) -> Output {
    let o = posflow_in(dir, args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    o
}

/// Trains `toml` (written to `<name>.toml` in `dir`) on the CPU; the run must succeed.
fn train(dir: &Path, name: &str, toml: &str) -> Output {
    let config = format!("{name}.toml");
    std::fs::write(dir.join(&config), toml).unwrap();
    succeeds(dir, &["train", "--config", &config, "--device", "cpu"])
}

/// Sets `key` of the model config to `value`, both where the model config is and in the run
/// config inside the training state, as a hostile file would.
fn with_model_size(metadata: &mut HashMap<String, String>, key: &str, value: u64) {
    let mut config: serde_json::Value = serde_json::from_str(&metadata["config"]).unwrap();
    config[key] = value.into();
    metadata.insert("config".into(), config.to_string());
    let mut training: serde_json::Value = serde_json::from_str(&metadata["training"]).unwrap();
    training["run"]["model"][key] = value.into();
    metadata.insert("training".into(), training.to_string());
}

#[test]
fn a_resumed_checkpoint_is_saved_back_to_its_own_file_never_to_a_path_stored_inside() {
    let dir = scratch("hostile", "resume_paths");
    train(&dir, "tiny", TINY);
    // Someone else's checkpoint: its run says "save to a/run.safetensors".
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::copy(dir.join("a/run.safetensors"), dir.join("b/x.safetensors")).unwrap();
    std::fs::remove_dir_all(dir.join("a")).unwrap();
    let o = succeeds(
        &dir,
        &[
            "train",
            "--resume",
            "b/x.safetensors",
            "--steps",
            "3",
            "--device",
            "cpu",
        ],
    );
    assert!(!dir.join("a").exists(), "the stored path was written");
    assert!(
        stdout(&o).contains("saved step 3 to b/x.safetensors"),
        "{}",
        stdout(&o)
    );
    let log = std::fs::read_to_string(dir.join("b/x.jsonl")).unwrap();
    assert!(log.contains(r#""step":2"#), "{log}");

    // --out and --metrics choose other files; the resumed one is left as it was.
    let before = std::fs::read(dir.join("b/x.safetensors")).unwrap();
    succeeds(
        &dir,
        &[
            "train",
            "--resume",
            "b/x.safetensors",
            "--steps",
            "4",
            "--out",
            "c.safetensors",
            "--metrics",
            "c.jsonl",
            "--device",
            "cpu",
        ],
    );
    assert!(dir.join("c.safetensors").exists() && dir.join("c.jsonl").exists());
    assert_eq!(std::fs::read(dir.join("b/x.safetensors")).unwrap(), before);
}

const TEXT_FILE: &str = r#"
[data]
task = "text_file"
path = "corpus.txt"
seq_len = 8

[model]
d_model = 8
heads = 2
layers = 1
ffn = 16
max_len = 8
kind = { type = "causal_lm" }
posenc = { type = "sinusoidal" }

[train]
steps = 2
batch = 2
lr = 1e-2
eval_lengths = [8]
eval_batches = 1
checkpoint = "text.safetensors"
"#;

#[test]
fn a_text_file_run_reads_only_the_file_the_user_names() {
    let dir = scratch("hostile", "text_file");
    let corpus = "the cat sat on the mat and the dog sat on the log. ".repeat(20);
    std::fs::write(dir.join("corpus.txt"), &corpus).unwrap();
    train(&dir, "text", TEXT_FILE);

    // The checkpoint names corpus.txt, which is there: eval and resume still refuse to read it.
    refused(
        &dir,
        &[
            "eval",
            "--checkpoint",
            "text.safetensors",
            "--lengths",
            "8",
            "--device",
            "cpu",
        ],
        &["no file given", "--data"],
    );
    refused(
        &dir,
        &[
            "train",
            "--resume",
            "text.safetensors",
            "--steps",
            "3",
            "--device",
            "cpu",
        ],
        &["no file given", "--data"],
    );
    succeeds(
        &dir,
        &[
            "eval",
            "--checkpoint",
            "text.safetensors",
            "--lengths",
            "8",
            "--data",
            "corpus.txt",
            "--device",
            "cpu",
        ],
    );
    succeeds(
        &dir,
        &[
            "eval",
            "--checkpoint",
            "text.safetensors",
            "--lengths",
            "8",
            "--config",
            "text.toml",
            "--device",
            "cpu",
        ],
    );
    let o = succeeds(
        &dir,
        &[
            "train",
            "--resume",
            "text.safetensors",
            "--data",
            "corpus.txt",
            "--steps",
            "3",
            "--device",
            "cpu",
        ],
    );
    assert!(stdout(&o).contains("resuming at step 2"), "{}", stdout(&o));

    // Another text: the same ids would mean other characters.
    std::fs::write(dir.join("other.txt"), "THE CAT! ".repeat(50)).unwrap();
    for command in [
        vec!["eval", "--checkpoint", "text.safetensors", "--lengths", "8"],
        vec!["train", "--resume", "text.safetensors", "--steps", "4"],
    ] {
        let mut args = command;
        args.extend(["--data", "other.txt", "--device", "cpu"]);
        refused(
            &dir,
            &args,
            &["differ from the checkpoint's tokenizer", "only in the data: ! A"],
        );
    }
    // A task that reads no file takes no --data.
    train(&dir, "tiny", TINY);
    refused(
        &dir,
        &[
            "eval",
            "--checkpoint",
            "a/run.safetensors",
            "--data",
            "corpus.txt",
            "--device",
            "cpu",
        ],
        &["--data corpus.txt", "reads no data file"],
    );
}

#[test]
fn absurd_sizes_are_refused_at_once_naming_the_field() {
    let dir = scratch("hostile", "sizes");
    train(&dir, "tiny", TINY);
    let valid = std::fs::read(dir.join("a/run.safetensors")).unwrap();
    for (key, value) in [
        ("layers", 1_000_000),
        ("ffn", 10_000_000_000),
        ("max_len", 1_000_000_000_000),
    ] {
        let name = format!("{key}.safetensors");
        let bytes = rewritten(&valid, |_, metadata| with_model_size(metadata, key, value));
        std::fs::write(dir.join(&name), bytes).unwrap();
        let started = Instant::now();
        refused(
            &dir,
            &["eval", "--checkpoint", &name, "--device", "cpu"],
            &[&format!("{key} is {value}, over posflow's limit")],
        );
        // Refused before anything is built: no hang, no allocation (a generous bound for a
        // loaded machine; it takes milliseconds).
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{key}: {:?}",
            started.elapsed()
        );
    }
    for (find, replace, expected) in [
        (
            "ffn = 16",
            "ffn = 10000000000",
            "ffn is 10000000000, over posflow's limit",
        ),
        (
            "batch = 2",
            "batch = 1000000000",
            "[train] batch is 1000000000, over posflow's limit",
        ),
        (
            "max_len = 16",
            "max_len = 1000000000000",
            "max_len is 1000000000000",
        ),
        ("layers = 1", "layers = 1000000", "layers is 1000000"),
        (
            "lr = 1e-2",
            "lr = 1e-2\nbeta1 = 2.0",
            "beta1 must be in [0, 1), got 2",
        ),
        (
            "lr = 1e-2",
            "lr = 1e-2\neps = -1.0",
            "eps must be positive and finite, got -1",
        ),
        (
            "lr = 1e-2",
            "lr = 1e-2\nweight_decay = nan",
            "weight_decay must be finite",
        ),
        ("seq_len = 16", "seq_len = 100000000000", "seq_len <= 1048576"),
        (
            "eval_lengths = [16]",
            "eval_lengths = [0]",
            "evaluation length 0 is out of range",
        ),
        (
            "lr = 1e-2",
            "lr = 1e-2\nfinal_eval_batches = 1000000000",
            "[train] final_eval_batches is 1000000000, over posflow's limit",
        ),
    ] {
        std::fs::write(dir.join("bad.toml"), TINY.replace(find, replace)).unwrap();
        let started = Instant::now();
        refused(
            &dir,
            &["train", "--config", "bad.toml", "--device", "cpu"],
            &[expected],
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{expected}: {:?}",
            started.elapsed()
        );
    }
}

/// Counts a config multiplies are checked, never wrapped: a synthetic pair task's per_length
/// times its lengths (2⁶⁴ − 1 of each length would wrap to a small allocation in a release
/// build, or panic in a debug one).
#[test]
fn a_count_that_would_overflow_is_refused_naming_the_field() {
    let dir = scratch("hostile", "overflow");
    let pairs = |per_length: &str| {
        format!(
            "data = {{ task = \"synthetic_pairs\", pairs = \"reverse\", min_len = 1, max_len = 4, \
             per_length = {per_length}, train_max_len = 4 }}\n[model]\nd_model = 8\nheads = 1\nlayers = 1\n\
             ffn = 8\nmax_len = 16\nkind = {{ type = \"seq2seq\", decoder_layers = 1 }}\n\
             posenc = {{ type = \"sinusoidal\" }}\n[train]\nsteps = 1\nbatch = 2\nlr = 1e-3\n"
        )
    };
    for (per_length, expected) in [
        (
            "18446744073709551615",
            "per_length 18446744073709551615 × 4 lengths is over posflow's limit",
        ),
        (
            "5000000",
            "per_length 5000000 × 4 lengths is over posflow's limit",
        ),
    ] {
        std::fs::write(dir.join("pairs.toml"), pairs(per_length)).unwrap();
        refused(
            &dir,
            &["train", "--config", "pairs.toml", "--device", "cpu"],
            &[expected],
        );
    }
    std::fs::write(dir.join("pairs.toml"), pairs("4")).unwrap();
    succeeds(&dir, &["train", "--config", "pairs.toml", "--device", "cpu"]);
}

#[test]
fn every_flag_at_zero_or_out_of_range_is_a_usage_error() {
    let dir = scratch("hostile", "flags");
    train(&dir, "tiny", TINY);
    let ckpt = "a/run.safetensors";
    for (args, expected) in [
        (
            vec!["eval", "--checkpoint", ckpt, "--lengths", "0"],
            "0 is out of range",
        ),
        (
            vec!["eval", "--checkpoint", ckpt, "--batches", "0"],
            "must be at least 1",
        ),
        (vec!["bench", "matmul", "--repeats", "0"], "must be at least 1"),
        (vec!["bench", "matmul", "--sizes", "0"], "not in 1..=8192"),
        (vec!["bench", "train", "--steps", "0"], "must be at least 1"),
        (vec!["mlp", "--hidden", "0"], "not in 1..=4096"),
        (vec!["mlp", "--steps", "0"], "must be at least 1"),
        (vec!["mlp", "--lr", "0"], "must be finite and positive"),
        (vec!["mlp", "--lr", "NaN"], "must be finite and positive"),
        (
            vec![
                "sample",
                "--checkpoint",
                ckpt,
                "--prompt",
                "a",
                "--temperature=-1",
            ],
            "not negative",
        ),
        (
            vec![
                "sample",
                "--checkpoint",
                ckpt,
                "--prompt",
                "a",
                "--chars",
                "99999999999",
            ],
            "not in 0..=1048576",
        ),
        (
            vec!["train", "--config", "tiny.toml", "--steps", "0"],
            "steps (0) and batch (2) must be at least 1",
        ),
        (
            vec!["study", "studies/copy_s2l.toml", "--jobs", "0"],
            "not in 1..",
        ),
    ] {
        let mut args = args;
        args.extend(["--device", "cpu"]);
        refused(&dir, &args, &[expected]);
    }
}

#[test]
fn non_finite_weights_are_refused_on_load_naming_the_tensor() {
    let dir = scratch("hostile", "nan");
    train(&dir, "tiny", TINY);
    let valid = std::fs::read(dir.join("a/run.safetensors")).unwrap();
    let bytes = rewritten(&valid, |tensors, _| {
        let (_, _, data) = tensors.get_mut("blocks.0.ffn.up.weight").unwrap();
        data[12..16].copy_from_slice(&f32::NAN.to_le_bytes());
    });
    std::fs::write(dir.join("nan.safetensors"), bytes).unwrap();
    for command in ["eval", "export"] {
        let mut args = vec![command, "--checkpoint", "nan.safetensors", "--device", "cpu"];
        if command == "export" {
            args.extend(["--output", "out.safetensors"]);
        }
        refused(
            &dir,
            &args,
            &["tensor blocks.0.ffn.up.weight holds NaN at flat index 3"],
        );
    }
    assert!(!dir.join("out.safetensors").exists());
}

#[test]
fn escape_sequences_in_a_file_reach_the_terminal_escaped() {
    let dir = scratch("hostile", "escapes");
    train(&dir, "tiny", TINY);
    let valid = std::fs::read(dir.join("a/run.safetensors")).unwrap();
    let bytes = rewritten(&valid, |tensors, _| {
        let t = tensors["ln_f.gain"].clone();
        tensors.insert("ln_f.gain\u{1b}[2J\u{1b}[31m".into(), t);
    });
    std::fs::write(dir.join("ansi.safetensors"), bytes).unwrap();
    let err = refused(
        &dir,
        &["eval", "--checkpoint", "ansi.safetensors", "--device", "cpu"],
        &["ln_f.gain\\u{1b}[2J"],
    );
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

#[test]
fn a_sample_prompt_the_tokenizer_cannot_encode_is_refused_before_the_first_step() {
    let dir = scratch("hostile", "prompt");
    let toml = TINY.replace("metrics =", "sample_prompt = \"Call me €\"\nmetrics =");
    std::fs::write(dir.join("prompt.toml"), toml).unwrap();
    let err = refused(
        &dir,
        &["train", "--config", "prompt.toml", "--device", "cpu"],
        &["[train] sample_prompt", "'€'"],
    );
    assert!(!dir.join("a/run.safetensors").exists(), "it trained first: {err}");
}

#[test]
fn a_temporary_file_left_by_an_interrupted_save_is_removed_at_the_next_start() {
    let dir = scratch("hostile", "tmp");
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("a/run.safetensors.tmp"), b"half a checkpoint").unwrap();
    let o = train(&dir, "tiny", TINY);
    assert!(
        stdout(&o).contains("removed a/run.safetensors.tmp, left by a save that was interrupted"),
        "{}",
        stdout(&o)
    );
    assert!(!dir.join("a/run.safetensors.tmp").exists());
    assert!(dir.join("a/run.safetensors").exists());
}

#[test]
fn a_device_that_never_ends_is_refused_as_data_or_checkpoint() {
    let dir = scratch("hostile", "devices");
    refused(
        &dir,
        &["eval", "--checkpoint", "/dev/zero", "--device", "cpu"],
        &["checkpoint /dev/zero: is not a regular file"],
    );
    let toml = TEXT_FILE.replace("corpus.txt", "/dev/zero");
    std::fs::write(dir.join("zero.toml"), toml).unwrap();
    refused(
        &dir,
        &["train", "--config", "zero.toml", "--device", "cpu"],
        &["text file /dev/zero", "not a regular file"],
    );
}

/// A dopri5 FLOATER config whose adjoint runs out of `max_steps` where the forward did not:
/// `train` exits non-zero naming the backward pass and its attempts, on the CPU and the GPU (it
/// used to train on NaN gradients as if the solve had worked). With room, the same config trains.
#[test]
fn an_adjoint_solve_out_of_steps_is_an_error_naming_the_pass() {
    let dir = scratch("hostile", "adjoint_steps");
    let config = |max_steps: usize| {
        TINY.replace("d_model = 8", "d_model = 16")
            .replace("seq_len = 16", "seq_len = 64")
            .replace("max_len = 16", "max_len = 64")
            .replace("eval_lengths = [16]", "eval_lengths = [64]")
            .replace("steps = 2", "steps = 1")
            .replace(
                r#"posenc = { type = "learned" }"#,
                &format!(
                    r#"posenc = {{ type = "floater", form = "bias", method = "dopri5", gradient = "adjoint", max_steps = {max_steps} }}"#
                ),
            )
    };
    let mut devices = vec!["cpu"];
    if posflow::backend::gpu_for_tests().is_some() {
        devices.push("gpu");
    }
    for device in devices {
        // The forward fits in 11 attempts here (10 on the GPU, whose sums run in another
        // order); the adjoint, which restarts its step size at every position, not in 20.
        std::fs::write(dir.join("short.toml"), config(20)).unwrap();
        let err = refused(
            &dir,
            &["train", "--config", "short.toml", "--device", device],
            &[
                "dopri5's adjoint solve (the backward pass) failed",
                "after 20 step attempts",
            ],
        );
        assert!(!err.contains("NaN"), "{device}: {err}");
        std::fs::write(dir.join("roomy.toml"), config(1000)).unwrap();
        succeeds(&dir, &["train", "--config", "roomy.toml", "--device", device]);
    }
}
