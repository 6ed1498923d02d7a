//! Layer normalisation over the last axis with a learned scale and shift, and its gradient; and
//! the same with the residual add before it fused in (`s = x + r`, then its norm).
//!
//! Like llm.c, the forward also outputs each row's mean and 1/std, which the backward reads
//! instead of recomputing them.

use rayon::prelude::*;

use super::par::{PAR_CHUNK, par_rows};
use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, RowKernels, VjpArgs, grid, word};
use crate::error::{Error, Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::tensor::{DType, TensorMeta};

/// Rows each thread of the GPU's dgamma/dbeta pass sums into one partial. Partials are then
/// summed in a fixed order, so the gradients are deterministic without float atomics.
const CHUNK_ROWS: usize = 32;

/// Rows per parallel CPU task: about `PAR_CHUNK` elements, at least one row.
fn rows_per_task(dim: usize) -> usize {
    (PAR_CHUNK / dim.max(1)).max(1)
}

uniform! {
    /// The uniform every layernorm kernel reads.
    pub struct NormUniform = LAYERNORM "Norm" { rows: u32, dim: u32, eps: f32, chunk_rows: u32 }
}

fn norm_uniform(rows: usize, dim: usize, eps: f32) -> NormUniform {
    NormUniform {
        rows: word(rows),
        dim: word(dim),
        eps,
        chunk_rows: word(CHUNK_ROWS),
    }
}

/// y = (x − mean)·rstd·gamma + beta per row of the last axis, with rstd = 1/√(var + eps) and the
/// biased variance, as `torch.nn.functional.layer_norm`. Inputs x [.., D], gamma `[D]`, beta `[D]`;
/// outputs y (x's shape), mean `[rows]`, rstd `[rows]`.
#[derive(Debug)]
pub struct LayerNorm {
    pub eps: f32,
}

impl Op for LayerNorm {
    fn name(&self) -> &'static str {
        "layernorm"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (x, gamma, beta) = (inputs[0], inputs[1], inputs[2]);
        let all_f32 = [x, gamma, beta].iter().all(|m| m.dtype == DType::F32);
        let Some(&dim) = x.shape.last().filter(|&&d| d > 0 && all_f32) else {
            return shape_err(
                self.name(),
                format!("needs f32 x with a non-empty last axis, got x {x}, gamma {gamma}, beta {beta}"),
            );
        };
        if gamma.shape != [dim] || beta.shape != [dim] {
            return shape_err(
                self.name(),
                format!("x {x} needs gamma and beta of shape [{dim}], got gamma {gamma} and beta {beta}"),
            );
        }
        let (rows, _) = x.rows();
        Ok(vec![
            x.clone(),
            TensorMeta::f32(&[rows]),
            TensorMeta::f32(&[rows]),
        ])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (_, dim) = inputs[0].meta.rows();
        let [y, mean, rstd] = outputs else {
            unreachable!("layernorm has three outputs")
        };
        let (gamma, beta) = (inputs[1].data, inputs[2].data);
        normalise(self.eps, dim, inputs[0].data, (gamma, beta), [y, mean, rstd]);
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let (rows, dim) = inputs[0].rows();
        let per_row = RowKernels::for_adapter(adapter);
        GpuKernels::single(Dispatch::new(
            per_row.entry("layernorm_forward", "layernorm_forward_rows"),
            &norm_uniform(rows, dim, self.eps),
            vec![
                Arg::In(0),
                Arg::In(1),
                Arg::In(2),
                Arg::Out(0),
                Arg::Out(1),
                Arg::Out(2),
            ],
            per_row.grid(rows),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        if args.grads[1].is_some() || args.grads[2].is_some() {
            return Err(Error::Graph(
                "layernorm: mean and rstd are caches for the backward and have no gradient".into(),
            ));
        }
        let Some(gy) = args.grads[0] else {
            return Ok(vec![None, None, None]);
        };
        let (x, gamma) = (args.inputs[0], args.inputs[1]);
        let (mean, rstd) = (args.outputs[1], args.outputs[2]);
        let grads = g.apply(LayerNormBackward { residual: false }, &[x, gamma, mean, rstd, gy])?;
        Ok(grads.into_iter().map(Some).collect())
    }
}

/// The CPU forward of both norms: `y`, `mean` and `rstd` of the rows of `x` (`dim` long).
fn normalise(eps: f32, dim: usize, x: &[f32], (gamma, beta): (&[f32], &[f32]), outputs: [&mut Out; 3]) {
    let rows = rows_per_task(dim);
    let [y, mean, rstd] = outputs;
    y.data
        .par_chunks_mut(rows * dim)
        .zip(mean.data.par_chunks_mut(rows))
        .zip(rstd.data.par_chunks_mut(rows))
        .enumerate()
        .for_each(|(c, ((y, mean), rstd))| {
            for (r, y) in y.chunks_mut(dim).enumerate() {
                let x = &x[(c * rows + r) * dim..][..dim];
                let m = x.iter().sum::<f32>() / dim as f32;
                let var = x.iter().map(|v| (v - m) * (v - m)).sum::<f32>() / dim as f32;
                let s = 1.0 / (var + eps).sqrt();
                for (i, o) in y.iter_mut().enumerate() {
                    *o = (x[i] - m) * s * gamma[i] + beta[i];
                }
                mean[r] = m;
                rstd[r] = s;
            }
        });
}

/// [`LayerNorm`] of `s = x + r`, which it also outputs: the residual add before a pre-LN block's
/// second norm (or a post-LN block's norms), in the norm's own pass. Inputs x, r (x's shape),
/// gamma, beta; outputs s, y, mean, rstd. Its gradient adds the gradient that reaches s from
/// the residual stream into the norm's dx, so neither the add nor the gradients' sum is a
/// dispatch of its own.
#[derive(Debug)]
pub struct AddLayerNorm {
    pub eps: f32,
}

impl Op for AddLayerNorm {
    fn name(&self) -> &'static str {
        "add_layernorm"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (x, r) = (inputs[0], inputs[1]);
        if r != x {
            return shape_err(
                self.name(),
                format!("x {x} and the residual {r} must have one shape and dtype"),
            );
        }
        let mut metas = LayerNorm { eps: self.eps }.infer(&[x, inputs[2], inputs[3]])?;
        metas.insert(0, x.clone());
        Ok(metas)
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let (_, dim) = inputs[0].meta.rows();
        let [sum, y, mean, rstd] = outputs else {
            unreachable!("add_layernorm has four outputs")
        };
        sum.data
            .par_iter_mut()
            .zip(inputs[0].data.par_iter().zip(inputs[1].data))
            .for_each(|(s, (x, r))| *s = x + r);
        let (gamma, beta) = (inputs[2].data, inputs[3].data);
        normalise(self.eps, dim, sum.data, (gamma, beta), [y, mean, rstd]);
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let (rows, dim) = inputs[0].rows();
        let per_row = RowKernels::for_adapter(adapter);
        let mut args: Vec<Arg> = (0..4).map(Arg::In).collect();
        args.extend((0..4).map(Arg::Out));
        GpuKernels::single(Dispatch::new(
            per_row.entry("add_layernorm_forward", "add_layernorm_forward_rows"),
            &norm_uniform(rows, dim, self.eps),
            args,
            per_row.grid(rows),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        if args.grads[2].is_some() || args.grads[3].is_some() {
            return Err(Error::Graph(
                "add_layernorm: mean and rstd are caches for the backward and have no gradient".into(),
            ));
        }
        let (gs, gy) = (args.grads[0], args.grads[1]);
        let Some(gy) = gy else {
            // Only the sum was used: d x = d r = d s.
            return Ok(vec![gs, gs, None, None]);
        };
        let gamma = args.inputs[2];
        let [sum, _, mean, rstd] = args.outputs[..] else {
            unreachable!("add_layernorm has four outputs")
        };
        let mut inputs = vec![sum, gamma, mean, rstd, gy];
        inputs.extend(gs);
        let op = LayerNormBackward {
            residual: gs.is_some(),
        };
        let [dx, dgamma, dbeta] = g.apply(op, &inputs)?[..] else {
            unreachable!("layernorm_backward has three outputs")
        };
        Ok(vec![Some(dx), Some(dx), Some(dgamma), Some(dbeta)])
    }
}

/// The gradient of [`LayerNorm`]: inputs x, gamma, mean, rstd, gy; outputs dx, dgamma, dbeta.
/// With x̂ = (x − mean)·rstd and g = gy·gamma, per row dx = rstd·(g − mean(g) − x̂·mean(g·x̂));
/// over rows dgamma = Σ gy·x̂ and dbeta = Σ gy. With `residual`, a sixth input gs (x's shape)
/// is the gradient that reaches x from elsewhere, added to dx: [`AddLayerNorm`]'s gradient.
#[derive(Debug)]
pub struct LayerNormBackward {
    pub residual: bool,
}

impl Op for LayerNormBackward {
    fn name(&self) -> &'static str {
        "layernorm_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let want = if self.residual { 6 } else { 5 };
        if inputs.len() != want {
            return shape_err(self.name(), format!("needs {want} inputs, got {}", inputs.len()));
        }
        let [x, gamma, mean, rstd, gy] = [0, 1, 2, 3, 4].map(|i| inputs[i]);
        let gs = inputs.get(5).copied();
        let (rows, dim) = x.rows();
        let fits = x.shape.last().is_some_and(|&d| d > 0)
            && inputs.iter().all(|m| m.dtype == DType::F32)
            && gamma.shape == [dim]
            && mean.shape == [rows]
            && rstd.shape == [rows]
            && gy == x
            && gs.is_none_or(|gs| gs == x);
        if !fits {
            return shape_err(
                self.name(),
                format!(
                    "needs x [.., D] with gamma [D], mean and rstd [rows], gy (and gs) like x; got x {x}, gamma {gamma}, mean {mean}, rstd {rstd}, gy {gy}{}",
                    gs.map(|gs| format!(", gs {gs}")).unwrap_or_default()
                ),
            );
        }
        Ok(vec![x.clone(), gamma.clone(), gamma.clone()])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let [x, gamma, mean, rstd, gy] = [0, 1, 2, 3, 4].map(|i| inputs[i].data);
        let gs = inputs.get(5).map(|gs| gs.data);
        let (n_rows, dim) = inputs[0].meta.rows();
        let [dx, dgamma, dbeta] = outputs else {
            unreachable!("layernorm_backward has three outputs")
        };
        par_rows(dx.data, dim, |row, dx| {
            let (x, gy) = (&x[row * dim..][..dim], &gy[row * dim..][..dim]);
            let (m, s) = (mean[row], rstd[row]);
            let (mut g_mean, mut gx_mean) = (0.0, 0.0);
            for i in 0..dim {
                let g = gy[i] * gamma[i];
                g_mean += g;
                gx_mean += g * (x[i] - m) * s;
            }
            g_mean /= dim as f32;
            gx_mean /= dim as f32;
            let gs = gs.map(|gs| &gs[row * dim..][..dim]);
            for (i, o) in dx.iter_mut().enumerate() {
                let xhat = (x[i] - m) * s;
                let own = s * (gy[i] * gamma[i] - g_mean - xhat * gx_mean);
                *o = gs.map_or(own, |gs| gs[i] + own);
            }
        });
        dgamma.data.fill(0.0);
        dbeta.data.fill(0.0);
        for row in 0..n_rows {
            let (x, gy) = (&x[row * dim..][..dim], &gy[row * dim..][..dim]);
            for i in 0..dim {
                dgamma.data[i] += gy[i] * (x[i] - mean[row]) * rstd[row];
                dbeta.data[i] += gy[i];
            }
        }
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let (rows, dim) = inputs[0].rows();
        let per_row = RowKernels::for_adapter(adapter);
        let chunks = rows.div_ceil(CHUNK_ROWS);
        let uniform = norm_uniform(rows, dim, 0.0);
        let dispatch = |entry, args, workgroups| Dispatch::new(entry, &uniform, args, workgroups);
        let ins = [0, 1, 2, 3, 4].map(Arg::In);
        GpuKernels {
            // dgamma partials, then dbeta partials: [2][chunks][dim].
            scratch: vec![(2 * chunks * dim).max(1)],
            dispatches: vec![
                if self.residual {
                    dispatch(
                        per_row.entry(
                            "layernorm_backward_dx_residual",
                            "layernorm_backward_dx_rows_residual",
                        ),
                        [&ins[..], &[Arg::Out(0), Arg::In(5)]].concat(),
                        per_row.grid(rows),
                    )
                } else {
                    dispatch(
                        per_row.entry("layernorm_backward_dx", "layernorm_backward_dx_rows"),
                        [&ins[..], &[Arg::Out(0)]].concat(),
                        per_row.grid(rows),
                    )
                },
                dispatch(
                    "layernorm_backward_partials",
                    [&ins[..], &[Arg::Scratch(0)]].concat(),
                    grid(chunks * dim, 256),
                ),
                dispatch(
                    "layernorm_backward_params",
                    vec![Arg::Scratch(0), Arg::Out(1), Arg::Out(2)],
                    grid(dim, 256),
                ),
            ],
        }
    }
}

impl Graph {
    /// Layer normalisation of `x` over its last axis, scaled by `gamma` and shifted by `beta`.
    pub fn layernorm(&mut self, x: TensorId, gamma: TensorId, beta: TensorId, eps: f32) -> Result<TensorId> {
        Ok(self.apply(LayerNorm { eps }, &[x, gamma, beta])?[0])
    }

    /// `s = x + r` and the layer norm of `s`, in one pass: `(s, norm(s))`.
    pub fn add_layernorm(
        &mut self,
        x: TensorId,
        r: TensorId,
        gamma: TensorId,
        beta: TensorId,
        eps: f32,
    ) -> Result<(TensorId, TensorId)> {
        let outputs = self.apply(AddLayerNorm { eps }, &[x, r, gamma, beta])?;
        Ok((outputs[0], outputs[1]))
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::BackendKind;
    use crate::graph::Graph;
    use crate::testing::*;

    /// layernorm(x * spread + shift) with parameters x, gamma, beta uniform on [-1, 1].
    fn layernorm(shape: &'static [usize], spread: f32, shift: f32, eps: f32) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let dim = *shape.last().unwrap();
            let mut x = param(g, "x", shape);
            if spread != 1.0 {
                x = g.scale(x, spread).unwrap();
            }
            if shift != 0.0 {
                let s = g.fill(&[1], shift).unwrap();
                x = g.add(x, s).unwrap();
            }
            let gamma = param(g, "gamma", &[dim]);
            let beta = param(g, "beta", &[dim]);
            Built {
                out: g.layernorm(x, gamma, beta, eps).unwrap(),
                feeds: vec![],
            }
        }
    }

    /// Which outputs of the fused residual norm the loss reads.
    #[derive(Clone, Copy)]
    enum Read {
        Norm,
        Sum,
        Both,
    }

    /// `add_layernorm(x, r)` with parameters x, r, gamma, beta uniform on [-1, 1]; `Both` joins
    /// s and the norm along the first axis, so each gets its own upstream weights (and the
    /// backward takes the residual path, gs into dx).
    fn add_layernorm(shape: &'static [usize], eps: f32, read: Read) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let dim = *shape.last().unwrap();
            let x = param(g, "x", shape);
            let r = param(g, "r", shape);
            let gamma = param(g, "gamma", &[dim]);
            let beta = param(g, "beta", &[dim]);
            let (sum, norm) = g.add_layernorm(x, r, gamma, beta, eps).unwrap();
            let out = match read {
                Read::Norm => norm,
                Read::Sum => sum,
                Read::Both => g.concat(&[sum, norm], 0).unwrap(),
            };
            Built { out, feeds: vec![] }
        }
    }

    #[test]
    fn the_fused_residual_norm_matches_cpu_on_both_kinds() {
        let shapes: [&'static [usize]; 4] = [&[37, 91, 53], &[5, 1], &[4, 300], &[16, 128, 128]];
        for shape in shapes {
            for read in [Read::Norm, Read::Both] {
                check_each_kind_matches_cpu(&add_layernorm(shape, 1e-5, read), 1e-4, 1e-4);
            }
        }
        check_each_kind_matches_cpu(&add_layernorm(&[3, 7], 1e-5, Read::Sum), 0.0, 0.0);
    }

    /// The fused op computes exactly what the add and the norm computed apart, forward and
    /// backward, on the CPU and software adapters (CI's): the model's numbers do not move. A
    /// hardware GPU's compiler may contract the gradients' `a·b + c` into one fused multiply-add
    /// in one kernel and not the other (WGSL allows it; an H100 did, in 52 of 480 gradients), so
    /// there the gradients agree to within that rounding.
    #[test]
    fn the_fused_residual_norm_equals_the_add_then_the_norm() {
        let apart = |g: &mut Graph| {
            let x = param(g, "x", &[6, 40]);
            let r = param(g, "r", &[6, 40]);
            let gamma = param(g, "gamma", &[40]);
            let beta = param(g, "beta", &[40]);
            let sum = g.add(x, r).unwrap();
            let norm = g.layernorm(sum, gamma, beta, 1e-5).unwrap();
            Built {
                out: g.concat(&[sum, norm], 0).unwrap(),
                feeds: vec![],
            }
        };
        let mut backends = vec![cpu()];
        backends.extend(gpus_with_and_without_subgroups());
        for backend in backends {
            let want = run(backend.clone(), &apart, 3, &Overrides::default());
            let got = run(
                backend.clone(),
                &add_layernorm(&[6, 40], 1e-5, Read::Both),
                3,
                &Overrides::default(),
            );
            let on = backend.describe();
            assert_eq!(got.out, want.out, "forward on {on}");
            // A software adapter describes itself as a `Cpu` device.
            if backend.kind() == BackendKind::Cpu || on.contains(", Cpu)") {
                assert_eq!(got.grads, want.grads, "gradients on {on}");
            } else {
                for (name, want) in &want.grads {
                    assert_close(&format!("{name} on {on}"), &got.grads[name], want, 1e-6, 1e-6);
                }
            }
        }
    }

    #[test]
    fn gpu_matches_cpu_on_odd_and_long_rows() {
        // Odd rows (53), rows of 1 and 3, rows longer than the 64-thread workgroup (300, 1000),
        // and more rows than one dgamma chunk (3367 rows, 105 chunks).
        let shapes: [&'static [usize]; 5] = [&[37, 91, 53], &[5, 1], &[70, 3], &[4, 300], &[2, 1000]];
        for shape in shapes {
            check_each_kind_matches_cpu(&layernorm(shape, 1.0, 0.0, 1e-5), 1e-4, 1e-4);
        }
        // Rows with a mean 100 times their spread.
        check_each_kind_matches_cpu(&layernorm(&[9, 77], 0.1, 10.0, 1e-5), 1e-4, 1e-4);
    }

    #[test]
    fn gradients_match_finite_differences() {
        for read in [Read::Norm, Read::Sum, Read::Both] {
            check_gradients(&add_layernorm(&[2, 3, 6], 1e-5, read), 1e-2, 1e-2, 12);
        }
        check_gradients(&layernorm(&[2, 3, 6], 1.0, 0.0, 1e-5), 1e-2, 1e-2, 12);
        // A large eps makes rstd depend on eps; the gradient must still hold.
        check_gradients(&layernorm(&[4, 5], 1.0, 0.0, 0.5), 1e-2, 1e-2, 10);
    }

    #[test]
    fn matches_pytorch() {
        check_reference(
            "layernorm",
            "small",
            &layernorm(&[3, 5, 16], 1.0, 0.0, 1e-5),
            1e-5,
            1e-4,
        );
        check_reference(
            "layernorm",
            "long_rows",
            &layernorm(&[2, 300], 1.0, 0.0, 1e-5),
            1e-5,
            1e-4,
        );
        check_reference(
            "layernorm",
            "large_eps",
            &layernorm(&[4, 7], 1.0, 0.0, 0.1),
            1e-5,
            1e-4,
        );
        check_reference(
            "layernorm",
            "residual",
            &add_layernorm(&[3, 4, 16], 1e-5, Read::Both),
            1e-5,
            1e-4,
        );
        // A mean 100 times the spread: a one-pass variance, E[x²] − mean², loses ~1e-3 here.
        check_reference(
            "layernorm",
            "offset_rows",
            &layernorm(&[4, 50], 1.0, 0.0, 1e-5),
            1e-4,
            1e-4,
        );
    }

    #[test]
    fn mismatched_gamma_names_the_op_and_every_shape() {
        let mut g = Graph::new();
        let x = param(&mut g, "x", &[2, 5]);
        let gamma = param(&mut g, "gamma", &[4]);
        let beta = param(&mut g, "beta", &[5]);
        let err = g.layernorm(x, gamma, beta, 1e-5).unwrap_err().to_string();
        assert!(
            err.starts_with("layernorm:")
                && err.contains("[2, 5]")
                && err.contains("[4]")
                && err.contains("[5]"),
            "{err}"
        );
    }

    #[test]
    fn gradient_of_the_cached_statistics_is_an_error() {
        let mut g = Graph::new();
        let x = param(&mut g, "x", &[2, 5]);
        let gamma = param(&mut g, "gamma", &[5]);
        let beta = param(&mut g, "beta", &[5]);
        let outs = g
            .apply(super::LayerNorm { eps: 1e-5 }, &[x, gamma, beta])
            .unwrap();
        let loss = g.sum_all(outs[1]).unwrap();
        let err = g.backward(loss).unwrap_err().to_string();
        assert!(
            err.contains("layernorm") && err.contains("mean and rstd"),
            "{err}"
        );
    }
}
