//! Train a small causal character LM on a text file of your own, from Rust: evaluate it per
//! length bin and save a checkpoint that `posflow viz` opens.
//!
//! `cargo run --release --example train_lm -- FILE [--steps N] [--posenc sinusoidal|learned|rope|…]
//!  [--out CHECKPOINT] [--device cpu|gpu|auto]`
//!
//! A run is a `RunConfig` (the same as a TOML file's: data, model, training); `Trainer` holds the
//! model, its parameters, the optimizer and the data, and `fit` runs it to its last step,
//! evaluating and saving on the run's schedule and telling a `Progress` what happened.

use std::path::{Path, PathBuf};

use posflow::backend::{DeviceChoice, select_backend};
use posflow::train::{EvalReport, Progress, RunConfig, StepStats, Trainer, fit};

/// Prints every 50th step and each evaluation.
struct Printer;

impl Progress for Printer {
    fn step(&mut self, stats: &StepStats, tokens_per_s: f64) {
        if stats.step.is_multiple_of(50) {
            println!(
                "step {:>5}  loss {:.4}  {tokens_per_s:.0} tokens/s",
                stats.step, stats.loss
            );
        }
    }

    fn evaluated(&mut self, step: usize, report: &EvalReport) {
        println!(
            "evaluation at step {step} (trained on {} tokens):\n{}",
            report.train_len, report.bins
        );
    }

    fn saved(&mut self, path: &Path, step: usize) {
        println!("saved {} at step {step}", path.display());
    }
}

/// The value after `--name`, if given.
fn flag(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn main() -> posflow::Result<()> {
    let Some(text) = std::env::args().nth(1).filter(|a| !a.starts_with("--")) else {
        return Err(posflow::Error::Input(
            "usage: train_lm FILE [--steps N] [--posenc NAME] [--out PATH]".into(),
        ));
    };
    let steps: usize = flag("--steps")
        .map_or(Ok(300), |s| s.parse())
        .map_err(|e| posflow::Error::Input(format!("--steps: {e}")))?;
    let posenc = flag("--posenc").unwrap_or_else(|| "sinusoidal".into());
    let out = PathBuf::from(flag("--out").unwrap_or_else(|| "runs/train_lm.safetensors".into()));

    // A run as a config file says it (`vocab` comes from the text's characters); the text's
    // last tenth is held out for evaluation. A JSON string is a TOML string too: quoted, escaped.
    let path = serde_json::to_string(&text).expect("a string serialises");
    let mut run = RunConfig::from_toml(
        &format!(
            "[data]\ntask = \"text_file\"\npath = {path}\nseq_len = 64\nvalid_fraction = 0.1\n\
             [model]\nd_model = 64\nheads = 4\nlayers = 2\nffn = 256\nmax_len = 256\n\
             kind = {{ type = \"causal_lm\", tied_head = true }}\nposenc = {{ type = \"{posenc}\" }}\n\
             [train]\nsteps = {steps}\nbatch = 16\nlr = 3e-3\nwarmup = 30\ndecay = \"cosine\"\n\
             eval_every = {steps}\neval_lengths = [32, 64, 128, 256]\neval_batches = 8\n"
        ),
        "train_lm",
    )?;
    run.train.checkpoint = Some(out.clone());

    let device = flag("--device")
        .map(|d| d.parse())
        .transpose()?
        .unwrap_or(DeviceChoice::Auto);
    let backend = pollster::block_on(select_backend(device))?;
    println!("device: {}", backend.describe());
    let mut trainer = Trainer::new(backend, run)?;
    let summary = fit(&mut trainer, &mut Printer)?;
    println!(
        "{} steps, loss {:.4} -> {:.4}; look at it with: posflow viz --checkpoint {}",
        summary.steps,
        summary.first_loss,
        summary.last_loss,
        out.display()
    );
    Ok(())
}
