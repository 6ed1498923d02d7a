//! Attention heads in and out of the packed layout a projection writes: `x [B, L, P·H·Dh]` (P
//! parts side by side, q|k|v for self-attention) split into P tensors `[B, H, L, Dh]`, and
//! the inverse. Each is one pass over the data, where slicing a part out, reshaping and
//! permuting took two (and the gradient of three slices was three zero-padded full copies
//! added together).

use rayon::prelude::*;

use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::tensor::{TensorMeta, list_metas};

uniform! {
    /// `split_heads`' and `merge_heads`' uniform (`Heads` in `shape.wgsl`).
    pub struct HeadsUniform = SHAPE "Heads" {
        n: u32,
        heads: u32,
        len: u32,
        head_dim: u32,
        row: u32,
        offset: u32,
    }
}

/// Which way the data moves: out of the packed tensor, or into it.
#[derive(Clone, Copy, Debug)]
enum Direction {
    Split,
    Merge,
}

/// The sizes both ops share: batch, length, parts, heads and head width.
#[derive(Clone, Copy, Debug)]
struct Layout {
    batch: usize,
    len: usize,
    parts: usize,
    heads: usize,
    head_dim: usize,
}

impl Layout {
    /// Where row `row` of part `part` (its index in `[B, H, L]`, the `Dh` values of one head at
    /// one position) starts in the packed `[B, L, P·H·Dh]` tensor.
    fn packed_row_start(&self, part: usize, row: usize) -> usize {
        let (l, bh) = (row % self.len, row / self.len);
        let (h, b) = (bh % self.heads, bh / self.heads);
        (b * self.len + l) * self.parts * self.heads * self.head_dim + (part * self.heads + h) * self.head_dim
    }

    fn part_shape(&self) -> [usize; 4] {
        [self.batch, self.heads, self.len, self.head_dim]
    }

    /// The dispatches that move every part: for q|k|v (three parts) one of the three-part entry
    /// point, otherwise one per part, each over one part's elements.
    fn dispatches(&self, direction: Direction) -> GpuKernels {
        let n = self.batch * self.heads * self.len * self.head_dim;
        let uniform = |part: usize| HeadsUniform {
            n: word(n),
            heads: word(self.heads),
            len: word(self.len),
            head_dim: word(self.head_dim),
            row: word(self.parts * self.heads * self.head_dim),
            offset: word(part * self.heads * self.head_dim),
        };
        if self.parts == 3 {
            let (entry, args) = match direction {
                Direction::Split => (
                    "split_heads3",
                    vec![Arg::In(0), Arg::Out(0), Arg::Out(1), Arg::Out(2)],
                ),
                Direction::Merge => (
                    "merge_heads3",
                    vec![Arg::In(0), Arg::In(1), Arg::In(2), Arg::Out(0)],
                ),
            };
            return GpuKernels::single(Dispatch::new(entry, &uniform(0), args, grid(n, 256)));
        }
        let dispatches = (0..self.parts)
            .map(|part| {
                let (entry, args) = match direction {
                    Direction::Split => ("split_heads", vec![Arg::In(0), Arg::Out(part)]),
                    Direction::Merge => ("merge_heads", vec![Arg::In(part), Arg::Out(0)]),
                };
                Dispatch::new(entry, &uniform(part), args, grid(n, 256))
            })
            .collect();
        GpuKernels {
            scratch: Vec::new(),
            dispatches,
        }
    }
}

/// `x [B, L, P·H·Dh]` → P outputs `[B, H, L, Dh]`: part p is the columns `p·H·Dh ..
/// (p + 1)·H·Dh`, head h of it the `Dh` columns from `h·Dh`.
#[derive(Debug)]
pub struct SplitHeads {
    pub parts: usize,
    pub heads: usize,
}

impl SplitHeads {
    fn layout(&self, x: &TensorMeta) -> Layout {
        Layout {
            batch: x.shape[0],
            len: x.shape[1],
            parts: self.parts,
            heads: self.heads,
            head_dim: x.shape[2] / (self.parts * self.heads),
        }
    }
}

impl Op for SplitHeads {
    fn name(&self) -> &'static str {
        "split_heads"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let x = inputs[0];
        let columns = self.parts * self.heads;
        if x.rank() != 3 || columns == 0 || !x.shape[2].is_multiple_of(columns) || x.shape[2] == 0 {
            return shape_err(
                self.name(),
                format!(
                    "cannot split {x} into {} parts of {} heads (want [batch, len, parts · heads · head width])",
                    self.parts, self.heads
                ),
            );
        }
        let shape = self.layout(x).part_shape();
        Ok(vec![
            TensorMeta {
                shape: shape.to_vec(),
                dtype: x.dtype,
            };
            self.parts
        ])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let layout = self.layout(inputs[0].meta);
        let (x, dh) = (inputs[0].data, layout.head_dim);
        for (part, out) in outputs.iter_mut().enumerate() {
            out.data.par_chunks_mut(dh).enumerate().for_each(|(row, run)| {
                let from = layout.packed_row_start(part, row);
                run.copy_from_slice(&x[from..from + dh]);
            });
        }
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        self.layout(inputs[0]).dispatches(Direction::Split)
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        if args.grads.iter().all(Option::is_none) {
            return Ok(vec![None]);
        }
        let mut grads = Vec::with_capacity(self.parts);
        for (&grad, &out) in args.grads.iter().zip(args.outputs) {
            grads.push(match grad {
                Some(grad) => grad,
                None => {
                    let shape = g.shape(out).to_vec();
                    g.fill(&shape, 0.0)?
                }
            });
        }
        Ok(vec![Some(g.merge_heads(&grads)?)])
    }
}

/// P tensors `[B, H, L, Dh]` → `[B, L, P·H·Dh]`, the inverse of [`SplitHeads`] (with P = 1,
/// the heads of one attention merged back into `[B, L, D]`).
#[derive(Debug)]
pub struct MergeHeads;

impl MergeHeads {
    fn layout(inputs: &[&TensorMeta]) -> Layout {
        let [batch, heads, len, head_dim] = inputs[0].shape[..] else {
            unreachable!("merge_heads' inputs were checked to be [B, H, L, Dh]")
        };
        Layout {
            batch,
            len,
            parts: inputs.len(),
            heads,
            head_dim,
        }
    }
}

impl Op for MergeHeads {
    fn name(&self) -> &'static str {
        "merge_heads"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let Some(first) = inputs.first() else {
            return shape_err(self.name(), "needs at least one input");
        };
        let empty_rows = first.rank() == 4 && first.shape[1] * first.shape[3] == 0;
        if first.rank() != 4 || empty_rows || inputs.iter().any(|m| m != first) {
            return shape_err(
                self.name(),
                format!(
                    "cannot merge {}: want one or more [batch, heads, len, head width] of one shape, with heads and width above 0",
                    list_metas(inputs)
                ),
            );
        }
        let [b, h, l, dh] = first.shape[..] else {
            unreachable!("rank checked")
        };
        Ok(vec![TensorMeta {
            shape: vec![b, l, inputs.len() * h * dh],
            dtype: first.dtype,
        }])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let metas: Vec<&TensorMeta> = inputs.iter().map(|x| x.meta).collect();
        let layout = Self::layout(&metas);
        let (dh, heads) = (layout.head_dim, layout.heads);
        // A packed row `(b, l)` holds, for every part and head, one run of the part's row `(b, h, l)`.
        let packed_row = layout.parts * heads * dh;
        outputs[0]
            .data
            .par_chunks_mut(packed_row)
            .enumerate()
            .for_each(|(bl, packed)| {
                let (b, l) = (bl / layout.len, bl % layout.len);
                for (part, x) in inputs.iter().enumerate() {
                    for h in 0..heads {
                        let from = ((b * heads + h) * layout.len + l) * dh;
                        let to = (part * heads + h) * dh;
                        packed[to..to + dh].copy_from_slice(&x.data[from..from + dh]);
                    }
                }
            });
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        Self::layout(inputs).dispatches(Direction::Merge)
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None; args.inputs.len()]);
        };
        let heads = g.shape(args.inputs[0])[1];
        let grads = g.split_heads(grad, args.inputs.len(), heads)?;
        Ok(grads.into_iter().map(Some).collect())
    }
}

impl Graph {
    /// `x [B, L, parts·heads·Dh]` as `parts` tensors `[B, heads, L, Dh]` (q, k and v from one
    /// fused projection: `parts` = 3).
    pub fn split_heads(&mut self, x: TensorId, parts: usize, heads: usize) -> Result<Vec<TensorId>> {
        self.apply(SplitHeads { parts, heads }, &[x])
    }

    /// Tensors `[B, H, L, Dh]` of one shape side by side as `[B, L, parts·H·Dh]`.
    pub fn merge_heads(&mut self, parts: &[TensorId]) -> Result<TensorId> {
        self.apply1(MergeHeads, parts)
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::testing::*;

    /// Every part of `x [batch, len, parts·heads·dh]` split, then joined along the batch axis so
    /// that one output shows them all.
    fn split(shape: &'static [usize], parts: usize, heads: usize) -> impl Fn(&mut Graph) -> Built {
        on_param(shape, move |g, x| {
            let split = g.split_heads(x, parts, heads)?;
            g.concat(&split, 0)
        })
    }

    /// `parts` parameters `[b, h, l, dh]` merged.
    fn merge(parts: usize, shape: &'static [usize]) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let xs: Vec<_> = (0..parts).map(|i| param(g, &format!("x{i}"), shape)).collect();
            Built {
                out: g.merge_heads(&xs).unwrap(),
                feeds: vec![],
            }
        }
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        // Copies are exact: the backends must agree bit for bit.
        check_gpu_matches_cpu(&split(&[3, 7, 3 * 5 * 3], 3, 5), 0.0, 0.0);
        check_gpu_matches_cpu(&split(&[2, 9, 2 * 3 * 7], 2, 3), 0.0, 0.0);
        check_gpu_matches_cpu(&split(&[5, 3, 11], 1, 1), 0.0, 0.0);
        check_gpu_matches_cpu(&merge(3, &[3, 5, 7, 3]), 0.0, 0.0);
        check_gpu_matches_cpu(&merge(1, &[2, 4, 9, 5]), 0.0, 0.0);
        // The model's shape: q|k|v of 16 × 128 tokens, 4 heads of 32.
        check_gpu_matches_cpu(&split(&[16, 128, 384], 3, 4), 0.0, 0.0);
        check_gpu_matches_cpu(&merge(1, &[16, 4, 128, 32]), 0.0, 0.0);
    }

    /// Split then merge is the identity, and part p, head h, position l of the split is the
    /// `dh` values at column `(p·heads + h)·dh` of row l.
    #[test]
    fn split_picks_each_head_and_merge_puts_it_back() {
        let (b, l, parts, heads, dh) = (2, 3, 3, 2, 4);
        let x: Vec<f32> = (0..b * l * parts * heads * dh).map(|i| i as f32).collect();
        let build = |g: &mut Graph| {
            let x = param(g, "x", &[b, l, parts * heads * dh]);
            let split = g.split_heads(x, parts, heads).unwrap();
            let merged = g.merge_heads(&split).unwrap();
            let mut all = split;
            all.push(g.reshape(merged, &[b, heads * parts, l, dh]).unwrap());
            Built {
                out: g.concat(&all, 1).unwrap(),
                feeds: vec![],
            }
        };
        let mut backends = vec![cpu()];
        backends.extend(gpu());
        for backend in backends {
            let over = Overrides {
                params: [("x".to_string(), x.clone())].into(),
                ..Default::default()
            };
            let out = run(backend.clone(), &build, 1, &over).out;
            // out [b, parts·heads (split) + parts·heads (merged, reshaped), l, dh]
            let at = |bi: usize, j: usize, li: usize| {
                let start = ((bi * 2 * parts * heads + j) * l + li) * dh;
                out[start..start + dh].to_vec()
            };
            for bi in 0..b {
                for p in 0..parts {
                    for h in 0..heads {
                        for li in 0..l {
                            let col = (p * heads + h) * dh;
                            let start = (bi * l + li) * parts * heads * dh + col;
                            assert_eq!(
                                at(bi, p * heads + h, li),
                                x[start..start + dh],
                                "part {p} head {h} at {bi},{li} on {}",
                                backend.describe()
                            );
                        }
                    }
                }
            }
            let merged: Vec<f32> = (0..b)
                .flat_map(|bi| (0..parts * heads).flat_map(move |j| (0..l).map(move |li| (bi, j, li))))
                .flat_map(|(bi, j, li)| at(bi, parts * heads + j, li))
                .collect();
            assert_eq!(merged, x, "merge(split(x)) on {}", backend.describe());
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_gradients(&split(&[2, 3, 12], 3, 2), 1e-2, 1e-2, 8);
        check_gradients(&merge(2, &[2, 2, 3, 2]), 1e-2, 1e-2, 8);
        // A part without a gradient (only q and v used) gets zeros.
        let unused_part = on_param(&[2, 3, 12], |g, x| {
            let split = g.split_heads(x, 3, 2)?;
            g.concat(&[split[0], split[2]], 1)
        });
        check_gradients(&unused_part, 1e-2, 1e-2, 12);
        check_gpu_matches_cpu(&unused_part, 0.0, 0.0);
    }

    #[test]
    fn matches_pytorch() {
        check_reference("heads", "split", &split(&[2, 3, 3 * 2 * 4], 3, 2), 1e-6, 1e-6);
        check_reference("heads", "merge", &merge(2, &[2, 3, 4, 5]), 1e-6, 1e-6);
    }

    #[test]
    fn bad_shapes_name_the_op_and_the_shapes() {
        let mut g = Graph::new();
        let a = param(&mut g, "a", &[2, 3, 10]);
        let b = param(&mut g, "b", &[2, 3, 4, 5]);
        let c = param(&mut g, "c", &[2, 3, 4, 6]);
        let err = |r: crate::Result<Vec<crate::TensorId>>| r.unwrap_err().to_string();
        let e = err(g.split_heads(a, 3, 2));
        assert!(e.starts_with("split_heads:") && e.contains("[2, 3, 10]"), "{e}");
        let e = err(g.split_heads(a, 0, 2));
        assert!(e.starts_with("split_heads:"), "{e}");
        let e = err(g.split_heads(b, 1, 1));
        assert!(e.starts_with("split_heads:") && e.contains("[2, 3, 4, 5]"), "{e}");
        let e = g.merge_heads(&[b, c]).unwrap_err().to_string();
        assert!(
            e.starts_with("merge_heads:") && e.contains("[2, 3, 4, 5]") && e.contains("[2, 3, 4, 6]"),
            "{e}"
        );
        let e = g.merge_heads(&[]).unwrap_err().to_string();
        assert!(e.starts_with("merge_heads:"), "{e}");
        let e = g.merge_heads(&[a]).unwrap_err().to_string();
        assert!(e.starts_with("merge_heads:") && e.contains("[2, 3, 10]"), "{e}");
    }
}
