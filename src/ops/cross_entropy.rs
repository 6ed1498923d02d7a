//! Cross-entropy loss of logits against integer targets, averaged over the tokens that count,
//! and its gradient. Matches `torch.nn.functional.cross_entropy(logits, targets,
//! ignore_index=..., reduction='mean')` with two deliberate differences:
//! - when no token counts the loss is 0 (PyTorch gives NaN), so a batch of padding cannot poison
//!   training;
//! - a target outside `[0, V)` that is not the ignore index is ignored like it (PyTorch raises);
//!   the data layer validates targets, this only keeps a bad one from reading out of bounds.

use rayon::prelude::*;

use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, RowKernels, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::math;
use crate::tensor::{DType, TensorMeta};

/// Checks logits [.., V] (V > 0) against targets [..]; returns (rows, V).
fn rows_and_vocab(op: &'static str, logits: &TensorMeta, targets: &TensorMeta) -> Result<(usize, usize)> {
    let fits = logits.dtype == DType::F32
        && targets.dtype == DType::I32
        && logits.rank() == targets.rank() + 1
        && logits.shape[..targets.rank()] == targets.shape[..]
        && logits.shape[targets.rank()] > 0;
    if !fits {
        return shape_err(
            op,
            format!(
                "needs f32 logits [.., V] and i32 targets [..], got logits {logits} and targets {targets}"
            ),
        );
    }
    Ok((targets.numel(), logits.shape[targets.rank()]))
}

/// The row of the target, or `None` where the token does not count.
fn counted(target: i32, ignore_index: i32, vocab: usize) -> Option<usize> {
    if target == ignore_index {
        return None;
    }
    usize::try_from(target).ok().filter(|&t| t < vocab)
}

/// A row's max and sum of exp(x - max): softmax(x)_j = exp(x_j - max) / sum.
fn row_stats(row: &[f32]) -> (f32, f32) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (max, row.iter().map(|&x| math::exp(x - max)).sum())
}

uniform! {
    pub struct CrossEntropyUniform = CROSS_ENTROPY "Rows" { rows: u32, vocab: u32, ignore_index: i32 }
}

fn uniform(rows: usize, vocab: usize, ignore_index: i32) -> CrossEntropyUniform {
    CrossEntropyUniform {
        rows: word(rows),
        vocab: word(vocab),
        ignore_index,
    }
}

/// Inputs: logits [.., V] and targets `[..]` (i32). Outputs: the mean loss, shape `[1]`; and what
/// the backward reads, [rows + 1]: each counted row's log-sum-exp (0 for the others), then the
/// count of rows, so that the backward is one pass over the logits.
#[derive(Debug)]
pub struct CrossEntropy {
    pub ignore_index: i32,
}

impl Op for CrossEntropy {
    fn name(&self) -> &'static str {
        "cross_entropy"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (rows, _) = rows_and_vocab(self.name(), inputs[0], inputs[1])?;
        Ok(vec![TensorMeta::f32(&[1]), TensorMeta::f32(&[rows + 1])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (logits, targets) = (inputs[0].data, inputs[1].ints());
        let rows = targets.len();
        let vocab = logits.len() / rows.max(1);
        // Per-row (loss, log-sum-exp) in parallel, summed in row order: the same loss on every
        // run.
        let per_row: Vec<Option<(f64, f32)>> = logits
            .par_chunks(vocab.max(1))
            .zip(targets.par_iter())
            .map(|(row, &t)| {
                let t = counted(t, self.ignore_index, vocab)?;
                let (max, sum) = row_stats(row);
                let lse = math::ln(sum) + max;
                Some((f64::from(lse - row[t]), lse))
            })
            .collect();
        let (sum, count) = per_row
            .iter()
            .flatten()
            .fold((0.0, 0usize), |(s, c), (l, _)| (s + l, c + 1));
        let [loss, saved] = outputs else {
            unreachable!("cross_entropy has two outputs")
        };
        loss.data[0] = if count == 0 {
            0.0
        } else {
            (sum / count as f64) as f32
        };
        for (s, row) in saved.data.iter_mut().zip(&per_row) {
            *s = row.map_or(0.0, |(_, lse)| lse);
        }
        saved.data[rows] = count as f32;
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let rows = inputs[1].numel();
        let uniform = uniform(rows, inputs[0].numel() / rows.max(1), self.ignore_index);
        let per_row = RowKernels::for_adapter(adapter);
        GpuKernels {
            scratch: vec![rows.max(1)],
            dispatches: vec![
                Dispatch::new(
                    per_row.entry("row_loss", "row_loss_rows"),
                    &uniform,
                    vec![Arg::In(0), Arg::In(1), Arg::Scratch(0), Arg::Out(1)],
                    per_row.grid(rows),
                ),
                Dispatch::new(
                    "mean",
                    &uniform,
                    vec![Arg::In(1), Arg::Scratch(0), Arg::Out(0), Arg::Out(1)],
                    [1, 1, 1],
                ),
            ],
        }
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None, None]);
        };
        let backward = CrossEntropyBackward {
            ignore_index: self.ignore_index,
        };
        let (logits, targets, saved) = (args.inputs[0], args.inputs[1], args.outputs[1]);
        Ok(vec![
            Some(g.apply1(backward, &[logits, targets, grad, saved])?),
            None,
        ])
    }
}

/// d loss / d logits: inputs logits [.., V], targets `[..]`, the loss's gradient `[1]` and what the
/// forward saved ([`CrossEntropy`]'s second output); output (softmax - onehot(target)) * grad /
/// count per counted row, zeros for the others.
#[derive(Debug)]
pub struct CrossEntropyBackward {
    pub ignore_index: i32,
}

impl Op for CrossEntropyBackward {
    fn name(&self) -> &'static str {
        "cross_entropy_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (logits, targets, grad, saved) = (inputs[0], inputs[1], inputs[2], inputs[3]);
        let (rows, _) = rows_and_vocab(self.name(), logits, targets)?;
        if grad.shape != [1] || grad.dtype != DType::F32 {
            return shape_err(
                self.name(),
                format!("needs the loss gradient as f32 [1], got {grad} (logits {logits})"),
            );
        }
        if saved.shape != [rows + 1] || saved.dtype != DType::F32 {
            return shape_err(
                self.name(),
                format!(
                    "needs the forward's saved log-sum-exps and count as f32 [{}], got {saved}",
                    rows + 1
                ),
            );
        }
        Ok(vec![logits.clone()])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (logits, targets, grad) = (inputs[0].data, inputs[1].ints(), inputs[2].data[0]);
        let saved = inputs[3].data;
        let rows = targets.len();
        let vocab = logits.len() / rows.max(1);
        if vocab == 0 {
            return;
        }
        let ignore = self.ignore_index;
        // A counted row exists wherever the scale is used, so the count is at least 1 there.
        let scale = grad / saved[rows];
        outputs[0]
            .data
            .par_chunks_mut(vocab)
            .zip(logits.par_chunks(vocab))
            .zip(targets.par_iter().zip(saved))
            .for_each(|((out, row), (&t, &lse))| {
                let Some(t) = counted(t, ignore, vocab) else {
                    out.fill(0.0);
                    return;
                };
                for (j, (o, &x)) in out.iter_mut().zip(row).enumerate() {
                    let onehot = if j == t { 1.0 } else { 0.0 };
                    *o = (math::exp(x - lse) - onehot) * scale;
                }
            });
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let rows = inputs[1].numel();
        let n = inputs[0].numel();
        let uniform = uniform(rows, n / rows.max(1), self.ignore_index);
        let args = vec![Arg::In(0), Arg::In(1), Arg::In(2), Arg::In(3), Arg::Out(0)];
        GpuKernels::single(Dispatch::new("logit_grad", &uniform, args, grid(n, 256)))
    }
}

impl Graph {
    /// Mean cross-entropy of `logits` [.., V] against i32 `targets` [..], over the targets that
    /// are not `ignore_index` (and lie in [0, V)); 0 when none does. Shape `[1]`.
    pub fn cross_entropy(
        &mut self,
        logits: TensorId,
        targets: TensorId,
        ignore_index: i32,
    ) -> Result<TensorId> {
        Ok(self.apply(CrossEntropy { ignore_index }, &[logits, targets])?[0])
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::testing::*;

    const IGNORE: i32 = -100;

    /// Loss of random logits [.., vocab]; every 5th target ignored, every 11th out of range.
    fn loss(shape: &'static [usize]) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let logits = param(g, "logits", shape);
            let (rows, vocab) = shape.split_at(shape.len() - 1);
            let n = rows.iter().product();
            let mut values = random_ints(n, vocab[0] as i32, 9);
            for (r, v) in values.iter_mut().enumerate() {
                if r % 5 == 1 {
                    *v = IGNORE;
                } else if r % 11 == 2 {
                    *v = vocab[0] as i32 + r as i32;
                }
            }
            let (targets, feed) = int_input(g, "targets", rows, values);
            Built {
                out: g.cross_entropy(logits, targets, IGNORE).unwrap(),
                feeds: vec![feed],
            }
        }
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        check_each_kind_matches_cpu(&loss(&[37, 91, 53]), 1e-8, 1e-4);
        // Long rows (a vocabulary of 5000): many elements per thread of the row's workgroup.
        check_each_kind_matches_cpu(&loss(&[6, 5000]), 1e-8, 1e-4);
        check_each_kind_matches_cpu(&loss(&[300, 2]), 1e-8, 1e-4);
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_gradients(&loss(&[3, 4, 5]), 1e-2, 1e-2, 20);
    }

    /// The logits of a reference case, with its targets read from the file.
    fn reference(shape: &'static [usize], ignore_index: i32) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let logits = param(g, "logits", shape);
            let rows = &shape[..shape.len() - 1];
            let (targets, feed) = int_input(g, "targets", rows, vec![0; rows.iter().product()]);
            Built {
                out: g.cross_entropy(logits, targets, ignore_index).unwrap(),
                feeds: vec![feed],
            }
        }
    }

    #[test]
    fn matches_pytorch() {
        check_reference("cross_entropy", "plain", &reference(&[6, 7], IGNORE), 1e-5, 1e-5);
        check_reference(
            "cross_entropy",
            "ignored",
            &reference(&[3, 5, 9], IGNORE),
            1e-5,
            1e-5,
        );
        check_reference("cross_entropy", "ignore_zero", &reference(&[8, 6], 0), 1e-5, 1e-5);
        check_reference(
            "cross_entropy",
            "long_rows",
            &reference(&[3, 700], IGNORE),
            1e-5,
            1e-5,
        );
    }

    #[test]
    fn every_token_ignored_gives_zero_loss_and_zero_gradient() {
        let build = |g: &mut Graph| {
            let logits = param(g, "logits", &[2, 3, 4]);
            let (targets, feed) = int_input(g, "targets", &[2, 3], vec![IGNORE, 4, -1, IGNORE, IGNORE, 99]);
            Built {
                out: g.cross_entropy(logits, targets, IGNORE).unwrap(),
                feeds: vec![feed],
            }
        };
        let mut backends = vec![cpu()];
        backends.extend(gpu_kernel_sets().into_iter().map(|(_, gpu)| gpu));
        for backend in backends {
            let r = run(backend, &build, 2, &Overrides::default());
            assert_eq!(r.out, [0.0]);
            assert_eq!(r.grads["logits"], [0.0; 24]);
        }
    }

    #[test]
    fn bad_shapes_name_the_op_and_the_shapes() {
        let mut g = Graph::new();
        let logits = param(&mut g, "logits", &[4, 10]);
        let targets = g.input("targets", crate::TensorMeta::i32(&[5]));
        let e = g.cross_entropy(logits, targets, IGNORE).unwrap_err().to_string();
        assert!(
            e.starts_with("cross_entropy:") && e.contains("[4, 10]") && e.contains("[5] i32"),
            "{e}"
        );
        let float_targets = param(&mut g, "float_targets", &[4]);
        let e = g
            .cross_entropy(logits, float_targets, IGNORE)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cross_entropy:") && e.contains("[4, 10]") && e.contains("[4]"),
            "{e}"
        );
        let targets = g.input("targets4", crate::TensorMeta::i32(&[4]));
        let grad = param(&mut g, "grad", &[2]);
        let saved = param(&mut g, "saved", &[5]);
        let backward = |g: &mut Graph, grad, saved| {
            g.apply1(
                super::CrossEntropyBackward { ignore_index: IGNORE },
                &[logits, targets, grad, saved],
            )
            .unwrap_err()
            .to_string()
        };
        let e = backward(&mut g, grad, saved);
        assert!(
            e.starts_with("cross_entropy_backward:") && e.contains("[2]") && e.contains("[4, 10]"),
            "{e}"
        );
        let grad = param(&mut g, "grad1", &[1]);
        let e = backward(&mut g, grad, grad);
        assert!(
            e.starts_with("cross_entropy_backward:") && e.contains("f32 [5], got [1]"),
            "{e}"
        );
    }
}
