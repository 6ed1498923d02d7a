//! Fill: a tensor of one value. The seed of every backward pass (d loss / d loss = 1).

use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, grid, word};
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::tensor::TensorMeta;

uniform! {
    pub struct FillUniform = FILL "Params" { n: u32, value: f32 }
}

#[derive(Debug)]
pub struct Fill {
    pub shape: Vec<usize>,
    pub value: f32,
}

impl Op for Fill {
    fn name(&self) -> &'static str {
        "fill"
    }

    fn infer(&self, _inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![TensorMeta::f32(&self.shape)])
    }

    fn cpu(&self, _inputs: &[In], outputs: &mut [Out]) {
        outputs[0].data.fill(self.value);
    }

    fn gpu(&self, _adapter: AdapterKind, _inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let n = outputs[0].numel();
        let uniform = FillUniform {
            n: word(n),
            value: self.value,
        };
        GpuKernels::single(Dispatch::new("fill", &uniform, vec![Arg::Out(0)], grid(n, 256)))
    }
}

impl Graph {
    pub fn fill(&mut self, shape: &[usize], value: f32) -> Result<TensorId> {
        self.apply1(
            Fill {
                shape: shape.to_vec(),
                value,
            },
            &[],
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::testing::*;

    /// Fill has no inputs, so it is checked through a product with a parameter: every element of
    /// the output and of the parameter's gradient is the fill value times something known.
    fn scaled_by_fill(shape: &'static [usize]) -> impl Fn(&mut Graph) -> Built {
        on_param(shape, |g, x| {
            let c = g.fill(g.shape(x).to_vec().as_slice(), 2.5)?;
            g.mul(x, c)
        })
    }

    #[test]
    fn gpu_matches_cpu_beyond_one_workgroup_and_grid_row() {
        for shape in [&[1][..], &[37, 91, 53], &[70001]] {
            check_gpu_matches_cpu(&scaled_by_fill(shape), 0.0, 0.0);
        }
    }

    #[test]
    fn every_element_holds_the_value() {
        let mut backends = vec![cpu()];
        backends.extend(gpu());
        for backend in backends {
            let r = run(backend, &scaled_by_fill(&[300]), 1, &Overrides::default());
            // d(2.5·x)/dx = 2.5 everywhere, times the loss weights, is what the gradient holds.
            let want: Vec<f32> = upstream_weights(300, 1).iter().map(|u| 2.5 * u).collect();
            assert_close("gradient through fill", &r.grads["x"], &want, 0.0, 1e-7);
        }
    }
}
