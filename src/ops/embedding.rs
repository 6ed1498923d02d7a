//! Embedding lookup: rows of a table picked by token ids, and its gradient, a deterministic
//! scatter-add into the table's shape.
//!
//! Ids outside `[0, V)` give a zero row and no gradient, on both backends. The model layer
//! validates tokens before they get here; this only keeps a bad id from reading out of bounds.

use rayon::prelude::*;

use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::tensor::{DType, TensorMeta};

/// The table row of `id`, or `None` for an id outside `[0, vocab)`.
fn row(id: i32, vocab: usize) -> Option<usize> {
    usize::try_from(id).ok().filter(|&v| v < vocab)
}

uniform! {
    pub struct LookupUniform = EMBEDDING "Lookup" { n: u32, dim: u32, vocab: u32 }
}

/// Inputs: table [V, D] (f32) and ids [..] (i32); output [.., D].
#[derive(Debug)]
pub struct Embedding;

impl Op for Embedding {
    fn name(&self) -> &'static str {
        "embedding"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (table, ids) = (inputs[0], inputs[1]);
        if table.rank() != 2 || table.dtype != DType::F32 || ids.dtype != DType::I32 {
            return shape_err(
                self.name(),
                format!("needs an f32 table [V, D] and i32 ids, got table {table} and ids {ids}"),
            );
        }
        let mut shape = ids.shape.clone();
        shape.push(table.shape[1]);
        Ok(vec![TensorMeta::f32(&shape)])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (table, ids) = (inputs[0].data, inputs[1].ints());
        let (vocab, dim) = (inputs[0].shape()[0], inputs[0].shape()[1]);
        if dim == 0 {
            return;
        }
        outputs[0]
            .data
            .par_chunks_mut(dim)
            .zip(ids.par_iter())
            .for_each(|(out, &id)| match row(id, vocab) {
                Some(v) => out.copy_from_slice(&table[v * dim..(v + 1) * dim]),
                None => out.fill(0.0),
            });
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let n = outputs[0].numel();
        let uniform = LookupUniform {
            n: word(n),
            dim: word(inputs[0].shape[1]),
            vocab: word(inputs[0].shape[0]),
        };
        GpuKernels::single(Dispatch::new(
            "forward",
            &uniform,
            vec![Arg::In(1), Arg::In(0), Arg::Out(0)],
            grid(n, 256),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None, None]);
        };
        let (table, ids) = (args.inputs[0], args.inputs[1]);
        let vocab = g.shape(table)[0];
        Ok(vec![
            Some(g.apply1(EmbeddingBackward { vocab }, &[grad, ids])?),
            None,
        ])
    }
}

uniform! {
    pub struct ScatterUniform = EMBEDDING "Scatter" { tokens: u32, dim: u32, vocab: u32 }
}

/// d loss / d table: inputs the output's gradient [.., D] and the ids [..]; output [vocab, D],
/// each row the sum of the gradients of the tokens with that id, in token order.
#[derive(Debug)]
pub struct EmbeddingBackward {
    pub vocab: usize,
}

impl Op for EmbeddingBackward {
    fn name(&self) -> &'static str {
        "embedding_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (grad, ids) = (inputs[0], inputs[1]);
        let fits = grad.dtype == DType::F32
            && ids.dtype == DType::I32
            && grad.rank() == ids.rank() + 1
            && grad.shape[..ids.rank()] == ids.shape[..];
        if !fits {
            return shape_err(
                self.name(),
                format!("needs an f32 gradient [.., D] and i32 ids [..], got gradient {grad} and ids {ids}"),
            );
        }
        Ok(vec![TensorMeta::f32(&[self.vocab, grad.shape[ids.rank()]])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (grad, ids) = (inputs[0].data, inputs[1].ints());
        let out = &mut *outputs[0].data;
        out.fill(0.0);
        let dim = outputs[0].meta.shape[1];
        if dim == 0 {
            return;
        }
        // Token order, as the GPU sums: both backends give the same bits.
        for (t, &id) in ids.iter().enumerate() {
            if let Some(v) = row(id, self.vocab) {
                let src = &grad[t * dim..(t + 1) * dim];
                for (o, &x) in out[v * dim..(v + 1) * dim].iter_mut().zip(src) {
                    *o += x;
                }
            }
        }
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let tokens = inputs[1].numel();
        let uniform = ScatterUniform {
            tokens: word(tokens),
            dim: word(outputs[0].shape[1]),
            vocab: word(self.vocab),
        };
        let dispatch = |entry, args, workgroups| Dispatch::new(entry, &uniform, args, workgroups);
        let (ids, index, bucketed, sorted) = (Arg::In(1), Arg::Scratch(0), Arg::Scratch(1), Arg::Scratch(2));
        let per_token = grid(tokens, 256);
        GpuKernels {
            // Offsets (vocab + 1) then bucket cursors (vocab); tokens by id, unsorted and sorted.
            scratch: vec![2 * self.vocab + 1, tokens.max(1), tokens.max(1)],
            dispatches: vec![
                dispatch("backward_clear", vec![index], grid(2 * self.vocab + 1, 256)),
                dispatch("backward_count", vec![ids, index], per_token),
                dispatch("backward_offsets", vec![index], [1, 1, 1]),
                dispatch("backward_place", vec![ids, index, bucketed], per_token),
                dispatch("backward_rank", vec![ids, index, bucketed, sorted], per_token),
                dispatch(
                    "backward_sum",
                    vec![Arg::In(0), index, sorted, Arg::Out(0)],
                    grid(outputs[0].numel(), 256),
                ),
            ],
        }
    }
}

impl Graph {
    /// Rows of `table` [V, D] picked by the i32 `ids` [..]: shape [.., D]. Ids outside [0, V)
    /// give zero rows.
    pub fn embedding(&mut self, table: TensorId, ids: TensorId) -> Result<TensorId> {
        self.apply1(Embedding, &[table, ids])
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::testing::*;

    /// Lookup of `ids` (values below `below`, a few replaced by out-of-range ids) in a [vocab, dim] table.
    fn lookup(
        vocab: usize,
        dim: usize,
        ids_shape: &'static [usize],
        below: i32,
    ) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let table = param(g, "table", &[vocab, dim]);
            let n = ids_shape.iter().product();
            let mut values = random_ints(n, below, 5);
            for (k, bad) in [-1, vocab as i32, i32::MIN, i32::MAX].into_iter().enumerate() {
                if let Some(v) = values.get_mut(k * 7 + 3) {
                    *v = bad;
                }
            }
            let (ids, feed) = int_input(g, "ids", ids_shape, values);
            Built {
                out: g.embedding(table, ids).unwrap(),
                feeds: vec![feed],
            }
        }
    }

    #[test]
    fn gpu_matches_cpu_on_odd_shapes() {
        // Both backends sum each row's gradients in token order: the results agree bit for bit.
        check_gpu_matches_cpu(&lookup(300, 53, &[37, 91], 300), 0.0, 0.0);
        // Few distinct ids: long runs of tokens per row.
        check_gpu_matches_cpu(&lookup(1000, 5, &[600], 10), 0.0, 0.0);
        check_gpu_matches_cpu(&lookup(7, 300, &[3, 1, 5], 7), 0.0, 0.0);
        // One id for almost every token: a bucket of 2000 that arrives in a racy order and must
        // be summed in token order.
        check_gpu_matches_cpu(&lookup(3, 4, &[2000], 1), 0.0, 0.0);
    }

    #[test]
    fn out_of_range_ids_give_zero_rows_and_no_gradient() {
        let build = |g: &mut Graph| {
            let table = param(g, "table", &[4, 3]);
            let (ids, feed) = int_input(g, "ids", &[5], vec![1, -1, 4, 1, 3]);
            Built {
                out: g.embedding(table, ids).unwrap(),
                feeds: vec![feed],
            }
        };
        let mut backends = vec![cpu()];
        backends.extend(gpu());
        for backend in backends {
            let r = run(backend, &build, 1, &Overrides::default());
            assert_eq!(r.out[3..9], [0.0; 6]);
            assert!(r.out[..3].iter().chain(&r.out[9..]).all(|&x| x != 0.0));
            let grad = &r.grads["table"];
            assert_eq!(grad[..3], [0.0; 3], "row 0 is never picked");
            assert_eq!(grad[6..9], [0.0; 3], "row 2 is never picked");
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_gradients(&lookup(6, 3, &[2, 5], 6), 1e-2, 1e-2, 18);
    }

    #[test]
    fn matches_pytorch() {
        let build = |g: &mut Graph| {
            let table = param(g, "table", &[10, 4]);
            let (ids, feed) = int_input(g, "ids", &[3, 5], vec![0; 15]);
            Built {
                out: g.embedding(table, ids).unwrap(),
                feeds: vec![feed],
            }
        };
        check_reference("embedding", "embedding", &build, 1e-6, 1e-6);
    }

    #[test]
    fn bad_shapes_name_the_op_and_the_shapes() {
        let mut g = Graph::new();
        let table = param(&mut g, "table", &[10]);
        let ids = g.input("ids", crate::TensorMeta::i32(&[3, 4]));
        let e = g.embedding(table, ids).unwrap_err().to_string();
        assert!(
            e.starts_with("embedding:") && e.contains("[10]") && e.contains("[3, 4] i32"),
            "{e}"
        );
        let table = param(&mut g, "table2", &[10, 2]);
        let float_ids = param(&mut g, "float_ids", &[3]);
        let e = g.embedding(table, float_ids).unwrap_err().to_string();
        assert!(
            e.starts_with("embedding:") && e.contains("[10, 2]") && e.contains("[3]"),
            "{e}"
        );
        let grad = param(&mut g, "grad", &[4, 2]);
        let e = g
            .apply1(super::EmbeddingBackward { vocab: 10 }, &[grad, ids])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("embedding_backward:") && e.contains("[4, 2]") && e.contains("[3, 4] i32"),
            "{e}"
        );
    }
}
