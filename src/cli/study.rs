//! `posflow study FILE`: every variant × seed of a study file, one progress bar for all of them,
//! resumable, then `study.md`, `study.json` and the pictures (see `posflow::study`).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use posflow::backend::{DeviceChoice, select_backend};
use posflow::study::{
    RunPlan, RunResult, Study, StudyProgress, plan_runs, run_study, summarize, write_pictures, write_reports,
};
use posflow::train::StepStats;

#[derive(Args)]
pub struct StudyArgs {
    /// The study file (TOML): a base run, its variants, seeds and claims (see studies/).
    file: PathBuf,
    /// Where the runs, the report and the pictures go; defaults to runs/studies/<name>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Runs trained at once, each on its own thread with its own backend and an equal share of
    /// the CPU threads (RAYON_NUM_THREADS, or every core, divided by the jobs; at least one).
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    jobs: usize,
    /// Check the study and print its runs, training nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also run every variant with fresh seeds (as many as the file lists, the integers after its
    /// largest) and judge each claim on the file's seeds, the fresh ones and all together: a
    /// claim holds only on all seeds together with each half passing alone.
    #[arg(long)]
    replicate: bool,
}

pub fn study(choice: DeviceChoice, args: StudyArgs) -> posflow::Result<()> {
    let study = Study::load(&args.file)?;
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("runs/studies").join(&study.name));
    let fresh = if args.replicate {
        Some(study.fresh_seeds()?)
    } else {
        None
    };
    let seeds = study.seeds_with(fresh.as_deref());
    let plans = plan_runs(&study, &seeds, &out);
    describe(&study, &seeds, fresh.as_deref(), &plans, &out);
    if args.dry_run {
        return Ok(());
    }
    let device = pollster::block_on(select_backend(choice))?.describe();
    println!("device: {device}");
    let bar = StudyBar::new(&plans);
    let make_backend = || pollster::block_on(select_backend(choice));
    let results = run_study(&plans, args.jobs, &make_backend, &bar);
    bar.bar.finish();
    let results = results?;
    let summary = summarize(&study, &results, fresh.as_deref());
    let pictures = write_pictures(&out, &study, &summary, &results)?;
    write_reports(&out, &study, &summary, &results, &device, &pictures)?;
    for claim in &summary.claims {
        let halves = claim.replication.as_ref().map_or(String::new(), |r| {
            let pass = |v: posflow::study::Verdict| {
                if v == posflow::study::Verdict::Holds {
                    "passes"
                } else {
                    "fails"
                }
            };
            format!(
                "; file's seeds alone {}, fresh seeds alone {}",
                pass(claim.original.verdict),
                pass(r.fresh.verdict)
            )
        });
        let p = |p: Option<f64>| p.map_or("—".into(), |p| format!("{p:.4}"));
        println!(
            "{} {}: {} (p {}, q {}{halves})",
            if claim.kind == posflow::study::ClaimKind::Sanity {
                "sanity check"
            } else {
                "claim"
            },
            claim.claim.name(),
            claim.verdict.word(),
            p(claim.p),
            p(claim.q)
        );
    }
    println!("wrote {}", out.join("study.md").display());
    Ok(())
}

/// The plan: variants, what they change, seeds, steps, and how many runs are already done.
fn describe(study: &Study, seeds: &[u64], fresh: Option<&[u64]>, plans: &[RunPlan], out: &std::path::Path) {
    let steps: usize = plans.iter().map(RunPlan::steps).sum();
    println!(
        "study {}: {} × {} = {}, {steps} steps in all, into {}",
        study.name,
        count(study.variants.len(), "variant"),
        count(seeds.len(), "seed"),
        count(plans.len(), "run"),
        out.display()
    );
    let list = |seeds: &[u64]| seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    match fresh {
        Some(fresh) => println!(
            "  seeds: the file's {}; fresh for the replication: {}; claims at a {}% level",
            list(&study.seeds),
            list(fresh),
            100.0 * study.level
        ),
        None => println!(
            "  seeds: {}; claims at a {}% level",
            list(seeds),
            100.0 * study.level
        ),
    }
    for v in &study.variants {
        let set: Vec<String> = v
            .set
            .iter()
            .map(|(k, value)| format!("{k} = {}", posflow::study::inline_toml(value)))
            .collect();
        let warm = v
            .warm_start
            .as_ref()
            .map_or(String::new(), |s| format!(", warm start from {s}"));
        println!(
            "  {:<16} {} steps{warm}: {}",
            v.name,
            v.run.train.steps,
            if set.is_empty() {
                "the base".into()
            } else {
                set.join(", ")
            }
        );
        if let Some(caution) = v.run.model.posenc.encoding().caution(&v.run.model.facts()) {
            println!("  {:<16} caution: {caution}", "");
        }
    }
    for p in plans.iter().filter(|p| p.stale) {
        println!(
            "  {}/seed{}: its result.json was made with another config; it runs again",
            p.variant, p.seed
        );
    }
    let done = plans.iter().filter(|p| p.done.is_some()).count();
    println!(
        "{done} of {} runs already done, {} to run",
        plans.len(),
        plans.len() - done
    );
}

fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// One bar for the whole study, counted in training steps (runs differ in length), with the ETA.
/// When stderr is not a terminal the bar is hidden, so a line is printed every 5% instead.
struct StudyBar {
    bar: ProgressBar,
    runs: usize,
    state: Mutex<BarState>,
}

struct BarState {
    runs_done: usize,
    smoothed_loss: Option<f32>,
    /// Steps run by this process (not skipped or resumed), for the ETA of the hidden bar.
    steps_here: u64,
    started: Instant,
    next_line: u64,
}

impl StudyBar {
    fn new(plans: &[RunPlan]) -> Self {
        let total: usize = plans.iter().map(RunPlan::steps).sum();
        let done: usize = plans
            .iter()
            .filter(|p| p.done.is_some())
            .map(RunPlan::steps)
            .sum();
        let bar = ProgressBar::new(total as u64).with_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  eta {eta}")
                .expect("a valid template"),
        );
        bar.set_position(done as u64);
        bar.reset_eta();
        let line_every = (total as u64 / 20).max(1);
        Self {
            bar,
            runs: plans.len(),
            state: Mutex::new(BarState {
                runs_done: plans.iter().filter(|p| p.done.is_some()).count(),
                smoothed_loss: None,
                steps_here: 0,
                started: Instant::now(),
                next_line: (done as u64 / line_every + 1) * line_every,
            }),
        }
    }

    fn line_every(&self) -> u64 {
        (self.bar.length().unwrap_or(1) / 20).max(1)
    }
}

impl StudyProgress for StudyBar {
    fn started(&self, plan: &RunPlan, step: usize) {
        let how = if step > 0 {
            format!("resumed from its checkpoint at step {step}")
        } else if plan.warm_start.is_some() {
            "started, warm".into()
        } else {
            "started".into()
        };
        self.bar
            .suspend(|| println!("run {}/seed{}: {how}", plan.variant, plan.seed));
        if step > 0 {
            self.bar.inc(step as u64);
            self.bar.reset_eta();
        }
        self.state.lock().expect("no panic").smoothed_loss = None;
    }

    fn step(&self, plan: &RunPlan, stats: &StepStats) {
        let mut s = self.state.lock().expect("no panic");
        let smoothed = s.smoothed_loss.map_or(stats.loss, |l| 0.9 * l + 0.1 * stats.loss);
        s.smoothed_loss = Some(smoothed);
        s.steps_here += 1;
        let msg = format!(
            "run {}/{} {}/seed{} loss {smoothed:.4}",
            s.runs_done + 1,
            self.runs,
            plan.variant,
            plan.seed
        );
        self.bar.inc(1);
        let position = self.bar.position();
        if self.bar.is_hidden() && position >= s.next_line {
            let total = self.bar.length().unwrap_or(1);
            let per_step = s.started.elapsed().as_secs_f64() / s.steps_here as f64;
            let eta = per_step * total.saturating_sub(position) as f64;
            println!(
                "study: {:.0}% ({position}/{total} steps), {msg}, eta {:.0}m{:02.0}s",
                100.0 * position as f64 / total as f64,
                (eta / 60.0).floor(),
                eta % 60.0
            );
            s.next_line = (position / self.line_every() + 1) * self.line_every();
        }
        self.bar.set_message(msg);
    }

    fn finished(&self, plan: &RunPlan, result: &RunResult) {
        let mut s = self.state.lock().expect("no panic");
        s.runs_done += 1;
        let finals: Vec<String> = result.evals.last().map_or(Vec::new(), |e| {
            e.bins
                .iter()
                .map(|b| format!("{} {:.1}%", b.bin, 100.0 * b.accuracy))
                .collect()
        });
        self.bar.suspend(|| {
            println!(
                "run {}/seed{}: done in {:.1} s ({}/{} runs); final accuracy {}",
                plan.variant,
                plan.seed,
                result.seconds,
                s.runs_done,
                self.runs,
                finals.join(", ")
            )
        });
    }
}
