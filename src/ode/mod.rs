//! ODE solvers for FLOATER's position encodings, on the CPU: the reference the GPU kernels are
//! tested against.
//!
//! FLOATER solves dp/dt = h(t, p; θ) from a per-block initial value p(0) and reads the encodings at
//! t_i = i·Δ. [`Flow`] does that for all blocks at once (state [blocks, d], f32) and gives the
//! gradients of a loss Σᵢ ⟨upstream_i, p(t_i)⟩ with respect to θ and p(0) two ways:
//!
//! - [`Flow::record`] + [`Flow::backprop`]: backprop through the solver, the exact gradient of the
//!   discrete solution (torch autograd through `odeint`), recomputing each step's stages from its
//!   start state; memory is one state per step.
//! - [`Flow::adjoint`]: the continuous adjoint (torchdiffeq's `odeint_adjoint`), integrated backward
//!   from the trajectory alone; memory does not grow with the number of steps.
//!
//! The methods follow torchdiffeq 0.2.5 (`tests/reference/gen_ode.py` produces the reference
//! values): `euler`, `midpoint`, `rk4` (Kutta's 3/8 rule) on a fixed grid of `substeps` steps per
//! interval, and `dopri5` with torchdiffeq's initial step, controller (safety 0.9, growth ≤ 10,
//! shrink ≥ 0.2, RMS error norm) and dense output (steps run past output times; outputs are
//! interpolated). The adjoint uses the forward method and tolerances backward, restarts the state
//! from the forward trajectory at every output time, and (dopri5) measures its error as the max
//! of the RMS norms of the state, the adjoint and each parameter tensor, as torchdiffeq does.
//! Times and the step-size controller are f64; state, stages and gradients are f32 (as on the GPU).
//!
//! Agreement with torchdiffeq (float64) measured on the committed cases, as
//! max |posflow − torch| / max(1, |torch|):
//!
//! | method                      | trajectory | backprop grads | adjoint grads |
//! |-----------------------------|------------|----------------|---------------|
//! | euler, midpoint, rk4        | ≤ 4.2e-7   | ≤ 5.3e-7       | ≤ 3.7e-7      |
//! | dopri5, tanh, rtol 1e-5     | 2.5e-6     | 7.2e-6         | 4.9e-6        |
//! | dopri5, ReLU, rtol 1e-5     | 3.2e-4     | 9.4e-2         | 7.7e-4        |
//!
//! ReLU's kinks defeat dopri5's error estimate (torchdiffeq's own f32 and f64 solutions differ by
//! 3.4e-4 there), so tiny rounding differences change the step sequence; use a fixed-step method
//! with ReLU, as FLOATER does. Two deliberate differences from torchdiffeq: every step size is a
//! constant for backprop (torch differentiates dopri5's first step size, a function of p(0) and θ,
//! but no later one; the reference script passes that first step in precomputed), and
//! [`Tolerance::max_steps`] bounds a whole solve rather than each output interval.

mod adjoint;
mod backprop;
mod dynamics;
mod field;
mod integrate;
mod tableau;
#[cfg(test)]
mod tests;

pub use dynamics::{Activation, Dynamics, FloaterDynamics};

use crate::error::{Error, Result};
use field::StateField;
use integrate::{Tape, integrate};
use tableau::Tableau;

/// The output times t_i = i·delta, i = 0..positions.
#[derive(Clone, Copy, Debug)]
pub struct Grid {
    pub positions: usize,
    pub delta: f64,
}

impl Grid {
    pub fn times(&self) -> Vec<f64> {
        (0..self.positions).map(|i| i as f64 * self.delta).collect()
    }
}

/// Fixed-step schemes, as torchdiffeq's methods of the same names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Euler,
    Midpoint,
    /// torchdiffeq's `rk4`: Kutta's 3/8 rule (`rk4_alt_step_func`), not the classic tableau.
    Rk4,
}

/// dopri5's tolerances: a step is accepted when the RMS of err / (atol + rtol·|z|) is at most 1.
/// The tightest relative tolerance an f32 solve can meet (a few ulps of its state): tighter, the
/// error estimate is rounding noise that no step size brings under the tolerance, and the solver
/// shrinks its steps until `max_steps` runs out.
pub const MIN_RTOL: f64 = 1e-6;

#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
    /// Step attempts (accepted or rejected) allowed in one solve: the forward solve, or the whole
    /// adjoint pass. Past it the solve fails, naming the time reached.
    pub max_steps: usize,
}

#[derive(Clone, Copy, Debug)]
pub enum Method {
    /// `substeps` equal steps inside each interval [t_i, t_i+1].
    Fixed {
        scheme: Scheme,
        substeps: usize,
    },
    Dopri5(Tolerance),
}

impl Method {
    pub fn name(&self) -> &'static str {
        match self {
            Method::Fixed {
                scheme: Scheme::Euler,
                ..
            } => "euler",
            Method::Fixed {
                scheme: Scheme::Midpoint,
                ..
            } => "midpoint",
            Method::Fixed {
                scheme: Scheme::Rk4, ..
            } => "rk4",
            Method::Dopri5(_) => "dopri5",
        }
    }

    pub(crate) fn tableau(&self) -> &'static Tableau {
        match self {
            Method::Fixed {
                scheme: Scheme::Euler,
                ..
            } => &tableau::EULER,
            Method::Fixed {
                scheme: Scheme::Midpoint,
                ..
            } => &tableau::MIDPOINT,
            Method::Fixed {
                scheme: Scheme::Rk4, ..
            } => &tableau::RK4_THREE_EIGHTHS,
            Method::Dopri5(_) => &tableau::DOPRI5,
        }
    }
}

/// d loss / d θ (in θ's layout) and d loss / d p(0) ([blocks, d]).
#[derive(Clone, Debug)]
pub struct Gradients {
    pub theta: Vec<f32>,
    pub p0: Vec<f32>,
}

/// A solve's trajectory and what backprop through the solver needs to differentiate it.
pub struct Recording {
    /// [positions, blocks, d]
    pub trajectory: Vec<f32>,
    tape: Tape,
}

/// The initial value problem dp/dt = h(t, p; θ) for every block, solved through `grid`.
pub struct Flow<'a, D> {
    pub dynamics: &'a D,
    pub theta: &'a [f32],
    pub grid: Grid,
    pub method: Method,
}

/// How far a solve got, for the error a failed one reports: dopri5's step attempts (accepted or
/// not; 0 for fixed steps), and the position the adjoint was integrating back from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub attempts: usize,
    pub position: usize,
}

impl<D: Dynamics> Flow<'_, D> {
    /// The trajectory [positions, blocks, d] from p0 = [blocks, d].
    pub fn solve(&self, p0: &[f32]) -> Result<Vec<f32>> {
        self.solve_tracked(p0, &mut Progress::default())
    }

    /// [`Flow::solve`], counting its attempts in `progress`.
    pub fn solve_tracked(&self, p0: &[f32], progress: &mut Progress) -> Result<Vec<f32>> {
        self.check(p0)?;
        let theta = self.dynamics.prepare(self.theta);
        integrate(
            &mut self.field(&theta, p0.len()),
            &self.method,
            &self.grid.times(),
            p0,
            None,
            &mut progress.attempts,
        )
    }

    /// Solves and keeps each step's start state for [`Flow::backprop`].
    pub fn record(&self, p0: &[f32]) -> Result<Recording> {
        self.record_tracked(p0, &mut Progress::default())
    }

    /// [`Flow::record`], counting its attempts in `progress`.
    pub fn record_tracked(&self, p0: &[f32], progress: &mut Progress) -> Result<Recording> {
        self.check(p0)?;
        let mut tape = Tape::default();
        let times = self.grid.times();
        let theta = self.dynamics.prepare(self.theta);
        let trajectory = integrate(
            &mut self.field(&theta, p0.len()),
            &self.method,
            &times,
            p0,
            Some(&mut tape),
            &mut progress.attempts,
        )?;
        Ok(Recording { trajectory, tape })
    }

    /// Backprop through the solver: `upstream` = d loss / d trajectory, [positions, blocks, d].
    pub fn backprop(&self, recording: &Recording, upstream: &[f32]) -> Result<Gradients> {
        self.check_upstream(&recording.trajectory, upstream)?;
        let n = recording.trajectory.len() / self.grid.positions;
        let theta = self.dynamics.prepare(self.theta);
        Ok(backprop::backprop(
            &mut self.field(&theta, n),
            self.method.tableau(),
            &recording.tape,
            upstream,
        ))
    }

    /// The continuous adjoint with the forward method and tolerances, from the trajectory of
    /// [`Flow::solve`]; `upstream` = d loss / d trajectory, [positions, blocks, d].
    pub fn adjoint(&self, trajectory: &[f32], upstream: &[f32]) -> Result<Gradients> {
        self.adjoint_tracked(trajectory, upstream, &mut Progress::default())
    }

    /// [`Flow::adjoint`], counting its attempts and the interval it is in in `progress`.
    pub fn adjoint_tracked(
        &self,
        trajectory: &[f32],
        upstream: &[f32],
        progress: &mut Progress,
    ) -> Result<Gradients> {
        self.check_upstream(trajectory, upstream)?;
        adjoint::adjoint(
            self.dynamics,
            &self.dynamics.prepare(self.theta),
            &self.method,
            &self.grid.times(),
            trajectory,
            upstream,
            progress,
        )
    }

    /// The forward field, with θ as [`Dynamics::prepare`] gives it.
    fn field<'a>(&'a self, theta: &'a [f32], len: usize) -> StateField<'a, D> {
        StateField {
            dynamics: self.dynamics,
            theta,
            len,
        }
    }

    fn check(&self, p0: &[f32]) -> Result<()> {
        let (d, params) = (self.dynamics.dim(), self.dynamics.param_len());
        let Grid { positions, delta } = self.grid;
        if d == 0 || p0.is_empty() || !p0.len().is_multiple_of(d) {
            return Err(bad_input(format!(
                "p0 has {} values, not a positive multiple of d = {d} (one row per block)",
                p0.len()
            )));
        }
        if self.theta.len() != params {
            return Err(bad_input(format!(
                "theta has {} values, the dynamics takes {params}",
                self.theta.len()
            )));
        }
        if positions == 0 || !(delta.is_finite() && delta > 0.0) {
            return Err(bad_input(format!(
                "grid of {positions} positions with delta {delta}: need at least one position and a positive delta"
            )));
        }
        match self.method {
            Method::Fixed { substeps: 0, .. } => Err(bad_input("substeps must be at least 1")),
            Method::Dopri5(Tolerance { rtol, atol, .. }) if !(rtol >= 0.0 && atol > 0.0) => Err(bad_input(
                format!("dopri5 needs rtol >= 0 and atol > 0, got rtol {rtol}, atol {atol}"),
            )),
            _ => Ok(()),
        }
    }

    fn check_upstream(&self, trajectory: &[f32], upstream: &[f32]) -> Result<()> {
        let rows = self.grid.positions * self.dynamics.dim();
        if trajectory.is_empty()
            || !trajectory.len().is_multiple_of(rows)
            || upstream.len() != trajectory.len()
        {
            return Err(bad_input(format!(
                "trajectory of {} and upstream of {} values: both must be [positions = {}, blocks, d = {}]",
                trajectory.len(),
                upstream.len(),
                self.grid.positions,
                self.dynamics.dim()
            )));
        }
        Ok(())
    }
}

/// Arguments that do not fit the problem.
fn bad_input(detail: impl Into<String>) -> Error {
    Error::Input(format!("ode: {}", detail.into()))
}

/// A solve that cannot go on: a non-finite state or dopri5's step limit.
fn diverged(detail: String) -> Error {
    Error::Training(format!("ode: {detail}"))
}
