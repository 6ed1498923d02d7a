//! Where a compiled program's time goes, per op kind, over its runs: what `POSFLOW_PROFILE=1`
//! prints when the program is dropped. The CPU backend times each op on the host; the GPU backend
//! times each dispatch with timestamp queries where the adapter has them, and otherwise submits
//! each dispatch alone and waits for it (which adds the submission's latency to every one). The
//! first run of a program is left out: drivers compile shaders at first use (lavapipe's first
//! training step takes twice as long as the next), and caches are cold.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by [`request`].
static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Whether `POSFLOW_PROFILE=1` is set or [`request`] was called: programs compiled then are
/// profiled.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed) || std::env::var("POSFLOW_PROFILE").is_ok_and(|v| v == "1")
}

/// Profiles the programs compiled from now on (or no longer, unless `POSFLOW_PROFILE=1`): for
/// the page, which has no environment.
pub fn request(on: bool) {
    REQUESTED.store(on, Ordering::Relaxed);
}

/// How the times were taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The host's clock around each op (the CPU backend).
    Host,
    /// GPU timestamps written at the start and end of each dispatch's compute pass.
    GpuTimestamps,
    /// The host's clock around each dispatch, submitted alone and waited for: the adapter has no
    /// timestamp queries.
    GpuWaited,
}

/// One op kind's share of the runs.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    pub name: &'static str,
    /// Kernel dispatches (GPU) or op executions (CPU) over all runs.
    pub calls: usize,
    pub seconds: f64,
}

/// The time per op kind over every run of one program.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub clock: Clock,
    /// Runs counted: every run but the first.
    pub runs: usize,
    started: usize,
    /// In the order the op kinds first ran.
    pub ops: Vec<OpTime>,
}

impl Profile {
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            runs: 0,
            started: 0,
            ops: Vec::new(),
        }
    }

    /// A run begins: from the second on, its ops are recorded.
    pub fn start_run(&mut self) {
        self.started += 1;
        if self.started > 1 {
            self.runs += 1;
        }
    }

    /// Adds `seconds` of op kind `name` to the current run (nothing in the first run).
    pub fn record(&mut self, name: &'static str, seconds: f64) {
        if self.started <= 1 {
            return;
        }
        match self.ops.iter_mut().find(|op| op.name == name) {
            Some(op) => {
                op.calls += 1;
                op.seconds += seconds;
            }
            None => self.ops.push(OpTime {
                name,
                calls: 1,
                seconds,
            }),
        }
    }

    /// Seconds per run, summed over the ops.
    pub fn seconds_per_run(&self) -> f64 {
        self.ops.iter().map(|op| op.seconds).sum::<f64>() / self.runs.max(1) as f64
    }
}

impl fmt::Display for Profile {
    /// A table, the costliest op kind first: calls per run, ms per run, share of the run.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let runs = self.runs.max(1) as f64;
        let total: f64 = self.ops.iter().map(|op| op.seconds).sum();
        let clock = match self.clock {
            Clock::Host => "host clock per op",
            Clock::GpuTimestamps => "GPU timestamps per dispatch",
            Clock::GpuWaited => {
                "host clock per dispatch, each submitted alone and waited for (no timestamp queries)"
            }
        };
        writeln!(
            f,
            "POSFLOW_PROFILE: {} runs after the first, {:.2} ms per run ({clock})",
            self.runs,
            total * 1e3 / runs
        )?;
        let calls = if self.clock == Clock::Host {
            "calls/run"
        } else {
            "dispatches/run"
        };
        writeln!(f, "{:<24} {calls:>14} {:>12} {:>7}", "op", "ms/run", "share")?;
        let mut ops = self.ops.clone();
        ops.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        for op in ops {
            writeln!(
                f,
                "{:<24} {:>14.0} {:>12.3} {:>6.1}%",
                op.name,
                op.calls as f64 / runs,
                op.seconds * 1e3 / runs,
                100.0 * op.seconds / total.max(1e-12)
            )?;
        }
        Ok(())
    }
}
