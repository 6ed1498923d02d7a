//! The right-hand side dp/dt = h(t, p; θ) and its vector-Jacobian products.

use std::ops::Range;

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
    #[inline(always)]
    fn apply(self, z: f32) -> f32 {
        match self {
            Activation::Relu => z.max(0.0),
            Activation::Tanh => z.tanh(),
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

/// Σ aᵢ·bᵢ in eight interleaved partial sums (lane i % 8, added pairwise at the end): a fixed
/// order, so every run gives the same bits, that the compiler can keep in one SIMD register. A
/// plain `.sum()` adds one product at a time and ran the CPU solve ~5× slower.
#[inline(always)]
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
    // Seen through, the pairwise sum made the compiler keep the partial sums shuffled in narrow
    // registers (4× slower); behind the barrier the loop keeps them in one.
    sum_lanes(std::hint::black_box(partial), tail)
}

/// The eight partial sums of [`dot`] added pairwise, then the tail.
#[inline(always)]
fn sum_lanes([p0, p1, p2, p3, p4, p5, p6, p7]: [f32; 8], tail: f32) -> f32 {
    ((p0 + p4) + (p1 + p5)) + ((p2 + p6) + (p3 + p7)) + tail
}

/// [`dot`] of four rows with one vector, each summed in `dot`'s order: the rows share each load
/// of `b`, and their partial sums are four independent chains.
#[inline(always)]
fn dot4(a: [&[f32]; 4], b: &[f32]) -> [f32; 4] {
    const LANES: usize = 8;
    let full = b.len() / LANES * LANES;
    let (mut p0, mut p1, mut p2, mut p3) =
        ([0.0f32; LANES], [0.0f32; LANES], [0.0f32; LANES], [0.0f32; LANES]);
    for c in (0..full).step_by(LANES) {
        let y: &[f32; LANES] = b[c..c + LANES].try_into().expect("8 lanes");
        let row = |r: &[f32]| -> [f32; LANES] { r[c..c + LANES].try_into().expect("8 lanes") };
        let (x0, x1, x2, x3) = (row(a[0]), row(a[1]), row(a[2]), row(a[3]));
        for lane in 0..LANES {
            p0[lane] += x0[lane] * y[lane];
            p1[lane] += x1[lane] * y[lane];
            p2[lane] += x2[lane] * y[lane];
            p3[lane] += x3[lane] * y[lane];
        }
    }
    let partials = std::hint::black_box([p0, p1, p2, p3]);
    std::array::from_fn(|r| {
        let tail: f32 = a[r][full..b.len()]
            .iter()
            .zip(&b[full..])
            .map(|(x, y)| x * y)
            .sum();
        sum_lanes(partials[r], tail)
    })
}

/// out[i] = w_i[..n] · x + w_i[n]·t + bias[i] for the rows w_i of `w` (n + 1 columns each, n =
/// x.len(): a linear layer with t appended to its input), four rows at a time.
#[inline(always)]
fn affine(w: &[f32], x: &[f32], t: f32, bias: &[f32], out: &mut [f32]) {
    let n = x.len();
    let row = |i: usize| &w[i * (n + 1)..(i + 1) * (n + 1)];
    let grouped = out.len() / 4 * 4;
    for i in (0..grouped).step_by(4) {
        let dots = dot4(
            [&row(i)[..n], &row(i + 1)[..n], &row(i + 2)[..n], &row(i + 3)[..n]],
            x,
        );
        for (r, dot) in dots.into_iter().enumerate() {
            out[i + r] = dot + row(i + r)[n] * t + bias[i + r];
        }
    }
    for i in grouped..out.len() {
        out[i] = dot(&row(i)[..n], x) + row(i)[n] * t + bias[i];
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
    #[inline(always)]
    fn hidden_layer(&self, theta: &[f32], t: f32, p: &[f32], z: &mut [f32], y: &mut [f32]) {
        affine(&theta[self.w1()], p, t, &theta[self.b1()], z);
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

    fn eval(&self, theta: &[f32], t: f32, p: &[f32], out: &mut [f32]) {
        floater_eval(self, theta, t, p, out);
    }

    fn vjp(&self, theta: &[f32], t: f32, p: &[f32], a: &[f32], out_dp: &mut [f32], dtheta: &mut [f32]) {
        floater_vjp(self, theta, t, p, a, out_dp, dtheta);
    }
}

// The solve's hot loops, compiled for the widest vector unit (same bits at every width: the dot
// products keep their eight partial sums, and the other loops combine independent elements).
vectorised_fn! {
    /// [`Dynamics::eval`] of [`FloaterDynamics`].
    fn floater_eval(dy: &FloaterDynamics, theta: &[f32], t: f32, p: &[f32], out: &mut [f32]) {
        let (w2, b2) = (&theta[dy.w2()], &theta[dy.b2()]);
        let (d, k) = (dy.dim, dy.hidden);
        let mut z = vec![0.0; k];
        let mut y = vec![0.0; k];
        for (p, out) in p.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            dy.hidden_layer(theta, t, p, &mut z, &mut y);
            affine(w2, &y, t, b2, out);
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
