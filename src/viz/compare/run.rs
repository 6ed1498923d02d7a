//! Training a comparison live: the settings' study as a [`LiveStudy`], stepped by jobs that the
//! frames spawn one after another (natively within a frame, on the web beside the frames), so the
//! viewer stays responsive. A job owns the study while it steps, for about [`SLICE_SECONDS`] or
//! until a run finishes, and leaves a snapshot of what the tab draws: the finished runs, the run
//! in training, the summary and, at the end, the verdicts. Stop keeps what finished.

use std::cell::RefCell;
use std::rc::Rc;

use super::settings::CompareSettings;
use crate::arithmetic::Arithmetic;
use crate::backend::{Backend, BackendKind};
use crate::error::Result;
use crate::study::{ClaimKind, ClaimReport, LiveStudy, RunResult, StudySummary, judge_claims};
use crate::viz::{Job, State};

/// A job steps for about this long before handing the study back to the frames: long enough
/// that drawing a frame (slow where the browser renders in software) does not dominate, short
/// enough that the page answers within a tenth of a second.
const SLICE_SECONDS: f64 = 0.1;

/// Where a comparison stands, for the tab and the page (`window.posflow`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompareStatus {
    /// Training steps taken and planned, over every run.
    pub steps_done: usize,
    pub steps_total: usize,
    pub runs_done: usize,
    pub runs_total: usize,
    /// Started, and neither stopped, failed nor done.
    pub running: bool,
    /// Every run finished, so the verdicts are in.
    pub done: bool,
    /// Seconds spent training so far.
    pub seconds: f64,
    /// Seconds since Start, frames and pauses included (what the time left is reckoned from).
    pub wall_seconds: f64,
    /// Each comparative claim's verdict ("holds", "not shown", "at chance"), once done.
    pub verdicts: Vec<ClaimStatus>,
    /// Each sanity check's (each encoding learned the training lengths).
    pub sanity: Vec<ClaimStatus>,
    /// Why the last start or step failed.
    pub error: Option<String>,
}

/// One claim's verdict, as the tab shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimStatus {
    pub name: String,
    /// "holds", "not shown" or "at chance".
    pub verdict: String,
    /// Sequences each run was evaluated on in the claim's bin (the fewest over its runs).
    pub sequences: Option<usize>,
}

/// The tab's settings and its comparison.
pub(crate) struct Comparing {
    pub settings: CompareSettings,
    /// The arithmetic its runs compute in: the portable one on the CPU (so that `posflow study`
    /// of its file re-runs it to the bit), a GPU's own on a GPU.
    arithmetic: Arithmetic,
    pub(super) run: Option<Run>,
    pub(super) error: Option<String>,
}

/// A comparison started from the settings: the study file and what its runs gave so far.
pub(super) struct Run {
    /// The study file it trains (what "Download study" writes).
    pub study_toml: String,
    /// `None` while a step's job holds it.
    live: Option<Box<LiveStudy>>,
    pub running: bool,
    pub snapshot: Snapshot,
    /// Each finished run's checkpoint bytes, in the order of `snapshot.finished`.
    pub checkpoints: Vec<Rc<[u8]>>,
    pub started: web_time::Instant,
    /// Seconds from Start to the last slice's end.
    pub wall_seconds: f64,
}

/// What the tab draws, refreshed after every job.
#[derive(Clone)]
pub(super) struct Snapshot {
    pub variants: Vec<(String, String)>,
    pub finished: Vec<RunResult>,
    pub partial: Option<RunResult>,
    pub summary: StudySummary,
    pub steps_done: usize,
    pub steps_total: usize,
    pub runs_total: usize,
    pub seconds: f64,
    /// Judged once every run finished.
    pub verdicts: Option<Vec<ClaimReport>>,
    pub metric: crate::study::Metric,
}

impl Snapshot {
    fn of(live: &LiveStudy) -> Self {
        let study = live.study();
        let verdicts = live.is_done().then(|| judge_claims(study, live.finished(), None));
        let metric = study
            .claims
            .first()
            .map_or(crate::study::Metric::Accuracy, |c| c.metric());
        Self {
            variants: study
                .variants
                .iter()
                .map(|v| (v.name.clone(), v.label().to_string()))
                .collect(),
            finished: live.finished().to_vec(),
            partial: live.partial(),
            summary: live.summary(),
            steps_done: live.steps_done(),
            steps_total: live.total_steps(),
            runs_total: live.runs().len(),
            seconds: live.seconds(),
            verdicts,
            metric,
        }
    }
}

impl Comparing {
    /// The tab of a viewer whose models run on a backend of `kind`.
    pub fn on(kind: BackendKind) -> Self {
        Self {
            settings: CompareSettings::default(),
            arithmetic: match kind {
                BackendKind::Cpu => Arithmetic::Portable,
                BackendKind::Gpu => Arithmetic::Native,
            },
            run: None,
            error: None,
        }
    }

    /// How closely `posflow study` of the tab's file re-runs what the tab trains.
    pub fn reproduction(&self) -> &'static str {
        match self.arithmetic {
            Arithmetic::Portable => {
                "Computed in the portable arithmetic: `posflow study` of the study file gives these \
                 numbers to the bit, on any machine."
            }
            Arithmetic::Native => {
                "Computed on this GPU, which sums in its own order: `posflow study` of the study \
                 file re-runs these numbers to rounding, not to the bit."
            }
        }
    }

    /// The study file of the settings as they stand, in the tab's arithmetic.
    fn settings_study_toml(&self) -> Result<String> {
        self.settings.study_toml_in(self.arithmetic)
    }

    fn running(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.running)
    }

    /// A step's job holds the study.
    fn stepping(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.live.is_none())
    }

    pub fn status(&self) -> CompareStatus {
        let Some(run) = &self.run else {
            return CompareStatus {
                error: self.error.clone(),
                ..CompareStatus::default()
            };
        };
        let snap = &run.snapshot;
        let of_kind = |kind: ClaimKind| {
            snap.verdicts.as_ref().map_or_else(Vec::new, |claims| {
                claims
                    .iter()
                    .filter(|c| c.kind == kind)
                    .map(|c| ClaimStatus {
                        name: c.claim.name().to_string(),
                        verdict: c.verdict.word().to_string(),
                        sequences: c.items,
                    })
                    .collect()
            })
        };
        let (verdicts, sanity) = (of_kind(ClaimKind::Comparative), of_kind(ClaimKind::Sanity));
        CompareStatus {
            steps_done: snap.steps_done,
            steps_total: snap.steps_total,
            runs_done: snap.finished.len(),
            runs_total: snap.runs_total,
            running: self.running(),
            done: snap.verdicts.is_some(),
            seconds: snap.seconds,
            wall_seconds: run.wall_seconds,
            verdicts,
            sanity,
            error: self.error.clone(),
        }
    }

    /// The finished runs of the comparison started last.
    pub fn finished(&self) -> Vec<RunResult> {
        self.run
            .as_ref()
            .map_or_else(Vec::new, |r| r.snapshot.finished.clone())
    }

    /// The checkpoint of the comparison's `i`-th finished run, named `<variant>_seed<k>`.
    pub fn checkpoint(&self, i: usize) -> Option<(String, Rc<[u8]>)> {
        let run = self.run.as_ref()?;
        let result = run.snapshot.finished.get(i)?;
        let bytes = run.checkpoints.get(i)?.clone();
        Some((format!("{}_seed{}", result.variant, result.seed), bytes))
    }

    /// The study file of the comparison started last, or of the settings as they are.
    pub fn study_toml(&self) -> Result<String> {
        match &self.run {
            Some(run) => Ok(run.study_toml.clone()),
            None => self.settings_study_toml(),
        }
    }
}

/// Starts a comparison of the settings (replacing the last); the frames run its steps. A
/// refusal is also shown in the tab.
pub(crate) fn start(s: &mut State) -> Result<()> {
    let result = new_run(s).map(|run| s.compare.run = Some(run));
    s.compare.error = result.as_ref().err().map(ToString::to_string);
    if let Some(ctx) = &s.ctx {
        ctx.request_repaint();
    }
    result
}

fn new_run(s: &State) -> Result<Run> {
    if s.compare.stepping() {
        return Err(crate::error::Error::Input(
            "the last comparison's step is still running: start again when it is done".into(),
        ));
    }
    let study_toml = s.compare.settings_study_toml()?;
    let study = crate::study::Study::from_toml(&study_toml, "the comparison")?;
    let start = web_time::Instant::now();
    let live = LiveStudy::new(study, Box::new(move || start.elapsed().as_secs_f64()))?;
    Ok(Run {
        study_toml,
        snapshot: Snapshot::of(&live),
        live: Some(Box::new(live)),
        running: true,
        checkpoints: Vec::new(),
        started: web_time::Instant::now(),
        wall_seconds: 0.0,
    })
}

/// Offers the comparison's study file for download (the tab's "Download study"), named
/// `compare_<task>.toml`.
pub(crate) fn offer_study(s: &mut State) -> Result<()> {
    let text = s.compare.study_toml()?;
    let task = crate::study::Study::from_toml(&text, "the comparison")?.name;
    s.downloads.push(crate::viz::Download {
        name: format!("{task}.toml"),
        bytes: text.into_bytes(),
    });
    Ok(())
}

/// Stops the comparison after the slice that is running; what finished stays.
pub(crate) fn stop(s: &mut State) {
    if let Some(run) = &mut s.compare.run {
        run.running = false;
    }
}

/// One slice of steps, as a job.
pub(crate) struct Step {
    live: Box<LiveStudy>,
}

/// The next slice's job, when the comparison goes on and no slice is running.
pub(crate) fn next_step(s: &mut State) -> Option<Job> {
    let run = s.compare.run.as_mut().filter(|r| r.running)?;
    let live = run.live.take()?;
    Some(Job::CompareStep(Step { live }))
}

/// Steps until the slice's time is up, a run finished or the study ended, then hands the
/// study back with a fresh snapshot. Ending at a finished run shows its results at once, and a
/// Stop then keeps the runs finished when it was pressed, however fast they run.
pub(crate) async fn run_step(state: &Rc<RefCell<State>>, mut step: Step) {
    let backend: Rc<dyn Backend> = state.borrow().backend.clone();
    let start = web_time::Instant::now();
    let finished = step.live.finished().len();
    let result = loop {
        match step.live.advance(&backend).await {
            Ok(Some(_))
                if start.elapsed().as_secs_f64() < SLICE_SECONDS
                    && step.live.finished().len() == finished => {}
            Ok(_) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    let mut s = state.borrow_mut();
    let compare = &mut s.compare;
    let Some(run) = compare.run.as_mut() else {
        return;
    };
    run.snapshot = Snapshot::of(&step.live);
    run.wall_seconds = run.started.elapsed().as_secs_f64();
    for i in run.checkpoints.len()..step.live.finished().len() {
        if let Some(bytes) = step.live.checkpoint_bytes(i) {
            run.checkpoints.push(Rc::from(bytes));
        }
    }
    if let Err(e) = result {
        run.running = false;
        compare.error = Some(e.to_string());
    }
    if step.live.is_done() {
        run.running = false;
    }
    run.live = Some(step.live);
}
