//! Ops that move data without arithmetic: reshape (a view, no kernel).

use super::{GpuKernels, In, Op, Out, VjpArgs};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::tensor::{TensorMeta, numel};

/// Same elements, new shape. The planner gives the output the input's buffer, so nothing runs.
#[derive(Debug)]
pub struct Reshape {
    pub shape: Vec<usize>,
}

impl Op for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let x = inputs[0];
        if x.numel() != numel(&self.shape) {
            return shape_err(self.name(), format!("cannot reshape {x} to {:?}", self.shape));
        }
        Ok(vec![TensorMeta {
            shape: self.shape.clone(),
            dtype: x.dtype,
        }])
    }

    /// Views run no kernel; the copy keeps the op usable on its own (and is what a view means).
    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        outputs[0].data.copy_from_slice(inputs[0].data);
    }

    fn gpu(&self, _inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        GpuKernels::default()
    }

    fn is_view(&self) -> bool {
        true
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None]);
        };
        let in_shape = g.shape(args.inputs[0]).to_vec();
        Ok(vec![Some(g.reshape(grad, &in_shape)?)])
    }
}

impl Graph {
    pub fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        if self.shape(x) == shape {
            return Ok(x);
        }
        self.apply1(
            Reshape {
                shape: shape.to_vec(),
            },
            &[x],
        )
    }
}
