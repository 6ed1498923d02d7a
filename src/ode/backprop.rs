//! Backprop through the solver: the exact gradient of the discrete solution, walking the recorded
//! steps backward and recomputing each step's stages from its start state (memory: one state per
//! step, not one per stage).

use super::Gradients;
use super::dynamics::Dynamics;
use super::field::{Field, StateField};
use super::integrate::{Stages, Tape};
use super::tableau::Tableau;

/// Gradients of Σ upstream · trajectory with respect to θ and z₀; `upstream` is
/// [positions, state length], position 0 being z₀ itself.
pub(crate) fn backprop<D: Dynamics>(
    field: &mut StateField<'_, D>,
    tab: &Tableau,
    tape: &Tape,
    upstream: &[f32],
) -> Gradients {
    let n = field.len();
    let (dynamics, theta) = (field.dynamics, field.theta);
    let mut stages = Stages::new(tab, n);
    let mut k_bar = vec![vec![0.0f32; n]; tab.stages()];
    let mut input_bar = vec![0.0f32; n];
    let mut theta_bar = vec![0.0f32; dynamics.param_len()];
    // The adjoint of the state at the end of the step being processed.
    let mut z_bar = vec![0.0f32; n];
    let mut outputs = tape.outputs.iter().enumerate().rev().peekable();

    for (index, step) in tape.steps.iter().enumerate().rev() {
        let (t0, dt) = (step.t0, step.dt);
        stages.inputs[0].copy_from_slice(&step.z0);
        field.eval(t0, &step.z0, &mut stages.k[0]);
        stages.eval_after_first(field, tab, t0, dt, &step.z0);

        // z₁ = z₀ + dt·Σ bᵢ kᵢ, and each output in this step is z₀ + dt·Σ wᵢ kᵢ.
        k_bar.iter_mut().for_each(|kb| kb.fill(0.0));
        let mut add = |weights: &[f64], bar: &[f32], z_bar0: &mut [f32]| {
            z_bar0.iter_mut().zip(bar).for_each(|(z, b)| *z += b);
            for (w, kb) in weights.iter().zip(k_bar.iter_mut()) {
                let coef = (dt * w) as f32;
                kb.iter_mut().zip(bar).for_each(|(kb, b)| *kb += coef * b);
            }
        };
        let mut z_bar0 = vec![0.0f32; n];
        add(tab.b, &z_bar, &mut z_bar0);
        while let Some((o, out)) = outputs.next_if(|(_, out)| out.step == index) {
            let bar = &upstream[(o + 1) * n..(o + 2) * n];
            add(&out.weights, bar, &mut z_bar0);
        }

        // Stage i: kᵢ = h(t₀ + cᵢ dt, inputᵢ), inputᵢ = z₀ + dt·Σⱼ aᵢⱼ kⱼ.
        for i in (0..tab.stages()).rev() {
            let t = (t0 + tab.c[i] * dt) as f32;
            dynamics.vjp(
                theta,
                t,
                &stages.inputs[i],
                &k_bar[i],
                &mut input_bar,
                &mut theta_bar,
            );
            z_bar0.iter_mut().zip(&input_bar).for_each(|(z, b)| *z += b);
            for (j, a) in tab.a[i].iter().enumerate() {
                let coef = (dt * a) as f32;
                k_bar[j]
                    .iter_mut()
                    .zip(&input_bar)
                    .for_each(|(kb, b)| *kb += coef * b);
            }
        }
        z_bar = z_bar0;
    }
    z_bar.iter_mut().zip(&upstream[..n]).for_each(|(z, u)| *z += u);
    Gradients {
        theta: theta_bar,
        p0: z_bar,
    }
}
