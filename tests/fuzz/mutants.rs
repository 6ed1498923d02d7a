//! What the fuzz tests share: how many mutants to make, running one mutant under `catch_unwind`
//! with a clock, and the tally of outcomes per family that the tests print and check.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use posflow::checkpoint::{Checkpoint, adam_m_name, adam_v_name};
use posflow::model::{PosEnc, SolverMethod};
use posflow::params::ParamStore;
use posflow::train::RunConfig;

/// Mutants per family: `POSFLOW_FUZZ_MUTANTS`, or `default` (what keeps the suite's run short).
pub fn mutants_per_family(default: usize) -> usize {
    match std::env::var("POSFLOW_FUZZ_MUTANTS") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("POSFLOW_FUZZ_MUTANTS must be a count, got {text:?}")),
        Err(_) => default,
    }
}

/// The most one mutant may take: every input, however hostile, is refused or run this fast.
/// The mutants take milliseconds; the margin is for a loaded machine.
pub const MAX_MUTANT_TIME: Duration = Duration::from_millis(500);

/// What happened to one mutant.
pub enum Outcome {
    /// Every stage took it.
    Accepted,
    /// A stage refused it, with this error message.
    Refused(String),
    /// Every stage took it, but what they made of it is broken, as this says.
    Corrupted(String),
}

#[derive(Default)]
struct Counts {
    accepted: usize,
    refused: usize,
    panicked: usize,
    corrupted: usize,
}

/// The outcomes of a fuzz run, per family, and every failure of the properties checked.
#[derive(Default)]
pub struct Tally {
    counts: BTreeMap<&'static str, Counts>,
    slowest: (Duration, String),
    /// Panics, slow mutants and unclear errors: each with the mutant that caused it.
    failures: Vec<String>,
}

impl Tally {
    /// Runs `mutant` (described by `what`) under `catch_unwind` and a clock. A refusal must be
    /// an error message that `clear` accepts: it returns why the message is unclear, if it is.
    pub fn run(
        &mut self,
        family: &'static str,
        what: &str,
        mutant: impl FnOnce() -> Outcome,
        clear: impl FnOnce(&str) -> Option<String>,
    ) {
        let start = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(mutant));
        let took = start.elapsed();
        if took > self.slowest.0 {
            self.slowest = (took, format!("{family}: {what}"));
        }
        if took > MAX_MUTANT_TIME {
            self.failures.push(format!("{family}: {what}: took {took:?}"));
        }
        let counts = self.counts.entry(family).or_default();
        match outcome {
            Err(payload) => {
                counts.panicked += 1;
                let message = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                self.failures
                    .push(format!("{family}: {what}: panicked: {message}"));
            }
            Ok(Outcome::Accepted) => counts.accepted += 1,
            Ok(Outcome::Corrupted(why)) => {
                counts.corrupted += 1;
                self.failures
                    .push(format!("{family}: {what}: accepted, but {why}"));
            }
            Ok(Outcome::Refused(message)) => {
                counts.refused += 1;
                let unclear = if message.trim().is_empty() {
                    Some("the error message is empty".into())
                } else {
                    clear(&message)
                };
                if let Some(why) = unclear {
                    self.failures
                        .push(format!("{family}: {what}: unclear error ({why}): {message}"));
                }
            }
        }
    }

    /// Prints the counts per family and the slowest mutant, then fails on any panic, slow mutant
    /// or unclear error, listing them.
    pub fn report(&self, test: &str) {
        eprintln!(
            "{test}: {:>16}  {:>8}  {:>8}  {:>8}  {:>9}",
            "family", "accepted", "refused", "panicked", "corrupted"
        );
        let mut total = 0;
        for (family, c) in &self.counts {
            eprintln!(
                "{test}: {family:>16}  {:>8}  {:>8}  {:>8}  {:>9}",
                c.accepted, c.refused, c.panicked, c.corrupted
            );
            total += c.accepted + c.refused + c.panicked + c.corrupted;
        }
        eprintln!(
            "{test}: {total} mutants, {} failures; slowest {:?} ({})",
            self.failures.len(),
            self.slowest.0,
            self.slowest.1
        );
        assert!(total > 0, "{test}: no mutant ran");
        assert!(
            self.failures.is_empty(),
            "{test}: {} failures, the first ones:\n{}",
            self.failures.len(),
            self.failures
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// `None` if `message` contains one of `anchors`, else why it is unclear.
pub fn names_one_of(message: &str, anchors: &[impl AsRef<str>]) -> Option<String> {
    let named = anchors.iter().any(|a| message.contains(a.as_ref()));
    let anchors: Vec<&str> = anchors.iter().map(AsRef::as_ref).collect();
    (!named).then(|| format!("names none of {anchors:?}"))
}

/// Whether a step of `run` takes milliseconds, so that a fuzz test may train it: a small model
/// on a small batch of a synthetic task, and no solver asked for many steps. (Loading Moby Dick
/// or the dictionary alone takes longer.)
pub fn is_cheap(run: &RunConfig) -> bool {
    let Some(len) = run.data.train_len() else {
        return false;
    };
    let solver_steps = match run.model.posenc {
        PosEnc::Floater(f) if f.method == SolverMethod::Dopri5 => f.max_steps / 100,
        PosEnc::Floater(f) => f.substeps,
        _ => 1,
    };
    run.data.starts_with_bos()
        && run.model.estimated_parameters() < 20_000
        && run.train.batch.saturating_mul(len) < 1_000
        && solver_steps <= 10
}

/// The names of the parameters of `params` and of their AdamW moments, as checkpoints hold them.
pub fn tensor_names(params: &ParamStore) -> Vec<String> {
    params
        .iter()
        .flat_map(|(name, _)| [name.to_string(), adam_m_name(name), adam_v_name(name)])
        .collect()
}

/// The first of `names` that `checkpoint` does not hold as an all-finite f32 tensor.
pub fn first_non_finite<'a>(checkpoint: &Checkpoint, names: &'a [String]) -> Option<&'a String> {
    names.iter().find(|name| {
        !checkpoint
            .f32_tensor(name)
            .is_some_and(|(_, values)| values.iter().all(|v| v.is_finite()))
    })
}
