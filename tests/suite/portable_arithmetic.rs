//! The portable arithmetic gives the same bits whatever the CPU's vector width and thread count:
//! runs with every loop kept at the baseline's four lanes on one thread, and at the widest the
//! CPU has on two, log the same losses and evaluations to the bit. (The native arithmetic's
//! products are gemm's, which follow the CPU; the page's wasm runs are held to these in
//! `.ci/web.sh`.)

use std::path::Path;
use std::process::Command;

use crate::common::scratch::scratch;

/// A small Chomsky run in the portable arithmetic with `posenc`, its GELU FFN in fused products,
/// evaluated past its training lengths.
fn config(posenc: &str) -> String {
    format!(
        r#"
[data]
task = "chomsky"
name = "reverse_string"
train_max_len = 6

[model]
d_model = 16
heads = 4
layers = 2
ffn = 32
max_len = 64
activation = "gelu"
dropout = 0.1
kind = {{ type = "token_classifier", n_classes = 2 }}
posenc = {posenc}

[train]
steps = 12
batch = 8
lr = 3e-3
eval_every = 6
eval_lengths = [4, 6, 12]  # bins 1-6 and 7-12
eval_batches = 2
metrics = "log.jsonl"
arithmetic = "portable"
"#
    )
}

/// The run's log without its clock (tokens per second): every loss, norm and evaluated number.
fn run(dir: &Path, config: &str, baseline: bool) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("run.toml"), config).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_posflow"));
    command
        .args(["--device", "cpu", "train", "--config", "run.toml"])
        .current_dir(dir)
        .env_remove("POSFLOW_DEVICE");
    if baseline {
        command
            .env("POSFLOW_BASELINE_VECTORS", "1")
            .env("RAYON_NUM_THREADS", "1");
    } else {
        command
            .env_remove("POSFLOW_BASELINE_VECTORS")
            .env("RAYON_NUM_THREADS", "2");
    }
    let o = command.output().expect("the binary runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = std::fs::read_to_string(dir.join("log.jsonl")).unwrap();
    log.lines()
        .map(|line| {
            let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
            value.as_object_mut().unwrap().remove("tokens_per_s");
            value.to_string()
        })
        .collect()
}

#[test]
fn portable_runs_are_the_same_bits_at_every_vector_width_and_thread_count() {
    let dir = scratch("portable_arithmetic", "widths");
    for (name, posenc) in [
        ("rope", r#"{ type = "rope" }"#),
        ("floater", r#"{ type = "floater", resolve_every = 1 }"#),
    ] {
        let config = config(posenc);
        let narrow = run(&dir.join(name).join("baseline"), &config, true);
        let wide = run(&dir.join(name).join("wide"), &config, false);
        assert_eq!(narrow.len(), 12 + 2 * 2, "{name}: {narrow:?}");
        assert!(
            narrow.iter().any(|l| l.contains("\"eval\"")),
            "{name}: {narrow:?}"
        );
        assert_eq!(narrow, wide, "{name}");
    }
}
