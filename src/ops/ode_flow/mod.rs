//! FLOATER's position flow as a graph op: dp/dt = h(t, p; θ) solved from every block's initial
//! value at once, read at the positions t_i = i·Δ (see [`crate::ode`] for the dynamics, the θ layout
//! and the methods).
//!
//! Inputs: θ f32 `[param_len]` ([`FloaterDynamics`] layout) and p0 f32 `[blocks, d]`. Outputs: the
//! trajectory `[positions, blocks, d]` and a status f32 `[4]` = `[code, block, time, attempts]`
//! (dopri5's step attempts, 0 for fixed steps), because a kernel cannot return an error: the
//! graph asks every executor to check it after each run ([`check_status`]). Codes:
//! - [`STATUS_OK`] (block −1, time 0);
//! - [`STATUS_NON_FINITE`]: a non-finite state, first in `block` at the position time `time` (the
//!   earliest position whose state is not finite; the lowest such block). That block's rows are
//!   non-finite from that position on; other blocks are unaffected (fixed-step methods solve the
//!   blocks independently);
//! - [`STATUS_SOLVER_FAILED`] (dopri5): a non-finite state or the step limit, before the position
//!   time `time`; dopri5 shares its step size across blocks, so block is −1 and every row from
//!   that position on is NaN (and so are the gradients).
//!
//! Gradients ([`FlowGradient`]): backprop through the solver, or the continuous adjoint. Both read
//! the trajectory (no extra state is kept between the forward and the backward). The backward has
//! its own status, checked the same way: dopri5's adjoint solve can run out of steps where the
//! forward did not ([`STATUS_ADJOINT_FAILED`]; `time` is the position it was integrating back
//! from), and backprop replays the forward ([`STATUS_REPLAY_FAILED`]).
//!
//! The GPU kernels: fixed-step methods in `fixed.rs` (`shaders/ode_flow.wgsl`), dopri5 in
//! `dopri5.rs` (`shaders/ode_dopri5.wgsl` + `_backward`); each file's doc says how its kernels walk the solve.

mod dopri5;
mod fixed;
#[cfg(test)]
pub(crate) use dopri5::Dopri5Uniform;
#[cfg(test)]
pub(crate) use fixed::FlowUniform;
#[cfg(test)]
mod tests;

use std::ops::Range;

use rayon::prelude::*;

use super::{GpuKernels, In, Op, Out, VjpArgs};
use crate::arithmetic::Arithmetic;
use crate::error::{Error, Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::AdapterKind;
use crate::ode::{
    Activation, Dynamics, FloaterDynamics, Flow, Gradients, Grid, MIN_RTOL, Method, Progress, Tolerance,
};
use crate::tensor::{DType, TensorMeta, list_metas};

/// The largest d and hidden the GPU kernels hold (`MAX_DIM` in the shader: workgroup vectors).
pub const MAX_DIM: usize = 256;

/// Threads per workgroup (`WG` in the shader).
const WORKGROUP: usize = 64;

/// Loop iterations per thread that one dispatch aims at. Lavapipe (llvmpipe) silently stops a
/// shader invocation's loops after 65535 iterations of all its loops together, so longer solves
/// are split into dispatches of this much work (one step of the largest size, d = hidden = 256
/// with rk4's backprop, is about 29k).
const ITERATIONS_PER_DISPATCH: usize = 32_768;

/// Blocks whose adjoints one thread solves together on a fixed grid: a fixed number, so that the
/// gradient's sums do not depend on the number of threads.
const BACKWARD_GROUP: usize = 2;

/// Status codes (element 0 of the status output); see the module doc.
pub const STATUS_OK: f32 = 0.0;
/// A non-finite state: element 1 is the block, element 2 the position time.
pub const STATUS_NON_FINITE: f32 = 1.0;
/// dopri5 failed before the position time in element 2.
pub const STATUS_SOLVER_FAILED: f32 = 2.0;
/// The backward's adjoint solve failed integrating back from the position time in element 2.
pub const STATUS_ADJOINT_FAILED: f32 = 3.0;
/// The backward's replay of the forward solve (backprop) failed.
pub const STATUS_REPLAY_FAILED: f32 = 4.0;
/// Length of a status.
pub const STATUS_LEN: usize = 4;

/// How the backward computes d loss / d θ and d loss / d p0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowGradient {
    /// The exact gradient of the discrete solution (autograd through the solver).
    Backprop,
    /// The continuous adjoint, integrated backward with the forward method.
    Adjoint,
}

/// The flow op; see the module doc. `dim` = d, `hidden` = k of [`FloaterDynamics`].
#[derive(Clone, Copy, Debug)]
pub struct OdeFlow {
    pub dim: usize,
    pub hidden: usize,
    pub activation: Activation,
    pub grid: Grid,
    pub method: Method,
    pub gradient: FlowGradient,
}

/// One solve's outputs up to its first failure.
struct Solved {
    /// [reached positions, width]
    values: Vec<f32>,
    /// The first position whose state is not finite (or, dopri5, was not reached).
    failed_at: Option<usize>,
    /// dopri5's step attempts on the whole grid.
    attempts: usize,
}

impl Solved {
    /// Writes the rows `col..col + width` of every position of `traj` ([positions, row_len]), NaN
    /// from the failure on.
    fn write(&self, traj: &mut [f32], positions: usize, col: usize, width: usize, row_len: usize) {
        for i in 0..positions {
            let dst = &mut traj[i * row_len + col..i * row_len + col + width];
            match self.values.get(i * width..(i + 1) * width) {
                Some(src) => dst.copy_from_slice(src),
                None => dst.fill(f32::NAN),
            }
        }
    }
}

impl OdeFlow {
    pub fn dynamics(&self) -> FloaterDynamics {
        FloaterDynamics {
            dim: self.dim,
            hidden: self.hidden,
            activation: self.activation,
            arithmetic: Arithmetic::Native,
        }
    }

    /// Length of θ.
    pub fn param_len(&self) -> usize {
        self.dynamics().param_len()
    }

    fn flow<'a>(
        &self,
        dynamics: &'a FloaterDynamics,
        theta: &'a [f32],
        positions: usize,
    ) -> Flow<'a, FloaterDynamics> {
        Flow {
            dynamics,
            theta,
            grid: Grid {
                positions,
                ..self.grid
            },
            method: self.method,
        }
    }

    fn substeps(&self) -> usize {
        match self.method {
            Method::Fixed { substeps, .. } => substeps,
            Method::Dopri5(_) => 1,
        }
    }

    fn check_config(&self, op: &'static str) -> Result<()> {
        let (d, k) = (self.dim, self.hidden);
        if !(1..=MAX_DIM).contains(&d) || !(1..=MAX_DIM).contains(&k) {
            return shape_err(
                op,
                format!(
                    "needs d and hidden in 1..={MAX_DIM} (the GPU kernels' workgroup vectors), got d = {d}, hidden = {k}"
                ),
            );
        }
        let Grid { positions, delta } = self.grid;
        if positions == 0 || !(delta.is_finite() && delta > 0.0) {
            return shape_err(
                op,
                format!(
                    "needs at least one position and a positive delta, got {positions} positions with delta {delta}"
                ),
            );
        }
        match self.method {
            Method::Fixed { substeps: 0, .. } => shape_err(op, "needs at least 1 substep, got 0"),
            Method::Dopri5(Tolerance { rtol, atol, .. }) if !(rtol >= 0.0 && atol > 0.0) => shape_err(
                op,
                format!("dopri5 needs rtol >= 0 and atol > 0, got rtol {rtol}, atol {atol}"),
            ),
            Method::Dopri5(Tolerance { rtol, .. }) if rtol > 0.0 && rtol < MIN_RTOL => shape_err(
                op,
                format!(
                    "dopri5's rtol {rtol} is below what its f32 state resolves (relative precision \
                     1.2e-7); use rtol >= {MIN_RTOL}"
                ),
            ),
            _ => Ok(()),
        }
    }

    /// Solves `p0` ([rows, d]) through the grid; on failure, the outputs before it. Outputs do not
    /// depend on how many positions are asked for (a fixed grid; dopri5's steps ignore the output
    /// times), so the first failing position is found by bisection on the number of positions.
    fn solve_prefix(&self, dynamics: &FloaterDynamics, theta: &[f32], p0: &[f32]) -> Solved {
        let solve = |n: usize| self.flow(dynamics, theta, n).solve(p0).ok();
        let mut progress = Progress::default();
        let whole = self.flow(dynamics, theta, self.grid.positions);
        if let Ok(values) = whole.solve_tracked(p0, &mut progress) {
            return Solved {
                values,
                failed_at: None,
                attempts: progress.attempts,
            };
        }
        // solve(ok) succeeds (0: nothing to solve), solve(bad) fails.
        let (mut ok, mut bad, mut values) = (0, self.grid.positions, Vec::new());
        while bad - ok > 1 {
            let mid = (ok + bad) / 2;
            match solve(mid) {
                Some(v) => (ok, values) = (mid, v),
                None => bad = mid,
            }
        }
        Solved {
            values,
            failed_at: Some(ok),
            attempts: progress.attempts,
        }
    }

    /// Gradients of one problem (a block, or all blocks for dopri5) from its trajectory
    /// [positions, rows, d], or how far the backward's solve got when it failed.
    fn gradients(
        &self,
        dynamics: &FloaterDynamics,
        theta: &[f32],
        traj: &[f32],
        upstream: &[f32],
        progress: &mut Progress,
    ) -> Option<Gradients> {
        let flow = self.flow(dynamics, theta, self.grid.positions);
        match self.gradient {
            FlowGradient::Backprop => {
                let p0 = &traj[..traj.len() / self.grid.positions];
                let recording = flow.record_tracked(p0, progress);
                recording.and_then(|r| flow.backprop(&r, upstream)).ok()
            }
            FlowGradient::Adjoint => flow.adjoint_tracked(traj, upstream, progress).ok(),
        }
    }
}

impl Op for OdeFlow {
    fn name(&self) -> &'static str {
        "ode_flow"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        self.check_config(self.name())?;
        let (d, params) = (self.dim, self.param_len());
        let fits = inputs.len() == 2
            && inputs.iter().all(|m| m.dtype == DType::F32)
            && inputs[0].shape == [params]
            && inputs[1].rank() == 2
            && inputs[1].shape[0] > 0
            && inputs[1].shape[1] == d;
        if !fits {
            return shape_err(
                self.name(),
                format!(
                    "needs theta f32 [{params}] (d = {d}, hidden = {}) and p0 f32 [blocks, {d}], got {}",
                    self.hidden,
                    list_metas(inputs)
                ),
            );
        }
        let blocks = inputs[1].shape[0];
        Ok(vec![
            TensorMeta::f32(&[self.grid.positions, blocks, d]),
            TensorMeta::f32(&[STATUS_LEN]),
        ])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let theta = inputs[0].data;
        let (blocks, d) = (inputs[1].shape()[0], self.dim);
        let p0 = &inputs[1].data[..blocks * d];
        let dynamics = self.dynamics();
        let positions = self.grid.positions;
        let (traj, status) = outputs.split_at_mut(1);
        let traj = &mut traj[0].data[..positions * blocks * d];
        let mut attempts = 0;
        let failure = match self.method {
            // A fixed grid treats the blocks independently (row by row), so each is solved on its
            // own, in parallel, with the same values as one batched solve.
            Method::Fixed { .. } => {
                let solved: Vec<Solved> = p0
                    .par_chunks(d)
                    .map(|p0| self.solve_prefix(&dynamics, theta, p0))
                    .collect();
                for (b, s) in solved.iter().enumerate() {
                    s.write(traj, positions, b * d, d, blocks * d);
                }
                solved
                    .iter()
                    .enumerate()
                    .filter_map(|(b, s)| s.failed_at.map(|i| (i, b)))
                    .min()
                    .map(|(i, b)| [STATUS_NON_FINITE, b as f32, i as f32])
            }
            // dopri5 takes one step size for the whole state, as torchdiffeq does.
            Method::Dopri5(_) => {
                let s = self.solve_prefix(&dynamics, theta, p0);
                s.write(traj, positions, 0, blocks * d, blocks * d);
                attempts = s.attempts;
                s.failed_at.map(|i| [STATUS_SOLVER_FAILED, -1.0, i as f32])
            }
        };
        let out = match failure {
            Some([code, block, position]) => [code, block, position * self.grid.delta as f32],
            None => [STATUS_OK, -1.0, 0.0],
        };
        status[0].data[..3].copy_from_slice(&out);
        status[0].data[3] = attempts as f32;
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let blocks = inputs[1].shape[0];
        match self.method {
            Method::Fixed { .. } => self.fixed_forward(blocks, adapter),
            Method::Dopri5(tol) => self.dopri5_forward(&tol, blocks),
        }
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(upstream) = args.grads[0] else {
            return Ok(vec![None, None]);
        };
        let grads = g.apply(
            OdeFlowBackward { flow: *self },
            &[args.inputs[0], args.outputs[0], upstream],
        )?;
        g.check_after_run(grads[2], check_status);
        Ok(vec![Some(grads[0]), Some(grads[1])])
    }
}

/// d loss / d θ and d loss / d p0 of [`OdeFlow`] by its `gradient`, and the backward's status.
/// Inputs: θ, the trajectory (its position 0 is p0) and the upstream gradient
/// `[positions, blocks, d]`.
#[derive(Debug)]
struct OdeFlowBackward {
    flow: OdeFlow,
}

impl Op for OdeFlowBackward {
    fn name(&self) -> &'static str {
        "ode_flow_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let flow = &self.flow;
        flow.check_config(self.name())?;
        let (d, params, positions) = (flow.dim, flow.param_len(), flow.grid.positions);
        let fits = inputs.len() == 3
            && inputs.iter().all(|m| m.dtype == DType::F32)
            && inputs[0].shape == [params]
            && inputs[1].rank() == 3
            && inputs[1].shape[0] == positions
            && inputs[1].shape[1] > 0
            && inputs[1].shape[2] == d
            && inputs[2] == inputs[1];
        if !fits {
            return shape_err(
                self.name(),
                format!(
                    "needs theta f32 [{params}], trajectory and upstream f32 [{positions}, blocks, {d}], got {}",
                    list_metas(inputs)
                ),
            );
        }
        let blocks = inputs[1].shape[1];
        Ok(vec![
            TensorMeta::f32(&[params]),
            TensorMeta::f32(&[blocks, d]),
            TensorMeta::f32(&[STATUS_LEN]),
        ])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        self.cpu_in(Arithmetic::Native, inputs, outputs);
    }

    fn cpu_in(&self, arithmetic: Arithmetic, inputs: &[In], outputs: &mut [Out]) {
        let flow = &self.flow;
        let theta = inputs[0].data;
        let (positions, blocks, d) = (flow.grid.positions, inputs[1].shape()[1], flow.dim);
        let n = positions * blocks * d;
        let (traj, upstream) = (&inputs[1].data[..n], &inputs[2].data[..n]);
        let dynamics = FloaterDynamics {
            arithmetic,
            ..flow.dynamics()
        };
        // Fixed grids: the blocks in groups, in parallel (a group's rows share each pass over θ;
        // the rows do not interact, see OdeFlow::cpu); dopri5: all blocks at once.
        let per_group = match flow.method {
            Method::Fixed { .. } => BACKWARD_GROUP,
            Method::Dopri5(_) => blocks,
        };
        let groups: Vec<Range<usize>> = (0..blocks)
            .step_by(per_group)
            .map(|start| start..(start + per_group).min(blocks))
            .collect();
        let column = |data: &[f32], group: &Range<usize>| -> Vec<f32> {
            (0..positions)
                .flat_map(|i| &data[(i * blocks + group.start) * d..(i * blocks + group.end) * d])
                .copied()
                .collect()
        };
        let grads: Vec<(Option<Gradients>, Progress)> = groups
            .par_iter()
            .map(|group| {
                let mut progress = Progress::default();
                let g = flow.gradients(
                    &dynamics,
                    theta,
                    &column(traj, group),
                    &column(upstream, group),
                    &mut progress,
                );
                (g, progress)
            })
            .collect();
        // A fixed grid cannot run out of steps: its backward reports ok, as the forward does for
        // what it checked (non-finite gradients come from a non-finite forward).
        let status = match (flow.method, &grads[..]) {
            (Method::Dopri5(_), [(None, progress)]) => {
                let code = match flow.gradient {
                    FlowGradient::Adjoint => STATUS_ADJOINT_FAILED,
                    FlowGradient::Backprop => STATUS_REPLAY_FAILED,
                };
                let time = progress.position as f32 * flow.grid.delta as f32;
                [code, -1.0, time, progress.attempts as f32]
            }
            (Method::Dopri5(_), [(Some(_), progress)]) => [STATUS_OK, -1.0, 0.0, progress.attempts as f32],
            _ => [STATUS_OK, -1.0, 0.0, 0.0],
        };
        let [dtheta, dp0, status_out] = outputs else {
            unreachable!("infer gives ode_flow_backward three outputs")
        };
        status_out.data[..STATUS_LEN].copy_from_slice(&status);
        let dtheta = &mut dtheta.data[..theta.len()];
        let dp0 = &mut dp0.data[..blocks * d];
        dtheta.fill(0.0);
        for ((g, _), group) in grads.iter().zip(&groups) {
            let dp0 = &mut dp0[group.start * d..group.end * d];
            match g {
                Some(g) => {
                    dtheta.iter_mut().zip(&g.theta).for_each(|(s, v)| *s += v);
                    dp0.copy_from_slice(&g.p0);
                }
                None => {
                    dtheta.fill(f32::NAN);
                    dp0.fill(f32::NAN);
                }
            }
        }
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let blocks = inputs[1].shape[1];
        match self.flow.method {
            Method::Fixed { .. } => self.flow.fixed_backward(blocks, adapter),
            Method::Dopri5(tol) => self.flow.dopri5_backward(&tol, blocks),
        }
    }
}

/// Turns a status of [`Graph::ode_flow`] or of its backward into an error that names the pass
/// that failed, where, and after how many step attempts.
pub fn check_status(status: &[f32]) -> Result<()> {
    let &[code, block, time, attempts] = status else {
        return Err(Error::Input(format!(
            "ode_flow: a status has {STATUS_LEN} values, got {}",
            status.len()
        )));
    };
    let why = "a non-finite state, or max_steps reached";
    // Position times are i·Δ in f32: 0.42999998 reads as 0.43.
    let time = (f64::from(time) * 1e6).round() / 1e6;
    if code == STATUS_OK {
        Ok(())
    } else if code == STATUS_NON_FINITE {
        Err(Error::Training(format!(
            "ode_flow: non-finite state in block {block} by t = {time} (its first non-finite position)"
        )))
    } else if code == STATUS_SOLVER_FAILED {
        Err(Error::Training(format!(
            "ode_flow: dopri5's forward solve failed before t = {time} after {attempts} step attempts ({why})"
        )))
    } else if code == STATUS_ADJOINT_FAILED {
        Err(Error::Training(format!(
            "ode_flow: dopri5's adjoint solve (the backward pass) failed integrating back from t = {time} \
             after {attempts} step attempts ({why}); the adjoint often needs more steps than the forward: \
             raise max_steps, or use gradient = \"backprop\""
        )))
    } else if code == STATUS_REPLAY_FAILED {
        Err(Error::Training(format!(
            "ode_flow: dopri5's replay of the forward solve (the backward pass, backprop) failed after \
             {attempts} step attempts ({why})"
        )))
    } else {
        Err(Error::Input(format!("ode_flow: unknown status code {code}")))
    }
}

impl Graph {
    /// Solves the flow for every block: returns (trajectory `[positions, blocks, d]`, status `[3]`).
    /// Check the status after each run with [`check_status`].
    pub fn ode_flow(&mut self, flow: OdeFlow, theta: TensorId, p0: TensorId) -> Result<(TensorId, TensorId)> {
        let out = self.apply(flow, &[theta, p0])?;
        self.check_after_run(out[1], check_status);
        Ok((out[0], out[1]))
    }
}
