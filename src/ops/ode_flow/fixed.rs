//! Fixed-step methods on the GPU (`shaders/ode_flow.wgsl` and its continuations), d and hidden at
//! most [`MAX_DIM`](super::MAX_DIM). Two kernel families walk the solve, by adapter kind: on GPUs
//! one workgroup per row of the state (`ode_flow_groups.wgsl`: the MLP evaluated with
//! workgroup-shared vectors, four threads per output); on software adapters one workgroup per octet
//! of rows (`ode_flow_rows.wgsl`: eight rows in the lanes of a mat2x4, sixteen outputs per thread, so
//! loads serve several multiply-adds each where the GPU kernels' serve one — lavapipe loads every
//! element lane by lane, and loads are its cost). Then a one-thread pass writes the status.
//!
//! A long solve is split into a few dispatches of ~32k loop iterations per thread each (the state
//! handed over in a scratch buffer), because lavapipe silently stops every loop of a shader
//! invocation once all its loops together have run 65535 iterations (Mesa gallivm's
//! `LP_MAX_TGSI_LOOP_ITERATIONS`); e.g. d = 64 with rk4 runs ~60 steps per forward dispatch. The
//! backward: backprop recomputes every step's start from the trajectory (one state per step, as
//! the CPU reference stores) and walks the steps in reverse recomputing the stages; the adjoint
//! integrates [p | a] backward with memory independent of the number of steps. Neither touches dθ
//! while walking: each stage evaluation writes a record (the four vectors whose outer products are
//! its dθ terms) and `theta_from_records` sums a chunk's records after it (a thread per θ element
//! on GPUs, per 8 × 8 tile on software adapters), chunks and records in a fixed order:
//! deterministic, no atomics, and no pass over all of θ per stage.

use super::{FlowGradient, ITERATIONS_PER_DISPATCH, OdeFlow, WORKGROUP};
use crate::kernel::{AdapterKind, uniform, word};
use crate::ode::{Activation, Method};
use crate::ops::{Arg, Dispatch, GpuKernels, grid};

uniform! {
    /// The uniform of `shaders/ode_flow.wgsl`: the tableau (c, b, rows 1..3 of a) as f32 bits,
    /// the sizes, the steps `[begin, end)` the dispatch runs, the stage evaluations each quad's
    /// records hold, and whether `theta_from_records` adds to dθ.
    pub(crate) struct FlowUniform = ODE_FLOW "Params" {
        tab: [[u32; 4]; 5],
        blocks: u32,
        d: u32,
        k: u32,
        positions: u32,
        substeps: u32,
        stages: u32,
        relu: u32,
        param_len: u32,
        delta: f32,
        begin: u32,
        end: u32,
        capacity: u32,
        accumulate: u32,
    }
}

/// The kernels that walk the steps, for their cost per step.
#[derive(Clone, Copy)]
pub(super) enum StepKernel {
    Forward,
    Backprop,
    Adjoint,
}

/// Vectors of each octet's state on software adapters (`SLOTS` in `ode_flow_rows.wgsl`).
const ROWS_SLOTS: usize = 14;

/// The most f32s the records of one chunk may take (they are summed into dθ after each chunk):
/// 32 MiB, well inside every adapter's binding limit.
const MAX_RECORD_WORDS: usize = 8 << 20;

/// The walk kernels' entry point for the adapter kind: a workgroup per row on GPUs, per octet of
/// rows (`_rows`) on software adapters.
fn entry(kernel: &'static str, adapter: AdapterKind) -> &'static str {
    match (adapter, kernel) {
        (AdapterKind::Gpu, _) => kernel,
        (AdapterKind::Software, "forward") => "forward_rows",
        (AdapterKind::Software, "starts") => "starts_rows",
        (AdapterKind::Software, "backprop") => "backprop_rows",
        (AdapterKind::Software, "adjoint") => "adjoint_rows",
        (AdapterKind::Software, other) => unreachable!("no rows kernel for {other}"),
    }
}

impl OdeFlow {
    /// Workgroups of the walk kernels: one per row, or one per octet of rows.
    fn walk_groups(&self, blocks: usize, adapter: AdapterKind) -> [u32; 3] {
        let groups = match adapter {
            AdapterKind::Gpu => blocks,
            AdapterKind::Software => blocks.div_ceil(8),
        };
        grid(groups * WORKGROUP, WORKGROUP)
    }

    /// The walk kernels' state between dispatches (GPUs: `[blocks, d]` per vector carried) or
    /// their whole state (software adapters: every slot of every octet).
    fn state_len(&self, blocks: usize, adapter: AdapterKind, carried: usize) -> usize {
        match adapter {
            AdapterKind::Gpu => blocks * carried * self.dim,
            AdapterKind::Software => blocks.div_ceil(8) * ROWS_SLOTS * self.dim.max(self.hidden) * 8,
        }
    }

    /// The forward's dispatches: the solve in chunks of steps, then the report.
    pub(super) fn fixed_forward(&self, blocks: usize, adapter: AdapterKind) -> GpuKernels {
        let dispatch = |entry, steps, workgroups| {
            let args = vec![
                Arg::In(0),
                Arg::In(1),
                Arg::Out(0),
                Arg::Out(1),
                Arg::Scratch(0),
                Arg::Scratch(1),
            ];
            Dispatch::new(entry, &self.uniform(blocks, steps, 0, false), args, workgroups)
        };
        let walk = self.walk_groups(blocks, adapter);
        let dispatches = self
            .chunks(StepKernel::Forward, blocks, adapter)
            .into_iter()
            .map(|steps| dispatch(entry("forward", adapter), steps, walk))
            .chain([dispatch("report", (0, 0), [1, 1, 1])])
            .collect();
        GpuKernels {
            // The first non-finite position of each block, and the state between dispatches.
            scratch: vec![blocks, self.state_len(blocks, adapter, 1)],
            dispatches,
        }
    }

    /// The backward's dispatches: backprop's step starts then its reverse walk, or the adjoint's
    /// backward solve, each chunk of the walk followed by `theta_from_records`, which adds the
    /// chunk's dθ terms.
    pub(super) fn fixed_backward(&self, blocks: usize, adapter: AdapterKind) -> GpuKernels {
        let flow = self;
        let (d, params_len) = (flow.dim, flow.param_len());
        let args = vec![
            Arg::In(0),
            Arg::In(1),
            Arg::In(2),
            Arg::Out(0),
            Arg::Out(1),
            Arg::Scratch(0),
            Arg::Scratch(1),
            Arg::Scratch(2),
        ];
        // theta_from_records writes the backward's status where the others read the trajectory:
        // a ninth storage buffer would pass the common limit of eight.
        let mut reduce_args = args.clone();
        reduce_args[1] = Arg::Out(2);
        let walk = flow.walk_groups(blocks, adapter);
        let kernel = match flow.gradient {
            FlowGradient::Backprop => StepKernel::Backprop,
            FlowGradient::Adjoint => StepKernel::Adjoint,
        };
        let chunks = flow.chunks(kernel, blocks, adapter);
        let stages = flow.method.tableau().stages();
        let capacity = chunks
            .iter()
            .map(|(b, e)| (e - b) * stages)
            .max()
            .unwrap_or(0)
            .max(1);
        let uniform = |steps, accumulate| flow.uniform(blocks, steps, capacity, accumulate);
        let mut dispatches = Vec::new();
        let walk_order: Vec<(usize, usize)> = match flow.gradient {
            FlowGradient::Backprop => {
                // The step starts first; then the steps from the last, so the ranges in reverse.
                for steps in flow.chunks(StepKernel::Forward, blocks, adapter) {
                    let u = uniform(steps, false);
                    dispatches.push(Dispatch::new(entry("starts", adapter), &u, args.clone(), walk));
                }
                chunks.into_iter().rev().collect()
            }
            FlowGradient::Adjoint => chunks,
        };
        let name = match flow.gradient {
            FlowGradient::Backprop => "backprop",
            FlowGradient::Adjoint => "adjoint",
        };
        // GPUs: a thread per element of θ; software adapters: per 8 × 8 tile of its outer products.
        let (reduce, reduce_threads) = match adapter {
            AdapterKind::Gpu => ("theta_from_records", params_len),
            AdapterKind::Software => {
                let (d8, k8) = (d.div_ceil(8), flow.hidden.div_ceil(8));
                let tiles = k8 * (d + 2).div_ceil(8) + d8 * (flow.hidden + 2).div_ceil(8);
                ("theta_from_records_rows", tiles)
            }
        };
        for (n, steps) in walk_order.into_iter().enumerate() {
            let u = uniform(steps, n > 0);
            dispatches.push(Dispatch::new(entry(name, adapter), &u, args.clone(), walk));
            dispatches.push(Dispatch::new(
                reduce,
                &u,
                reduce_args.clone(),
                grid(reduce_threads, WORKGROUP),
            ));
        }
        let starts_len = match flow.gradient {
            FlowGradient::Backprop => flow.total_steps() * blocks * d,
            FlowGradient::Adjoint => 0,
        };
        GpuKernels {
            // The walk's state (GPUs: what is handed between dispatches); backprop's step starts
            // (one state per step, as the CPU's recording); the chunk's records.
            scratch: vec![
                flow.state_len(blocks, adapter, 2),
                starts_len.max(1),
                flow.record_words(blocks, capacity),
            ],
            dispatches,
        }
    }

    /// f32s of the records of `capacity` stage evaluations of every quad (`record_len` vec4s each).
    fn record_words(&self, blocks: usize, capacity: usize) -> usize {
        blocks.div_ceil(4) * capacity * self.record_len() * 4
    }

    /// vec4s of one record: U1 [k], V1 [d + 2], U2 [d], V2 [k + 2].
    fn record_len(&self) -> usize {
        2 * (self.dim + self.hidden + 2)
    }

    /// The shader's uniform for a dispatch that runs the steps `[begin, end)`.
    pub(super) fn uniform(
        &self,
        blocks: usize,
        (begin, end): (usize, usize),
        capacity: usize,
        accumulate: bool,
    ) -> FlowUniform {
        let mut tab = [[0u32; 4]; 5];
        let mut stages = 0;
        if let Method::Fixed { .. } = self.method {
            let t = self.method.tableau();
            stages = t.stages();
            for i in 0..stages {
                tab[0][i] = (t.c[i] as f32).to_bits();
                tab[1][i] = (t.b[i] as f32).to_bits();
                for (j, &a) in t.a[i].iter().enumerate() {
                    tab[1 + i][j] = (a as f32).to_bits();
                }
            }
        }
        FlowUniform {
            tab,
            blocks: word(blocks),
            d: word(self.dim),
            k: word(self.hidden),
            positions: word(self.grid.positions),
            substeps: word(self.substeps()),
            stages: word(stages),
            relu: (self.activation == Activation::Relu) as u32,
            param_len: word(self.param_len()),
            delta: self.grid.delta as f32,
            begin: word(begin),
            end: word(end),
            capacity: word(capacity),
            accumulate: accumulate as u32,
        }
    }

    /// Steps on the whole grid.
    pub(super) fn total_steps(&self) -> usize {
        (self.grid.positions - 1) * self.substeps()
    }

    /// The step ranges `[begin, end)` of a kernel's dispatches, in increasing order, each at most
    /// [`ITERATIONS_PER_DISPATCH`] loop iterations per thread by the shader's loop counts (one range,
    /// maybe empty, at least). The backward's chunks also keep their records within
    /// [`MAX_RECORD_WORDS`] and `theta_from_records`'s loop over them within the budget.
    pub(super) fn chunks(
        &self,
        kernel: StepKernel,
        blocks: usize,
        adapter: AdapterKind,
    ) -> Vec<(usize, usize)> {
        let (d, k) = (self.dim, self.hidden);
        let rows = |n: usize| n.div_ceil(WORKGROUP);
        // A product's outputs per thread: one per pass of 64 outputs on GPUs; in the rows kernels
        // sixteen, which d, k ≤ 256 make one block.
        let outs = |n: usize| match adapter {
            AdapterKind::Gpu => rows(n),
            AdapterKind::Software => 1,
        };
        let dot = |n: usize| match adapter {
            // Four threads share each output's terms (`ode_flow_groups.wgsl`).
            AdapterKind::Gpu => n.div_ceil(4) + 6,
            // One loop over the terms, then one over the sixteen outputs.
            AdapterKind::Software => n + 18,
        };
        let stages = self.method.tableau().stages();
        let eval = outs(k) * dot(d) + outs(d) * dot(k);
        let record = rows(k + 2) + rows(d + 2);
        let vjp = outs(k) * 2 * dot(d) + outs(d) * dot(k) + record;
        let eval_and_vjp = outs(k) * 2 * dot(d) + outs(d) * 2 * dot(k) + record;
        // Per element of the state and step, besides the stages: the update, and the rows kernels'
        // loops over eight rows to load, store and check it.
        let per_step = rows(d) * (stages + 24);
        let forward = stages * (eval + rows(d) * stages) + per_step;
        let (cost, evaluations) = match kernel {
            StepKernel::Forward => (forward, 0),
            StepKernel::Backprop => (
                forward + stages * (vjp + rows(d) * stages) + 3 * rows(d) * stages + per_step,
                stages,
            ),
            StepKernel::Adjoint => (
                stages * (eval_and_vjp + 2 * rows(d) * stages) + 2 * rows(d) * stages + per_step,
                stages,
            ),
        };
        let mut per_dispatch = ITERATIONS_PER_DISPATCH / cost;
        if evaluations > 0 {
            let quads = blocks.div_ceil(4);
            let record_words = quads * evaluations * self.record_len() * 4;
            per_dispatch = per_dispatch
                .min(MAX_RECORD_WORDS / record_words)
                .min(ITERATIONS_PER_DISPATCH / (quads * evaluations));
        }
        let per_dispatch = per_dispatch.max(1);
        let total = self.total_steps();
        let mut ranges: Vec<(usize, usize)> = (0..total)
            .step_by(per_dispatch)
            .map(|begin| (begin, (begin + per_dispatch).min(total)))
            .collect();
        if ranges.is_empty() {
            ranges.push((0, 0));
        }
        ranges
    }
}
