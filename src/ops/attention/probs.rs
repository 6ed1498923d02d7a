//! The attention probabilities, for inspection.

use rayon::prelude::*;

use super::cpu::{Block, OnBlock, Problem, forward_scratch};
use super::{Arg, Attention, Dims, Dispatch, GpuKernels, In, Op, Out, grid};
use crate::error::Result;
use crate::kernel::AdapterKind;
use crate::tensor::TensorMeta;

/// The attention probabilities `[B, H, Lq, Lk]` for inspection (the visualizer): the same
/// softmax as [`Attention`], 0 for hidden keys and for rows with no visible key. Inputs: q, k,
/// then the bias's inputs and key_mask as the wrapped [`Attention`] says (no v). No gradient.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionProbs(pub Attention);

impl Op for AttentionProbs {
    fn name(&self) -> &'static str {
        "attention_probs"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let d = self.0.check(self.name(), inputs, false)?;
        Ok(vec![TensorMeta::f32(&[d.b, d.h, d.lq, d.lk])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let pr = Problem::new(self.0, inputs, false);
        let Dims { lq, lk, .. } = pr.d;
        outputs[0].data.par_chunks_mut(lq * lk).enumerate().for_each_init(
            || forward_scratch(pr.d),
            |scratch, (bh, probs)| pr.for_each_block(bh, &mut Probabilities { scratch, probs }),
        );
    }

    /// q·kᵀ.
    fn flops(&self, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> Option<u64> {
        Some(self.0.dims(inputs, 2).products())
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let d = self.0.dims(inputs, 2);
        let [bias, mask, buckets] = self.0.optional_args(2);
        GpuKernels::single(Dispatch::new(
            "attention_probs",
            &self.0.uniform(d),
            // q stands in for v, which the probabilities do not need.
            vec![
                Arg::In(0),
                Arg::In(1),
                Arg::In(0),
                bias,
                mask,
                buckets,
                Arg::Out(0),
            ],
            grid(d.rows(), 64),
        ))
    }
}

/// The probabilities of one (b, h) block by block.
struct Probabilities<'s> {
    scratch: &'s mut [f32],
    /// The (b, h)'s `[Lq, Lk]`.
    probs: &'s mut [f32],
}

impl OnBlock for Probabilities<'_> {
    #[inline(always)]
    fn run<const W: usize>(&mut self, pr: &Problem<'_>, block: Block) {
        let lk = pr.d.lk;
        let keys = pr.keys(block);
        let (p, x_t) = self.scratch.as_chunks_mut::<W>().0.split_at_mut(lk);
        let p = &mut p[..keys];
        pr.probs(block, &mut x_t[..pr.d.dh], p, &mut [0.0; W][..block.n]);
        for (l, probs) in self.probs[block.first * lk..][..block.n * lk]
            .chunks_exact_mut(lk)
            .enumerate()
        {
            let (seen, hidden) = probs.split_at_mut(keys);
            for (x, p) in seen.iter_mut().zip(p.iter()) {
                *x = p[l];
            }
            hidden.fill(0.0);
        }
    }
}
