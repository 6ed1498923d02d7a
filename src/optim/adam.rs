//! AdamW with global gradient-norm clipping, matching `torch.optim.AdamW` preceded by
//! `torch.nn.utils.clip_grad_norm_`. The update is a pair of kernels appended to the training
//! plan, so a whole step (forward, backward, clip, update) is one GPU submission. A step whose
//! global gradient norm is not finite updates nothing, so a diverging run keeps its last good
//! parameters and moments.

use std::rc::Rc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::backend::{Backend, Bound, Buffer, Step, f32_words, words_f32};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Gradients, Graph};
use crate::kernel::{AdapterKind, eight_words, uniform};
use crate::ops::par::PAR_CHUNK;
use crate::ops::{Arg, Dispatch, GpuKernels, In, Op, Out, grid, word};
use crate::params::ParamStore;
use crate::tensor::TensorMeta;

/// AdamW's hyperparameters. Weight decay applies to matrices (rank ≥ 2) only: decaying biases,
/// norm gains and position tables toward zero is rarely what anyone wants.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Clip the global gradient norm to this value before the update; `None` does not clip.
    pub max_grad_norm: Option<f32>,
}

impl Default for AdamW {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            max_grad_norm: Some(1.0),
        }
    }
}

impl AdamW {
    /// Checks that every hyperparameter is one AdamW can use: a learning rate and decay that are
    /// finite and not negative, betas in [0, 1), a positive ε and a positive clipping norm.
    /// Errors name the key as a run config spells it.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, want: &str, got: f32| {
            Err(Error::Input(format!("AdamW {key} must be {want}, got {got}")))
        };
        if !(self.lr.is_finite() && self.lr >= 0.0) {
            return bad("lr", "finite and not negative", self.lr);
        }
        for (key, beta) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return bad(key, "in [0, 1)", beta);
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return bad("eps", "positive and finite", self.eps);
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad("weight_decay", "finite and not negative", self.weight_decay);
        }
        match self.max_grad_norm {
            Some(norm) if !(norm.is_finite() && norm > 0.0) => {
                bad("clip_grad_norm", "positive and finite (or off)", norm)
            }
            _ => Ok(()),
        }
    }
}

uniform! {
    pub(crate) struct SumSquaresUniform = ADAM "SumSquares" {
        lengths: [[u32; 4]; 2],
        first_slot: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

/// Gradients one `sum_squares` dispatch reads: with the norms, the 8 storage buffers a WebGPU
/// shader stage may bind by default.
const GRADIENTS_PER_DISPATCH: usize = 7;

/// Squared L2 norms of up to [`GRADIENTS_PER_DISPATCH`] gradients (the inputs), written into
/// slots `first_slot..` of a shared buffer: a workgroup per gradient. One dispatch per gradient
/// was 52 per step, each a few microseconds of a GPU's fixed cost.
#[derive(Debug)]
struct SumSquares {
    first_slot: usize,
}

impl Op for SumSquares {
    fn name(&self) -> &'static str {
        "sum_squares"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![TensorMeta::f32(&[self.first_slot + inputs.len()])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        for (k, grad) in inputs.iter().enumerate() {
            // Fixed chunks summed in order: rayon's own `sum` splits the work by what threads
            // are free, so its rounding (and with clipping, the whole run) would vary from run
            // to run.
            let partial: Vec<f32> = grad
                .data
                .par_chunks(PAR_CHUNK)
                .map(|chunk| chunk.iter().map(|g| g * g).sum())
                .collect();
            outputs[0].data[self.first_slot + k] = partial.iter().sum();
        }
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let lengths: Vec<usize> = inputs.iter().map(|g| g.numel()).collect();
        let uniform = SumSquaresUniform {
            // Unused bindings repeat the first gradient, read with length 0.
            lengths: eight_words(&lengths, 0, 0),
            first_slot: word(self.first_slot),
            _pad0: 0,
            _pad1: 0,
            _pad2: 0,
        };
        let mut args: Vec<Arg> = (0..GRADIENTS_PER_DISPATCH)
            .map(|k| Arg::In(if k < inputs.len() { k } else { 0 }))
            .collect();
        args.push(Arg::Out(0));
        GpuKernels::single(Dispatch::new(
            "sum_squares",
            &uniform,
            args,
            [word(inputs.len()), 1, 1],
        ))
    }
}

uniform! {
    pub(crate) struct ClipUniform = ADAM "Clip" { n_norms: u32, max_norm: f32 }
}

/// The step's clipping factor from the squared norms of every gradient (one word; the sum of
/// the squares, inf or NaN, when that is not finite), computed once: each update kernel read
/// all the norms per element before, 52 loads per parameter value in the peers' step.
#[derive(Debug)]
struct ClipFactor {
    max_norm: Option<f32>,
}

impl Op for ClipFactor {
    fn name(&self) -> &'static str {
        "clip_factor"
    }

    fn infer(&self, _inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![TensorMeta::f32(&[1])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let norms = inputs[0].data;
        let total = norms.iter().sum::<f32>();
        outputs[0].data[0] = if total.is_finite() {
            clip_factor(self.max_norm, norms)
        } else {
            total
        };
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
        n: u32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    }
}

/// The in-place AdamW update of one parameter and its two moments.
/// Inputs: gradient, the step's clipping factor ([`ClipFactor`]), schedule [lr, 1-β1^t, 1-β2^t].
/// Outputs (read and written): parameter, first moment, second moment.
#[derive(Debug)]
struct AdamUpdate {
    config: AdamW,
    weight_decay: f32,
}

impl Op for AdamUpdate {
    fn name(&self) -> &'static str {
        "adam_update"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        Ok(vec![inputs[0].clone(); 3])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let c = &self.config;
        let (grad, clip, schedule) = (inputs[0].data, inputs[1].data[0], inputs[2].data);
        if !clip.is_finite() {
            // A diverged step changes nothing (the trainer then stops with an error).
            return;
        }
        let (lr, bias1, bias2) = (schedule[0], schedule[1], schedule[2]);
        let [param, m, v] = outputs else {
            unreachable!("adam_update has three outputs")
        };
        let wd = self.weight_decay;
        param
            .data
            .par_iter_mut()
            .zip(m.data.par_iter_mut())
            .zip(v.data.par_iter_mut())
            .zip(grad.par_iter())
            .for_each(|(((p, m), v), &g)| {
                let g = g * clip;
                *m = c.beta1 * *m + (1.0 - c.beta1) * g;
                *v = c.beta2 * *v + (1.0 - c.beta2) * g * g;
                let denom = v.sqrt() / bias2.sqrt() + c.eps;
                *p = *p * (1.0 - lr * wd) - (lr / bias1) * *m / denom;
            });
    }

    fn gpu(&self, _adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let c = &self.config;
        let n = inputs[0].numel();
        let uniform = AdamUniform {
            n: word(n),
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: self.weight_decay,
        };
        GpuKernels::single(Dispatch::new(
            "adam_step",
            &uniform,
            vec![
                Arg::In(0),
                Arg::In(1),
                Arg::In(2),
                Arg::Out(0),
                Arg::Out(1),
                Arg::Out(2),
            ],
            grid(n, 256),
        ))
    }
}

/// torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6), at most 1.
fn clip_factor(max_norm: Option<f32>, squared_norms: &[f32]) -> f32 {
    match max_norm {
        Some(max) if max > 0.0 => (max / (squared_norms.iter().sum::<f32>().sqrt() + 1e-6)).min(1.0),
        _ => 1.0,
    }
}

/// The moments of one parameter.
pub struct Moments {
    pub m: Buffer,
    pub v: Buffer,
}

/// AdamW's state for every parameter of a [`ParamStore`], and the steps that update them.
pub struct Optimizer {
    config: AdamW,
    backend: Rc<dyn Backend>,
    moments: Vec<(String, Moments)>,
    norms: Bound,
    clip: Bound,
    schedule: Bound,
    step: u64,
}

impl Optimizer {
    pub fn new(config: AdamW, params: &ParamStore) -> Result<Self> {
        config.validate()?;
        let backend = params.backend().clone();
        let moments = params
            .iter()
            .map(|(name, p)| {
                let words = p.meta.numel();
                Ok((
                    name.to_string(),
                    Moments {
                        m: backend.alloc(words, &format!("{name}.adam_m"))?,
                        v: backend.alloc(words, &format!("{name}.adam_v"))?,
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let n_params = moments.len().max(1);
        let bound = |name: &str, words: usize| -> Result<Bound> {
            Ok(Bound {
                name: name.into(),
                meta: TensorMeta::f32(&[words]),
                buffer: backend.alloc(words, name)?,
            })
        };
        Ok(Self {
            norms: bound("adam.grad_norms", n_params)?,
            clip: bound("adam.clip", 1)?,
            schedule: bound("adam.schedule", 3)?,
            config,
            backend,
            moments,
            step: 0,
        })
    }

    pub fn config(&self) -> &AdamW {
        &self.config
    }

    /// Appends the clip-and-update steps for every parameter with a gradient to `exec`, whose
    /// plan must have the gradients among its outputs (so their buffers survive until the update).
    pub fn attach(
        &self,
        exec: &mut Executor,
        graph: &Graph,
        grads: &Gradients,
        params: &ParamStore,
    ) -> Result<()> {
        let mut steps = Vec::new();
        let grads: Vec<_> = grads.iter().collect();
        for &(param, grad) in &grads {
            if !exec.plan().outputs.contains(&grad) {
                return Err(Error::Graph(format!(
                    "the gradient of `{}` is not an output of this plan: pass the gradients to Executor::new",
                    graph.info(param).name
                )));
            }
        }
        for (group, chunk) in grads.chunks(GRADIENTS_PER_DISPATCH).enumerate() {
            let inputs = chunk
                .iter()
                .map(|&(_, grad)| exec.bound(grad).cloned())
                .collect::<Result<Vec<_>>>()?;
            steps.push(Step {
                op: Rc::new(SumSquares {
                    first_slot: group * GRADIENTS_PER_DISPATCH,
                }),
                inputs,
                outputs: vec![self.norms.clone()],
            });
        }
        if grads.len() > self.norms.meta.numel() {
            return Err(Error::Graph(
                "more gradients than parameters in the optimizer".into(),
            ));
        }
        let mut norms = self.norms.clone();
        norms.meta = TensorMeta::f32(&[grads.len()]);
        steps.push(Step {
            op: Rc::new(ClipFactor {
                max_norm: self.config.max_grad_norm,
            }),
            inputs: vec![norms],
            outputs: vec![self.clip.clone()],
        });
        for &(param, grad) in &grads {
            let name = &graph.info(param).name;
            let stored = params
                .get(name)
                .ok_or_else(|| Error::Graph(format!("parameter `{name}` is not in the store")))?;
            let moments = self.moments_of(name)?;
            let bound = |suffix: &str, buffer: &Buffer| Bound {
                name: format!("{name}{suffix}"),
                meta: stored.meta.clone(),
                buffer: buffer.clone(),
            };
            let weight_decay = if stored.meta.rank() >= 2 {
                self.config.weight_decay
            } else {
                0.0
            };
            steps.push(Step {
                op: Rc::new(AdamUpdate {
                    config: self.config.clone(),
                    weight_decay,
                }),
                inputs: vec![
                    exec.bound(grad)?.clone(),
                    self.clip.clone(),
                    self.schedule.clone(),
                ],
                outputs: vec![
                    bound("", &stored.buffer),
                    bound(".adam_m", &moments.m),
                    bound(".adam_v", &moments.v),
                ],
            });
        }
        exec.push_steps(steps);
        Ok(())
    }

    /// Call before each run of the training plan: advances the step count and sets the learning rate.
    pub fn prepare_step(&mut self, lr: f32) -> Result<()> {
        // Plans attached with fewer gradients (FLOATER's cached steps) leave the other slots as
        // an earlier plan wrote them: clear them so the norm counts only this step's gradients.
        let slots = self.norms.meta.numel();
        self.backend
            .write(&self.norms.buffer, f32_words(&vec![0.0; slots]))?;
        // The count may come from a checkpoint (`set_step`), so it may be anything: saturate
        // rather than overflow, and clamp t to i32 rather than wrap it negative. β^t is 0 in f32
        // long before i32::MAX, so the clamped bias corrections are the exact ones, 1.
        self.step = self.step.saturating_add(1);
        let t = i32::try_from(self.step).unwrap_or(i32::MAX);
        let schedule = [
            lr,
            1.0 - self.config.beta1.powi(t),
            1.0 - self.config.beta2.powi(t),
        ];
        self.backend.write(&self.schedule.buffer, f32_words(&schedule))
    }

    /// Steps taken so far (restored from checkpoints with [`Optimizer::set_step`]).
    pub fn step(&self) -> u64 {
        self.step
    }

    pub fn set_step(&mut self, step: u64) {
        self.step = step;
    }

    pub fn moments_of(&self, name: &str) -> Result<&Moments> {
        self.moments
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m)
            .ok_or_else(|| Error::Graph(format!("no optimizer state for parameter `{name}`")))
    }

    /// The global gradient norm of the last step, before clipping.
    pub async fn last_grad_norm(&self) -> Result<f32> {
        let squares = words_f32(self.backend.read(&self.norms.buffer).await?);
        Ok(squares.iter().sum::<f32>().sqrt())
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::{AdamW, Optimizer};
    use crate::backend::{Backend, words_f32};
    use crate::exec::Executor;
    use crate::graph::{Graph, Init, TensorId};
    use crate::params::ParamStore;
    use crate::tensor::TensorMeta;
    use crate::testing::{assert_close, cpu, gpu, random_vec};

    /// Three AdamW steps with clipping and weight decay on constant gradients, against
    /// torch.optim.AdamW after clip_grad_norm_ (tests/reference/gen_adam.py).
    #[test]
    fn matches_pytorch_adamw_with_clipping() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/reference/adam.safetensors");
        let bytes = std::fs::read(path).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let get =
            |name: &str| -> Vec<f32> { bytemuck::pod_collect_to_vec(file.tensor(name).unwrap().data()) };
        let mut backends = vec![cpu()];
        backends.extend(gpu());
        for backend in backends {
            let mut g = Graph::new();
            let w = g.param("w", &[5, 3], Init::Zeros).unwrap();
            let b = g.param("b", &[3], Init::Zeros).unwrap();
            let cw = g.input("cw", TensorMeta::f32(&[5, 3]));
            let cb = g.input("cb", TensorMeta::f32(&[3]));
            let lw = g.mul(w, cw).unwrap();
            let lw = g.sum_all(lw).unwrap();
            let lb = g.mul(b, cb).unwrap();
            let lb = g.sum_all(lb).unwrap();
            let loss = g.add(lw, lb).unwrap();
            let config = AdamW {
                lr: 0.1,
                weight_decay: 0.1,
                max_grad_norm: Some(0.5),
                ..AdamW::default()
            };
            let (params, mut opt, exec) = step_with(config, backend.clone(), &mut g, loss);
            params.set("w", &get("w0")).unwrap();
            params.set("b", &get("b0")).unwrap();
            exec.set_f32(cw, &get("cw")).unwrap();
            exec.set_f32(cb, &get("cb")).unwrap();
            for _ in 0..3 {
                opt.prepare_step(0.1).unwrap();
                exec.run().unwrap();
            }
            let on = backend.describe();
            let w3 = pollster::block_on(params.read("w")).unwrap();
            let b3 = pollster::block_on(params.read("b")).unwrap();
            assert_close(&format!("w after 3 steps on {on}"), &w3, &get("w3"), 1e-5, 1e-5);
            assert_close(&format!("b after 3 steps on {on}"), &b3, &get("b3"), 1e-5, 1e-5);
            let norm = pollster::block_on(opt.last_grad_norm()).unwrap();
            assert_close("gradient norm", &[norm], &get("grad_norm"), 1e-5, 1e-5);
        }
    }

    /// The parameters of `g` (seed 0), AdamW with `config`, and an executor that computes
    /// `loss` and every gradient and then applies the update.
    fn step_with(
        config: AdamW,
        backend: Rc<dyn Backend>,
        g: &mut Graph,
        loss: TensorId,
    ) -> (ParamStore, Optimizer, Executor) {
        let grads = g.backward(loss).unwrap();
        let params = ParamStore::init(backend, g, 0).unwrap();
        let opt = Optimizer::new(config, &params).unwrap();
        let mut outputs = vec![loss];
        outputs.extend(grads.iter().map(|(_, gr)| gr));
        let mut exec = Executor::new(g, &outputs, &params).unwrap();
        opt.attach(&mut exec, g, &grads, &params).unwrap();
        (params, opt, exec)
    }

    /// The clip's norm over gradients long enough for every path of the sum (eight values per
    /// thread at a time, then the rest): 70,005 and 2,049 values, one, and seven more, so that
    /// the ten take two dispatches of up to seven gradients, the second with bindings to spare.
    #[test]
    fn the_gradient_norm_of_long_gradients_is_exact() {
        let sizes: [&[usize]; 10] = [
            &[5, 14_001],
            &[2049],
            &[1],
            &[3],
            &[17, 3],
            &[256],
            &[257],
            &[1, 1],
            &[8, 9],
            &[300],
        ];
        let inputs: Vec<Vec<f32>> = sizes
            .iter()
            .enumerate()
            .map(|(i, shape)| random_vec(shape.iter().product(), 40 + i as u64))
            .collect();
        let want = inputs
            .iter()
            .flatten()
            .map(|&c| f64::from(c) * f64::from(c))
            .sum::<f64>()
            .sqrt();
        let mut backends = vec![cpu()];
        backends.extend(gpu());
        for backend in backends {
            let mut g = Graph::new();
            let mut terms = Vec::new();
            let mut feeds = Vec::new();
            for (i, shape) in sizes.iter().enumerate() {
                let w = g.param(&format!("w{i}"), shape, Init::Zeros).unwrap();
                let c = g.input(&format!("c{i}"), TensorMeta::f32(shape));
                let wc = g.mul(w, c).unwrap();
                terms.push(g.sum_all(wc).unwrap());
                feeds.push(c);
            }
            let loss = terms.into_iter().reduce(|a, b| g.add(a, b).unwrap()).unwrap();
            let (_, mut opt, exec) = step_with(AdamW::default(), backend.clone(), &mut g, loss);
            for (c, values) in feeds.iter().zip(&inputs) {
                exec.set_f32(*c, values).unwrap();
            }
            opt.prepare_step(0.1).unwrap();
            exec.run().unwrap();
            let norm = pollster::block_on(opt.last_grad_norm()).unwrap();
            let err = (f64::from(norm) - want).abs() / want;
            assert!(err < 1e-5, "norm {norm} vs {want} on {}", backend.describe());
        }
    }

    /// The clipping factor scales the gradient before the moments: after one step on the
    /// gradients 3 and −40 (norm 40.11) the first moment is (1 − β1)·g unclipped, and that times
    /// 1/40.11 clipped to norm 1 (AdamW's step itself hardly shows the factor: it divides it out
    /// up to ε). In both cases the weights move by lr·g/(|g| + ε) against the gradient.
    #[test]
    fn the_clipping_factor_scales_the_moments() {
        let gradient = [3.0f32, -40.0];
        let norm = gradient.iter().map(|g| g * g).sum::<f32>().sqrt();
        let mut backends = vec![cpu()];
        backends.extend(gpu());
        for backend in backends {
            for (max_grad_norm, factor) in [(None, 1.0), (Some(1.0), 1.0 / (norm + 1e-6))] {
                let mut g = Graph::new();
                let w = g.param("w", &[2], Init::Zeros).unwrap();
                let c = g.input("c", TensorMeta::f32(&[2]));
                let wc = g.mul(w, c).unwrap();
                let loss = g.sum_all(wc).unwrap();
                let config = AdamW {
                    max_grad_norm,
                    ..AdamW::default()
                };
                let (params, mut opt, exec) = step_with(config, backend.clone(), &mut g, loss);
                exec.set_f32(c, &gradient).unwrap();
                opt.prepare_step(0.1).unwrap();
                exec.run().unwrap();
                let on = format!("{} with clipping {max_grad_norm:?}", backend.describe());
                let m = opt.moments_of("w").unwrap();
                let m1 = words_f32(pollster::block_on(backend.read(&m.m)).unwrap());
                let want: Vec<f32> = gradient.iter().map(|g| 0.1 * g * factor).collect();
                assert_close(&format!("first moment on {on}"), &m1[..2], &want, 1e-7, 1e-5);
                let w1 = pollster::block_on(params.read("w")).unwrap();
                let want: Vec<f32> = gradient
                    .iter()
                    .map(|g| -0.1 * g * factor / ((g * factor).abs() + 1e-8))
                    .collect();
                assert_close(&format!("w after one step on {on}"), &w1, &want, 1e-6, 1e-5);
            }
        }
    }

    /// A NaN in one gradient skips the update of every parameter, moments included.
    #[test]
    fn a_non_finite_gradient_changes_nothing() {
        let mut backends = vec![cpu()];
        backends.extend(gpu());
        for backend in backends {
            let mut g = Graph::new();
            let w = g.param("w", &[2, 3], Init::Normal(1.0)).unwrap();
            let b = g.param("b", &[3], Init::Normal(1.0)).unwrap();
            let c = g.input("c", TensorMeta::f32(&[3]));
            let wb = g.add(w, b).unwrap();
            let scaled = g.mul(wb, c).unwrap();
            let loss = g.sum_all(scaled).unwrap();
            let (params, mut opt, exec) = step_with(AdamW::default(), backend.clone(), &mut g, loss);
            exec.set_f32(c, &[1.0, 2.0, 3.0]).unwrap();
            opt.prepare_step(0.1).unwrap();
            exec.run().unwrap();
            let read = |name: &str| pollster::block_on(params.read(name)).unwrap();
            let moments = |opt: &Optimizer, name: &str| {
                let m = opt.moments_of(name).unwrap();
                let backend = params.backend();
                let m1 = pollster::block_on(backend.read(&m.m)).unwrap();
                let v1 = pollster::block_on(backend.read(&m.v)).unwrap();
                (m1, v1)
            };
            let before = (read("w"), read("b"), moments(&opt, "w"), moments(&opt, "b"));
            exec.set_f32(c, &[1.0, f32::NAN, 3.0]).unwrap();
            opt.prepare_step(0.1).unwrap();
            exec.run().unwrap();
            let norm = pollster::block_on(opt.last_grad_norm()).unwrap();
            assert!(norm.is_nan(), "{norm}");
            let after = (read("w"), read("b"), moments(&opt, "w"), moments(&opt, "b"));
            assert_eq!(before, after, "on {}", backend.describe());
        }
    }
}
