//! The static graph: tensors and the ops that produce them, built once per shape and replayed.

use std::rc::Rc;

use crate::error::{Error, Result};
use crate::tensor::TensorMeta;

mod autodiff;
mod op;

pub use autodiff::Gradients;
pub use op::{Op, VjpArgs};

/// A tensor in one graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub(crate) usize);

impl TensorId {
    pub fn index(self) -> usize {
        self.0
    }
}

/// How a parameter is initialised; drawn on the host from a seed, so every backend starts equal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Zeros,
    Ones,
    /// Every element this value.
    Constant(f32),
    /// Normal with this standard deviation.
    Normal(f32),
    /// Uniform on [-a, a].
    Uniform(f32),
}

/// Where a tensor's value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Fed by the caller before each run.
    Input,
    /// A trainable parameter, held in a [`crate::params::ParamStore`] under its name.
    Param(Init),
    /// Output `index` of node `node`.
    Node { node: usize, index: usize },
}

#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub meta: TensorMeta,
    pub name: String,
    pub source: Source,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub op: Rc<dyn Op>,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
}

/// A status tensor to read after every run, and what turns it into an error: kernels cannot
/// return errors, so an op that can fail at run time (an ODE solve out of steps) writes a status,
/// and the executor checks it before any result of the run is used.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    pub tensor: TensorId,
    pub verify: fn(&[f32]) -> Result<()>,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    // Read by the planner (crate::exec), which walks them by index.
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) checks: Vec<Check>,
    /// Put in front of every parameter name declared now ([`Graph::with_param_prefix`]).
    param_prefix: String,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    /// A tensor the caller writes before each run (data, targets).
    pub fn input(&mut self, name: &str, meta: TensorMeta) -> TensorId {
        self.push_tensor(meta, name.to_string(), Source::Input)
    }

    /// A trainable f32 parameter. Names are unique: they are the keys of checkpoints.
    pub fn param(&mut self, name: &str, shape: &[usize], init: Init) -> Result<TensorId> {
        let name = &format!("{}{name}", self.param_prefix);
        if self
            .tensors
            .iter()
            .any(|t| t.name == *name && matches!(t.source, Source::Param(_)))
        {
            return Err(Error::Graph(format!("parameter `{name}` declared twice")));
        }
        Ok(self.push_tensor(TensorMeta::f32(shape), name.to_string(), Source::Param(init)))
    }

    /// The parameter `name`, declared by the first call and the same tensor on every later one:
    /// a parameter that several parts of a model share (the ODE Transformer authors' one gate
    /// for all the blocks of a stack). A later call with another shape is an error.
    pub fn shared_param(&mut self, name: &str, shape: &[usize], init: Init) -> Result<TensorId> {
        let full = format!("{}{name}", self.param_prefix);
        match self.param_by_name(&full) {
            None => self.param(name, shape, init),
            Some(id) if self.meta(id).shape == shape => Ok(id),
            Some(id) => Err(Error::Graph(format!(
                "parameter `{full}` is shared as {:?} and asked for again as {shape:?}",
                self.meta(id).shape
            ))),
        }
    }

    /// Runs `build` with `prefix` in front of the names of the parameters it declares (after any
    /// prefix already set): the encoder and the decoder of a seq2seq model declare the same parts
    /// (`blocks.0.ln1`, a position table) under `encoder.` and `decoder.`.
    pub fn with_param_prefix<T>(
        &mut self,
        prefix: &str,
        build: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let outer = self.param_prefix.len();
        self.param_prefix.push_str(prefix);
        let built = build(self);
        self.param_prefix.truncate(outer);
        built
    }

    /// Appends a node; returns its outputs. Shape errors name the op and the shapes given.
    pub fn apply(&mut self, op: impl Op + 'static, inputs: &[TensorId]) -> Result<Vec<TensorId>> {
        for &t in inputs {
            self.check(t)?;
        }
        let metas: Vec<&TensorMeta> = inputs.iter().map(|&t| &self.tensors[t.0].meta).collect();
        let out_metas = op.infer(&metas)?;
        let node = self.nodes.len();
        let name = op.name();
        let outputs = out_metas
            .into_iter()
            .enumerate()
            .map(|(index, meta)| {
                self.push_tensor(
                    meta,
                    format!("{name}#{node}.{index}"),
                    Source::Node { node, index },
                )
            })
            .collect::<Vec<_>>();
        self.nodes.push(Node {
            op: Rc::new(op),
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
        });
        Ok(outputs)
    }

    /// [`Graph::apply`] for the common single-output op.
    pub fn apply1(&mut self, op: impl Op + 'static, inputs: &[TensorId]) -> Result<TensorId> {
        Ok(self.apply(op, inputs)?[0])
    }

    /// Asks every executor that computes `tensor` to read it after each run and pass it to
    /// `verify` (see [`Check`]).
    pub fn check_after_run(&mut self, tensor: TensorId, verify: fn(&[f32]) -> Result<()>) {
        self.checks.push(Check { tensor, verify });
    }

    pub fn meta(&self, t: TensorId) -> &TensorMeta {
        &self.tensors[t.0].meta
    }

    pub fn shape(&self, t: TensorId) -> &[usize] {
        &self.tensors[t.0].meta.shape
    }

    pub fn info(&self, t: TensorId) -> &TensorInfo {
        &self.tensors[t.0]
    }

    pub fn tensors(&self) -> impl Iterator<Item = (TensorId, &TensorInfo)> {
        self.tensors.iter().enumerate().map(|(i, t)| (TensorId(i), t))
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Gives a tensor a readable name (shown in errors such as a binding over the GPU's limit).
    pub fn name(&mut self, t: TensorId, name: &str) {
        self.tensors[t.0].name = name.to_string();
    }

    /// Every parameter the graph declares: its name and meta.
    pub fn params(&self) -> impl Iterator<Item = (&str, &TensorMeta)> {
        self.tensors
            .iter()
            .filter(|t| matches!(t.source, Source::Param(_)))
            .map(|t| (t.name.as_str(), &t.meta))
    }

    /// The parameter tensor called `name`.
    pub fn param_by_name(&self, name: &str) -> Option<TensorId> {
        self.tensors()
            .find(|(_, t)| t.name == name && matches!(t.source, Source::Param(_)))
            .map(|(id, _)| id)
    }

    pub(crate) fn check(&self, t: TensorId) -> Result<()> {
        if t.0 < self.tensors.len() {
            Ok(())
        } else {
            Err(Error::Graph(format!("tensor {} is not in this graph", t.0)))
        }
    }

    fn push_tensor(&mut self, meta: TensorMeta, name: String, source: Source) -> TensorId {
        self.tensors.push(TensorInfo { meta, name, source });
        TensorId(self.tensors.len() - 1)
    }
}
