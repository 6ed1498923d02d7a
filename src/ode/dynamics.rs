//! The right-hand side dp/dt = h(t, p; θ) and its vector-Jacobian products.

use std::ops::Range;

use crate::arithmetic::Arithmetic;
use crate::math;
use crate::product::{Strides, product};
use crate::vector::vectorised_fn;

/// A vector field h(t, p; θ) applied to a batch of rows at once (one row per block).
///
/// θ is a flat f32 slice of [`Dynamics::param_len`] values; its layout belongs to the implementor.
pub trait Dynamics {
    /// Length of one row of the state.
    fn dim(&self) -> usize;

    /// Number of parameters θ.
    fn param_len(&self) -> usize;

    /// The separate parameter tensors inside θ. dopri5's adjoint error norm takes the RMS of each on
    /// its own (torchdiffeq does so per parameter tensor).
    fn param_groups(&self) -> Vec<Range<usize>>;

    /// θ followed by what the dynamics derives from it for its hot loops (a weight's
    /// transpose): every other method takes θ in this form, computed once per solve.
    fn prepare(&self, theta: &[f32]) -> Vec<f32> {
        theta.to_vec()
    }

    /// out = h(t, p) for every row; `p` and `out` are [rows, dim].
    fn eval(&self, theta: &[f32], t: f32, p: &[f32], out: &mut [f32]);

    /// For every row, writes out_dp = aᵀ ∂h/∂p and adds aᵀ ∂h/∂θ, summed over rows, to `dtheta`.
    fn vjp(&self, theta: &[f32], t: f32, p: &[f32], a: &[f32], out_dp: &mut [f32], dtheta: &mut [f32]);

    /// Values per row that [`Dynamics::eval_vjp`] records for [`Dynamics::add_param_vjp`].
    fn factor_len(&self) -> usize;

    /// One stage of the adjoint with its parameter part left for later: for every row of
    /// `state` = (p, a), `outs` = (h(t, p), aᵀ ∂h/∂p) as [`Dynamics::eval`] and
    /// [`Dynamics::vjp`] give them, and [`Dynamics::factor_len`] values appended to `factors`
    /// from which [`Dynamics::add_param_vjp`] forms the row's aᵀ ∂h/∂θ.
    fn eval_vjp(
        &self,
        theta: &[f32],
        t: f32,
        state: (&[f32], &[f32]),
        outs: (&mut [f32], &mut [f32]),
        factors: &mut Vec<f32>,
    );

    /// dtheta += Σᵣ weights\[r\] · aᵣᵀ ∂h/∂θ over the rows recorded in `factors` ([rows,
    /// factor_len]): many rows in one product, where [`Dynamics::vjp`] adds each row in turn.
    fn add_param_vjp(&self, factors: &[f32], weights: &[f32], dtheta: &mut [f32]);
}

/// The nonlinearity between FLOATER's two layers. The reference code uses ReLU (its derivative at 0
/// is taken as 0, as in PyTorch); the paper only says "one nonlinearity".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Relu,
    Tanh,
}

impl Activation {
    #[inline(always)]
    fn apply(self, z: f32) -> f32 {
        match self {
            Activation::Relu => z.max(0.0),
            Activation::Tanh => math::tanh(z),
        }
    }

    /// The derivative at z, given y = apply(z).
    #[inline(always)]
    fn derivative(self, z: f32, y: f32) -> f32 {
        match self {
            Activation::Relu => {
                if z > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Activation::Tanh => 1.0 - y * y,
        }
    }
}

/// For every row x of `xs` ([rows, n]) and its row of `out` ([rows, m]): out = W [x; t] + bias
/// for a linear layer with t appended to its input, from its transpose `wt` ([n + 1, m]): each
/// out[i] = (Σ_c wt[c][i]·x[c] over c < n in order from 0 + wt[n][i]·t) + bias[i].
#[inline(always)]
fn affine(wt: &[f32], (xs, n): (&[f32], usize), t: f32, bias: &[f32], out: &mut [f32]) {
    let m = bias.len();
    transposed_product(wt, m, (xs, n), out, m);
    let time = &wt[n * m..(n + 1) * m];
    for out in out.chunks_exact_mut(m) {
        for ((o, &w), &b) in out.iter_mut().zip(time).zip(bias) {
            *o = *o + w * t + b;
        }
    }
}

/// For every row a of `a_rows` ([rows, n]) and its row of `out` ([rows, m]): out[j] =
/// Σᵢ w[i·stride + j]·a[i], the sum over i < n in order from 0 (the product with a layer's
/// transpose). A block of columns at a time, its sums in registers while every row of `w`
/// passes (rather than each row's update read and written back through memory), each block
/// passed over every row of `a_rows` while it is in cache.
#[inline(always)]
fn transposed_product(w: &[f32], stride: usize, (a_rows, n): (&[f32], usize), out: &mut [f32], m: usize) {
    const BLOCK: usize = 64;
    for start in (0..m).step_by(BLOCK) {
        let width = BLOCK.min(m - start);
        for (a, out) in a_rows.chunks_exact(n).zip(out.chunks_exact_mut(m)) {
            let out = &mut out[start..start + width];
            if let Ok(out) = <&mut [f32; BLOCK]>::try_from(&mut *out) {
                let mut sums = [0.0f32; BLOCK];
                for (i, &ai) in a.iter().enumerate() {
                    let row: &[f32; BLOCK] = w[i * stride + start..][..BLOCK].try_into().expect("a block");
                    for j in 0..BLOCK {
                        sums[j] += row[j] * ai;
                    }
                }
                *out = sums;
            } else {
                out.fill(0.0);
                for (i, &ai) in a.iter().enumerate() {
                    let row = &w[i * stride + start..][..width];
                    out.iter_mut().zip(row).for_each(|(o, &w)| *o += w * ai);
                }
            }
        }
    }
}

/// FLOATER's flow network in the reference code's `flow_func_linear` form: time is appended to the
/// input of each linear layer,
///
/// h(t, p) = W₂ · [σ(W₁ · [p; t] + b₁); t] + b₂.
///
/// θ layout (row-major, the shapes of PyTorch `nn.Linear` weights), with d = `dim`, k = `hidden`:
///
/// | part | shape      | offset                       |
/// |------|------------|------------------------------|
/// | W₁   | [k, d + 1] | 0                            |
/// | b₁   | `[k]`        | k(d + 1)                     |
/// | W₂   | [d, k + 1] | k(d + 1) + k                 |
/// | b₂   | `[d]`        | k(d + 1) + k + d(k + 1)      |
///
/// The last column of each weight multiplies t. FLOATER uses k = d.
#[derive(Clone, Copy, Debug)]
pub struct FloaterDynamics {
    pub dim: usize,
    pub hidden: usize,
    pub activation: Activation,
    /// The arithmetic of the parameters' gradient, a matrix product (the flow's own sums have one
    /// order).
    pub arithmetic: Arithmetic,
}

impl FloaterDynamics {
    fn w1(&self) -> Range<usize> {
        0..self.hidden * (self.dim + 1)
    }

    fn b1(&self) -> Range<usize> {
        let start = self.w1().end;
        start..start + self.hidden
    }

    fn w2(&self) -> Range<usize> {
        let start = self.b1().end;
        start..start + self.dim * (self.hidden + 1)
    }

    fn b2(&self) -> Range<usize> {
        let start = self.w2().end;
        start..start + self.dim
    }

    /// W₁ᵀ ([d + 1, k]) in the prepared θ ([`Dynamics::prepare`]).
    fn w1t(&self) -> Range<usize> {
        let start = self.param_len();
        start..start + self.hidden * (self.dim + 1)
    }

    /// W₂ᵀ ([k + 1, d]) in the prepared θ.
    fn w2t(&self) -> Range<usize> {
        let start = self.w1t().end;
        start..start + self.dim * (self.hidden + 1)
    }

    /// The first layer for every row of p ([rows, d]): z = W₁ [p; t] + b₁ and y = σ(z), [rows, k].
    #[inline(always)]
    fn hidden_layer(&self, theta: &[f32], t: f32, p: &[f32], z: &mut [f32], y: &mut [f32]) {
        affine(&theta[self.w1t()], (p, self.dim), t, &theta[self.b1()], z);
        for (y, &z) in y.iter_mut().zip(z.iter()) {
            *y = self.activation.apply(z);
        }
    }
}

impl Dynamics for FloaterDynamics {
    fn dim(&self) -> usize {
        self.dim
    }

    fn param_len(&self) -> usize {
        self.b2().end
    }

    fn param_groups(&self) -> Vec<Range<usize>> {
        vec![self.w1(), self.b1(), self.w2(), self.b2()]
    }

    /// θ, W₁ᵀ and W₂ᵀ: the layers' products read their weights a column at a time
    /// (`transposed_product`), the fast order for one vector.
    fn prepare(&self, theta: &[f32]) -> Vec<f32> {
        let mut prepared = theta.to_vec();
        for (w, rows, cols) in [
            (self.w1(), self.hidden, self.dim + 1),
            (self.w2(), self.dim, self.hidden + 1),
        ] {
            let w = &theta[w];
            prepared.extend((0..rows * cols).map(|i| w[(i % rows) * cols + i / rows]));
        }
        prepared
    }

    fn eval(&self, theta: &[f32], t: f32, p: &[f32], out: &mut [f32]) {
        floater_eval(self, theta, t, p, out);
    }

    fn vjp(&self, theta: &[f32], t: f32, p: &[f32], a: &[f32], out_dp: &mut [f32], dtheta: &mut [f32]) {
        floater_vjp(self, theta, t, p, a, out_dp, dtheta);
    }

    /// t, a, y = σ(z), the hidden gradient dz and p: W₂'s gradient is a ⊗ [y; t], W₁'s dz ⊗ [p; t].
    fn factor_len(&self) -> usize {
        1 + 2 * self.dim + 2 * self.hidden
    }

    fn eval_vjp(
        &self,
        theta: &[f32],
        t: f32,
        state: (&[f32], &[f32]),
        outs: (&mut [f32], &mut [f32]),
        factors: &mut Vec<f32>,
    ) {
        let start = factors.len();
        factors.resize(start + state.0.len() / self.dim * self.factor_len(), 0.0);
        floater_eval_vjp(self, theta, t, state, outs, &mut factors[start..]);
    }

    fn add_param_vjp(&self, factors: &[f32], weights: &[f32], dtheta: &mut [f32]) {
        let (d, k, f) = (self.dim, self.hidden, self.factor_len());
        let rows = weights.len();
        assert_eq!(factors.len(), rows * f, "factors of {rows} rows");
        if rows == 0 {
            return;
        }
        // W₂ and b₂ from a ⊗ [y; t; 1], W₁ and b₁ from dz ⊗ [p; t; 1], the weights on the right.
        let second = OuterSum {
            lhs: 1,
            rhs: 1 + d,
            len: k,
            rows: d,
        };
        let first = OuterSum {
            lhs: 1 + d + k,
            rhs: 1 + d + 2 * k,
            len: d,
            rows: k,
        };
        let (w1, b1, w2, b2) = (self.w1(), self.b1(), self.w2(), self.b2());
        for (sum, w, b) in [(second, w2, b2), (first, w1, b1)] {
            let product = sum.product(factors, f, weights, self.arithmetic);
            let n = sum.len + 2;
            for (i, row) in product.chunks_exact(n).enumerate() {
                let weight_row = &mut dtheta[w.start + i * (n - 1)..w.start + (i + 1) * (n - 1)];
                weight_row.iter_mut().zip(row).for_each(|(g, v)| *g += v);
                dtheta[b.start + i] += row[n - 1];
            }
        }
    }
}

/// Σᵣ weightᵣ · uᵣ ⊗ [vᵣ; tᵣ; 1] over rows of recorded factors, u at column `lhs` (`rows` values)
/// and v at `rhs` (`len` values), t at column 0: a layer's weight gradient with its bias gradient
/// in the last column, [rows, len + 2].
struct OuterSum {
    lhs: usize,
    rhs: usize,
    len: usize,
    rows: usize,
}

impl OuterSum {
    fn product(&self, factors: &[f32], f: usize, weights: &[f32], arithmetic: Arithmetic) -> Vec<f32> {
        let n = self.len + 2;
        let mut right = Vec::with_capacity(weights.len() * n);
        for (factor, &w) in factors.chunks_exact(f).zip(weights) {
            right.extend(factor[self.rhs..self.rhs + self.len].iter().map(|v| w * v));
            right.extend([w * factor[0], w]);
        }
        let mut out = vec![0.0f32; self.rows * n];
        let lhs = &factors[self.lhs..];
        // The left operand (i, r) = lhs[r·f + i], the right (r, j) = right[r·n + j]; `product`
        // checks that both lie inside their slices.
        let (sl, sr) = (Strides { rows: 1, cols: f }, Strides { rows: n, cols: 1 });
        product(
            self.rows,
            n,
            weights.len(),
            lhs,
            sl,
            &right,
            sr,
            &mut out,
            false,
            arithmetic,
        );
        out
    }
}

// The solve's hot loops, compiled for the widest vector unit (same bits at every width: each sum
// runs over its inputs in order, and a vector only ever holds independent outputs).
vectorised_fn! {
    /// [`Dynamics::eval`] of [`FloaterDynamics`].
    fn floater_eval(dy: &FloaterDynamics, theta: &[f32], t: f32, p: &[f32], out: &mut [f32]) {
        let (w2t, b2) = (&theta[dy.w2t()], &theta[dy.b2()]);
        let rows = p.len() / dy.dim;
        let mut z = vec![0.0; rows * dy.hidden];
        let mut y = vec![0.0; rows * dy.hidden];
        dy.hidden_layer(theta, t, p, &mut z, &mut y);
        affine(w2t, (&y, dy.hidden), t, b2, out);
    }
}

vectorised_fn! {
    /// [`Dynamics::eval_vjp`] of [`FloaterDynamics`]: the hidden layer once for both, and the same
    /// sums in the same order as [`floater_eval`] and [`floater_vjp`] give, a layer at a time
    /// over every row.
    fn floater_eval_vjp(dy: &FloaterDynamics, theta: &[f32], t: f32, state: (&[f32], &[f32]), outs: (&mut [f32], &mut [f32]), factors: &mut [f32]) {
        let ((p, a), (out, out_dp)) = (state, outs);
        let (d, k) = (dy.dim, dy.hidden);
        let (w1, w2, w2t, b2) = (&theta[dy.w1()], &theta[dy.w2()], &theta[dy.w2t()], &theta[dy.b2()]);
        let rows = p.len() / d;
        let (mut z, mut y, mut dz) = (vec![0.0; rows * k], vec![0.0; rows * k], vec![0.0; rows * k]);
        dy.hidden_layer(theta, t, p, &mut z, &mut y);
        affine(w2t, (&y, k), t, b2, out);
        transposed_product(w2, k + 1, (a, d), &mut dz, k);
        for j in 0..rows * k {
            dz[j] *= dy.activation.derivative(z[j], y[j]);
        }
        transposed_product(w1, d + 1, (&dz, k), out_dp, d);
        let rows = factors
            .chunks_exact_mut(dy.factor_len())
            .zip(a.chunks_exact(d).zip(p.chunks_exact(d)))
            .zip(y.chunks_exact(k).zip(dz.chunks_exact(k)));
        for ((factor, (a, p)), (y, dz)) in rows {
            factor[0] = t;
            let mut rest = &mut factor[1..];
            for values in [a, y, dz, p] {
                let (part, tail) = rest.split_at_mut(values.len());
                part.copy_from_slice(values);
                rest = tail;
            }
        }
    }
}

vectorised_fn! {
    /// [`Dynamics::vjp`] of [`FloaterDynamics`].
    fn floater_vjp(dy: &FloaterDynamics, theta: &[f32], t: f32, p: &[f32], a: &[f32], out_dp: &mut [f32], dtheta: &mut [f32]) {
        let (d, k) = (dy.dim, dy.hidden);
        let (w1, w2) = (&theta[dy.w1()], &theta[dy.w2()]);
        let (r_w1, r_b1, r_w2, r_b2) = (dy.w1(), dy.b1(), dy.w2(), dy.b2());
        let mut z = vec![0.0; k];
        let mut y = vec![0.0; k];
        let mut dz = vec![0.0; k];
        let rows = p
            .chunks_exact(d)
            .zip(a.chunks_exact(d))
            .zip(out_dp.chunks_exact_mut(d));
        for ((p, a), dp) in rows {
            dy.hidden_layer(theta, t, p, &mut z, &mut y);
            // Second layer: d/dW₂ = a ⊗ [y; t], d/db₂ = a, and the hidden gradient W₂[:, :k]ᵀ a.
            dz.fill(0.0);
            for (i, &ai) in a.iter().enumerate() {
                let row = i * (k + 1);
                let gw2 = &mut dtheta[r_w2.start + row..r_w2.start + row + k + 1];
                // Zipped slices, no indexing: the compiler vectorises both updates.
                for ((g, &yj), (dzj, &w)) in gw2.iter_mut().zip(&y).zip(dz.iter_mut().zip(&w2[row..row + k]))
                {
                    *g += ai * yj;
                    *dzj += w * ai;
                }
                gw2[k] += ai * t;
                dtheta[r_b2.start + i] += ai;
            }
            for j in 0..k {
                dz[j] *= dy.activation.derivative(z[j], y[j]);
            }
            // First layer: d/dW₁ = dz ⊗ [p; t], d/db₁ = dz, dp = W₁[:, :d]ᵀ dz.
            dp.fill(0.0);
            for (j, &dzj) in dz.iter().enumerate() {
                let row = j * (d + 1);
                let gw1 = &mut dtheta[r_w1.start + row..r_w1.start + row + d + 1];
                for ((g, &pc), (dpc, &w)) in gw1.iter_mut().zip(p).zip(dp.iter_mut().zip(&w1[row..row + d])) {
                    *g += dzj * pc;
                    *dpc += w * dzj;
                }
                gw1[d] += dzj * t;
                dtheta[r_b1.start + j] += dzj;
            }
        }
    }
}
