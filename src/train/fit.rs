//! The training loop: steps until the run's end, evaluating, logging and checkpointing on the
//! config's schedule, and telling a [`Progress`] (the CLI's progress bar, a test's recorder)
//! what happened.

use std::path::Path;
use std::time::Instant;

use super::eval::EvalReport;
use super::metrics::{MetricsLog, Record};
use super::trainer::{StepStats, Trainer};
use crate::error::{Error, Result};

/// Hears about a run as it goes; every method does nothing unless overridden.
pub trait Progress {
    fn step(&mut self, _stats: &StepStats, _tokens_per_s: f64) {}
    fn evaluated(&mut self, _step: usize, _report: &EvalReport) {}
    fn saved(&mut self, _path: &Path, _step: usize) {}
}

/// Hears nothing: `fit(&mut trainer, &mut ())` trains quietly.
impl Progress for () {}

/// What [`fit`] did.
#[derive(Clone, Debug)]
pub struct FitSummary {
    /// The steps this call ran (fewer than the run's if it was resumed).
    pub steps: usize,
    pub first_loss: f32,
    pub last_loss: f32,
    /// Tokens per second over the whole call, padding included, evaluation excluded.
    pub tokens_per_s: f64,
    pub last_eval: Option<EvalReport>,
}

/// Trains to the run's last step. Evaluates every `eval_every` steps and after the last, and
/// saves the checkpoint at the same points; on error (a non-finite loss) the last checkpoint
/// written is left as it was.
pub fn fit(trainer: &mut Trainer, progress: &mut dyn Progress) -> Result<FitSummary> {
    let t = trainer.run().train.clone();
    for path in t.checkpoint.iter().chain(&t.metrics) {
        create_parent(path)?;
    }
    let mut log = match &t.metrics {
        Some(path) => Some(MetricsLog::resume(path, trainer.steps_done())?),
        None => None,
    };
    let mut summary = FitSummary {
        steps: 0,
        first_loss: f32::NAN,
        last_loss: f32::NAN,
        tokens_per_s: 0.0,
        last_eval: None,
    };
    let mut training_seconds = 0.0;
    while !trainer.is_done() {
        let start = Instant::now();
        let stats = trainer.step()?;
        let seconds = start.elapsed().as_secs_f64();
        training_seconds += seconds;
        let tokens_per_s = trainer.tokens_per_step() as f64 / seconds;
        if summary.steps == 0 {
            summary.first_loss = stats.loss;
        }
        summary.steps += 1;
        summary.last_loss = stats.loss;
        if let Some(log) = &mut log {
            log.write(&Record::Train {
                step: stats.step,
                loss: stats.loss,
                lr: stats.lr,
                grad_norm: stats.grad_norm,
                tokens_per_s: tokens_per_s as f32,
            })?;
        }
        progress.step(&stats, tokens_per_s);

        let done = trainer.steps_done();
        if trainer.evaluation_due() {
            if trainer.evaluates() {
                let report = pollster::block_on(trainer.evaluate());
                if let Some(log) = &mut log {
                    write_eval(log, done, &report)?;
                }
                progress.evaluated(done, &report);
                summary.last_eval = Some(report);
            }
            if let Some(path) = &t.checkpoint {
                pollster::block_on(trainer.checkpoint())?.write(path)?;
                progress.saved(path, done);
            }
        }
    }
    summary.tokens_per_s = (summary.steps * trainer.tokens_per_step()) as f64 / training_seconds.max(1e-9);
    Ok(summary)
}

/// Creates the directory `path` goes in (`runs/` on a fresh clone).
fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir)
            .map_err(|e| Error::Input(format!("cannot create the directory {}: {e}", dir.display()))),
        _ => Ok(()),
    }
}

fn write_eval(log: &mut MetricsLog, step: usize, report: &EvalReport) -> Result<()> {
    for record in Record::evaluation(step, report) {
        log.write(&record)?;
    }
    Ok(())
}
