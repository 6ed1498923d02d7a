//! The right-hand side dp/dt = h(t, p; θ) and its vector-Jacobian products.

use std::ops::Range;

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

    /// out = h(t, p) for every row; `p` and `out` are [rows, dim].
    fn eval(&self, theta: &[f32], t: f32, p: &[f32], out: &mut [f32]);

    /// For every row, writes out_dp = aᵀ ∂h/∂p and adds aᵀ ∂h/∂θ, summed over rows, to `dtheta`.
    fn vjp(&self, theta: &[f32], t: f32, p: &[f32], a: &[f32], out_dp: &mut [f32], dtheta: &mut [f32]);
}

/// The nonlinearity between FLOATER's two layers. The reference code uses ReLU (its derivative at 0
/// is taken as 0, as in PyTorch); the paper only says "one nonlinearity".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Relu,
    Tanh,
}

impl Activation {
    fn apply(self, z: f32) -> f32 {
        match self {
            Activation::Relu => z.max(0.0),
            Activation::Tanh => z.tanh(),
        }
    }

    /// The derivative at z, given y = apply(z).
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

/// Σ aᵢ·bᵢ in eight interleaved partial sums (lane i % 8, added pairwise at the end): a fixed
/// order, so every run gives the same bits, that the compiler can keep in one SIMD register. A
/// plain `.sum()` adds one product at a time and ran the CPU solve ~5× slower.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut partial = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..LANES {
            partial[lane] += x[lane] * y[lane];
        }
    }
    let [p0, p1, p2, p3, p4, p5, p6, p7] = partial;
    ((p0 + p4) + (p1 + p5)) + ((p2 + p6) + (p3 + p7)) + tail
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
/// | b₁   | [k]        | k(d + 1)                     |
/// | W₂   | [d, k + 1] | k(d + 1) + k                 |
/// | b₂   | [d]        | k(d + 1) + k + d(k + 1)      |
///
/// The last column of each weight multiplies t. FLOATER uses k = d.
#[derive(Clone, Copy, Debug)]
pub struct FloaterDynamics {
    pub dim: usize,
    pub hidden: usize,
    pub activation: Activation,
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

    /// The first layer for one row: z = W₁ [p; t] + b₁ and y = σ(z).
    fn hidden_layer(&self, theta: &[f32], t: f32, p: &[f32], z: &mut [f32], y: &mut [f32]) {
        let (w1, b1) = (&theta[self.w1()], &theta[self.b1()]);
        let cols = self.dim + 1;
        for j in 0..self.hidden {
            let w = &w1[j * cols..(j + 1) * cols];
            z[j] = dot(&w[..self.dim], p) + w[self.dim] * t + b1[j];
            y[j] = self.activation.apply(z[j]);
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

    fn eval(&self, theta: &[f32], t: f32, p: &[f32], out: &mut [f32]) {
        let (w2, b2) = (&theta[self.w2()], &theta[self.b2()]);
        let (d, k) = (self.dim, self.hidden);
        let mut z = vec![0.0; k];
        let mut y = vec![0.0; k];
        for (p, out) in p.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            self.hidden_layer(theta, t, p, &mut z, &mut y);
            for (i, out) in out.iter_mut().enumerate() {
                let w = &w2[i * (k + 1)..(i + 1) * (k + 1)];
                *out = dot(&w[..k], &y) + w[k] * t + b2[i];
            }
        }
    }

    fn vjp(&self, theta: &[f32], t: f32, p: &[f32], a: &[f32], out_dp: &mut [f32], dtheta: &mut [f32]) {
        let (d, k) = (self.dim, self.hidden);
        let (w1, w2) = (&theta[self.w1()], &theta[self.w2()]);
        let (r_w1, r_b1, r_w2, r_b2) = (self.w1(), self.b1(), self.w2(), self.b2());
        let mut z = vec![0.0; k];
        let mut y = vec![0.0; k];
        let mut dz = vec![0.0; k];
        let rows = p
            .chunks_exact(d)
            .zip(a.chunks_exact(d))
            .zip(out_dp.chunks_exact_mut(d));
        for ((p, a), dp) in rows {
            self.hidden_layer(theta, t, p, &mut z, &mut y);
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
                dz[j] *= self.activation.derivative(z[j], y[j]);
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
