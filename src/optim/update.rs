//! The three ops of an AdamW step over packed allocations: the squared norm of each chunk of
//! the gradients, the step's clipping factor from them, and the update of every parameter. Each
//! reads a table of chunks (`Span`s) so that one dispatch covers every parameter of an
//! allocation; the optimizer (`adam.rs`) builds the tables and appends the ops to a plan.

use std::rc::Rc;

use rayon::prelude::*;

use super::AdamW;
use crate::error::{Error, Result};
use crate::kernel::{AdapterKind, uniform};
use crate::ops::{Arg, Dispatch, GpuKernels, In, Op, Out, grid, word};
use crate::tensor::TensorMeta;

/// Values a workgroup of the update kernels covers (256 threads × 16), and so the most one
/// chunk of the table holds.
const CHUNK: usize = 4096;

/// Marks a chunk of a parameter that decays (bit 31 of its length word).
const DECAYS: u32 = 1 << 31;

/// Where a run of values of one parameter lies in the allocations an update dispatch binds,
/// in words: a whole parameter, or a workgroup's chunk of one (at most [`CHUNK`] values).
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub(super) grad: usize,
    pub(super) param: usize,
    /// Where its first and second moments start: m and v share one layout.
    pub(super) moments: usize,
    pub(super) len: usize,
    pub(super) decays: bool,
}

impl Span {
    /// Its row of the chunk table the kernels read (`adam.wgsl`).
    pub(super) fn words(&self) -> [u32; 4] {
        let decays = if self.decays { DECAYS } else { 0 };
        [
            word(self.grad),
            word(self.param),
            word(self.moments),
            word(self.len) | decays,
        ]
    }
}

/// Whole parameters cut into chunks, in order.
pub(super) fn chunked(parameters: &[Span]) -> Vec<Span> {
    parameters
        .iter()
        .flat_map(|s| {
            (0..s.len).step_by(CHUNK).map(move |at| Span {
                grad: s.grad + at,
                param: s.param + at,
                moments: s.moments + at,
                len: CHUNK.min(s.len - at),
                decays: s.decays,
            })
        })
        .collect()
}

uniform! {
    pub(crate) struct SumSquaresUniform = ADAM "SumSquares" { n_chunks: u32, first_slot: u32 }
}

/// The squared L2 norm of each chunk of the gradients in one allocation, written into slots
/// `first_slot..` of a shared buffer. Inputs: the gradients' allocation and the chunk table.
/// A dispatch per gradient was 52 per step, each a few microseconds of a GPU's fixed cost.
#[derive(Debug)]
pub(super) struct SumSquares {
    pub(super) chunks: Rc<Vec<Span>>,
    pub(super) first_slot: usize,
}

impl Op for SumSquares {
    fn name(&self) -> &'static str {
        "sum_squares"
    }

    fn infer(&self, _inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![TensorMeta::f32(&[self.first_slot + self.chunks.len()])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let grad = inputs[0].data;
        let slots = &mut outputs[0].data[self.first_slot..][..self.chunks.len()];
        // A fixed split summed in order: rayon's own `sum` splits the work by what threads are
        // free, so its rounding (and with clipping, the whole run) would vary from run to run.
        slots
            .par_iter_mut()
            .zip(self.chunks.par_iter())
            .for_each(|(slot, c)| {
                *slot = grad[c.grad..][..c.len].iter().map(|g| g * g).sum();
            });
    }

    fn gpu(&self, _adapter: AdapterKind, _inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let uniform = SumSquaresUniform {
            n_chunks: word(self.chunks.len()),
            first_slot: word(self.first_slot),
        };
        GpuKernels::single(Dispatch::new(
            "sum_squares",
            &uniform,
            vec![Arg::In(0), Arg::In(1), Arg::Out(0)],
            grid(self.chunks.len(), 1),
        ))
    }
}

uniform! {
    pub(crate) struct ClipUniform = ADAM "Clip" { n_norms: u32, max_norm: f32 }
}

/// The step's clipping factor from the squared norms of every chunk, computed once (each update
/// thread read all the norms before, 52 loads per parameter value in the peers' step), and the
/// squared global norm: [factor, norm²]. The factor is that sum (inf or NaN) when it is not
/// finite.
#[derive(Debug)]
pub(super) struct ClipFactor {
    pub(super) max_norm: Option<f32>,
}

impl Op for ClipFactor {
    fn name(&self) -> &'static str {
        "clip_factor"
    }

    fn infer(&self, _inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![TensorMeta::f32(&[2])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let total = inputs[0].data.iter().sum::<f32>();
        outputs[0].data[0] = if total.is_finite() {
            clip_factor(self.max_norm, total)
        } else {
            total
        };
        outputs[0].data[1] = total;
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let uniform = ClipUniform {
            n_norms: word(inputs[0].numel()),
            max_norm: self.max_norm.unwrap_or(0.0),
        };
        GpuKernels::single(Dispatch::new(
            "clip_factor",
            &uniform,
            vec![Arg::In(0), Arg::Out(0)],
            [1, 1, 1],
        ))
    }
}

uniform! {
    pub(crate) struct AdamUniform = ADAM "Adam" {
        n_chunks: u32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    }
}

/// The in-place AdamW update of every parameter in one allocation.
/// Inputs: the gradients' allocation, the chunk table, the step's clipping factor
/// ([`ClipFactor`]), the schedule [lr, 1-β1^t, 1-β2^t].
/// Outputs (read and written): the parameters', first moments' and second moments' allocations.
#[derive(Debug)]
pub(super) struct AdamUpdate {
    pub(super) config: AdamW,
    pub(super) chunks: Rc<Vec<Span>>,
}

impl Op for AdamUpdate {
    fn name(&self) -> &'static str {
        "adam_update"
    }

    fn infer(&self, _inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Err(Error::Graph(
            "adam_update updates allocations the optimizer binds; it is not a graph op".into(),
        ))
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let c = &self.config;
        let (grad, clip, schedule) = (inputs[0].data, inputs[2].data[0], inputs[3].data);
        if !clip.is_finite() {
            // A diverged step changes nothing (the trainer then stops with an error).
            return;
        }
        let (lr, bias1, bias2) = (schedule[0], schedule[1], schedule[2]);
        let [param, m, v] = outputs else {
            unreachable!("adam_update has three outputs")
        };
        for chunk in self.chunks.iter() {
            let wd = if chunk.decays { c.weight_decay } else { 0.0 };
            let param = &mut param.data[chunk.param..][..chunk.len];
            let m = &mut m.data[chunk.moments..][..chunk.len];
            let v = &mut v.data[chunk.moments..][..chunk.len];
            let grad = &grad[chunk.grad..][..chunk.len];
            for (((p, m), v), &g) in param.iter_mut().zip(m).zip(v).zip(grad) {
                let g = g * clip;
                *m = c.beta1 * *m + (1.0 - c.beta1) * g;
                *v = c.beta2 * *v + (1.0 - c.beta2) * g * g;
                let denom = v.sqrt() / bias2.sqrt() + c.eps;
                *p = *p * (1.0 - lr * wd) - (lr / bias1) * *m / denom;
            }
        }
    }

    fn gpu(&self, _adapter: AdapterKind, _inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let c = &self.config;
        let uniform = AdamUniform {
            n_chunks: word(self.chunks.len()),
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: c.weight_decay,
        };
        GpuKernels::single(Dispatch::new(
            "adam_step",
            &uniform,
            vec![
                Arg::In(0),
                Arg::In(1),
                Arg::In(2),
                Arg::In(3),
                Arg::Out(0),
                Arg::Out(1),
                Arg::Out(2),
            ],
            grid(self.chunks.len(), 1),
        ))
    }
}

/// torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6), at most 1.
fn clip_factor(max_norm: Option<f32>, squared_norm: f32) -> f32 {
    match max_norm {
        Some(max) if max > 0.0 => (max / (squared_norm.sqrt() + 1e-6)).min(1.0),
        _ => 1.0,
    }
}
