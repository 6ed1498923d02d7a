//! The continuous adjoint (FLOATER appendix A; torchdiffeq's `odeint_adjoint`): integrate
//! [p | a | g] backward over each output interval with the forward method, restarting p from the
//! stored forward output and adding the upstream gradient at every output time. Memory: the
//! augmented state and one method's stages, whatever the number of steps. On a fixed grid g
//! stays outside the state ([`DeferredAdjointField`]).

use crate::error::Result;

use super::diverged;
use super::dynamics::Dynamics;
use super::field::{AdjointField, DeferredAdjointField, Field};
use super::integrate::{Scratch, Solve, integrate_into};
use super::{Gradients, Method, Progress};

/// Gradients of Σ upstream · trajectory, from the trajectory at `times` ([positions, n]).
pub(crate) fn adjoint<D: Dynamics>(
    dynamics: &D,
    theta: &[f32],
    method: &Method,
    times: &[f64],
    trajectory: &[f32],
    upstream: &[f32],
    progress: &mut Progress,
) -> Result<Gradients> {
    let n = trajectory.len() / times.len();
    let path = Path {
        method,
        times,
        trajectory,
        upstream,
    };
    match method {
        Method::Fixed { .. } => {
            let mut field = DeferredAdjointField::new(dynamics, theta, n);
            let z = path.walk_back(&mut field, progress)?;
            field.flush();
            let theta = std::mem::take(&mut field.gradient);
            // The state's checks saw p and a only; g is checked once, whole.
            if let Some(i) = theta.iter().position(|v| !v.is_finite()) {
                return Err(diverged(format!(
                    "non-finite parameter adjoint element {i} ({})",
                    method.name()
                )));
            }
            Ok(Gradients {
                p0: z[n..].to_vec(),
                theta,
            })
        }
        Method::Dopri5(_) => {
            let mut field = AdjointField {
                dynamics,
                theta,
                state_len: n,
            };
            let z = path.walk_back(&mut field, progress)?;
            Ok(Gradients {
                p0: z[n..2 * n].to_vec(),
                theta: z[2 * n..].to_vec(),
            })
        }
    }
}

/// The forward solve the adjoint walks back along.
struct Path<'a> {
    method: &'a Method,
    times: &'a [f64],
    trajectory: &'a [f32],
    upstream: &'a [f32],
}

impl Path<'_> {
    /// Integrates `field`'s state (p, a, then anything else, starting at 0) from the last output
    /// time to the first; returns it at the first.
    fn walk_back(&self, field: &mut impl Field, progress: &mut Progress) -> Result<Vec<f32>> {
        let Path {
            method,
            times,
            trajectory,
            upstream,
        } = *self;
        let n = trajectory.len() / times.len();
        let last = times.len() - 1;
        let (mut scratch, mut ends) = (Scratch::default(), Vec::new());
        let mut z = vec![0.0f32; field.len()];
        z[..n].copy_from_slice(&trajectory[last * n..]);
        z[n..2 * n].copy_from_slice(&upstream[last * n..]);
        for i in (1..times.len()).rev() {
            progress.position = i;
            let solve = Solve {
                tape: None,
                attempts: &mut progress.attempts,
                scratch: &mut scratch,
            };
            integrate_into(field, method, &[times[i], times[i - 1]], &z, solve, &mut ends)?;
            let len = z.len();
            z.copy_from_slice(&ends[len..]);
            // Restart from the forward solution (as torchdiffeq does) rather than the re-integrated p.
            z[..n].copy_from_slice(&trajectory[(i - 1) * n..i * n]);
            let a = &mut z[n..2 * n];
            a.iter_mut()
                .zip(&upstream[(i - 1) * n..i * n])
                .for_each(|(a, u)| *a += u);
        }
        Ok(z)
    }
}
