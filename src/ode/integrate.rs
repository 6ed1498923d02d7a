//! Explicit Runge-Kutta integration of a [`Field`] through a list of output times (increasing, or
//! decreasing for the adjoint): fixed grids and dopri5 with torchdiffeq's step-size controller.

use crate::error::Result;
use crate::math;
use crate::vector::vectorised_fn;

use super::field::Field;
use super::tableau::{DOPRI5, DOPRI5_ERROR, Tableau, dopri5_dense_weights};
use super::{Method, Tolerance, diverged};

/// What backprop through the solver needs: every accepted step's start, and where each output
/// (after the first, which is z₀ itself) lies. Stages are recomputed from these in the backward.
#[derive(Default)]
pub(crate) struct Tape {
    pub steps: Vec<TapeStep>,
    pub outputs: Vec<TapeOutput>,
}

pub(crate) struct TapeStep {
    pub t0: f64,
    pub dt: f64,
    pub z0: Vec<f32>,
}

/// Output = z₀ + dt·Σᵢ wᵢ kᵢ of step `step`: w = b on a fixed grid, the dense weights for dopri5.
pub(crate) struct TapeOutput {
    pub step: usize,
    pub weights: Vec<f64>,
}

/// out = z₀ + Σᵢ (dt·wᵢ) kᵢ, in f32 like the state (zero weights skipped), each element's terms
/// added in order; over the first `out.len()` elements of `z0` and each kᵢ.
pub(crate) fn combine<K: AsRef<[f32]>>(z0: &[f32], dt: f64, weights: &[f64], k: &[K], out: &mut [f32]) {
    let terms: Vec<(f32, &[f32])> = weights
        .iter()
        .zip(k)
        .filter(|(w, _)| **w != 0.0)
        .map(|(w, k)| ((dt * w) as f32, k.as_ref()))
        .collect();
    combine_terms(z0, &terms, out);
}

vectorised_fn! {
    /// out = z0 + Σ coef·k over `terms` in order, a block of elements at a time: one pass over
    /// memory instead of one per term (the state is large in the adjoint, which carries the
    /// parameter gradient).
    fn combine_terms(z0: &[f32], terms: &[(f32, &[f32])], out: &mut [f32]) {
        const BLOCK: usize = 256;
        for (b, out) in out.chunks_mut(BLOCK).enumerate() {
            let start = b * BLOCK;
            out.copy_from_slice(&z0[start..start + out.len()]);
            // kᵢ may be longer than `out` (a stage input formed over the driving part only).
            for &(coef, k) in terms {
                let k = &k[start..start + out.len()];
                out.iter_mut().zip(k).for_each(|(o, k)| *o += coef * k);
            }
        }
    }
}

/// One step's stage slopes kᵢ and stage inputs.
pub(crate) struct Stages {
    pub k: Vec<Vec<f32>>,
    pub inputs: Vec<Vec<f32>>,
}

impl Stages {
    pub fn new(tab: &Tableau, n: usize) -> Self {
        Stages {
            k: vec![vec![0.0; n]; tab.stages()],
            inputs: vec![vec![0.0; n]; tab.stages()],
        }
    }

    /// Evaluates stages 1.. of the step from (t0, z0) of length dt; `k[0]` must already hold
    /// f(t0, z0) (dopri5 carries it over from the previous step). A stage's input is formed only
    /// over the part of the state the field reads ([`Field::driving_len`]).
    pub fn eval_after_first(&mut self, field: &mut impl Field, tab: &Tableau, t0: f64, dt: f64, z0: &[f32]) {
        let driving = field.driving_len();
        for i in 1..tab.stages() {
            combine(
                &z0[..driving],
                dt,
                tab.a[i],
                &self.k[..i],
                &mut self.inputs[i][..driving],
            );
            field.eval(t0 + tab.c[i] * dt, &self.inputs[i], &mut self.k[i]);
        }
    }

    fn fits(&self, tab: &Tableau, n: usize) -> bool {
        self.k.len() == tab.stages() && self.k.first().is_some_and(|k| k.len() == n)
    }
}

/// The buffers of a solve, kept between solves: the adjoint solves once per output interval, and
/// at its size (the parameter gradient rides in its state) each fresh allocation is fresh pages
/// from the kernel, zeroed on first touch.
#[derive(Default)]
pub(crate) struct Scratch {
    stages: Option<Stages>,
    z: Vec<f32>,
    z1: Vec<f32>,
}

impl Scratch {
    /// The stages of `tab` for a state of `n`, and the current and next state (z a copy of `z0`).
    fn parts(&mut self, tab: &Tableau, z0: &[f32]) -> (&mut Stages, &mut Vec<f32>, &mut Vec<f32>) {
        let n = z0.len();
        if !self.stages.as_ref().is_some_and(|s| s.fits(tab, n)) {
            self.stages = Some(Stages::new(tab, n));
        }
        self.z.clear();
        self.z.extend_from_slice(z0);
        self.z1.resize(n, 0.0);
        let stages = self.stages.as_mut().expect("made above");
        (stages, &mut self.z, &mut self.z1)
    }
}

vectorised_fn! {
    /// Whether every value is finite: an OR over all of them (no early exit), so that it is
    /// vectorised; the slow search for the first bad one runs only when there is one.
    fn all_finite(z: &[f32]) -> bool {
        const EXPONENT: u32 = 0x7f80_0000;
        !z.iter().fold(false, |bad, v| bad | (v.to_bits() & EXPONENT == EXPONENT))
    }
}

fn check_finite(field: &impl Field, z: &[f32], t: f64, method: &str) -> Result<()> {
    if all_finite(z) {
        return Ok(());
    }
    match z.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(diverged(format!(
            "non-finite state in {} at t = {t} ({method})",
            field.locate(i)
        ))),
    }
}

/// Solves through `times` from z₀; returns the states at every time, [times.len(), field.len()].
/// `attempts` counts dopri5's step attempts (accepted or not) against `Tolerance::max_steps`.
pub(crate) fn integrate(
    field: &mut impl Field,
    method: &Method,
    times: &[f64],
    z0: &[f32],
    tape: Option<&mut Tape>,
    attempts: &mut usize,
) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    let solve = Solve {
        tape,
        attempts,
        scratch: &mut Scratch::default(),
    };
    integrate_into(field, method, times, z0, solve, &mut out)?;
    Ok(out)
}

/// What a solve records and reuses besides its states.
pub(crate) struct Solve<'a> {
    pub tape: Option<&'a mut Tape>,
    pub attempts: &'a mut usize,
    pub scratch: &'a mut Scratch,
}

/// [`integrate`] into `out` (cleared first), with the buffers of `solve.scratch`.
pub(crate) fn integrate_into(
    field: &mut impl Field,
    method: &Method,
    times: &[f64],
    z0: &[f32],
    solve: Solve<'_>,
    out: &mut Vec<f32>,
) -> Result<()> {
    check_finite(field, z0, times[0], method.name())?;
    out.clear();
    let Solve {
        tape,
        attempts,
        scratch,
    } = solve;
    match method {
        Method::Fixed { substeps, .. } => {
            let grid = FixedGrid {
                tab: method.tableau(),
                name: method.name(),
                substeps: *substeps,
            };
            fixed_grid(field, grid, times, z0, (tape, scratch), out)
        }
        Method::Dopri5(tol) => dopri5(field, tol, times, z0, (tape, attempts, scratch), out),
    }
}

/// A fixed-step method: its tableau, name and steps per output interval.
struct FixedGrid<'a> {
    tab: &'a Tableau,
    name: &'a str,
    substeps: usize,
}

/// `substeps` equal steps inside each output interval; the outputs are grid points. The grid is
/// tᵢ + k·(tᵢ₊₁ − tᵢ)/substeps, the one the reference script gives torchdiffeq.
fn fixed_grid(
    field: &mut impl Field,
    FixedGrid { tab, name, substeps }: FixedGrid<'_>,
    times: &[f64],
    z0: &[f32],
    (mut tape, scratch): (Option<&mut Tape>, &mut Scratch),
    out: &mut Vec<f32>,
) -> Result<()> {
    let (stages, z, z1) = scratch.parts(tab, z0);
    out.reserve(times.len() * z0.len());
    out.extend_from_slice(z0);
    for span in times.windows(2) {
        let grid = |s: usize| match s {
            s if s == substeps => span[1],
            s => span[0] + s as f64 * (span[1] - span[0]) / substeps as f64,
        };
        for s in 0..substeps {
            let (t0, t1) = (grid(s), grid(s + 1));
            let dt = t1 - t0;
            field.eval(t0, z, &mut stages.k[0]);
            stages.eval_after_first(field, tab, t0, dt, z);
            combine(z, dt, tab.b, &stages.k, z1);
            field.step_taken(dt, tab.b);
            check_finite(field, z1, t1, name)?;
            if let Some(tape) = tape.as_deref_mut() {
                tape.steps.push(TapeStep {
                    t0,
                    dt,
                    z0: z.clone(),
                });
            }
            std::mem::swap(z, z1);
        }
        if let Some(tape) = tape.as_deref_mut() {
            let step = tape.steps.len() - 1;
            tape.outputs.push(TapeOutput {
                step,
                weights: tab.b.to_vec(),
            });
        }
        out.extend_from_slice(z);
    }
    Ok(())
}

/// max over groups of the RMS of `v(i)`, and the index of the largest |v(i)|.
fn group_norm(groups: &[std::ops::Range<usize>], v: impl Fn(usize) -> f64) -> (f64, usize) {
    let (mut norm, mut worst, mut worst_value) = (0.0f64, 0, -1.0);
    for g in groups.iter().filter(|g| !g.is_empty()) {
        let mut sum = 0.0;
        for i in g.clone() {
            let x = v(i).abs();
            sum += x * x;
            if x > worst_value {
                (worst, worst_value) = (i, x);
            }
        }
        norm = norm.max((sum / g.len() as f64).sqrt());
    }
    (norm, worst)
}

/// torchdiffeq's `_select_initial_step` (Hairer, Nørsett, Wanner II.4) for a method of order 5;
/// returns a step length (positive).
fn initial_step(field: &mut impl Field, tol: &Tolerance, t0: f64, dir: f64, z0: &[f32], f0: &[f32]) -> f64 {
    let groups = field.norm_groups();
    let scale = |i: usize| tol.atol + tol.rtol * (z0[i] as f64).abs();
    let (d0, _) = group_norm(&groups, |i| z0[i] as f64 / scale(i));
    let (d1, _) = group_norm(&groups, |i| f0[i] as f64 / scale(i));
    let h0 = if d0 < 1e-5 || d1 < 1e-5 {
        1e-6
    } else {
        0.01 * d0 / d1
    };
    let z1: Vec<f32> = z0
        .iter()
        .zip(f0)
        .map(|(z, f)| z + (dir * h0) as f32 * f)
        .collect();
    let mut f1 = vec![0.0; z0.len()];
    field.eval(t0 + dir * h0, &z1, &mut f1);
    let (d2, _) = group_norm(&groups, |i| (f1[i] as f64 - f0[i] as f64) / scale(i));
    let d2 = d2 / h0;
    let h1 = if d1 <= 1e-15 && d2 <= 1e-15 {
        (h0 * 1e-3).max(1e-6)
    } else {
        math::powf(0.01 / d1.max(d2), 1.0 / 5.0)
    };
    (100.0 * h0).min(h1)
}

/// torchdiffeq's `_optimal_step_size`: safety 0.9, growth at most ×10, shrink at most ×0.2, never
/// shrink after an accepted step.
fn next_step(h: f64, error_ratio: f64) -> f64 {
    if error_ratio == 0.0 {
        return h * 10.0;
    }
    let dfactor = if error_ratio < 1.0 { 1.0 } else { 0.2 };
    h * (0.9 / math::powf(error_ratio, 1.0 / 5.0)).max(dfactor).min(10.0)
}

/// Adaptive Dormand-Prince 5(4) exactly as torchdiffeq steps it: steps ignore the output times
/// (the last one may run past the end) and outputs come from the dense output of the step that
/// contains them. The error norm is the RMS of err / (atol + rtol·max(|z₀|, |z₁|)).
fn dopri5(
    field: &mut impl Field,
    tol: &Tolerance,
    times: &[f64],
    z0: &[f32],
    (mut tape, attempts, scratch): (Option<&mut Tape>, &mut usize, &mut Scratch),
    out: &mut Vec<f32>,
) -> Result<()> {
    let n = field.len();
    let groups = field.norm_groups();
    let dir = (times[times.len() - 1] - times[0]).signum();
    let (stages, z, z1) = scratch.parts(&DOPRI5, z0);
    out.reserve(times.len() * n);
    out.extend_from_slice(z0);
    let mut t = times[0];
    field.eval(t, z, &mut stages.k[0]);
    let mut h = initial_step(field, tol, t, dir, z, &stages.k[0]);
    let mut next_out = 1;
    let mut worst = None;
    while next_out < times.len() {
        if *attempts >= tol.max_steps {
            let worst = worst.map_or(String::new(), |i| {
                format!("; the largest error estimate was in {}", field.locate(i))
            });
            return Err(diverged(format!(
                "dopri5 step limit of {} steps reached at t = {t} on the way to t = {} (step size {h:e}, \
                 rtol {}, atol {}){worst}",
                tol.max_steps,
                times[times.len() - 1],
                tol.rtol,
                tol.atol
            )));
        }
        *attempts += 1;
        let dt = dir * h;
        let t1 = t + dt;
        if t1 == t {
            return Err(diverged(format!("dopri5 step size underflow ({h:e}) at t = {t}")));
        }
        stages.eval_after_first(field, &DOPRI5, t, dt, z);
        combine(z, dt, DOPRI5.b, &stages.k, z1);
        check_finite(field, z1, t1, "dopri5")?;
        let err = |i: usize| {
            dt * DOPRI5_ERROR
                .iter()
                .zip(&stages.k)
                .map(|(e, k)| e * k[i] as f64)
                .sum::<f64>()
        };
        let scale = |i: usize| tol.atol + tol.rtol * (z[i] as f64).abs().max((z1[i] as f64).abs());
        let (ratio, largest) = group_norm(&groups, |i| err(i) / scale(i));
        worst = Some(largest);
        if ratio <= 1.0 {
            while next_out < times.len() && dir * (times[next_out] - t1) <= 0.0 {
                let weights = dopri5_dense_weights((times[next_out] - t) / (t1 - t));
                let start = out.len();
                out.resize(start + n, 0.0);
                combine(z, dt, &weights, &stages.k, &mut out[start..]);
                if let Some(tape) = tape.as_deref_mut() {
                    let step = tape.steps.len();
                    tape.outputs.push(TapeOutput {
                        step,
                        weights: weights.to_vec(),
                    });
                }
                next_out += 1;
            }
            if let Some(tape) = tape.as_deref_mut() {
                tape.steps.push(TapeStep {
                    t0: t,
                    dt,
                    z0: z.clone(),
                });
            }
            std::mem::swap(z, z1);
            stages.k.swap(0, 6);
            t = t1;
        }
        h = next_step(h, ratio);
    }
    Ok(())
}
