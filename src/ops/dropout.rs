//! Inverted dropout: each element is zeroed with probability `p` and the rest scaled by
//! 1 / (1 − p), so the expectation is unchanged and evaluation needs no rescaling.
//!
//! The mask is not stored: it is a hash of the element's index, a per-step seed (an i32 `[1]`
//! input the trainer writes before each step) and a per-site salt, computed identically by the
//! CPU reference and the WGSL kernel. The backward pass is the same op applied to the upstream
//! gradient, which re-derives the same mask. PyTorch draws its masks from its own generator, so
//! there are no PyTorch reference values to match; the tests check the keep rate, the scaling,
//! GPU = CPU bit for bit, and the gradient.

use super::par::par_map_indexed;
use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::tensor::{DType, TensorMeta};

uniform! {
    pub struct DropoutUniform = DROPOUT "Params" { n: u32, threshold: u32, scale: f32, salt: u32 }
}

/// Which elements one dropout site keeps, and their factor: element `index` of a run seeded
/// `seed` is kept when `pcg(index ^ stream)` is at least `threshold`, with
/// `stream = pcg(seed ^ pcg(salt))`. The dropout op and attention's dropout on its probabilities
/// draw their masks this way; `shaders/hash.wgsl` is the same hash.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropMask {
    /// Elements whose hash is below this are dropped: p · 2³².
    pub threshold: u32,
    /// 1 / (1 − p).
    pub scale: f32,
    pub salt: u32,
}

impl DropMask {
    /// The mask of drop probability `p` at site `salt`; a `p` outside [0, 1) is an error naming
    /// the op `op` that asked for it.
    pub fn new(op: &'static str, p: f32, salt: u32) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return shape_err(op, format!("the drop probability must be in [0, 1), got {p}"));
        }
        Ok(Self {
            threshold: (f64::from(p) * 4_294_967_296.0) as u32,
            scale: 1.0 / (1.0 - p),
            salt,
        })
    }

    /// The stream of a run seeded `seed`.
    pub fn stream(&self, seed: i32) -> u32 {
        pcg(seed as u32 ^ pcg(self.salt))
    }

    /// Element `index`'s factor in the stream's mask: 0 or 1 / (1 − p). The index wraps at 2³²,
    /// as the kernels' u32 arithmetic.
    #[inline(always)]
    pub fn factor(&self, stream: u32, index: usize) -> f32 {
        if pcg(index as u32 ^ stream) >= self.threshold {
            self.scale
        } else {
            0.0
        }
    }
}

#[derive(Debug)]
pub struct Dropout(DropMask);

/// PCG's output permutation of a 32-bit state: a cheap hash with well-mixed bits.
fn pcg(v: u32) -> u32 {
    let state = v.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
    let word = ((state >> ((state >> 28) + 4)) ^ state).wrapping_mul(277_803_737);
    (word >> 22) ^ word
}

impl Op for Dropout {
    fn name(&self) -> &'static str {
        "dropout"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (x, seed) = (inputs[0], inputs[1]);
        if x.dtype != DType::F32 || seed.dtype != DType::I32 || seed.shape != [1] {
            return shape_err(
                self.name(),
                format!("takes f32 values and an i32 [1] seed, got {x} and {seed}"),
            );
        }
        Ok(vec![x.clone()])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let x = inputs[0].data;
        let mask = self.0;
        let stream = mask.stream(inputs[1].ints()[0]);
        // A dropped element is 0 even where x is not finite, as the kernel writes it.
        par_map_indexed(outputs[0].data, x, |i, x| {
            let factor = mask.factor(stream, i);
            if factor == 0.0 { 0.0 } else { x * factor }
        });
    }

    fn gpu(&self, _adapter: AdapterKind, _inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let n = outputs[0].numel();
        let uniform = DropoutUniform {
            n: word(n),
            threshold: self.0.threshold,
            scale: self.0.scale,
            salt: self.0.salt,
        };
        GpuKernels::single(Dispatch::new(
            "dropout",
            &uniform,
            vec![Arg::In(0), Arg::In(1), Arg::Out(0)],
            grid(n, 256),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None, None]);
        };
        Ok(vec![
            Some(g.apply1(Dropout(self.0), &[grad, args.inputs[1]])?),
            None,
        ])
    }
}

impl Graph {
    /// `x` with each element dropped with probability `p` (in [0, 1)) and the rest scaled by
    /// 1 / (1 − p). `seed` is an i32 `[1]` input, new every step; `salt` tells apart the sites of
    /// one graph that share it.
    pub fn dropout(&mut self, x: TensorId, seed: TensorId, p: f32, salt: u32) -> Result<TensorId> {
        let mask = DropMask::new("dropout", p, salt)?;
        self.apply1(Dropout(mask), &[x, seed])
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::testing::*;

    fn dropout(shape: &'static [usize], p: f32, seed: i32, salt: u32) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let x = param(g, "x", shape);
            let (s, feed) = int_input(g, "seed", &[1], vec![seed]);
            let out = g.dropout(x, s, p, salt).unwrap();
            Built {
                out,
                feeds: vec![feed],
            }
        }
    }

    #[test]
    fn gpu_drops_the_same_elements_as_the_cpu() {
        for (shape, p) in [
            (&[37usize, 91, 53][..], 0.1),
            (&[5, 300][..], 0.5),
            (&[70001][..], 0.9),
        ] {
            check_gpu_matches_cpu(&dropout(shape, p, -12345, 3), 0.0, 1e-7);
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_gradients(&dropout(&[4, 7], 0.3, 9, 1), 1e-2, 1e-2, 12);
    }

    /// About p of the elements are zero, the rest x / (1 − p); a new seed or another salt gives
    /// another mask; the same seed and salt give the same mask.
    #[test]
    fn keeps_one_minus_p_and_scales_the_rest() {
        let n = 200_000;
        let mask = |seed: i32, salt: u32| -> Vec<bool> {
            let mut g = Graph::new();
            let x = g.input("x", crate::TensorMeta::f32(&[n]));
            let s = g.input("seed", crate::TensorMeta::i32(&[1]));
            let out = g.dropout(x, s, 0.25, salt).unwrap();
            let params = crate::params::ParamStore::init(cpu(), &g, 0).unwrap();
            let exec = crate::exec::Executor::new(&g, &[out], &params).unwrap();
            exec.set_f32(x, &vec![2.0; n]).unwrap();
            exec.set_i32(s, &[seed]).unwrap();
            exec.run().unwrap();
            let out = exec.read_blocking(out).unwrap();
            out.iter()
                .map(|&y| {
                    assert!(y == 0.0 || y == 2.0 / 0.75, "{y}");
                    y != 0.0
                })
                .collect()
        };
        let a = mask(7, 0);
        let kept = a.iter().filter(|&&k| k).count() as f64 / n as f64;
        assert!((kept - 0.75).abs() < 0.005, "kept {kept}");
        assert_eq!(a, mask(7, 0));
        for other in [mask(8, 0), mask(7, 1)] {
            let agree = a.iter().zip(&other).filter(|(x, y)| x == y).count() as f64 / n as f64;
            // Independent masks agree on 0.75² + 0.25² = 62.5% of elements.
            assert!((agree - 0.625).abs() < 0.01, "agree {agree}");
        }
    }

    #[test]
    fn bad_probabilities_and_seeds_are_errors() {
        let mut g = Graph::new();
        let x = param(&mut g, "x", &[3]);
        let seed = g.input("seed", crate::TensorMeta::f32(&[1]));
        let err = g.dropout(x, seed, 0.1, 0).unwrap_err().to_string();
        assert!(err.contains("dropout") && err.contains("i32 [1] seed"), "{err}");
        let (seed, _) = int_input(&mut g, "s", &[1], vec![0]);
        let err = g.dropout(x, seed, 1.0, 0).unwrap_err().to_string();
        assert!(err.contains("[0, 1), got 1"), "{err}");
    }
}
