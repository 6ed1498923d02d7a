//! dopri5 on the GPU (`shaders/ode_dopri5.wgsl`, its backward passes in `_backward.wgsl`): all
//! blocks share one step size, so ONE workgroup integrates the whole state [blocks, d], its
//! vectors (state, the seven slopes, stage input) in a scratch buffer; the error norm is a
//! workgroup reduction finished by one thread in a fixed order, and the
//! controller (torchdiffeq's initial step, safety 0.9, growth ≤ 10, shrink ≥ 0.2, dense output) is
//! the CPU's in f32, t kept as an offset from the last position passed. An adaptive solve has an
//! unknown step count, so each kernel is a first chunk and a [`Repeat`]ed one that the backend runs
//! until the kernel's flag says done: each chunk runs at most a bounded number of units (an interval
//! start or a step attempt; a backprop step) under the loop budget, the controller handed over in a
//! scratch buffer, so time follows the attempts taken, not `max_steps`. A report pass writes the
//! status and the NaN rows. Backprop runs the forward again in the backward (same kernel, same
//! bits), taping each output's step and dense weights and every accepted step's (t0, dt, start) in
//! a tape that starts small and doubles when `record` says it is full, then walks the tape in
//! reverse with the step sizes held constant, as the CPU does; the adjoint integrates [p | a | g]
//! backward interval by interval, each with its own initial step, the norm the max of the RMS norms
//! of p, a and each θ tensor. Agreement with the CPU: ~1e-6 on the trajectory and ≤ 2e-5 on the
//! gradients with tanh on short solves; the f32 controller differs from the CPU's f64 one in its
//! roundings, so where the step sequence hinges on them (ReLU's kinks, long steps that amplify
//! rounding through dopri5's large coefficients) the two drift apart like torchdiffeq's f32 and
//! f64 solves (see the tests).

use super::{FlowGradient, ITERATIONS_PER_DISPATCH, OdeFlow, WORKGROUP};
use crate::kernel::{Repeat, eight_words, uniform, word};
use crate::ode::{Activation, Tolerance};
use crate::ops::{Arg, Dispatch, GpuKernels, grid};

/// The dopri5 kernels (`shaders/ode_dopri5.wgsl`), for their cost per unit of work.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Dopri5Kernel {
    /// The forward solve, or its recording in the backward.
    Solve,
    Record,
    Backprop,
    Adjoint,
}

/// Controller words of the dopri5 kernels: the solve's, backprop's walk from word 16, the repeat
/// flags at `FLAG` and `WALK_FLAG` (the shader's).
const DOPRI5_CONTROL: usize = 32;
const FLAG: usize = 24;
const WALK_FLAG: usize = 25;

/// Accepted steps backprop's tape holds at first (natively it doubles when full; the web cannot
/// grow it between chunks, so there it holds `max_steps`). The unit tests start it at 4, so that
/// every backprop solve in them grows it, most several times.
const FIRST_TAPE_STEPS: usize = if cfg!(test) { 4 } else { 256 };

uniform! {
    /// The uniform of `shaders/ode_dopri5.wgsl` (see its comments).
    pub(crate) struct Dopri5Uniform = ODE_DOPRI5 "Params" {
        blocks: u32,
        d: u32,
        k: u32,
        positions: u32,
        param_len: u32,
        relu: u32,
        max_steps: u32,
        adjoint: u32,
        len: u32,
        hidden_off: u32,
        chunk: u32,
        units: u32,
        delta: f32,
        rtol: f32,
        atol: f32,
        nan: f32,
        groups: u32,
        pad0: u32,
        pad1: u32,
        pad2: u32,
        bounds: [[u32; 4]; 2],
    }
}

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
    /// (and the adjoint's interval starts), each dispatch within [`ITERATIONS_PER_DISPATCH`]. The
    /// dispatches are a bound: the solve stops repeating them when it is done.
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
    fn dopri5_uniform(
        &self,
        tol: &Tolerance,
        blocks: usize,
        kernel: Dopri5Kernel,
        chunk: usize,
        units: usize,
    ) -> Dopri5Uniform {
        let n = blocks * self.dim;
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
        Dopri5Uniform {
            blocks: word(blocks),
            d: word(d),
            k: word(k),
            positions: word(self.grid.positions),
            param_len: word(self.param_len()),
            relu: (self.activation == Activation::Relu) as u32,
            max_steps: word(tol.max_steps),
            adjoint: adjoint as u32,
            len: word(self.dopri5_len(blocks, kernel)),
            hidden_off: word(self.dopri5_hidden_off(blocks, kernel)),
            chunk: word(chunk),
            units: word(units),
            delta: self.grid.delta as f32,
            rtol: tol.rtol as f32,
            atol: tol.atol as f32,
            nan: f32::NAN,
            groups: word(groups),
            pad0: 0,
            pad1: 0,
            pad2: 0,
            bounds: eight_words(&bounds, 0, 0),
        }
    }

    /// A kernel's chunks, one workgroup each: the first, which starts the solve, and one the
    /// backend repeats until the flag at word `flag` of the controller says done.
    fn dopri5_dispatches(
        &self,
        tol: &Tolerance,
        blocks: usize,
        kernel: Dopri5Kernel,
        entry: &'static str,
        args: &[Arg],
    ) -> Vec<Dispatch> {
        let (units, chunks) = self.dopri5_chunks(tol, blocks, kernel);
        let chunk = |c| {
            Dispatch::new(
                entry,
                &self.dopri5_uniform(tol, blocks, kernel, c, units),
                args.to_vec(),
                [1, 1, 1],
            )
        };
        let (flag, grows) = match kernel {
            Dopri5Kernel::Backprop => (WALK_FLAG, None),
            // The tape (scratch 2) of a backprop's recording.
            Dopri5Kernel::Record => (FLAG, Some(2)),
            _ => (FLAG, None),
        };
        vec![
            chunk(0),
            chunk(1).repeated(Repeat {
                max_runs: chunks - 1,
                flag: (1, flag),
                grows,
            }),
        ]
    }

    /// The tape's first length: each output's step and dense weights, and room for
    /// [`FIRST_TAPE_STEPS`] accepted steps of blocks·d floats and (t0, dt).
    fn dopri5_tape_len(&self, tol: &Tolerance, blocks: usize) -> usize {
        let steps = if cfg!(target_arch = "wasm32") {
            tol.max_steps
        } else {
            tol.max_steps.min(FIRST_TAPE_STEPS)
        };
        self.grid.positions * 8 + steps * (blocks * self.dim + 2)
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
        dispatches.push(Dispatch::new(
            "report",
            &self.dopri5_uniform(tol, blocks, solve, 0, 0),
            args.to_vec(),
            grid(self.grid.positions * blocks * self.dim, WORKGROUP),
        ));
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
                (d, Dopri5Kernel::Backprop, self.dopri5_tape_len(tol, blocks))
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
        // finish binds the backward's status where the others bind the trajectory (it reads
        // neither it nor θ): a ninth storage buffer would pass the common limit of eight.
        let mut finish_args = args.to_vec();
        finish_args[1] = Arg::Out(2);
        dispatches.push(Dispatch::new(
            "finish",
            &self.dopri5_uniform(tol, blocks, kernel, 0, 0),
            finish_args,
            grid(self.param_len().max(n), WORKGROUP),
        ));
        GpuKernels {
            // The vectors; the controller; backprop's tape (each output's step and dense weights,
            // each accepted step's t0, dt and start).
            scratch: vec![self.dopri5_vectors_len(blocks, kernel), DOPRI5_CONTROL, tape],
            dispatches,
        }
    }
}
