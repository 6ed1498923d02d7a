//! A study trained live, one step at a time in memory (the page's Compare tab), against the same
//! study run by `posflow study`'s runner: the same runs give the same numbers bit for bit on the
//! CPU backend, and the same verdicts.

use crate::common::scratch as scratch_dir;

use std::rc::Rc;
use std::time::Instant;

use posflow::backend::Backend;
use posflow::backend::cpu::CpuBackend;
use posflow::study::{Clock, LiveStudy, RunResult, Study, StudyProgress, judge_claims, plan_runs, run_study};
use scratch_dir::scratch;

/// Two variants × two seeds of a 1-layer reverse_string model (one at randomized positions), evaluated every 4 of 10 steps (so the last
/// evaluation is the one after the last step, off the schedule).
const STUDY: &str = r#"
[study]
name = "live"
description = "A relative bias against a learned table, live"
seeds = [3, 7]

[base]
data = { task = "chomsky", name = "reverse_string", train_max_len = 4 }
[base.model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 64
dropout = 0.1
kind = { type = "token_classifier", n_classes = 2 }
posenc = { type = "relative", buckets = 8, max_distance = 16 }
[base.train]
steps = 10
batch = 8
lr = 1e-2
eval_every = 4
eval_lengths = [2, 4, 8, 16]
eval_batches = 1

[[variant]]
name = "relative"

[[variant]]
name = "sinusoidal_rand"
set = { "model.posenc" = { type = "sinusoidal" }, "model.random_positions" = 128 }

[[claim]]
name = "extrapolates"
text = "relative > randomized sinusoidal in accuracy past the training length"
kind = "order"
metric = "accuracy"
bin = "9-16"
order = ["relative", "sinusoidal_rand"]
"#;

fn clock() -> Clock {
    let start = Instant::now();
    Box::new(move || start.elapsed().as_secs_f64())
}

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

/// Trains every run of `study` live to the end, checking the progress it reports on the way.
fn run_live(study: &Study) -> Vec<RunResult> {
    let mut live = LiveStudy::new(study.clone(), clock()).unwrap();
    let backend = cpu();
    assert_eq!(live.runs().len(), 4);
    assert_eq!(live.total_steps(), 40);
    let mut evaluations = 0;
    let mut advances = 0;
    while let Some(advanced) = pollster::block_on(live.advance(&backend)).unwrap() {
        advances += 1;
        assert_eq!(live.steps_done(), advances);
        evaluations += usize::from(advanced.evaluated);
        if !advanced.finished {
            // The run in training shows its losses so far and NaN after them.
            let partial = live.partial().expect("a run is going");
            assert_eq!(partial.variant, live.runs()[advanced.run].variant);
            let taken = advanced.stats.step + 1;
            assert!(partial.train_loss[..taken].iter().all(|l| l.is_finite()));
            assert!(partial.train_loss[taken..].iter().all(|l| l.is_nan()));
        } else {
            assert!(live.partial().is_none());
        }
    }
    assert!(live.is_done());
    assert_eq!(advances, 40);
    // Steps 4, 8 and the last (10) of each of the four runs.
    assert_eq!(evaluations, 12);
    assert!(pollster::block_on(live.advance(&backend)).unwrap().is_none());
    live.finished().to_vec()
}

struct Quiet;
impl StudyProgress for Quiet {}

#[test]
fn a_live_study_gives_posflow_study_s_numbers_and_verdicts() {
    let study = Study::from_toml(STUDY, "live.toml").unwrap();
    let live = run_live(&study);

    let dir = scratch("live_study", "runner");
    let plans = plan_runs(&study, &study.seeds, &dir);
    let native = run_study(&plans, 1, &|| Ok(cpu()), &Quiet).unwrap();

    assert_eq!(live.len(), native.len());
    for (l, n) in live.iter().zip(&native) {
        assert_eq!((&l.variant, l.seed), (&n.variant, n.seed));
        assert_eq!(l.run.train.seed, n.run.train.seed);
        let bits = |losses: &[f32]| losses.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&l.train_loss),
            bits(&n.train_loss),
            "{}/seed{}",
            l.variant,
            l.seed
        );
        assert_eq!(l.evals, n.evals, "{}/seed{}", l.variant, l.seed);
        assert_eq!(l.evals.iter().map(|e| e.step).collect::<Vec<_>>(), [4, 8, 10]);
        let bins: Vec<&str> = l.evals[0].bins.iter().map(|b| b.bin.as_str()).collect();
        assert_eq!(bins, ["1-4", "5-8", "9-16"]);
    }
    // Different seeds trained differently: the comparison is not of copies.
    assert_ne!(live[0].train_loss, live[1].train_loss);

    let verdicts = |results: &[RunResult]| {
        judge_claims(&study, results, None)
            .into_iter()
            .map(|c| (c.verdict, format!("{:?}", c.original)))
            .collect::<Vec<_>>()
    };
    assert_eq!(verdicts(&live), verdicts(&native));
}

#[test]
fn a_live_study_refuses_warm_starts_and_names_the_run_that_fails() {
    let warm = STUDY.replace(
        "[[variant]]\nname = \"sinusoidal_rand\"",
        "[[variant]]\nname = \"sinusoidal_rand\"\nwarm_start = \"relative\"",
    );
    let study = Study::from_toml(&warm, "warm.toml").unwrap();
    let err = LiveStudy::new(study, clock())
        .err()
        .expect("a warm start is refused");
    assert!(err.to_string().contains("`sinusoidal_rand` warm-starts"), "{err}");

    // A learning rate that blows the loss up in the first steps: the error names the run, and
    // the study stops there with what finished kept.
    let wild = STUDY.replace("lr = 1e-2", "lr = 1e30\nclip_grad_norm = 0.0");
    let study = Study::from_toml(&wild, "wild.toml").unwrap();
    let mut live = LiveStudy::new(study, clock()).unwrap();
    let backend = cpu();
    let err = loop {
        match pollster::block_on(live.advance(&backend)) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("a loss of 1e30 steps trained to the end"),
            Err(e) => break e,
        }
    };
    assert!(err.to_string().contains("run relative/seed3"), "{err}");
    assert!(live.finished().is_empty());
}
