//! What several test files share: running the binary, small models, editing safetensors files,
//! scratch directories, and a small Moby Dick run.

pub mod binary;
pub mod models;
pub mod rewrite;
pub mod scratch;

use posflow::train::RunConfig;

/// A 2-layer, d_model 16 character LM on Moby Dick windows of 16, with the given `posenc` (TOML
/// inline table) and `[train]` lines.
pub fn moby_run(posenc: &str, train: &str) -> RunConfig {
    let toml = format!(
        r#"
[data]
task = "moby_dick"
seq_len = 16

[model]
d_model = 16
heads = 2
layers = 2
ffn = 32
max_len = 16
embed_scale = "sqrt_d"
kind = {{ type = "causal_lm" }}
posenc = {posenc}

[train]
{train}
"#
    );
    // Settled here, so that tests may build the model before a trainer loads the data.
    RunConfig::from_toml(&toml, "test run")
        .and_then(RunConfig::with_data_vocab)
        .unwrap()
}
