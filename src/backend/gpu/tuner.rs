//! Choosing among an op's kernels that give the same bits (`Op::gpu_alternatives`) by timing
//! them on the adapter at hand. The ops' own choices per adapter kind were tuned on the few
//! adapters anyone measured (lavapipe, an H100, an H200); any other GPU (AMD, Intel, Apple, the
//! next NVIDIA) gets its own fastest this way, and since every candidate computes the same bits,
//! the numbers of a run never depend on what its timings chose. burn's wgpu backend tunes its
//! products the same way.
//!
//! Natively only (timing waits for the GPU). On by default for hardware adapters; off for software
//! ones, where a product takes milliseconds and the suite compiles thousands of programs.
//! `POSFLOW_TUNE=0` turns it off everywhere, `POSFLOW_TUNE=1` on everywhere; any other value is
//! an error, even where `--device auto` would otherwise fall back to the CPU.
#![cfg_attr(
    target_arch = "wasm32",
    expect(dead_code, reason = "the web never times kernels: it cannot wait for the GPU")
)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Instant;

use crate::error::{Error, Result};

/// Runs per timing, sized so that one timing takes about this long: long enough that the
/// submission's fixed cost and the clock's resolution are a small part of it.
const TIMING_SECONDS: f64 = 2e-3;
const MAX_RUNS: usize = 64;
/// Timings per candidate, alternating between candidates; each keeps its fastest.
const ROUNDS: usize = 3;
/// The op's own choice stays unless another is this much faster: timings a few percent apart
/// are noise, and a choice that flipped with them would make a run's speed a matter of chance.
const MARGIN: f64 = 0.05;

/// One set of candidates timed: the op and its operands' shapes, each candidate's name and
/// seconds per run (the op's own first), and which ran.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuned {
    pub what: String,
    pub candidates: Vec<(String, f64)>,
    pub chosen: usize,
}

/// What tuning did so far: the sets timed, and the seconds it took (pipelines built included).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tuning {
    pub sets: Vec<Tuned>,
    pub seconds: f64,
}

/// What `POSFLOW_TUNE` asks: `Some(false)` for 0, `Some(true)` for 1, `None` unset (the backend
/// then tunes on hardware adapters); anything else is an error naming the variable.
pub(super) fn requested() -> Result<Option<bool>> {
    match std::env::var("POSFLOW_TUNE").as_deref() {
        Ok("0") => Ok(Some(false)),
        Ok("1") => Ok(Some(true)),
        Ok(other) => Err(Error::Input(format!(
            "POSFLOW_TUNE must be 0 (never time kernels) or 1 (always), got {other:?}"
        ))),
        Err(_) => Ok(None),
    }
}

pub(super) struct Tuner {
    on: bool,
    /// The candidate each set chose, by a key naming the set (its op and dispatches): each
    /// product shape of a program is timed once per backend, not once per program.
    chosen: RefCell<HashMap<String, usize>>,
    done: RefCell<Tuning>,
}

impl Tuner {
    /// On or off; never on on the web, which cannot wait for the GPU to time it.
    pub fn with(on: bool) -> Self {
        Self {
            on: on && cfg!(not(target_arch = "wasm32")),
            chosen: RefCell::default(),
            done: RefCell::default(),
        }
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    pub fn done(&self) -> Tuning {
        self.done.borrow().clone()
    }

    /// What the set `key` chose before, if it was timed.
    pub fn chosen(&self, key: &str) -> Option<usize> {
        self.chosen.borrow().get(key).copied()
    }

    /// Times the candidates named in `names` (the op's own first) with `time(i, runs)`, which
    /// runs candidate i `runs` times and returns the seconds taken, and returns the fastest,
    /// remembered under `key`; `what` says what they compute. The first run of each is
    /// discarded (it pays for the pipeline's first use). `started` is when building the
    /// candidates began, so that what tuning costs includes it.
    pub fn choose(
        &self,
        key: String,
        what: String,
        names: Vec<String>,
        started: Instant,
        mut time: impl FnMut(usize, usize) -> Result<f64>,
    ) -> Result<usize> {
        let candidates = names.len();
        for i in 0..candidates {
            time(i, 1)?;
        }
        let once = time(0, 1)?.max(1e-7);
        let runs = ((TIMING_SECONDS / once).ceil() as usize).clamp(1, MAX_RUNS);
        let mut fastest = vec![f64::INFINITY; candidates];
        for _ in 0..ROUNDS {
            for (i, best) in fastest.iter_mut().enumerate() {
                *best = best.min(time(i, runs)? / runs as f64);
            }
        }
        let chosen = pick(&fastest);
        self.chosen.borrow_mut().insert(key, chosen);
        let mut done = self.done.borrow_mut();
        done.sets.push(Tuned {
            what,
            candidates: names.into_iter().zip(fastest).collect(),
            chosen,
        });
        done.seconds += started.elapsed().as_secs_f64();
        Ok(chosen)
    }
}

/// The fastest of `times`, unless it beats the first (the op's own choice) by less than
/// [`MARGIN`].
fn pick(times: &[f64]) -> usize {
    let (fastest, best) =
        times.iter().copied().enumerate().fold(
            (0, f64::INFINITY),
            |(i, t), (j, u)| if u < t { (j, u) } else { (i, t) },
        );
    if best < (1.0 - MARGIN) * times[0] {
        fastest
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ops_own_choice_stays_unless_another_is_clearly_faster() {
        assert_eq!(pick(&[1.0, 0.97, 1.2]), 0, "3% is noise");
        assert_eq!(pick(&[1.0, 0.9, 0.8]), 2);
        assert_eq!(pick(&[1.0, 0.8, 0.9]), 1);
        assert_eq!(pick(&[1.0]), 0);
    }

    #[test]
    fn each_set_is_timed_once_and_its_choice_remembered() {
        let tuner = Tuner::with(true);
        let mut calls = Vec::new();
        let names = vec!["own".to_string(), "half".to_string(), "same".to_string()];
        // Candidate 1 takes half as long as the others.
        let chosen = tuner
            .choose(
                "product".into(),
                "a product".into(),
                names,
                Instant::now(),
                |i, runs| {
                    calls.push((i, runs));
                    Ok(if i == 1 { 0.5e-3 } else { 1e-3 } * runs as f64)
                },
            )
            .unwrap();
        assert_eq!(chosen, 1);
        assert_eq!(tuner.chosen("product"), Some(1));
        assert_eq!(tuner.chosen("another"), None);
        let done = tuner.done();
        assert_eq!(done.sets.len(), 1);
        assert_eq!(done.sets[0].what, "a product");
        assert_eq!(done.sets[0].chosen, 1);
        let per_run: Vec<f64> = done.sets[0].candidates.iter().map(|c| c.1).collect();
        assert_eq!(per_run, [1e-3, 0.5e-3, 1e-3]);
        // One warm-up each, one to size the runs, then ROUNDS of each with 2 runs (2 ms / 1 ms).
        assert_eq!(calls.len(), 3 + 1 + ROUNDS * 3);
        assert!(calls[4..].iter().all(|&(_, runs)| runs == 2), "{calls:?}");
    }

    #[test]
    fn a_failed_timing_is_an_error_and_chooses_nothing() {
        let tuner = Tuner::with(true);
        let names = vec!["own".to_string(), "broken".to_string()];
        let err = tuner
            .choose(
                "product".into(),
                "a product".into(),
                names,
                Instant::now(),
                |i, _| match i {
                    1 => Err(Error::Gpu("device lost".into())),
                    _ => Ok(1e-3),
                },
            )
            .unwrap_err();
        assert!(err.to_string().contains("device lost"), "{err}");
        assert_eq!(tuner.chosen("product"), None);
        assert_eq!(tuner.done(), Tuning::default());
    }
}
