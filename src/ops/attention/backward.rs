//! The gradient of attention as one op: dq, dk, dv and the bias's gradient, from probabilities
//! recomputed with the forward's lse.

use rayon::prelude::*;

use super::cpu::{BackwardScratch, BiasGradient, Problem, backward_head};
use super::{Arg, Attention, BiasKind, Dims, Dispatch, GpuKernels, In, Kernels, Op, Out, grid};
use crate::error::{Result, shape_err};
use crate::kernel::AdapterKind;
use crate::tensor::{TensorMeta, list_metas};

/// The gradient of [`Attention`]. Inputs: the forward's inputs (q, k, v, the bias's inputs,
/// key_mask?, seed?), then out, lse and dout. Outputs: dq (like q), dk, dv (like k), then for a dense
/// bias dbias `[H, Lq, Lk]` (summed over the batch), for a relative bias each query row's dS
/// summed per bucket, `[B, H, Lq, buckets]` (see `relative.rs`). With P = exp(s − lse) recomputed, Z
/// the dropout mask (1 without dropout) and D = rowsum(dout ∘ out): dV = (Z ∘ P)ᵀ dout,
/// dS = P ∘ (Z ∘ dout·vᵀ − D), dq = dS k · scale, dk = dSᵀ q · scale, dbias = Σ_b dS.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionBackward(pub Attention);

impl AttentionBackward {
    /// How many of the inputs are the forward's.
    fn forward_inputs(&self) -> usize {
        3 + self.0.optional_count()
    }
}

impl Op for AttentionBackward {
    fn name(&self) -> &'static str {
        "attention_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let fwd = self.forward_inputs();
        if inputs.len() != fwd + 3 {
            return shape_err(
                self.name(),
                format!(
                    "needs {} inputs, got {}: {}",
                    fwd + 3,
                    inputs.len(),
                    list_metas(inputs)
                ),
            );
        }
        let d = self.0.check(self.name(), &inputs[..fwd], true)?;
        let (out, lse, dout) = (inputs[fwd], inputs[fwd + 1], inputs[fwd + 2]);
        if out != inputs[0] || dout != inputs[0] || *lse != TensorMeta::f32(&[d.b, d.h, d.lq]) {
            return shape_err(
                self.name(),
                format!(
                    "needs out and dout like q {} and lse [B, H, Lq]; got out {out}, lse {lse}, dout {dout}",
                    inputs[0]
                ),
            );
        }
        let mut metas = vec![inputs[0].clone(), inputs[1].clone(), inputs[1].clone()];
        match self.0.bias {
            BiasKind::None => {}
            BiasKind::Dense => metas.push(TensorMeta::f32(&[d.h, d.lq, d.lk])),
            BiasKind::Bucketed { trained: true } => metas.push(TensorMeta::f32(&[d.b, d.h, d.lq, d.buckets])),
            BiasKind::Bucketed { trained: false } => {}
        }
        Ok(metas)
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let pr = Problem::new(self.0, inputs, true);
        let fwd = self.forward_inputs();
        let (out, lse, dout) = (inputs[fwd].data, inputs[fwd + 1].data, inputs[fwd + 2].data);
        let Dims { lq, lk, dh, .. } = pr.d;
        let (grads, bias_grad) = outputs.split_at_mut(3);
        let [dq, dk, dv] = grads else {
            unreachable!("attention_backward has dq, dk, dv")
        };
        let saved = (lse, out, dout);
        let scratch = || BackwardScratch::new(pr.d);
        // The relative bias's per-row sums of one (b, h) are written by that (b, h)'s task.
        let by_bucket: Vec<Option<&mut [f32]>> = match (self.0.bias, bias_grad.first_mut()) {
            (BiasKind::Bucketed { trained: true }, Some(sums)) => {
                sums.data.chunks_mut(lq * pr.d.buckets).map(Some).collect()
            }
            _ => (0..pr.d.b * pr.d.h).map(|_| None).collect(),
        };
        // dq, dk and dv of one (b, h) depend only on that (b, h).
        dq.data
            .par_chunks_mut(lq * dh)
            .zip(dk.data.par_chunks_mut(lk * dh))
            .zip(dv.data.par_chunks_mut(lk * dh))
            .zip(by_bucket)
            .enumerate()
            .for_each_init(scratch, |s, (bh, (grads, by_bucket))| {
                backward_head(&pr, bh, saved, s, grads, by_bucket)
            });
        if let (BiasKind::Dense, [dbias]) = (self.0.bias, bias_grad) {
            let Dims {
                b: batch, h: heads, ..
            } = pr.d;
            // Each head sums dS over the batch in order.
            dbias
                .data
                .par_chunks_mut(lq * lk)
                .enumerate()
                .for_each_init(scratch, |s, (h, db)| {
                    db.fill(0.0);
                    for b in 0..batch {
                        let mut sums = BiasGradient {
                            saved,
                            scratch: s,
                            dbias: db,
                        };
                        pr.for_each_block(b * heads + h, &mut sums);
                    }
                });
        }
    }

    /// Five products of the forward's size: the scores recomputed, dout·vᵀ, pᵀ·dout, dS·k and
    /// dSᵀ·q.
    fn flops(&self, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> Option<u64> {
        Some(5 * self.0.dims(inputs, 3).products())
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let d = self.0.dims(inputs, 3);
        let kernels = Kernels::choose(adapter, &d);
        let fwd = self.forward_inputs();
        let [bias, mask, buckets] = self.0.optional_args(3);
        let (out, lse, dout) = (Arg::In(fwd), Arg::In(fwd + 1), Arg::In(fwd + 2));
        let uniform = self.0.uniform(d);
        let dispatch = |entry, args, workgroups| Dispatch::new(entry, &uniform, args, workgroups);
        let relative = matches!(self.0.bias, BiasKind::Bucketed { .. });
        let trained = self.0.bias == BiasKind::Bucketed { trained: true };
        // lse and D per row, then 1/0 visibility per key, then (relative bias) the bucket of
        // each offset or pair, so that the passes after it need one buffer less.
        let offsets = d.bucket_list();
        let stream = usize::from(self.0.dropout.is_some());
        let mut scratch = vec![2 * d.rows() + d.b * d.lk + if relative { offsets } else { 0 } + stream];
        // The stats pass copies the dropout stream for the passes after it; q stands in for an
        // absent seed.
        let seed = Arg::In(self.0.slots(3).seed.unwrap_or(0));
        // The dq pass writes a trained relative bias's per-row sums; without one it still binds
        // a writable buffer there, and a one-word scratch is one it never writes.
        let by_bucket = if trained {
            Arg::Out(3)
        } else {
            scratch.push(1);
            Arg::Scratch(1)
        };
        let shared = [Arg::In(0), Arg::In(1), Arg::In(2), bias, Arg::Scratch(0), dout];
        let mut dispatches = vec![
            dispatch(
                "attention_backward_stats",
                vec![out, lse, dout, mask, buckets, Arg::Scratch(0), seed],
                grid(d.rows().max(d.b * d.lk).max(offsets), 64),
            ),
            dispatch(
                kernels.entry("attention_backward_dkdv", "attention_backward_dkdv_rows"),
                [&shared[..], &[Arg::Out(1), Arg::Out(2)]].concat(),
                kernels.grid(d.b * d.h, d.lk),
            ),
            dispatch(
                kernels.entry("attention_backward_dq", "attention_backward_dq_rows"),
                [&shared[..], &[Arg::Out(0), by_bucket]].concat(),
                kernels.grid(d.b * d.h, d.lq),
            ),
        ];
        if self.0.bias == BiasKind::Dense {
            dispatches.push(dispatch(
                "attention_backward_dbias",
                [&shared[..], &[Arg::Out(3)]].concat(),
                grid(d.h * d.lq * d.lk, 64),
            ));
        }
        GpuKernels { scratch, dispatches }
    }
}
