//! AdamW with global gradient-norm clipping, matching `torch.optim.AdamW` preceded by
//! `torch.nn.utils.clip_grad_norm_`. The update is three ops (`update.rs`) appended to the training
//! plan, so a whole step (forward, backward, clip, update) is one GPU submission. A step whose
//! global gradient norm is not finite updates nothing, so a diverging run keeps its last good
//! parameters and moments.

use std::rc::Rc;

use serde::{Deserialize, Serialize};

use super::update::{AdamUpdate, ClipFactor, Span, SumSquares, chunked};
use crate::backend::{Backend, Bound, Buffer, Step, f32_words, words_f32};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Gradients, Graph};
use crate::math;
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
    /// [the clipping factor, the squared global norm] of the last step.
    clip: Bound,
    schedule: Bound,
    step: u64,
}

/// A new buffer of `words`, bound under `name`.
fn alloc_bound(backend: &dyn Backend, name: &str, words: usize) -> Result<Bound> {
    Ok(Bound {
        name: name.into(),
        meta: TensorMeta::f32(&[words]),
        buffer: backend.alloc(words, name)?,
    })
}

/// Parameters whose update one dispatch makes: the four allocations it binds, and where in them
/// each parameter lies.
struct Group {
    grad: Buffer,
    param: Buffer,
    m: Buffer,
    v: Buffer,
    parameters: Vec<Span>,
}

impl Optimizer {
    pub fn new(config: AdamW, params: &ParamStore) -> Result<Self> {
        config.validate()?;
        let backend = params.backend().clone();
        // m and v are packed alike (same lengths, same order), so one offset finds both.
        let packed = |suffix: &str| {
            let parts: Vec<(usize, String)> = params
                .iter()
                .map(|(name, p)| (p.meta.numel(), format!("{name}.{suffix}")))
                .collect();
            backend.alloc_packed(&parts)
        };
        let (m, v) = (packed("adam_m")?, packed("adam_v")?);
        let moments = params
            .iter()
            .zip(m.into_iter().zip(v))
            .map(|((name, _), (m, v))| (name.to_string(), Moments { m, v }))
            .collect();
        Ok(Self {
            clip: alloc_bound(&*backend, "adam.clip", 2)?,
            schedule: alloc_bound(&*backend, "adam.schedule", 3)?,
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
    /// plan must have the gradients among its outputs (so their buffers survive until the
    /// update), ideally packed ([`Executor::packing`]): the update takes a dispatch per
    /// allocation of gradients (and of parameters), so packed gradients on a GPU take one.
    pub fn attach(
        &self,
        exec: &mut Executor,
        graph: &Graph,
        grads: &Gradients,
        params: &ParamStore,
    ) -> Result<()> {
        let mut groups: Vec<Group> = Vec::new();
        for (param, grad) in grads.iter() {
            let name = &graph.info(param).name;
            if !exec.plan().outputs.contains(&grad) {
                return Err(Error::Graph(format!(
                    "the gradient of `{name}` is not an output of this plan: pass the gradients to Executor::packing"
                )));
            }
            let stored = params
                .get(name)
                .ok_or_else(|| Error::Graph(format!("parameter `{name}` is not in the store")))?;
            let moments = self.moments_of(name)?;
            let (grad_arena, grad_at) = exec.bound(grad)?.buffer.arena();
            let (param_arena, param_at) = stored.buffer.arena();
            let (m_arena, m_at) = moments.m.arena();
            let (v_arena, v_at) = moments.v.arena();
            if m_at != v_at {
                return Err(Error::Graph(format!(
                    "the moments of `{name}` are not laid out alike"
                )));
            }
            let span = Span {
                grad: grad_at,
                param: param_at,
                moments: m_at,
                len: stored.meta.numel(),
                decays: stored.meta.rank() >= 2,
            };
            let same = |g: &Group| {
                g.grad.same(&grad_arena)
                    && g.param.same(&param_arena)
                    && g.m.same(&m_arena)
                    && g.v.same(&v_arena)
            };
            match groups.iter_mut().find(|g| same(g)) {
                Some(group) => group.parameters.push(span),
                None => groups.push(Group {
                    grad: grad_arena,
                    param: param_arena,
                    m: m_arena,
                    v: v_arena,
                    parameters: vec![span],
                }),
            }
        }
        let chunks: Vec<Rc<Vec<Span>>> = groups.iter().map(|g| Rc::new(chunked(&g.parameters))).collect();
        let slots: usize = chunks.iter().map(|c| c.len()).sum();
        let norms = alloc_bound(&*self.backend, "adam.chunk_norms", slots)?;
        let mut tables = Vec::new();
        for c in &chunks {
            let table = alloc_bound(&*self.backend, "adam.chunks", 4 * c.len())?;
            let words: Vec<u32> = c.iter().flat_map(Span::words).collect();
            self.backend.write(&table.buffer, &words)?;
            tables.push(table);
        }
        let whole = |name: &str, buffer: &Buffer| Bound {
            name: name.into(),
            meta: TensorMeta::f32(&[buffer.words()]),
            buffer: buffer.clone(),
        };
        let mut steps = Vec::new();
        let mut first_slot = 0;
        for ((group, chunks), table) in groups.iter().zip(&chunks).zip(&tables) {
            steps.push(Step {
                op: Rc::new(SumSquares {
                    chunks: chunks.clone(),
                    first_slot,
                }),
                inputs: vec![whole("gradients", &group.grad), table.clone()],
                outputs: vec![norms.clone()],
            });
            first_slot += chunks.len();
        }
        steps.push(Step {
            op: Rc::new(ClipFactor {
                max_norm: self.config.max_grad_norm,
            }),
            inputs: vec![norms],
            outputs: vec![self.clip.clone()],
        });
        for ((group, chunks), table) in groups.iter().zip(&chunks).zip(tables) {
            steps.push(Step {
                op: Rc::new(AdamUpdate {
                    config: self.config.clone(),
                    chunks: chunks.clone(),
                }),
                inputs: vec![
                    whole("gradients", &group.grad),
                    table,
                    self.clip.clone(),
                    self.schedule.clone(),
                ],
                outputs: vec![
                    whole("parameters", &group.param),
                    whole("adam_m", &group.m),
                    whole("adam_v", &group.v),
                ],
            });
        }
        exec.push_steps(steps);
        Ok(())
    }

    /// Call before each run of the training plan: advances the step count and sets the learning rate.
    pub fn prepare_step(&mut self, lr: f32) -> Result<()> {
        // The count may come from a checkpoint (`set_step`), so it may be anything: saturate
        // rather than overflow. β^t is 0 in f32 long before t loses precision as an f32, so the
        // bias corrections of huge counts are the exact ones, 1.
        self.step = self.step.saturating_add(1);
        let t = self.step as f32;
        let schedule = [
            lr,
            1.0 - math::powf(self.config.beta1, t),
            1.0 - math::powf(self.config.beta2, t),
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
        let clip = words_f32(self.backend.read(&self.clip.buffer).await?);
        Ok(clip[1].sqrt())
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
    use crate::testing::{assert_close, cpu, gpus_with_and_without_subgroups, random_vec};

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
        backends.extend(gpus_with_and_without_subgroups());
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
        let ids: Vec<TensorId> = grads.iter().map(|(_, gr)| gr).collect();
        let mut exec = Executor::packing(g, &outputs, &ids, &params).unwrap();
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
        backends.extend(gpus_with_and_without_subgroups());
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
        backends.extend(gpus_with_and_without_subgroups());
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

    /// Three steps over parameters of several chunks and lengths, decaying and not, on the CPU
    /// (a dispatch per parameter) and a GPU, where the parameters, moments and packed gradients
    /// each share one allocation: there the update is one chunk-norm and one update dispatch
    /// for them all, and one more of each for the weight whose gradient the bias's sum reads
    /// (kept apart from the others'), plus the clipping factor's: five.
    #[test]
    fn one_dispatch_updates_every_packed_parameter_as_the_cpu_does() {
        let shapes: [(&str, &[usize]); 5] = [
            ("big", &[3, 1500]),
            ("odd", &[4097]),
            ("mat", &[5, 7]),
            ("w", &[2, 3]),
            ("b", &[3]),
        ];
        let config = AdamW {
            lr: 0.01,
            weight_decay: 0.1,
            max_grad_norm: Some(1.0),
            ..AdamW::default()
        };
        let mut runs = Vec::new();
        let mut backends = vec![cpu()];
        backends.extend(gpus_with_and_without_subgroups());
        for backend in backends {
            let mut g = Graph::new();
            let mut terms = Vec::new();
            let mut feeds = Vec::new();
            for (name, shape) in &shapes[..3] {
                let p = g.param(name, shape, Init::Normal(1.0)).unwrap();
                let c = g.input(&format!("c_{name}"), TensorMeta::f32(shape));
                let pp = g.mul(p, p).unwrap();
                let ppc = g.mul(pp, c).unwrap();
                terms.push(g.sum_all(ppc).unwrap());
                feeds.push((c, shape.iter().product::<usize>()));
            }
            let w = g.param("w", shapes[3].1, Init::Normal(1.0)).unwrap();
            let b = g.param("b", shapes[4].1, Init::Normal(1.0)).unwrap();
            let c = g.input("c_wb", TensorMeta::f32(shapes[3].1));
            let wb = g.add(w, b).unwrap();
            let wbc = g.mul(wb, c).unwrap();
            terms.push(g.sum_all(wbc).unwrap());
            feeds.push((c, 6));
            let loss = terms.into_iter().reduce(|a, b| g.add(a, b).unwrap()).unwrap();
            let (params, mut opt, exec) = step_with(config.clone(), backend.clone(), &mut g, loss);
            for (k, &(c, n)) in feeds.iter().enumerate() {
                exec.set_f32(c, &random_vec(n, 70 + k as u64)).unwrap();
            }
            for _ in 0..3 {
                opt.prepare_step(0.01).unwrap();
                exec.run().unwrap();
            }
            if let Some(total) = exec.dispatches() {
                let grads = g.backward(loss).unwrap();
                let ids: Vec<TensorId> = grads.iter().map(|(_, gr)| gr).collect();
                let mut outputs = vec![loss];
                outputs.extend(&ids);
                let alone = Executor::packing(&g, &outputs, &ids, &params).unwrap();
                alone.run().unwrap();
                let update = total - alone.dispatches().unwrap();
                assert_eq!(update, 5, "dispatches of the update on {}", backend.describe());
            }
            let mut values = Vec::new();
            for (name, shape) in shapes {
                let n = shape.iter().product::<usize>();
                let m = opt.moments_of(name).unwrap();
                let read = |b| words_f32(pollster::block_on(backend.read(b)).unwrap())[..n].to_vec();
                let p = pollster::block_on(params.read(name)).unwrap();
                values.push((name, p, read(&m.m), read(&m.v)));
            }
            runs.push((backend.describe(), values));
        }
        let (cpu_name, want) = &runs[0];
        for (on, got) in &runs[1..] {
            for ((name, p, m, v), (_, wp, wm, wv)) in got.iter().zip(want) {
                let what = |part: &str| format!("{part} of {name} on {on} vs {cpu_name}");
                assert_close(&what("parameter"), p, wp, 1e-5, 1e-4);
                assert_close(&what("first moment"), m, wm, 1e-6, 1e-4);
                assert_close(&what("second moment"), v, wv, 1e-7, 1e-4);
            }
        }
    }

    /// A NaN in one gradient skips the update of every parameter, moments included.
    #[test]
    fn a_non_finite_gradient_changes_nothing() {
        let mut backends = vec![cpu()];
        backends.extend(gpus_with_and_without_subgroups());
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
