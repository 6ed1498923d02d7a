//! What an op is to the graph: a shape rule, a CPU reference, GPU dispatches and a
//! vector-Jacobian product emitted as more graph ops. Beside [`Graph`], which holds ops; the ops
//! themselves live above, in `crate::ops`.

use std::fmt;

use super::{Graph, TensorId};
use crate::arithmetic::Arithmetic;
use crate::error::{Error, Result};
use crate::kernel::{AdapterKind, GpuKernels, In, Out};
use crate::tensor::TensorMeta;

/// What the VJP rule of a node is given.
pub struct VjpArgs<'a> {
    pub inputs: &'a [TensorId],
    pub outputs: &'a [TensorId],
    /// Gradient of the loss with respect to each output; `None` where no gradient flows.
    pub grads: &'a [Option<TensorId>],
}

pub trait Op: fmt::Debug {
    fn name(&self) -> &'static str;

    /// The shape rule: output metadata from input metadata, or an error naming the shapes.
    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>>;

    /// The CPU reference: the semantics every GPU kernel is tested against.
    fn cpu(&self, inputs: &[In], outputs: &mut [Out]);

    /// [`Op::cpu`] in the CPU backend's arithmetic: an op with matrix products (whose order the
    /// arithmetic sets) runs them in it; every other op's sums have one order already.
    fn cpu_in(&self, arithmetic: Arithmetic, inputs: &[In], outputs: &mut [Out]) {
        let _ = arithmetic;
        self.cpu(inputs, outputs);
    }

    /// The GPU dispatches that compute the same outputs.
    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels;

    /// Other dispatches that compute `gpu`'s outputs bit for bit (the same additions in the same
    /// order) with the same scratch buffers: a GPU backend that tunes its kernels times them
    /// beside `gpu`'s on its adapter and runs the fastest. Numbers never depend on which runs.
    /// The timing runs each candidate several times before the program's first run, so an op
    /// that updates a buffer in place (reads what it writes) must not offer any.
    fn gpu_alternatives(
        &self,
        _adapter: AdapterKind,
        _inputs: &[&TensorMeta],
        _outputs: &[&TensorMeta],
    ) -> Vec<GpuKernels> {
        Vec::new()
    }

    /// Gradients of the loss with respect to each input, emitted as graph ops.
    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let _ = (g, args);
        Err(Error::Graph(format!("{} has no gradient", self.name())))
    }

    /// The floating-point operations one execution does in its products (a multiply-add counts
    /// 2), as the shapes give them: what the profile divides by time for GFLOP/s. `None` (the
    /// default) for ops whose cost is their memory traffic: elementwise ops, norms, copies.
    fn flops(&self, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> Option<u64> {
        let _ = (inputs, outputs);
        None
    }

    /// True for ops whose single output is a view of input 0 (reshape): it shares the input's
    /// buffer and no kernel runs.
    fn is_view(&self) -> bool {
        false
    }
}
