//! Fill: a tensor of one value. The seed of every backward pass (d loss / d loss = 1).

use super::{Arg, Dispatch, GpuKernels, In, Op, Out, Params, grid};
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::shaders;
use crate::tensor::TensorMeta;

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

    fn gpu(&self, _inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let n = outputs[0].numel();
        GpuKernels::single(Dispatch {
            shader: &shaders::FILL,
            entry: "fill",
            params: Params::new().u(n).f(self.value).words(),
            args: vec![Arg::Out(0)],
            workgroups: grid(n, 256),
        })
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
