//! What one finished run leaves behind (`result.json`): its config, its time, and every number
//! the report needs, read back from its metrics log so that a resumed run reads as one run.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::train::{ClassScores, DecodedScores, ItemErrors, Record, RunConfig};

/// The steps each training-loss value covers in a published archive: every step's loss made 18
/// of the published results' 19 MB, and the curves drawn from them average far more steps.
pub const PUBLISHED_LOSS_WINDOW: usize = 10;

fn every_step() -> usize {
    1
}

fn is_every_step(window: &usize) -> bool {
    *window == 1
}

/// The mean of the finite values of `losses` (a step without a loss is NaN), if there are any.
pub(super) fn finite_mean(losses: &[f32]) -> Option<f64> {
    let finite: Vec<f64> = losses
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| l as f64)
        .collect();
    (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / finite.len() as f64)
}

/// Loss and accuracy of one length bin at one evaluation, and a seq2seq model's decoding scores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BinValue {
    /// As the metrics log writes it, e.g. "33-64".
    pub bin: String,
    pub loss: f64,
    pub accuracy: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoded: Option<DecodedScores>,
    /// A classifier's macro-F1 and confusion matrix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classified: Option<ClassScores>,
    /// Each score's standard error over the bin's sequences (absent in runs made before posflow
    /// kept them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_errors: Option<ItemErrors>,
}

/// One evaluation: the steps completed and every bin evaluated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    pub step: usize,
    pub bins: Vec<BinValue>,
}

/// A completed run; written (atomically) only once the run has finished.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub variant: String,
    pub seed: u64,
    /// The run exactly as trained: a result whose config differs from the plan's is stale.
    pub run: RunConfig,
    /// Wall-clock seconds of training and evaluation in the process that finished the run.
    pub seconds: f64,
    /// The step the run was resumed at from its checkpoint, if it was: `seconds` then covers only
    /// the steps after it.
    pub resumed_at_step: Option<usize>,
    /// The training loss by step index: each value the mean of `train_loss_window` steps' finite
    /// losses (NaN where there were none).
    pub train_loss: Vec<f32>,
    /// The steps each value of `train_loss` covers: 1 as a run writes it, `PUBLISHED_LOSS_WINDOW`
    /// once published.
    #[serde(default = "every_step", skip_serializing_if = "is_every_step")]
    pub train_loss_window: usize,
    /// Every evaluation, in step order; the last is the final one.
    pub evals: Vec<EvalPoint>,
}

impl RunResult {
    /// Builds a result from a finished run's metrics log.
    pub fn from_log(
        variant: &str,
        run: RunConfig,
        records: &[Record],
        seconds: f64,
        resumed_at_step: Option<usize>,
    ) -> Self {
        let mut train_loss = vec![f32::NAN; run.train.steps];
        let mut evals: Vec<EvalPoint> = Vec::new();
        for record in records {
            match record {
                Record::Train { step, loss, .. } => {
                    if let Some(slot) = train_loss.get_mut(*step) {
                        *slot = *loss;
                    }
                }
                Record::Eval {
                    step,
                    bin,
                    loss,
                    accuracy,
                    decoded,
                    classified,
                    item_errors,
                    ..
                } => {
                    let value = BinValue {
                        bin: bin.clone(),
                        loss: *loss as f64,
                        accuracy: *accuracy as f64,
                        decoded: *decoded,
                        classified: classified.clone(),
                        item_errors: *item_errors,
                    };
                    match evals.last_mut() {
                        Some(last) if last.step == *step => last.bins.push(value),
                        _ => evals.push(EvalPoint {
                            step: *step,
                            bins: vec![value],
                        }),
                    }
                }
            }
        }
        Self {
            variant: variant.to_string(),
            seed: run.train.seed,
            run,
            seconds,
            resumed_at_step,
            train_loss,
            train_loss_window: 1,
            evals,
        }
    }

    /// The training loss in windows of `window` steps, a multiple of this result's window: each
    /// value the mean of the finite values it covers, NaN where there are none.
    pub fn train_loss_in_windows(&self, window: usize) -> Vec<f32> {
        assert!(
            window.is_multiple_of(self.train_loss_window),
            "windows of {window} steps from windows of {}",
            self.train_loss_window
        );
        self.train_loss
            .chunks(window / self.train_loss_window)
            .map(|chunk| finite_mean(chunk).map_or(f32::NAN, |mean| mean as f32))
            .collect()
    }

    /// This result as published: its training loss in windows of `PUBLISHED_LOSS_WINDOW` steps.
    pub fn published(&self) -> Self {
        Self {
            train_loss: self.train_loss_in_windows(PUBLISHED_LOSS_WINDOW),
            train_loss_window: PUBLISHED_LOSS_WINDOW,
            ..self.clone()
        }
    }

    /// A result read from a file, refused when its training-loss window is not one posflow
    /// writes (the curves line windows up across runs).
    fn checked(self) -> std::result::Result<Self, String> {
        if self.train_loss_window == 1 || self.train_loss_window == PUBLISHED_LOSS_WINDOW {
            Ok(self)
        } else {
            Err(format!(
                "train_loss_window is {}: posflow writes 1 (every step) or {PUBLISHED_LOSS_WINDOW}",
                self.train_loss_window
            ))
        }
    }

    /// Parses one result (a `result.json`, or a line of an archive).
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        serde_json::from_str::<Self>(text)
            .map_err(|e| e.to_string())?
            .checked()
    }

    /// The final evaluation's value of `bin`, if that bin was evaluated.
    pub fn final_bin(&self, bin: &str) -> Option<&BinValue> {
        self.evals.last()?.bins.iter().find(|b| b.bin == bin)
    }

    /// The value of `bin` at the evaluation after `step` steps, if there was one with that bin.
    pub fn bin_at(&self, step: usize, bin: &str) -> Option<&BinValue> {
        let eval = self.evals.iter().find(|e| e.step == step)?;
        eval.bins.iter().find(|b| b.bin == bin)
    }

    /// Every step at which any of `runs` evaluated, in order.
    pub fn eval_steps(runs: &[&RunResult]) -> Vec<usize> {
        let mut steps: Vec<usize> = runs.iter().flat_map(|r| r.evals.iter().map(|e| e.step)).collect();
        steps.sort_unstable();
        steps.dedup();
        steps
    }

    /// Natively only (the page keeps results in memory). Writes the result atomically: a run killed while writing it leaves no result, so it is
    /// run again rather than half-read.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).expect("a result serializes");
        crate::checkpoint::write_atomically(path, text.as_bytes())
    }

    /// Reads a result; `None` when there is none or it does not parse (a run to do again).
    pub fn read(path: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(path).ok()?;
        Self::parse(&text).ok()
    }

    /// Reads a result that must be there (for reports).
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| Error::Input(format!("{}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::RunResult;
    use crate::study::test_runs::run;

    #[test]
    fn a_result_reads_back_to_the_bit() {
        // Accuracies and losses are f32s widened to f64, whose shortest decimal has 16-17
        // digits: a parser off by one ulp would make every report written from results differ
        // from the one written as the runs finished (0.9039062261581421 read as ...142).
        let values: Vec<f64> = (0..4000).map(|i| f64::from((i as f32 + 0.37) / 1279.0)).collect();
        let mut result = run("v", 3, &values);
        result.train_loss = values.iter().map(|&v| v as f32 * 3.1).collect();
        result.seconds = 268.444579529;
        let dir = std::env::temp_dir().join(format!("posflow-result-bits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("result.json");
        result.write(&path).unwrap();
        let back = RunResult::read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        for (a, b) in result.evals.iter().zip(&back.evals) {
            assert_eq!(
                a.bins[0].accuracy.to_bits(),
                b.bins[0].accuracy.to_bits(),
                "{}",
                a.bins[0].accuracy
            );
        }
        assert_eq!(back.seconds.to_bits(), result.seconds.to_bits());
        assert_eq!(back.train_loss, result.train_loss);
        assert_eq!(back, result);
    }
}
