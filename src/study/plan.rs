//! A study's runs before they train: every variant × seed, where each writes, whether it is
//! already done (a `result.json` made with the run config planned now, outputs aside), and who
//! trains it; and what hears about them as they go.

use std::path::{Path, PathBuf};

use super::results::RunResult;
use super::spec::{Study, StudyTrainer};
use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::train::{MetricsLog, RunConfig, StepStats, saved_run};

/// One variant × seed, where it writes, and whether it is already done.
#[derive(Clone, Debug)]
pub struct RunPlan {
    pub variant: String,
    pub seed: u64,
    pub dir: PathBuf,
    pub run: RunConfig,
    /// The checkpoint to warm-start from: the source variant's run with the same seed.
    pub warm_start: Option<PathBuf>,
    /// Its finished result, when one with this plan's config exists.
    pub done: Option<RunResult>,
    /// A result exists but was made with another config; it will be replaced.
    pub stale: bool,
    /// Who trains it: posflow here, or posflow_torch under torchrun.
    pub trainer: StudyTrainer,
}

impl RunPlan {
    pub fn result_path(&self) -> PathBuf {
        self.dir.join("result.json")
    }

    pub fn steps(&self) -> usize {
        self.run.train.steps
    }

    /// Where the run's last checkpoint is.
    pub fn checkpoint(&self) -> &Path {
        self.run
            .train
            .checkpoint
            .as_deref()
            .expect("a study run has a checkpoint")
    }

    /// Where the run's metrics log is.
    pub fn metrics(&self) -> &Path {
        self.run
            .train
            .metrics
            .as_deref()
            .expect("a study run has a metrics log")
    }

    /// The run's own last checkpoint, when there is one made with this run's config and not past
    /// its steps: what an interrupted run continues from.
    pub fn resumable(&self) -> Option<Checkpoint> {
        Checkpoint::load(self.checkpoint()).ok().filter(|c| {
            saved_run(c.metadata()).is_ok_and(|saved| same_run(&saved, &self.run))
                && usize::try_from(c.metadata().training.step).is_ok_and(|step| step <= self.steps())
        })
    }

    /// The finished run's result, from its metrics log, written beside it and told to `progress`.
    pub fn finish(
        &self,
        seconds: f64,
        resumed_at: Option<usize>,
        progress: &dyn StudyProgress,
    ) -> Result<RunResult> {
        let records = MetricsLog::read(self.metrics())?;
        let result = RunResult::from_log(&self.variant, self.run.clone(), &records, seconds, resumed_at);
        result.write(&self.result_path())?;
        progress.finished(self, &result);
        Ok(result)
    }
}

/// Every run of `study` with `seeds` (the file's, and a replication's after them) with outputs
/// under `out`: variants in dependency order, seeds in the given order, each marked done when its
/// result is there.
pub fn plan_runs(study: &Study, seeds: &[u64], out: &Path) -> Vec<RunPlan> {
    let dir = |variant: &str, seed: u64| out.join("runs").join(variant).join(format!("seed{seed}"));
    let mut plans = Vec::new();
    for v in &study.variants {
        for &seed in seeds {
            let run_dir = dir(&v.name, seed);
            let run = v.run_for(seed, &run_dir);
            let warm_start = v
                .warm_start
                .as_ref()
                .map(|source| dir(source, seed).join("model.safetensors"));
            let existing = RunResult::read(&run_dir.join("result.json"));
            let stale = existing.as_ref().is_some_and(|r| !same_run(&r.run, &run));
            let done = existing.filter(|r| same_run(&r.run, &run) && r.variant == v.name);
            plans.push(RunPlan {
                variant: v.name.clone(),
                seed,
                dir: run_dir,
                run,
                warm_start,
                done,
                stale,
                trainer: study.trainer,
            });
        }
    }
    plans
}

/// Whether two runs are the same but for where they write.
pub(super) fn same_run(a: &RunConfig, b: &RunConfig) -> bool {
    let strip = |r: &RunConfig| {
        let mut r = r.clone();
        r.train.checkpoint = None;
        r.train.metrics = None;
        r.data = r.data.without_file();
        r
    };
    strip(a) == strip(b)
}

/// Hears about the study as it goes, from every worker thread.
pub trait StudyProgress: Sync {
    /// A run begins, at `step` (above 0 when resumed from its checkpoint).
    fn started(&self, _plan: &RunPlan, _step: usize) {}
    fn step(&self, _plan: &RunPlan, _stats: &StepStats) {}
    fn finished(&self, _plan: &RunPlan, _result: &RunResult) {}
}
