//! Fixed-step methods on the GPU (`shaders/ode_flow.wgsl`), d and hidden at most
//! [`MAX_DIM`](super::MAX_DIM):
//! one workgroup per block integrates positions × substeps × stages inside the kernel
//! (the MLP evaluated with workgroup-shared vectors), then a one-thread pass writes the status. A
//! long solve is split into a few dispatches of ~32k loop iterations per thread each (the state
//! handed over in a scratch buffer), because lavapipe silently stops every loop of a shader
//! invocation once all its loops together have run 65535 iterations (Mesa gallivm's
//! `LP_MAX_TGSI_LOOP_ITERATIONS`); e.g. d = 64 with rk4 runs ~60 steps per forward dispatch. The backward, per block:
//! backprop recomputes every step's start from the trajectory (one state per step, as the CPU
//! reference stores) and walks the steps in reverse recomputing the stages; the adjoint integrates
//! [p | a | g] backward with memory independent of the number of steps. Each block's dθ goes to its
//! own scratch row and a last pass sums the rows in block order: deterministic, no atomics.

use super::{FlowGradient, ITERATIONS_PER_DISPATCH, OdeFlow, WORKGROUP};
use crate::kernel::{uniform, word};
use crate::ode::{Activation, Method};
use crate::ops::{Arg, Dispatch, GpuKernels, grid};

uniform! {
    /// The uniform of `shaders/ode_flow.wgsl`: the tableau (c, b, rows 1..3 of a) as f32 bits,
    /// the sizes, and the steps `[begin, end)` the dispatch runs.
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
    }
}

/// The kernels that walk the steps, for their cost per step.
#[derive(Clone, Copy)]
pub(super) enum StepKernel {
    Forward,
    Backprop,
    Adjoint,
}

impl OdeFlow {
    /// The forward's dispatches: the solve in chunks of steps, then the report.
    pub(super) fn fixed_forward(&self, blocks: usize) -> GpuKernels {
        let dispatch = |entry, steps, workgroups| {
            let args = vec![
                Arg::In(0),
                Arg::In(1),
                Arg::Out(0),
                Arg::Out(1),
                Arg::Scratch(0),
                Arg::Scratch(1),
            ];
            Dispatch::new(entry, &self.uniform(blocks, steps), args, workgroups)
        };
        let one_per_block = grid(blocks * WORKGROUP, WORKGROUP);
        let dispatches = self
            .chunks(StepKernel::Forward)
            .into_iter()
            .map(|steps| dispatch("forward", steps, one_per_block))
            .chain([dispatch("report", (0, 0), [1, 1, 1])])
            .collect();
        GpuKernels {
            // The first non-finite position of each block, and the state between dispatches.
            scratch: vec![blocks, blocks * self.dim],
            dispatches,
        }
    }

    /// The backward's dispatches: backprop's step starts then its reverse walk, or the adjoint's
    /// backward solve; then the sum of the blocks' dθ rows.
    pub(super) fn fixed_backward(&self, blocks: usize) -> GpuKernels {
        let flow = self;
        let (d, params_len) = (flow.dim, flow.param_len());
        let args = [
            Arg::In(0),
            Arg::In(1),
            Arg::In(2),
            Arg::Out(0),
            Arg::Out(1),
            Arg::Scratch(0),
            Arg::Scratch(1),
            Arg::Scratch(2),
        ];
        let dispatch = |entry, steps, args: &[Arg], workgroups| {
            Dispatch::new(entry, &flow.uniform(blocks, steps), args.to_vec(), workgroups)
        };
        // reduce_theta writes the backward's status where the others read the trajectory: a
        // ninth storage buffer would pass the common limit of eight.
        let mut reduce_args = args;
        reduce_args[1] = Arg::Out(2);
        let one_per_block = grid(blocks * WORKGROUP, WORKGROUP);
        let walk = |entry, kernel| flow.chunks(kernel).into_iter().map(move |steps| (entry, steps));
        let steps: Vec<(&'static str, (usize, usize))> = match flow.gradient {
            // The step starts first; then the steps from the last, so the ranges in reverse.
            FlowGradient::Backprop => walk("starts", StepKernel::Forward)
                .chain(walk("backprop", StepKernel::Backprop).rev())
                .collect(),
            FlowGradient::Adjoint => walk("adjoint", StepKernel::Adjoint).collect(),
        };
        let dispatches = steps
            .into_iter()
            .map(|(entry, steps)| dispatch(entry, steps, &args, one_per_block))
            .chain([dispatch(
                "reduce_theta",
                (0, 0),
                &reduce_args,
                grid(params_len, WORKGROUP),
            )])
            .collect();
        let starts_len = flow.total_steps() * blocks * d;
        GpuKernels {
            // Per-block dθ rows; backprop's step starts (one state per step, as the CPU's
            // recording); the state handed between dispatches.
            scratch: vec![blocks * params_len, starts_len.max(1), blocks * 2 * d],
            dispatches,
        }
    }

    /// The shader's uniform for a dispatch that runs the steps `[begin, end)`.
    pub(super) fn uniform(&self, blocks: usize, (begin, end): (usize, usize)) -> FlowUniform {
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
        }
    }

    /// Steps on the whole grid.
    pub(super) fn total_steps(&self) -> usize {
        (self.grid.positions - 1) * self.substeps()
    }

    /// The step ranges `[begin, end)` of a kernel's dispatches, in increasing order, each at most
    /// [`ITERATIONS_PER_DISPATCH`] loop iterations per thread by the shader's loop counts (one range,
    /// maybe empty, at least).
    pub(super) fn chunks(&self, kernel: StepKernel) -> Vec<(usize, usize)> {
        let (d, k) = (self.dim, self.hidden);
        let rows = |n: usize| n.div_ceil(WORKGROUP);
        let stages = self.method.tableau().stages();
        let eval = rows(k) * (d + 2) + rows(d) * (k + 2);
        let vjp = rows(k) * (2 * d + 3) + rows(d) * (k + 2) + rows(self.param_len());
        let forward = stages * (eval + rows(d) * stages) + rows(d) * (stages + 2);
        let cost = match kernel {
            StepKernel::Forward => forward,
            StepKernel::Backprop => forward + stages * (vjp + rows(d) * stages) + 3 * rows(d) * stages,
            StepKernel::Adjoint => stages * (eval + vjp + 2 * rows(d) * stages) + 2 * rows(d) * stages,
        };
        let per_dispatch = (ITERATIONS_PER_DISPATCH / cost).max(1);
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
