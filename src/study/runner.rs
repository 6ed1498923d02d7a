//! Running a study's planned runs (`plan.rs`): in what order the ones not done go (a warm start
//! after its source), how many at once, and how an interrupted run continues.
//!
//! A run killed halfway continues from its last
//! checkpoint (saved at every evaluation) with [`Trainer::resume`], which on the CPU backend
//! reproduces the uninterrupted run exactly; a checkpoint made with another config is ignored and
//! the run starts over. The first run that fails stops the study: runs already going finish, no
//! new one starts, and the error names the run.

use std::rc::Rc;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use super::plan::{RunPlan, StudyProgress};
use super::results::RunResult;
use super::spec::StudyTrainer;
use super::torchrun::run_torch;
use crate::backend::{Backend, CpuBackend};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::train::{Progress, StepStats, Trainer, fit};

/// Makes a backend for one worker thread (a backend is `Rc`, so each thread needs its own).
pub type BackendFactory<'a> = dyn Fn() -> Result<Rc<dyn Backend>> + Sync + 'a;

struct Queue {
    /// Indices into the plans of runs not yet started.
    pending: Vec<usize>,
    finished: Vec<Option<RunResult>>,
    running: usize,
    error: Option<Error>,
}

/// Runs every plan that is not done, `jobs` at a time, and returns every result in plan order.
pub fn run_study(
    plans: &[RunPlan],
    jobs: usize,
    backend: &BackendFactory,
    progress: &dyn StudyProgress,
) -> Result<Vec<RunResult>> {
    let queue = Mutex::new(Queue {
        pending: (0..plans.len()).filter(|&i| plans[i].done.is_none()).collect(),
        finished: plans.iter().map(|p| p.done.clone()).collect(),
        running: 0,
        error: None,
    });
    let wake = Condvar::new();
    let workers = jobs.clamp(1, plans.len().max(1));
    // Each worker runs its ops in a pool of its own, the threads shared out among them.
    let threads = (rayon::current_num_threads() / workers).max(1);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let _pool = CpuBackend::join_thread_pool(threads);
                work(plans, backend, progress, &queue, &wake)
            });
        }
    });
    let queue = queue.into_inner().expect("no worker panicked");
    if let Some(e) = queue.error {
        return Err(e);
    }
    Ok(queue.finished.into_iter().flatten().collect())
}

/// One worker: takes the first pending run whose warm-start source is finished, runs it, repeats.
fn work(
    plans: &[RunPlan],
    backend: &BackendFactory,
    progress: &dyn StudyProgress,
    queue: &Mutex<Queue>,
    wake: &Condvar,
) {
    let mut backend_here: Option<Rc<dyn Backend>> = None;
    loop {
        let index = {
            let mut q = queue.lock().expect("no worker panicked");
            loop {
                if q.error.is_some() || q.pending.is_empty() {
                    return;
                }
                let ready = q
                    .pending
                    .iter()
                    .position(|&i| source_finished(plans, &q.finished, i));
                if let Some(at) = ready {
                    q.running += 1;
                    break q.pending.remove(at);
                }
                if q.running == 0 {
                    // Cannot happen for a checked study (its warm starts form no cycle).
                    q.error = Some(Error::Input(
                        "study: no run can start; its warm starts wait on each other".into(),
                    ));
                    wake.notify_all();
                    return;
                }
                q = wake.wait(q).expect("no worker panicked");
            }
        };
        let plan = &plans[index];
        let outcome = match &backend_here {
            Some(b) => Ok(b.clone()),
            None => backend(),
        }
        .and_then(|b| {
            backend_here = Some(b.clone());
            run_one(plan, b, progress)
        });
        let mut q = queue.lock().expect("no worker panicked");
        q.running -= 1;
        match outcome {
            Ok(result) => q.finished[index] = Some(result),
            Err(e) => {
                let e = Error::Input(format!("run {}/seed{}: {e}", plan.variant, plan.seed));
                q.error.get_or_insert(e);
            }
        }
        wake.notify_all();
    }
}

fn source_finished(plans: &[RunPlan], finished: &[Option<RunResult>], index: usize) -> bool {
    let plan = &plans[index];
    let Some(source) = &plan.warm_start else {
        return true;
    };
    plans
        .iter()
        .zip(finished)
        .any(|(p, f)| p.checkpoint() == source && f.is_some())
}

/// Forwards a run's steps to the study's progress.
struct Forward<'a> {
    plan: &'a RunPlan,
    progress: &'a dyn StudyProgress,
}

impl Progress for Forward<'_> {
    fn step(&mut self, stats: &StepStats, _tokens_per_s: f64) {
        self.progress.step(self.plan, stats);
    }
}

/// Runs one plan to its end (resuming its checkpoint where it fits) and writes its result.
fn run_one(plan: &RunPlan, backend: Rc<dyn Backend>, progress: &dyn StudyProgress) -> Result<RunResult> {
    std::fs::create_dir_all(&plan.dir)
        .map_err(|e| Error::Input(format!("cannot create {}: {e}", plan.dir.display())))?;
    if let StudyTrainer::Torchrun { processes } = plan.trainer {
        return run_torch(plan, processes, progress);
    }
    let mut trainer = match (plan.resumable(), &plan.warm_start) {
        (Some(checkpoint), _) => Trainer::resume(backend, plan.run.clone(), &checkpoint)?,
        (None, Some(source)) => Trainer::warm_start(backend, plan.run.clone(), &Checkpoint::load(source)?)?.0,
        (None, None) => Trainer::new(backend, plan.run.clone())?,
    };
    let resumed_at = (trainer.steps_done() > 0).then_some(trainer.steps_done());
    progress.started(plan, trainer.steps_done());
    let start = Instant::now();
    fit(&mut trainer, &mut Forward { plan, progress })?;
    plan.finish(start.elapsed().as_secs_f64(), resumed_at, progress)
}
