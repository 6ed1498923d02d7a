//! A study run in this process one step at a time, its results kept in memory: how the page's
//! Compare tab trains a comparison (a step per job, between frames), with the same runs, seeds and
//! results as `posflow study` on the same file (a test holds the two equal on the CPU backend).
//!
//! Runs go in the study's variant order, seeds in the file's order, one at a time; a run's
//! evaluations follow the trainer's schedule exactly as [`crate::train::fit`]'s do, and a
//! finished run becomes the [`RunResult`] its metrics log would have given. Warm starts (which
//! need a checkpoint file) are refused.

use std::rc::Rc;

use super::results::RunResult;
use super::spec::Study;
use super::summary::{StudySummary, summarize};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::train::{Record, RunConfig, StepStats, Trainer};

/// A monotonic clock in seconds (natively `Instant`, in a page `performance.now()`).
pub type Clock = Box<dyn Fn() -> f64>;

/// One variant × seed of a live study.
#[derive(Clone, Debug)]
pub struct LiveRun {
    pub variant: String,
    pub seed: u64,
    pub run: RunConfig,
}

/// The run being trained: its trainer and its metrics log so far.
struct Current {
    trainer: Trainer,
    records: Vec<Record>,
    seconds: f64,
}

/// What one [`LiveStudy::advance`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Advanced {
    /// The run it stepped (an index into [`LiveStudy::runs`]).
    pub run: usize,
    pub stats: StepStats,
    /// The run evaluated after this step.
    pub evaluated: bool,
    /// The run finished with this step.
    pub finished: bool,
}

pub struct LiveStudy {
    study: Study,
    runs: Vec<LiveRun>,
    /// The run being trained or next to start.
    next: usize,
    current: Option<Current>,
    finished: Vec<RunResult>,
    /// Each finished run's checkpoint (safetensors bytes, without the optimizer's state), in
    /// the order of `finished`: for the viewer's tabs and "Download checkpoint".
    checkpoints: Vec<Vec<u8>>,
    clock: Clock,
}

impl LiveStudy {
    /// Every variant of `study` with every seed of the file, none started. A study with a warm
    /// start is refused: its source's checkpoint would be a file.
    pub fn new(study: Study, clock: Clock) -> Result<Self> {
        if let Some(v) = study.variants.iter().find(|v| v.warm_start.is_some()) {
            return Err(Error::Input(format!(
                "study {}: variant `{}` warm-starts from another, which a live study cannot (it \
                 keeps no checkpoints); run it with `posflow study`",
                study.name, v.name
            )));
        }
        let runs = study
            .variants
            .iter()
            .flat_map(|v| {
                study.seeds.iter().map(|&seed| LiveRun {
                    variant: v.name.clone(),
                    seed,
                    run: v.run_seeded(seed),
                })
            })
            .collect();
        Ok(Self {
            study,
            runs,
            next: 0,
            current: None,
            finished: Vec::new(),
            checkpoints: Vec::new(),
            clock,
        })
    }

    pub fn study(&self) -> &Study {
        &self.study
    }

    /// Every run, in the order they train.
    pub fn runs(&self) -> &[LiveRun] {
        &self.runs
    }

    /// The finished runs' results, in the order they finished.
    pub fn finished(&self) -> &[RunResult] {
        &self.finished
    }

    /// The checkpoint of the `i`-th finished run: safetensors bytes that `posflow eval`, the
    /// viewer and the browser demo open.
    pub fn checkpoint_bytes(&self, i: usize) -> Option<&[u8]> {
        self.checkpoints.get(i).map(Vec::as_slice)
    }

    /// Every run has finished.
    pub fn is_done(&self) -> bool {
        self.next == self.runs.len()
    }

    /// The training steps of every run together.
    pub fn total_steps(&self) -> usize {
        self.runs.iter().map(|r| r.run.train.steps).sum()
    }

    /// The training steps taken so far, over every run.
    pub fn steps_done(&self) -> usize {
        let finished: usize = self.runs[..self.next].iter().map(|r| r.run.train.steps).sum();
        finished + self.current.as_ref().map_or(0, |c| c.trainer.steps_done())
    }

    /// Seconds spent training and evaluating so far.
    pub fn seconds(&self) -> f64 {
        self.finished.iter().map(|r| r.seconds).sum::<f64>()
            + self.current.as_ref().map_or(0.0, |c| c.seconds)
    }

    /// The run in training so far, as a result (its training loss NaN past the steps taken), or
    /// `None` between runs.
    pub fn partial(&self) -> Option<RunResult> {
        let current = self.current.as_ref()?;
        let run = &self.runs[self.next];
        Some(RunResult::from_log(
            &run.variant,
            run.run.clone(),
            &current.records,
            current.seconds,
            None,
        ))
    }

    /// Means, spreads and (once every run of a claim's variants finished) verdicts of the
    /// finished runs, by the study's rule.
    pub fn summary(&self) -> StudySummary {
        summarize(&self.study, &self.finished, None)
    }

    /// One training step of the current run (starting the next run first if none is going), and
    /// its evaluation when one is due; `None` once every run has finished. An error names the
    /// run and stops the study here: the finished runs stay.
    pub async fn advance(&mut self, backend: &Rc<dyn Backend>) -> Result<Option<Advanced>> {
        if self.is_done() {
            return Ok(None);
        }
        let index = self.next;
        let name = |r: &LiveRun| format!("run {}/seed{}", r.variant, r.seed);
        let outcome = self.step_current(backend).await;
        let (stats, evaluated) =
            outcome.map_err(|e| Error::Training(format!("{}: {e}", name(&self.runs[index]))))?;
        let current = self.current.as_ref().expect("a run is going after a step");
        let finished = current.trainer.is_done();
        if finished {
            let bytes = async { current.trainer.checkpoint().await?.without_optimizer().to_bytes() }
                .await
                .map_err(|e| Error::Training(format!("{}: its checkpoint: {e}", name(&self.runs[index]))))?;
            self.checkpoints.push(bytes);
            let current = self.current.take().expect("checked above");
            let run = &self.runs[index];
            self.finished.push(RunResult::from_log(
                &run.variant,
                run.run.clone(),
                &current.records,
                current.seconds,
                None,
            ));
            self.next += 1;
        }
        Ok(Some(Advanced {
            run: index,
            stats,
            evaluated,
            finished,
        }))
    }

    async fn step_current(&mut self, backend: &Rc<dyn Backend>) -> Result<(StepStats, bool)> {
        let start = (self.clock)();
        if self.current.is_none() {
            let trainer = Trainer::new(backend.clone(), self.runs[self.next].run.clone())?;
            self.current = Some(Current {
                trainer,
                records: Vec::new(),
                seconds: 0.0,
            });
        }
        let current = self.current.as_mut().expect("started above");
        let stats = current.trainer.train_step().await?;
        let step_seconds = (self.clock)() - start;
        current.records.push(Record::Train {
            step: stats.step,
            loss: stats.loss,
            lr: stats.lr,
            grad_norm: stats.grad_norm,
            tokens_per_s: (current.trainer.tokens_per_step() as f64 / step_seconds.max(1e-9)) as f32,
        });
        let evaluated = current.trainer.evaluation_due() && current.trainer.evaluates();
        if evaluated {
            let report = current.trainer.evaluate().await;
            current
                .records
                .extend(Record::evaluation(current.trainer.steps_done(), &report));
        }
        current.seconds += (self.clock)() - start;
        Ok((stats, evaluated))
    }
}
