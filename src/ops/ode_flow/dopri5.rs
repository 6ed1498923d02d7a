//! dopri5 on the GPU (`shaders/ode_dopri5.wgsl`): all blocks share one step size, so ONE
//! workgroup integrates the whole state [blocks, d], its vectors (state, the seven slopes, stage input) in a scratch
//! buffer; the error norm is a workgroup reduction finished by one thread in a fixed order, and the
//! controller (torchdiffeq's initial step, safety 0.9, growth ≤ 10, shrink ≥ 0.2, dense output) is
//! the CPU's in f32, t kept as an offset from the last position passed. An adaptive solve has an
//! unknown step count, so each kernel is a fixed number of dispatches sized from `max_steps`, each
//! running at most a bounded number of units (an interval start or a step attempt; a backprop
//! step) under the loop budget, the controller handed over in a scratch buffer; chunks after the
//! end return at once. A report pass writes the status and the NaN rows. Backprop runs the forward
//! again in the backward (same kernel, same bits), taping every accepted step's (t0, dt, start) and
//! each output's step and dense weights (`max_steps` × blocks·d floats), then walks the tape in
//! reverse with the step sizes held constant, as the CPU does; the adjoint integrates [p | a | g]
//! backward interval by interval, each with its own initial step, the norm the max of the RMS norms
//! of p, a and each θ tensor. Agreement with the CPU: ~1e-6 on the trajectory and ≤ 2e-5 on the
//! gradients with tanh on short solves; the f32 controller differs from the CPU's f64 one in its
//! roundings, so where the step sequence hinges on them (ReLU's kinks, long steps that amplify
//! rounding through dopri5's large coefficients) the two drift apart like torchdiffeq's f32 and
//! f64 solves (see the tests).

use super::{FlowGradient, ITERATIONS_PER_DISPATCH, OdeFlow, WORKGROUP};
use crate::ode::{Activation, Tolerance};
use crate::ops::{Arg, Dispatch, GpuKernels, Params, grid};
use crate::shaders;

/// The dopri5 kernels (`shaders/ode_dopri5.wgsl`), for their cost per unit of work.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Dopri5Kernel {
    /// The forward solve, or its recording in the backward.
    Solve,
    Record,
    Backprop,
    Adjoint,
}

/// Controller words of the dopri5 kernels (the solve's, then backprop's walk from word 16).
const DOPRI5_CONTROL: usize = 32;

/// dopri5 on the GPU: one workgroup integrates every block (they share the step size), its vectors
/// in a scratch buffer; the solve is split into a fixed number of chunks sized from `max_steps`.
impl OdeFlow {
    /// The state length: blocks·d, or the adjoint's [p | a | g].
    fn dopri5_len(&self, blocks: usize, kernel: Dopri5Kernel) -> usize {
        let n = blocks * self.dim;
        match kernel {
            Dopri5Kernel::Adjoint => 2 * n + self.param_len(),
            _ => n,
        }
    }

    /// Where the hidden activations start in the vector buffer: after 10 slots (26 for backprop's
    /// stage inputs and adjoints; the recording shares backprop's layout).
    fn dopri5_hidden_off(&self, blocks: usize, kernel: Dopri5Kernel) -> usize {
        let slots = match kernel {
            Dopri5Kernel::Record | Dopri5Kernel::Backprop => 26,
            _ => 10,
        };
        slots * self.dopri5_len(blocks, kernel)
    }

    /// The vector buffer's length: the slots, hidden activations and their adjoints, backprop's dθ.
    fn dopri5_vectors_len(&self, blocks: usize, kernel: Dopri5Kernel) -> usize {
        self.dopri5_hidden_off(blocks, kernel) + 2 * blocks * self.hidden + self.param_len()
    }

    /// Loop iterations per thread of one unit of work (an interval start or a step attempt; a
    /// backprop step) and of the outputs one dispatch may write, by the shader's loop counts.
    fn dopri5_cost(&self, blocks: usize, kernel: Dopri5Kernel) -> (usize, usize) {
        let (d, k, params) = (self.dim, self.hidden, self.param_len());
        let rows = |n: usize| n.div_ceil(WORKGROUP) + 1;
        let (n, len) = (blocks * d, self.dopri5_len(blocks, kernel));
        let eval = rows(blocks * k) * (d + 1) + rows(n) * (k + 1);
        let vjp = rows(blocks * k) * (2 * d + 2) + rows(n) * (k + 1) + rows(params) * (blocks + 1);
        let field = eval + if kernel == Dopri5Kernel::Adjoint { vjp } else { 0 };
        let groups = if kernel == Dopri5Kernel::Adjoint { 6 } else { 1 };
        let norm = rows(len) + groups * (WORKGROUP + 2);
        let finite = rows(len) + WORKGROUP;
        let attempt = 6 * (field + rows(len)) + 3 * rows(len) + finite + norm;
        let start = 2 * field + 3 * norm + finite + rows(len);
        let positions = self.grid.positions;
        match kernel {
            Dopri5Kernel::Backprop => (
                7 * (eval + vjp + 4 * rows(n)) + 4 * rows(n),
                positions * (rows(n) + 4),
            ),
            // The adjoint ends one interval per output.
            Dopri5Kernel::Adjoint => (attempt.max(start) + 4 * rows(len), 0),
            _ => (attempt.max(start) + rows(len), positions * (3 * rows(len) + 4)),
        }
    }

    /// (units per dispatch, dispatches) of a kernel: enough units for `max_steps` step attempts
    /// (and the adjoint's interval starts), each dispatch within [`ITERATIONS_PER_DISPATCH`].
    pub(super) fn dopri5_chunks(
        &self,
        tol: &Tolerance,
        blocks: usize,
        kernel: Dopri5Kernel,
    ) -> (usize, usize) {
        let (unit, outputs) = self.dopri5_cost(blocks, kernel);
        let per_dispatch = (ITERATIONS_PER_DISPATCH.saturating_sub(outputs) / unit).max(1);
        let units = match kernel {
            // The start, the attempts, and the one that finds the limit reached.
            Dopri5Kernel::Solve | Dopri5Kernel::Record => tol.max_steps + 2,
            Dopri5Kernel::Adjoint => tol.max_steps + self.grid.positions + 1,
            Dopri5Kernel::Backprop => tol.max_steps.max(1),
        };
        (per_dispatch, units.div_ceil(per_dispatch))
    }

    /// The uniform of `shaders/ode_dopri5.wgsl`.
    fn dopri5_params(
        &self,
        tol: &Tolerance,
        blocks: usize,
        kernel: Dopri5Kernel,
        chunk: usize,
        units: usize,
    ) -> Vec<u32> {
        let n = blocks * self.dim;
        let len = self.dopri5_len(blocks, kernel);
        let adjoint = kernel == Dopri5Kernel::Adjoint;
        // Norm groups: the state; or p, a and each θ tensor (w1, b1, w2, b2).
        let (d, k) = (self.dim, self.hidden);
        let mut bounds = vec![0, n];
        if adjoint {
            for width in [n, k * (d + 1), k, d * (k + 1), d] {
                bounds.push(bounds.last().unwrap() + width);
            }
        }
        let groups = bounds.len() - 1;
        bounds.resize(8, 0);
        bounds
            .into_iter()
            .fold(
                Params::new()
                    .u(blocks)
                    .u(d)
                    .u(k)
                    .u(self.grid.positions)
                    .u(self.param_len())
                    .u((self.activation == Activation::Relu) as usize)
                    .u(tol.max_steps)
                    .u(adjoint as usize)
                    .u(len)
                    .u(self.dopri5_hidden_off(blocks, kernel))
                    .u(chunk)
                    .u(units)
                    .f(self.grid.delta as f32)
                    .f(tol.rtol as f32)
                    .f(tol.atol as f32)
                    .f(f32::NAN)
                    .u(groups)
                    .u(0)
                    .u(0)
                    .u(0),
                |p, b| p.u(b),
            )
            .words()
    }

    /// A kernel's chunks, one workgroup each.
    fn dopri5_dispatches(
        &self,
        tol: &Tolerance,
        blocks: usize,
        kernel: Dopri5Kernel,
        entry: &'static str,
        args: &[Arg],
    ) -> Vec<Dispatch> {
        let (units, chunks) = self.dopri5_chunks(tol, blocks, kernel);
        (0..chunks)
            .map(|chunk| Dispatch {
                shader: &shaders::ODE_DOPRI5,
                entry,
                params: self.dopri5_params(tol, blocks, kernel, chunk, units),
                args: args.to_vec(),
                workgroups: [1, 1, 1],
            })
            .collect()
    }

    pub(super) fn dopri5_forward(&self, tol: &Tolerance, blocks: usize) -> GpuKernels {
        let args = [
            Arg::In(0),
            Arg::In(1),
            Arg::Out(0),
            Arg::Out(1),
            Arg::Scratch(0),
            Arg::Scratch(1),
        ];
        let solve = Dopri5Kernel::Solve;
        let mut dispatches = self.dopri5_dispatches(tol, blocks, solve, "forward", &args);
        dispatches.push(Dispatch {
            shader: &shaders::ODE_DOPRI5,
            entry: "report",
            params: self.dopri5_params(tol, blocks, solve, 0, 0),
            args: args.to_vec(),
            workgroups: grid(self.grid.positions * blocks * self.dim, WORKGROUP),
        });
        GpuKernels {
            // The vectors; the controller.
            scratch: vec![self.dopri5_vectors_len(blocks, solve), DOPRI5_CONTROL],
            dispatches,
        }
    }

    pub(super) fn dopri5_backward(&self, tol: &Tolerance, blocks: usize) -> GpuKernels {
        let args = [
            Arg::In(0),
            Arg::In(1),
            Arg::In(2),
            Arg::Out(0),
            Arg::Scratch(0),
            Arg::Scratch(1),
            Arg::Out(1),
            Arg::Scratch(2),
        ];
        let n = blocks * self.dim;
        let (mut dispatches, kernel, tape) = match self.gradient {
            // The forward again, keeping every accepted step; then the steps in reverse.
            FlowGradient::Backprop => {
                let mut d = self.dopri5_dispatches(tol, blocks, Dopri5Kernel::Record, "record", &args);
                d.extend(self.dopri5_dispatches(tol, blocks, Dopri5Kernel::Backprop, "backprop", &args));
                let tape = tol.max_steps * (n + 2) + self.grid.positions * 8;
                (d, Dopri5Kernel::Backprop, tape)
            }
            FlowGradient::Adjoint => {
                let kernel = Dopri5Kernel::Adjoint;
                (
                    self.dopri5_dispatches(tol, blocks, kernel, "adjoint", &args),
                    kernel,
                    1,
                )
            }
        };
        dispatches.push(Dispatch {
            shader: &shaders::ODE_DOPRI5,
            entry: "finish",
            params: self.dopri5_params(tol, blocks, kernel, 0, 0),
            args: args.to_vec(),
            workgroups: grid(self.param_len().max(n), WORKGROUP),
        });
        GpuKernels {
            // The vectors; the controller; backprop's tape (each accepted step's t0, dt and start,
            // each output's step and dense weights).
            scratch: vec![self.dopri5_vectors_len(blocks, kernel), DOPRI5_CONTROL, tape],
            dispatches,
        }
    }
}
