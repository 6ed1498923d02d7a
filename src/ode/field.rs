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

    /// A fixed grid's step is done: its stage slopes, the last `weights.len()` evaluations in
    /// order, entered the state with coefficients dt·wᵢ. dopri5 never calls it.
    fn step_taken(&mut self, _dt: f64, _weights: &[f64]) {}
}

/// The forward problem: every row of z is one block's position encoding.
pub(crate) struct StateField<'a, D> {
    pub dynamics: &'a D,
    /// θ as [`Dynamics::prepare`] gives it.
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

/// Rows of recorded stage factors that [`DeferredAdjointField`] gathers before one product adds
/// them to the parameter gradient: large enough for the product to run at speed, small enough
/// to stay in cache (1 MiB at d = 128).
const DEFERRED_ROWS: usize = 512;

/// The continuous adjoint on a fixed grid, with the parameter adjoint g kept outside the state:
/// dg/dt depends on p and a only, so g(end) is a weighted sum of every stage's aᵀ ∂h/∂θ, which
/// [`Dynamics::add_param_vjp`] forms for many stages in one product instead of one pass over g
/// per stage. z = [p | a]; the same p and a, bit for bit, as [`AdjointField`], and g summed in
/// another order. Needs [`Field::step_taken`], so fixed grids only (dopri5's error norm reads g).
pub(crate) struct DeferredAdjointField<'a, D> {
    pub dynamics: &'a D,
    /// θ as [`Dynamics::prepare`] gives it.
    pub theta: &'a [f32],
    /// Length of the state p (blocks × d).
    pub state_len: usize,
    /// The parameter adjoint g so far.
    pub gradient: Vec<f32>,
    /// Every evaluation's factors since the last product ([`Dynamics::eval_vjp`]).
    factors: Vec<f32>,
    /// The weight of each row of `factors` whose step is done.
    weights: Vec<f32>,
}

impl<'a, D: Dynamics> DeferredAdjointField<'a, D> {
    pub fn new(dynamics: &'a D, theta: &'a [f32], state_len: usize) -> Self {
        DeferredAdjointField {
            dynamics,
            theta,
            state_len,
            gradient: vec![0.0; dynamics.param_len()],
            factors: Vec::new(),
            weights: Vec::new(),
        }
    }

    /// Adds every finished step's rows to the gradient.
    pub fn flush(&mut self) {
        let rows = self.weights.len();
        let f = self.dynamics.factor_len();
        self.dynamics
            .add_param_vjp(&self.factors[..rows * f], &self.weights, &mut self.gradient);
        self.factors.drain(..rows * f);
        self.weights.clear();
    }
}

impl<D: Dynamics> Field for DeferredAdjointField<'_, D> {
    fn len(&self) -> usize {
        2 * self.state_len
    }

    fn eval(&mut self, t: f64, z: &[f32], dz: &mut [f32]) {
        let n = self.state_len;
        let (dp, da) = dz.split_at_mut(n);
        self.dynamics.eval_vjp(
            self.theta,
            t as f32,
            (&z[..n], &z[n..]),
            (dp, da),
            &mut self.factors,
        );
        da.iter_mut().for_each(|v| *v = -*v);
    }

    fn norm_groups(&self) -> Vec<Range<usize>> {
        let n = self.state_len;
        vec![0..n, n..2 * n]
    }

    fn locate(&self, index: usize) -> String {
        let (n, d) = (self.state_len, self.dynamics.dim());
        if index < n {
            format!("block {} (state)", index / d)
        } else {
            format!("block {} (adjoint)", (index - n) / d)
        }
    }

    /// dg/dt = −aᵀ ∂h/∂θ: each stage's rows enter g with weight −dt·wᵢ (in f32, as the state's
    /// coefficients are).
    fn step_taken(&mut self, dt: f64, weights: &[f64]) {
        let rows = self.state_len / self.dynamics.dim();
        debug_assert_eq!(
            self.factors.len(),
            (self.weights.len() + weights.len() * rows) * self.dynamics.factor_len(),
            "one evaluation per stage since the last step"
        );
        for w in weights {
            let coef = -((dt * w) as f32);
            self.weights.extend(std::iter::repeat_n(coef, rows));
        }
        if self.weights.len() >= DEFERRED_ROWS {
            self.flush();
        }
    }
}

/// The continuous adjoint, integrated backward in time: z = [p | a | g] with
/// dp/dt = h(t, p), da/dt = −aᵀ ∂h/∂p, dg/dt = −aᵀ ∂h/∂θ (torchdiffeq's augmented dynamics).
pub(crate) struct AdjointField<'a, D> {
    pub dynamics: &'a D,
    /// θ as [`Dynamics::prepare`] gives it.
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
