//! Elementwise activations: exp, tanh, sigmoid, relu and GELU, and their gradients.

use super::elementwise::{par_map, par_zip, same_f32_shape};
use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::math;
use crate::tensor::{DType, TensorMeta};

uniform! {
    pub struct UnaryUniform = UNARY "Unary" { n: u32, kind: u32 }
}

/// The activation; the discriminant is the `kind` word the kernels switch on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryKind {
    Exp = 0,
    Tanh = 1,
    Sigmoid = 2,
    Relu = 3,
    /// PyTorch's default GELU, x·Φ(x) = 0.5·x·(1 + erf(x/√2)), not the tanh approximation.
    Gelu = 4,
}

/// The activations a product can apply as it writes its output: a feed-forward's nonlinearity.
/// In a model config: `activation = "gelu"` (the default; GPT-2, BERT and so TUPE) or `"relu"`
/// (Vaswani et al., fairseq and so FLOATER's and the ODE Transformer's authors' code).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    #[default]
    Gelu,
    Relu,
}

impl Activation {
    /// The elementwise op that computes it alone (and whose backward both share).
    pub fn kind(self) -> UnaryKind {
        match self {
            Self::Gelu => UnaryKind::Gelu,
            Self::Relu => UnaryKind::Relu,
        }
    }

    /// The value of the products' override `ACTIVATION` (`shaders/matmul.wgsl`): 0 is none.
    pub(crate) fn constant(activation: Option<Self>) -> f64 {
        match activation {
            None => 0.0,
            Some(Self::Gelu) => 1.0,
            Some(Self::Relu) => 2.0,
        }
    }

    pub fn name(self) -> &'static str {
        self.kind().name()
    }
}

/// 1/√(2π), the scale of the standard normal density.
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// e^x within 2 ulp (below 1e-38 it underflows earlier than libm), written so that the
/// compiler vectorises loops over it: libm's `expf` is one call per element. Exact at ±∞
/// (∞ and 0) and NaN in, NaN out.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    // e^x = 2^n · e^r, n = round(x / ln 2), |r| ≤ ln(2)/2; Cephes' expf polynomial for e^r.
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer, ties to even
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-104.0, 89.0);
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let n_int = t.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = x - n * LN2_HI - n * LN2_LO;
    let poly = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 0.166_666_65)
        * r
        + 0.5;
    let er = poly * r * r + r + 1.0;
    // 2^n as two factors, so that n from -150 to 128 underflows and overflows as e^x does.
    let half = n_int >> 1;
    let pow2 = |e: i32| f32::from_bits(((e + 127) << 23) as u32);
    er * pow2(half) * pow2(n_int - half)
}

/// erf by Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7. WGSL has no erf, so both backends use
/// this formula (`shaders/unary.wgsl` has the same one) and GELU agrees between them.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly =
        t * (0.254_829_6 + t * (-0.284_496_7 + t * (1.421_413_8 + t * (-1.453_152 + t * 1.061_405_4))));
    let magnitude = 1.0 - poly * exp(-x * x);
    if x < 0.0 { -magnitude } else { magnitude }
}

impl UnaryKind {
    /// The uniform of both kernels for `n` elements.
    fn uniform(self, n: usize) -> UnaryUniform {
        UnaryUniform {
            n: word(n),
            kind: self as u32,
        }
    }

    #[inline(always)]
    pub(crate) fn apply(self, x: f32) -> f32 {
        match self {
            Self::Exp => exp(x),
            Self::Tanh => math::tanh(x),
            Self::Sigmoid => 1.0 / (1.0 + exp(-x)),
            Self::Relu => x.max(0.0),
            Self::Gelu => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
        }
    }

    /// The backward reads the forward output where the derivative is a function of it (cheaper,
    /// and the input may already be dead), and the input otherwise.
    fn grad_from_output(self) -> bool {
        matches!(self, Self::Exp | Self::Tanh | Self::Sigmoid)
    }

    /// d out / d x times `gy`, given the saved tensor (output or input, see `grad_from_output`).
    #[inline(always)]
    fn grad(self, saved: f32, gy: f32) -> f32 {
        match self {
            Self::Exp => gy * saved,
            Self::Tanh => gy * (1.0 - saved * saved),
            Self::Sigmoid => gy * saved * (1.0 - saved),
            Self::Relu => {
                if saved > 0.0 {
                    gy
                } else {
                    0.0
                }
            }
            Self::Gelu => {
                let cdf = 0.5 * (1.0 + erf(saved * std::f32::consts::FRAC_1_SQRT_2));
                let pdf = INV_SQRT_2PI * exp(-0.5 * saved * saved);
                gy * (cdf + saved * pdf)
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Exp => "exp",
            Self::Tanh => "tanh",
            Self::Sigmoid => "sigmoid",
            Self::Relu => "relu",
            Self::Gelu => "gelu",
        }
    }

    fn backward_name(self) -> &'static str {
        match self {
            Self::Exp => "exp_backward",
            Self::Tanh => "tanh_backward",
            Self::Sigmoid => "sigmoid_backward",
            Self::Relu => "relu_backward",
            Self::Gelu => "gelu_backward",
        }
    }
}

/// out = f(x), elementwise.
#[derive(Debug)]
pub struct Unary(pub UnaryKind);

impl Op for Unary {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        same_f32_shape(self.name(), inputs[0])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (x, out) = (inputs[0].data, &mut *outputs[0].data);
        // One loop per kind, so that the kind is not matched per element.
        match self.0 {
            UnaryKind::Exp => par_map(out, x, |x| UnaryKind::Exp.apply(x)),
            UnaryKind::Tanh => par_map(out, x, |x| UnaryKind::Tanh.apply(x)),
            UnaryKind::Sigmoid => par_map(out, x, |x| UnaryKind::Sigmoid.apply(x)),
            UnaryKind::Relu => par_map(out, x, |x| UnaryKind::Relu.apply(x)),
            UnaryKind::Gelu => par_map(out, x, |x| UnaryKind::Gelu.apply(x)),
        }
    }

    fn gpu(&self, _adapter: AdapterKind, _inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let n = outputs[0].numel();
        GpuKernels::single(Dispatch::new(
            "unary",
            &self.0.uniform(n),
            vec![Arg::In(0), Arg::Out(0)],
            grid(n, 256),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        let saved = if self.0.grad_from_output() {
            args.outputs[0]
        } else {
            args.inputs[0]
        };
        Ok(vec![Some(g.apply1(UnaryBackward(self.0), &[saved, grad])?)])
    }
}

/// gx = f'(x)·gy. Inputs: the forward output (exp, tanh, sigmoid) or input (relu, gelu), and gy.
#[derive(Debug)]
pub struct UnaryBackward(pub UnaryKind);

impl Op for UnaryBackward {
    fn name(&self) -> &'static str {
        self.0.backward_name()
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (saved, gy) = (inputs[0], inputs[1]);
        if saved.dtype != DType::F32 || saved != gy {
            return shape_err(
                self.name(),
                format!("needs two f32 tensors of one shape, got {saved} and {gy}"),
            );
        }
        Ok(vec![saved.clone()])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (saved, gy, out) = (inputs[0].data, inputs[1].data, &mut *outputs[0].data);
        match self.0 {
            UnaryKind::Exp => par_zip(out, saved, gy, |s, g| UnaryKind::Exp.grad(s, g)),
            UnaryKind::Tanh => par_zip(out, saved, gy, |s, g| UnaryKind::Tanh.grad(s, g)),
            UnaryKind::Sigmoid => par_zip(out, saved, gy, |s, g| UnaryKind::Sigmoid.grad(s, g)),
            UnaryKind::Relu => par_zip(out, saved, gy, |s, g| UnaryKind::Relu.grad(s, g)),
            UnaryKind::Gelu => par_zip(out, saved, gy, |s, g| UnaryKind::Gelu.grad(s, g)),
        }
    }

    fn gpu(&self, _adapter: AdapterKind, _inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let n = outputs[0].numel();
        GpuKernels::single(Dispatch::new(
            "unary_backward",
            &self.0.uniform(n),
            vec![Arg::In(0), Arg::In(1), Arg::Out(0)],
            grid(n, 256),
        ))
    }
}

impl Graph {
    pub fn exp(&mut self, x: TensorId) -> Result<TensorId> {
        self.apply1(Unary(UnaryKind::Exp), &[x])
    }

    pub fn tanh(&mut self, x: TensorId) -> Result<TensorId> {
        self.apply1(Unary(UnaryKind::Tanh), &[x])
    }

    pub fn sigmoid(&mut self, x: TensorId) -> Result<TensorId> {
        self.apply1(Unary(UnaryKind::Sigmoid), &[x])
    }

    pub fn relu(&mut self, x: TensorId) -> Result<TensorId> {
        self.apply1(Unary(UnaryKind::Relu), &[x])
    }

    /// GELU in PyTorch's default (erf) form.
    pub fn gelu(&mut self, x: TensorId) -> Result<TensorId> {
        self.apply1(Unary(UnaryKind::Gelu), &[x])
    }

    /// `activation(x)`, elementwise.
    pub fn activate(&mut self, activation: Activation, x: TensorId) -> Result<TensorId> {
        self.apply1(Unary(activation.kind()), &[x])
    }
}

#[cfg(test)]
mod tests {
    use super::{UnaryKind, erf, exp};
    use crate::graph::Graph;
    use crate::tensor::TensorMeta;
    use crate::testing::*;

    /// Within 2 ulp of libm over the range where e^x is a normal float, and exact at the ends.
    #[test]
    fn vectorisable_exp_matches_libm() {
        let mut worst = 0.0f32;
        for i in 0..=200_000 {
            let x = -87.0 + 175.0 * i as f32 / 200_000.0;
            let (got, want) = (exp(x), crate::math::exp(x));
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 2.5e-7, "relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }

    const KINDS: [UnaryKind; 5] = [
        UnaryKind::Exp,
        UnaryKind::Tanh,
        UnaryKind::Sigmoid,
        UnaryKind::Relu,
        UnaryKind::Gelu,
    ];

    /// kind(x * spread): parameters are uniform on [-1, 1]; `spread` widens the range tested.
    fn unary(kind: UnaryKind, shape: &'static [usize], spread: f32) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let mut x = param(g, "x", shape);
            if spread != 1.0 {
                x = g.scale(x, spread).unwrap();
            }
            let out = g.apply1(super::Unary(kind), &[x]).unwrap();
            Built { out, feeds: vec![] }
        }
    }

    #[test]
    fn erf_is_within_the_stated_error() {
        // Exact values of erf from tables (Abramowitz & Stegun table 7.1); the 3e-7 bound is the
        // formula's 1.5e-7 plus f32 rounding.
        let table: [(f32, f64); 6] = [
            (0.0, 0.0),
            (0.1, 0.112_462_916),
            (0.5, 0.520_499_878),
            (1.0, 0.842_700_793),
            (2.0, 0.995_322_265),
            (3.5, 0.999_999_257),
        ];
        for (x, want) in table {
            for (x, want) in [(x, want), (-x, -want)] {
                let got = f64::from(erf(x));
                assert!((got - want).abs() <= 3e-7, "erf({x}) = {got} vs {want}");
            }
        }
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        let shapes: [&'static [usize]; 3] = [&[37, 91, 53], &[3, 70001], &[1]];
        for kind in KINDS {
            for shape in shapes {
                check_gpu_matches_cpu(&unary(kind, shape, 1.0), 1e-5, 1e-4);
            }
            // Far tails: exp stays finite below 88; tanh and sigmoid saturate. Gradients are
            // scaled by `spread`, and so is the rounding of 1 − y² where tanh(x) is within an ulp
            // of 1 (the GPU's tanh may round to 1 where the CPU's does not).
            let spread = if kind == UnaryKind::Exp { 80.0 } else { 100.0 };
            check_gpu_matches_cpu(&unary(kind, &[5, 77], spread), 1e-5 * spread, 1e-4);
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        for kind in KINDS {
            // A small step keeps relu's kink at 0 out of every sampled difference.
            check_gradients(&unary(kind, &[3, 5], 3.0), 1e-3, 1e-2, 15);
        }
    }

    #[test]
    fn matches_pytorch() {
        for (case, kind) in [
            ("exp", UnaryKind::Exp),
            ("tanh", UnaryKind::Tanh),
            ("sigmoid", UnaryKind::Sigmoid),
            ("relu", UnaryKind::Relu),
            ("gelu", UnaryKind::Gelu),
        ] {
            check_reference("unary", case, &unary(kind, &[4, 9], 1.0), 1e-5, 1e-5);
        }
    }

    #[test]
    fn integer_input_names_the_op_and_the_shape() {
        let mut g = Graph::new();
        let ids = g.input("ids", TensorMeta::i32(&[3, 4]));
        let err = g.gelu(ids).unwrap_err().to_string();
        assert!(err.starts_with("gelu:") && err.contains("[3, 4] i32"), "{err}");
    }
}
