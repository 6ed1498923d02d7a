//! The executor: binds a plan's tensors to buffers on one backend, compiles the program once,
//! and replays it. The host boundary (`read`) is async because the web cannot block on the GPU.

use std::cell::OnceCell;
use std::rc::Rc;

use super::{Plan, Slot};
use crate::backend::profile::Profile;
use crate::backend::{Backend, BackendKind, Bound, Buffer, Compiled, Program, Step, f32_words, words_f32};
use crate::error::{Error, Result};
use crate::graph::{Graph, Source, TensorId};
use crate::memory::check_host_fits;
use crate::params::ParamStore;
use crate::tensor::DType;

pub struct Executor {
    backend: Rc<dyn Backend>,
    plan: Plan,
    /// Every tensor the plan touches, with its buffer.
    bound: Vec<Option<Bound>>,
    program: Program,
    compiled: OnceCell<Box<dyn Compiled>>,
}

impl Executor {
    /// Plans `graph` for reading `outputs` and binds it to the buffers of `params`' backend.
    pub fn new(graph: &Graph, outputs: &[TensorId], params: &ParamStore) -> Result<Self> {
        Self::packing(graph, outputs, &[], params)
    }

    /// [`Executor::new`], with the outputs in `packed` (a training step's gradients) side by
    /// side in one allocation where the backend packs ([`Plan::packing`]).
    pub fn packing(
        graph: &Graph,
        outputs: &[TensorId],
        packed: &[TensorId],
        params: &ParamStore,
    ) -> Result<Self> {
        let backend = params.backend().clone();
        let plan = Plan::packing(graph, outputs, packed)?;
        if backend.kind() == BackendKind::Cpu {
            let words: usize = plan.buffers.iter().sum();
            check_host_fits(
                &format!(
                    "running this graph ({} buffers of activations and gradients)",
                    plan.buffers.len()
                ),
                words as u64 * 4,
            )?;
        }
        let parts: Vec<(usize, String)> = plan
            .packed
            .iter()
            .map(|&i| (plan.buffers[i], buffer_label(graph, &plan, i)))
            .collect();
        let packed = backend.alloc_packed(&parts)?;
        let buffers: Vec<Buffer> = (0..plan.buffers.len())
            .map(|i| match plan.packed.iter().position(|&p| p == i) {
                Some(k) => Ok(packed[k].clone()),
                None => backend.alloc(plan.buffers[i], &buffer_label(graph, &plan, i)),
            })
            .collect::<Result<_>>()?;
        let mut bound = vec![None; plan.slots.len()];
        for (t, info) in graph.tensors() {
            let buffer = match &plan.slots[t.0] {
                None => continue,
                Some(Slot::Buffer(i)) => buffers[*i].clone(),
                Some(Slot::Param(name)) => params
                    .get(name)
                    .ok_or_else(|| Error::Graph(format!("parameter `{name}` is not in the parameter store")))?
                    .buffer
                    .clone(),
            };
            bound[t.0] = Some(Bound {
                name: info.name.clone(),
                meta: info.meta.clone(),
                buffer,
            });
        }
        let program = plan
            .steps
            .iter()
            .map(|&n| {
                let node = &graph.nodes()[n];
                let take = |ts: &[TensorId]| {
                    ts.iter()
                        .map(|t| bound[t.0].clone().expect("planned tensor"))
                        .collect()
                };
                Step {
                    op: node.op.clone(),
                    inputs: take(&node.inputs),
                    outputs: take(&node.outputs),
                }
            })
            .collect();
        Ok(Self {
            backend,
            plan,
            bound,
            program,
            compiled: OnceCell::new(),
        })
    }

    pub fn backend(&self) -> &Rc<dyn Backend> {
        &self.backend
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The buffer and metadata of a planned tensor, e.g. a gradient the optimizer reads.
    pub fn bound(&self, t: TensorId) -> Result<&Bound> {
        self.bound
            .get(t.0)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::Graph(format!("tensor {} is not part of this plan", t.0)))
    }

    /// Appends steps that run after the graph in the same submission (the optimizer's update).
    pub fn push_steps(&mut self, steps: impl IntoIterator<Item = Step>) {
        self.program.extend(steps);
        self.compiled = OnceCell::new();
    }

    pub fn set_f32(&self, t: TensorId, data: &[f32]) -> Result<()> {
        self.set(t, DType::F32, f32_words(data))
    }

    pub fn set_i32(&self, t: TensorId, data: &[i32]) -> Result<()> {
        self.set(t, DType::I32, bytemuck::cast_slice(data))
    }

    fn set(&self, t: TensorId, dtype: DType, words: &[u32]) -> Result<()> {
        let b = self.bound(t)?;
        if b.meta.dtype != dtype || b.meta.numel() != words.len() {
            return Err(Error::Input(format!(
                "input `{}` is {}, got {} {:?} values",
                b.name,
                b.meta,
                words.len(),
                dtype
            )));
        }
        self.backend.write(&b.buffer, words)
    }

    /// Runs the whole program: on the GPU, one command buffer and one submission.
    pub fn run(&self) -> Result<()> {
        if self.compiled.get().is_none() {
            let compiled = self.backend.compile(&self.program)?;
            let _ = self.compiled.set(compiled);
        }
        self.compiled.get().expect("compiled above").run()
    }

    /// Kernel dispatches per run on a GPU; `None` on the CPU, or before the first run compiles
    /// the program.
    pub fn dispatches(&self) -> Option<usize> {
        self.compiled.get()?.dispatches()
    }

    /// The time per op kind over the runs so far, when the backend profiles
    /// (`POSFLOW_PROFILE=1`).
    pub fn profile(&self) -> Option<Profile> {
        self.compiled.get()?.profile()
    }

    pub async fn read(&self, t: TensorId) -> Result<Vec<f32>> {
        let b = self.bound(t)?;
        let mut v = words_f32(self.backend.read(&b.buffer).await?);
        v.truncate(b.meta.numel());
        Ok(v)
    }

    /// After a run: the error of the first failed [`crate::graph::Check`] (an ODE solve out of
    /// steps), so that no result of that run is used.
    pub async fn check(&self) -> Result<()> {
        for c in &self.plan.checks {
            (c.verify)(&self.read(c.tensor).await?)?;
        }
        Ok(())
    }

    /// [`Executor::read`], blocking. Native only.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_blocking(&self, t: TensorId) -> Result<Vec<f32>> {
        pollster::block_on(self.read(t))
    }
}

/// Names a plan buffer after the first tensor it holds (for errors about its size).
fn buffer_label(graph: &Graph, plan: &Plan, buffer: usize) -> String {
    graph
        .tensors()
        .find(|(t, info)| {
            plan.slots[t.0] == Some(Slot::Buffer(buffer)) && !matches!(info.source, Source::Param(_))
        })
        .map(|(_, info)| info.name.clone())
        .unwrap_or_else(|| format!("buffer {buffer}"))
}

#[cfg(test)]
mod tests {
    use super::Executor;
    use crate::graph::Graph;
    use crate::params::ParamStore;
    use crate::tensor::TensorMeta;
    use crate::testing::cpu;

    #[test]
    fn feeding_the_wrong_length_names_the_input_and_its_shape() {
        let mut g = Graph::new();
        let x = g.input("tokens", TensorMeta::f32(&[2, 3]));
        let y = g.scale(x, 2.0).unwrap();
        let params = ParamStore::init(cpu(), &g, 0).unwrap();
        let exec = Executor::new(&g, &[y], &params).unwrap();
        let err = exec.set_f32(x, &[1.0; 5]).unwrap_err().to_string();
        assert!(
            err.contains("tokens") && err.contains("[2, 3]") && err.contains('5'),
            "{err}"
        );
        let err = exec.set_i32(x, &[1; 6]).unwrap_err().to_string();
        assert!(err.contains("I32"), "{err}");
    }
}
