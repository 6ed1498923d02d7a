//! The continuous adjoint (FLOATER appendix A; torchdiffeq's `odeint_adjoint`): integrate
//! [p | a | g] backward over each output interval with the forward method, restarting p from the
//! stored forward output and adding the upstream gradient at every output time. Memory: the
//! augmented state and one method's stages, whatever the number of steps.

use crate::error::Result;

use super::dynamics::Dynamics;
use super::field::AdjointField;
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
    let mut field = AdjointField {
        dynamics,
        theta,
        state_len: n,
    };
    let last = times.len() - 1;
    let (mut scratch, mut ends) = (Scratch::default(), Vec::new());
    let mut z = vec![0.0f32; 2 * n + theta.len()];
    z[..n].copy_from_slice(&trajectory[last * n..]);
    z[n..2 * n].copy_from_slice(&upstream[last * n..]);
    for i in (1..times.len()).rev() {
        progress.position = i;
        let solve = Solve {
            tape: None,
            attempts: &mut progress.attempts,
            scratch: &mut scratch,
        };
        integrate_into(
            &mut field,
            method,
            &[times[i], times[i - 1]],
            &z,
            solve,
            &mut ends,
        )?;
        let len = z.len();
        z.copy_from_slice(&ends[len..]);
        // Restart from the forward solution (as torchdiffeq does) rather than the re-integrated p.
        z[..n].copy_from_slice(&trajectory[(i - 1) * n..i * n]);
        let a = &mut z[n..2 * n];
        a.iter_mut()
            .zip(&upstream[(i - 1) * n..i * n])
            .for_each(|(a, u)| *a += u);
    }
    Ok(Gradients {
        p0: z[n..2 * n].to_vec(),
        theta: z[2 * n..].to_vec(),
    })
}
