//! Finished runs made up for the claims' and verdicts' tests: a variant's evaluations in one bin.

use super::results::{BinValue, EvalPoint, RunResult};
use crate::train::RunConfig;

/// The one bin the made-up runs evaluate.
pub const BIN: &str = "65-128";

fn run_config(steps: usize, seed: u64) -> RunConfig {
    let mut run = RunConfig::from_toml(
        r#"
data = { task = "copy", min_len = 1, max_len = 4 }
[model]
d_model = 8
heads = 1
layers = 1
ffn = 8
max_len = 16
kind = { type = "causal_lm" }
posenc = { type = "none" }
[train]
steps = 100
batch = 2
lr = 1e-3
"#,
        "test",
    )
    .unwrap();
    run.train.steps = steps;
    run.train.seed = seed;
    run
}

/// A run of `variant` whose evaluations at steps 25, 50, ... gave `values` (accuracy and loss
/// alike) in `BIN`; the last value is the final one.
pub fn run(variant: &str, seed: u64, values: &[f64]) -> RunResult {
    RunResult {
        variant: variant.into(),
        seed,
        run: run_config(25 * values.len(), seed),
        seconds: 1.0,
        resumed_at_step: None,
        train_loss: vec![],
        train_loss_window: 1,
        evals: values
            .iter()
            .enumerate()
            .map(|(i, &v)| EvalPoint {
                step: 25 * (i + 1),
                bins: vec![BinValue {
                    bin: BIN.into(),
                    loss: v,
                    accuracy: v,
                    decoded: None,
                    classified: None,
                    item_errors: None,
                }],
            })
            .collect(),
    }
}
