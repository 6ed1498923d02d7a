//! Where a compiled program's time goes, per op kind, over its runs: what `POSFLOW_PROFILE=1`
//! prints when the program is dropped. The CPU backend times each op on the host; the GPU backend
//! times each dispatch with timestamp queries where the adapter has them, and otherwise submits
//! each dispatch alone and waits for it (which adds the submission's latency to every one). The
//! first run of a program is left out: drivers compile shaders at first use (lavapipe's first
//! training step takes twice as long as the next), and caches are cold.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::graph::Op;
use crate::tensor::TensorMeta;

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

/// What one execution of an op does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    /// Floating-point operations of its products ([`Op::flops`]); `None` for an op whose cost is
    /// its memory traffic.
    pub flops: Option<u64>,
    /// Bytes of its inputs and outputs: what it reads and writes at the least.
    pub bytes: u64,
}

impl Work {
    /// The work of `op` on tensors of these shapes.
    pub fn of(op: &dyn Op, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> Work {
        // Every element type posflow keeps (f32, i32, u32) is 4 bytes.
        let bytes = inputs.iter().chain(outputs).map(|m| m.numel() as u64 * 4).sum();
        Work {
            flops: op.flops(inputs, outputs),
            bytes,
        }
    }
}

/// One op kind's share of the runs.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    pub name: &'static str,
    /// Kernel dispatches (GPU) or op executions (CPU) over all runs.
    pub calls: usize,
    pub seconds: f64,
    /// Its work over all runs ([`Profile::count`]): flops `None` where any execution's are.
    pub work: Work,
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
        let op = self.op(name);
        op.calls += 1;
        op.seconds += seconds;
    }

    /// Adds one execution's `work` to op kind `name` in the current run (nothing in the first).
    /// Counted apart from [`Profile::record`], which a GPU calls once per dispatch.
    pub fn count(&mut self, name: &'static str, work: Work) {
        if self.started <= 1 {
            return;
        }
        let op = self.op(name);
        op.work.flops = op.work.flops.zip(work.flops).map(|(a, b)| a + b);
        op.work.bytes += work.bytes;
    }

    fn op(&mut self, name: &'static str) -> &mut OpTime {
        let i = match self.ops.iter().position(|op| op.name == name) {
            Some(i) => i,
            None => {
                // Flops counted from 0 until an execution counts none.
                self.ops.push(OpTime {
                    name,
                    calls: 0,
                    seconds: 0.0,
                    work: Work {
                        flops: Some(0),
                        bytes: 0,
                    },
                });
                self.ops.len() - 1
            }
        };
        &mut self.ops[i]
    }

    /// Floating-point operations per run of the ops that count theirs.
    pub fn flops_per_run(&self) -> f64 {
        self.ops.iter().filter_map(|op| op.work.flops).sum::<u64>() as f64 / self.runs.max(1) as f64
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
        let flops = self.flops_per_run();
        writeln!(
            f,
            "POSFLOW_PROFILE: {} runs after the first, {:.2} ms per run ({clock}); {:.3} GFLOP per \
             run in products, {:.1} GFLOP/s over the run",
            self.runs,
            total * 1e3 / runs,
            flops * 1e-9,
            flops * 1e-9 / (total / runs).max(1e-12)
        )?;
        let calls = if self.clock == Clock::Host {
            "calls/run"
        } else {
            "dispatches/run"
        };
        writeln!(
            f,
            "{:<24} {calls:>14} {:>12} {:>7} {:>12} {:>9} {:>9}",
            "op", "ms/run", "share", "MFLOP/run", "GFLOP/s", "GB/s"
        )?;
        let mut ops = self.ops.clone();
        ops.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        for op in ops {
            let seconds = op.seconds.max(1e-12);
            let (mflop, gflops) = match op.work.flops {
                Some(n) => (
                    format!("{:.1}", n as f64 * 1e-6 / runs),
                    format!("{:.1}", n as f64 * 1e-9 / seconds),
                ),
                None => ("—".into(), "—".into()),
            };
            writeln!(
                f,
                "{:<24} {:>14.0} {:>12.3} {:>6.1}% {mflop:>12} {gflops:>9} {:>9.1}",
                op.name,
                op.calls as f64 / runs,
                op.seconds * 1e3 / runs,
                100.0 * op.seconds / total.max(1e-12),
                op.work.bytes as f64 * 1e-9 / seconds
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Clock, Profile, Work};

    fn work(flops: Option<u64>, bytes: u64) -> Work {
        Work { flops, bytes }
    }

    #[test]
    fn work_is_summed_per_op_kind_over_the_runs_after_the_first() {
        let mut p = Profile::new(Clock::Host);
        for _ in 0..3 {
            p.start_run();
            for (name, w) in [
                ("matmul", work(Some(1_000_000), 400)),
                ("matmul", work(Some(2_000_000), 600)),
                ("add", work(None, 1_200)),
            ] {
                p.record(name, 1e-3);
                p.count(name, w);
            }
        }
        assert_eq!(p.runs, 2);
        let matmul = &p.ops[0];
        assert_eq!((matmul.calls, matmul.work), (4, work(Some(6_000_000), 2_000)));
        let add = &p.ops[1];
        assert_eq!((add.calls, add.work), (2, work(None, 2_400)));
        assert_eq!(p.flops_per_run(), 3e6);
        // 3 MFLOP a run in 2 ms of products: 1.5 GFLOP/s; the add moves 1,200 bytes a ms.
        let table = p.to_string();
        let row = |name: &str| -> Vec<&str> {
            let line = table.lines().find(|l| l.starts_with(name)).unwrap();
            line.split_whitespace().collect()
        };
        assert_eq!(row("matmul")[4..], ["3.0", "1.5", "0.0"], "{table}");
        assert_eq!(row("add")[4..], ["—", "—", "0.0"], "{table}");
    }

    #[test]
    fn an_op_kind_with_an_uncounted_execution_has_no_flops() {
        let mut p = Profile::new(Clock::Host);
        p.start_run();
        p.start_run();
        p.count("ode_flow", work(Some(10), 4));
        p.count("ode_flow", work(None, 4));
        p.count("ode_flow", work(Some(10), 4));
        assert_eq!(p.ops[0].work, work(None, 12));
    }
}
