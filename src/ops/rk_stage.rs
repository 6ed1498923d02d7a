//! The arithmetic between the stages of a Runge-Kutta block (ODE Transformer), one kernel each:
//! `y + c1·F1 + … + ck·Fk` (a stage's input, `y + ½F1`, or the block's output,
//! `y + (F1 + 2F2 + 2F3 + F4)/6`) and the gated RK2 output `y + g·F1 + (1 − g)·F2`, with a
//! gate value per row. Their backward passes are one kernel each too: all the `dFi` at once.

use super::par::par_fill;
use super::{AdapterKind, Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::uniform;
use crate::tensor::{DType, TensorMeta, list_metas};

/// The most stages one combination takes (RK4's output).
pub const MAX_STAGES: usize = 4;

const COMBINE_ENTRIES: [&str; MAX_STAGES] = ["combine1", "combine2", "combine3", "combine4"];
const GRADS_ENTRIES: [&str; MAX_STAGES] = ["grads1", "grads2", "grads3", "grads4"];

/// `y + Σ cᵢ·Fᵢ`; inputs `[y, F1, …, Fk]`, all of one f32 shape.
#[derive(Debug)]
struct Combine {
    coeffs: Vec<f32>,
}

uniform! {
    pub struct RkStageUniform = RK_STAGE "Params" { c: [f32; 4], n: u32, d: u32 }
}

/// The uniform of every stage kernel: the coefficients as the kernel's vec4 (unused ones 0), the
/// element count and the row length.
fn stage_uniform(coeffs: &[f32], n: usize, d: usize) -> RkStageUniform {
    RkStageUniform {
        c: std::array::from_fn(|i| coeffs.get(i).copied().unwrap_or(0.0)),
        n: word(n),
        d: word(d),
    }
}

fn same_shapes(op: &'static str, inputs: &[&TensorMeta]) -> Result<TensorMeta> {
    let first = inputs[0];
    if inputs
        .iter()
        .any(|m| m.dtype != DType::F32 || m.shape != first.shape)
    {
        return shape_err(
            op,
            format!("takes f32 tensors of one shape, got {}", list_metas(inputs)),
        );
    }
    Ok(first.clone())
}

impl Op for Combine {
    fn name(&self) -> &'static str {
        "rk_combine"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![same_shapes(self.name(), inputs)?])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let y = inputs[0].data;
        let stages: Vec<&[f32]> = inputs[1..].iter().map(|f| f.data).collect();
        par_fill(outputs[0].data, |i| {
            stages
                .iter()
                .zip(&self.coeffs)
                .fold(y[i], |acc, (f, c)| acc + c * f[i])
        });
    }

    fn gpu(&self, _adapter: AdapterKind, _inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let n = outputs[0].numel();
        let k = self.coeffs.len();
        GpuKernels::single(Dispatch::new(
            COMBINE_ENTRIES[k - 1],
            &stage_uniform(&self.coeffs, n, 1),
            (0..=k).map(Arg::In).chain([Arg::Out(0)]).collect(),
            grid(n, 256),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None; args.inputs.len()]);
        };
        let stage_grads = g.apply(
            CombineBackward {
                coeffs: self.coeffs.clone(),
            },
            &[grad],
        )?;
        Ok(std::iter::once(Some(grad))
            .chain(stage_grads.into_iter().map(Some))
            .collect())
    }
}

/// `dFᵢ = cᵢ·g` for every stage in one pass.
#[derive(Debug)]
struct CombineBackward {
    coeffs: Vec<f32>,
}

impl Op for CombineBackward {
    fn name(&self) -> &'static str {
        "rk_combine_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![inputs[0].clone(); self.coeffs.len()])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let g = inputs[0].data;
        for (out, &c) in outputs.iter_mut().zip(&self.coeffs) {
            par_fill(out.data, |i| c * g[i]);
        }
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let n = inputs[0].numel();
        let k = self.coeffs.len();
        GpuKernels::single(Dispatch::new(
            GRADS_ENTRIES[k - 1],
            &stage_uniform(&self.coeffs, n, 1),
            std::iter::once(Arg::In(0)).chain((0..k).map(Arg::Out)).collect(),
            grid(n, 256),
        ))
    }
}

/// `y + g·F1 + (1 − g)·F2`; inputs `[y, F1, F2, gate]`, the gate `[..., 1]` (one value per row
/// of the last axis).
#[derive(Debug)]
struct Gated;

fn gated_shapes(op: &'static str, inputs: &[&TensorMeta]) -> Result<(TensorMeta, usize)> {
    let y = same_shapes(op, &inputs[..3])?;
    let gate = inputs[3];
    let (rows, d) = y.shape.split_at(y.rank().saturating_sub(1));
    if gate.dtype != DType::F32 || gate.shape.split_last() != Some((&1, rows)) || d.is_empty() {
        return shape_err(
            op,
            format!("the gate must be [..., 1] with the rows of the stages {y}, got {gate}"),
        );
    }
    Ok((y.clone(), d[0]))
}

impl Op for Gated {
    fn name(&self) -> &'static str {
        "rk_gated"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![gated_shapes(self.name(), inputs)?.0])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let [y, f1, f2, gate] = [0, 1, 2, 3].map(|i| inputs[i].data);
        let d = *inputs[0].shape().last().expect("checked rank");
        par_fill(outputs[0].data, |i| {
            let s = gate[i / d];
            y[i] + s * f1[i] + (1.0 - s) * f2[i]
        });
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], outputs: &[&TensorMeta]) -> GpuKernels {
        let n = outputs[0].numel();
        let d = *inputs[0].shape.last().expect("checked rank");
        GpuKernels::single(Dispatch::new(
            "gated",
            &stage_uniform(&[], n, d),
            vec![Arg::In(0), Arg::In(1), Arg::In(2), Arg::In(3), Arg::Out(0)],
            grid(n, 256),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        let Some(grad) = args.grads[0] else {
            return Ok(vec![None; 4]);
        };
        let [_, f1, f2, gate] = [0, 1, 2, 3].map(|i| args.inputs[i]);
        let grads = g.apply(GatedBackward, &[grad, f1, f2, gate])?;
        Ok(vec![Some(grad), Some(grads[0]), Some(grads[1]), Some(grads[2])])
    }
}

/// `dF1 = g·u`, `dF2 = (1 − g)·u` and `dgate = Σ_d u·(F1 − F2)` for upstream `u`, one pass.
#[derive(Debug)]
struct GatedBackward;

impl Op for GatedBackward {
    fn name(&self) -> &'static str {
        "rk_gated_backward"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![inputs[0].clone(), inputs[0].clone(), inputs[3].clone()])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let [u, f1, f2, gate] = [0, 1, 2, 3].map(|i| inputs[i].data);
        let d = *inputs[0].shape().last().expect("checked rank");
        par_fill(outputs[0].data, |i| gate[i / d] * u[i]);
        par_fill(outputs[1].data, |i| (1.0 - gate[i / d]) * u[i]);
        par_fill(outputs[2].data, |row| {
            (row * d..(row + 1) * d).map(|i| u[i] * (f1[i] - f2[i])).sum()
        });
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let n = inputs[0].numel();
        let d = *inputs[0].shape.last().expect("checked rank");
        GpuKernels::single(Dispatch::new(
            "gated_grads",
            &stage_uniform(&[], n, d),
            vec![
                Arg::In(0),
                Arg::In(1),
                Arg::In(2),
                Arg::In(3),
                Arg::Out(0),
                Arg::Out(1),
                Arg::Out(2),
            ],
            grid(n / d, 1),
        ))
    }
}

impl Graph {
    /// `y + Σ cᵢ·Fᵢ` over 1 to [`MAX_STAGES`] stages of `y`'s shape.
    pub fn rk_combine(&mut self, y: TensorId, stages: &[(f32, TensorId)]) -> Result<TensorId> {
        if stages.is_empty() || stages.len() > MAX_STAGES {
            return shape_err(
                "rk_combine",
                format!("takes 1 to {MAX_STAGES} stages, got {}", stages.len()),
            );
        }
        let inputs: Vec<TensorId> = std::iter::once(y).chain(stages.iter().map(|&(_, f)| f)).collect();
        let coeffs = stages.iter().map(|&(c, _)| c).collect();
        self.apply1(Combine { coeffs }, &inputs)
    }

    /// `y + gate·F1 + (1 − gate)·F2`, `gate` `[..., 1]` broadcast over the last axis.
    pub fn rk_gated(&mut self, y: TensorId, f1: TensorId, f2: TensorId, gate: TensorId) -> Result<TensorId> {
        self.apply1(Gated, &[y, f1, f2, gate])
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::testing::*;

    fn combine(shape: &'static [usize], coeffs: &'static [f32]) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let y = param(g, "y", shape);
            let stages: Vec<(f32, _)> = coeffs
                .iter()
                .enumerate()
                .map(|(i, &c)| (c, param(g, &format!("f{}", i + 1), shape)))
                .collect();
            let out = g.rk_combine(y, &stages).unwrap();
            Built { out, feeds: vec![] }
        }
    }

    fn gated(rows: &'static [usize], d: usize) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let shape: Vec<usize> = rows.iter().copied().chain([d]).collect();
            let gate_shape: Vec<usize> = rows.iter().copied().chain([1]).collect();
            let y = param(g, "y", &shape);
            let f1 = param(g, "f1", &shape);
            let f2 = param(g, "f2", &shape);
            let gate = param(g, "gate", &gate_shape);
            let out = g.rk_gated(y, f1, f2, gate).unwrap();
            Built { out, feeds: vec![] }
        }
    }

    const RK_COEFFS: [&[f32]; 4] = [
        &[0.5],
        &[0.5, 0.5],
        &[1.0, -2.0, 3.5],
        &[1.0 / 6.0, 2.0 / 6.0, 2.0 / 6.0, 1.0 / 6.0],
    ];

    #[test]
    fn gpu_matches_cpu() {
        for coeffs in RK_COEFFS {
            check_gpu_matches_cpu(&combine(&[37, 91, 53], coeffs), 1e-6, 1e-6);
        }
        check_gpu_matches_cpu(&combine(&[70001], RK_COEFFS[3]), 1e-6, 1e-6);
        // Rows shorter and longer than the backward's 64-thread workgroup.
        check_each_kind_matches_cpu(&gated(&[3, 37], 53), 1e-5, 1e-5);
        check_each_kind_matches_cpu(&gated(&[5], 300), 1e-5, 1e-5);
    }

    #[test]
    fn gradients_match_finite_differences() {
        for coeffs in RK_COEFFS {
            check_gradients(&combine(&[3, 5], coeffs), 1e-2, 1e-2, 8);
        }
        check_gradients(&gated(&[2, 3], 4), 1e-2, 1e-2, 12);
    }

    #[test]
    fn matches_pytorch() {
        check_reference(
            "rk_stage",
            "rk4_output",
            &combine(&[2, 3, 5], RK_COEFFS[3]),
            1e-5,
            1e-5,
        );
        check_reference(
            "rk_stage",
            "half_step",
            &combine(&[2, 3, 5], RK_COEFFS[0]),
            1e-5,
            1e-5,
        );
        check_reference("rk_stage", "gated", &gated(&[2, 3], 5), 1e-5, 1e-5);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let mut g = Graph::new();
        let y = param(&mut g, "y", &[2, 3]);
        let f = param(&mut g, "f", &[3, 2]);
        let err = g.rk_combine(y, &[(0.5, f)]).unwrap_err().to_string();
        assert!(
            err.contains("rk_combine") && err.contains("[2, 3]") && err.contains("[3, 2]"),
            "{err}"
        );
        let err = g.rk_combine(y, &[]).unwrap_err().to_string();
        assert!(err.contains("1 to 4 stages, got 0"), "{err}");
        let f = param(&mut g, "f2", &[2, 3]);
        let gate = param(&mut g, "gate", &[2, 3]);
        let err = g.rk_gated(y, f, f, gate).unwrap_err().to_string();
        assert!(err.contains("rk_gated") && err.contains("[..., 1]"), "{err}");
    }
}
