//! The flat vector fields the integrators step: the forward state [blocks, d], and the adjoint's
//! augmented state [state | adjoint | parameter adjoint].

use std::ops::Range;

use super::dynamics::Dynamics;

/// dz/dt = f(t, z) on a flat f32 state, as the integrators see it.
pub(crate) trait Field {
    fn len(&self) -> usize;

    fn eval(&mut self, t: f64, z: &[f32], dz: &mut [f32]);

    /// The leading part of z that `eval` reads (all of it unless said otherwise): a stage's
    /// input needs forming only there.
    fn driving_len(&self) -> usize {
        self.len()
    }

    /// The parts of z whose RMS norms dopri5 combines by their maximum (torchdiffeq's tuple norm).
    fn norm_groups(&self) -> Vec<Range<usize>>;

    /// Names the part of the state element `index` belongs to, for error messages.
    fn locate(&self, index: usize) -> String;
}

/// The forward problem: every row of z is one block's position encoding.
pub(crate) struct StateField<'a, D> {
    pub dynamics: &'a D,
    pub theta: &'a [f32],
    pub len: usize,
}

impl<D: Dynamics> Field for StateField<'_, D> {
    fn len(&self) -> usize {
        self.len
    }

    fn eval(&mut self, t: f64, z: &[f32], dz: &mut [f32]) {
        self.dynamics.eval(self.theta, t as f32, z, dz);
    }

    fn norm_groups(&self) -> Vec<Range<usize>> {
        std::iter::once(0..self.len).collect()
    }

    fn locate(&self, index: usize) -> String {
        format!("block {}", index / self.dynamics.dim())
    }
}

/// The continuous adjoint, integrated backward in time: z = [p | a | g] with
/// dp/dt = h(t, p), da/dt = −aᵀ ∂h/∂p, dg/dt = −aᵀ ∂h/∂θ (torchdiffeq's augmented dynamics).
pub(crate) struct AdjointField<'a, D> {
    pub dynamics: &'a D,
    pub theta: &'a [f32],
    /// Length of the state p (blocks × d).
    pub state_len: usize,
}

impl<D: Dynamics> Field for AdjointField<'_, D> {
    fn len(&self) -> usize {
        2 * self.state_len + self.dynamics.param_len()
    }

    fn eval(&mut self, t: f64, z: &[f32], dz: &mut [f32]) {
        let n = self.state_len;
        let (p, rest) = z.split_at(n);
        let a = &rest[..n];
        let (dp, rest) = dz.split_at_mut(n);
        let (da, dg) = rest.split_at_mut(n);
        let t = t as f32;
        self.dynamics.eval(self.theta, t, p, dp);
        dg.fill(0.0);
        self.dynamics.vjp(self.theta, t, p, a, da, dg);
        da.iter_mut().chain(dg.iter_mut()).for_each(|v| *v = -*v);
    }

    /// p and a: the parameter adjoint g only accumulates.
    fn driving_len(&self) -> usize {
        2 * self.state_len
    }

    fn norm_groups(&self) -> Vec<Range<usize>> {
        let n = self.state_len;
        let params = self.dynamics.param_groups();
        [0..n, n..2 * n]
            .into_iter()
            .chain(params.into_iter().map(|r| r.start + 2 * n..r.end + 2 * n))
            .collect()
    }

    fn locate(&self, index: usize) -> String {
        let (n, d) = (self.state_len, self.dynamics.dim());
        if index < n {
            format!("block {} (state)", index / d)
        } else if index < 2 * n {
            format!("block {} (adjoint)", (index - n) / d)
        } else {
            format!("parameter adjoint element {}", index - 2 * n)
        }
    }
}
