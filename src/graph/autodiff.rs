//! Reverse-mode autodiff on the graph: `backward` appends the VJP nodes of every op that lies
//! between the parameters and the loss. A tensor used several times (shared ODE dynamics, one F
//! reused by RK stages) sums the gradients of its uses.

use std::collections::BTreeMap;

use super::{Graph, Source, TensorId};
use crate::error::{Error, Result};
use crate::ops::VjpArgs;

/// The gradient tensor of each parameter that the loss depends on.
#[derive(Clone, Debug, Default)]
pub struct Gradients {
    of: BTreeMap<TensorId, TensorId>,
}

impl Gradients {
    pub fn get(&self, param: TensorId) -> Option<TensorId> {
        self.of.get(&param).copied()
    }

    /// (parameter, gradient) pairs in parameter order.
    pub fn iter(&self) -> impl Iterator<Item = (TensorId, TensorId)> + '_ {
        self.of.iter().map(|(&p, &g)| (p, g))
    }
}

impl Graph {
    /// Appends the backward graph of a scalar `loss` and returns the parameters' gradients.
    pub fn backward(&mut self, loss: TensorId) -> Result<Gradients> {
        self.check(loss)?;
        if self.meta(loss).numel() != 1 {
            return Err(Error::Graph(format!(
                "backward needs a scalar loss, got shape {:?}",
                self.shape(loss)
            )));
        }
        let needs_grad = self.tensors_needing_grad();
        if !needs_grad[loss.0] {
            return Err(Error::Graph("the loss does not depend on any parameter".into()));
        }

        let mut grads: BTreeMap<TensorId, TensorId> = BTreeMap::new();
        let loss_shape = self.shape(loss).to_vec();
        let seed = self.fill(&loss_shape, 1.0)?;
        grads.insert(loss, seed);

        let forward_nodes = self.nodes.len() - 1; // the seed's fill node is not differentiated
        for n in (0..forward_nodes).rev() {
            let node = self.nodes[n].clone();
            if !node.inputs.iter().any(|t| needs_grad[t.0]) {
                continue;
            }
            let out_grads: Vec<Option<TensorId>> =
                node.outputs.iter().map(|t| grads.get(t).copied()).collect();
            if out_grads.iter().all(Option::is_none) {
                continue;
            }
            let in_grads = node.op.vjp(
                self,
                &VjpArgs {
                    inputs: &node.inputs,
                    outputs: &node.outputs,
                    grads: &out_grads,
                },
            )?;
            for (&input, grad) in node.inputs.iter().zip(in_grads) {
                let Some(grad) = grad.filter(|_| needs_grad[input.0]) else {
                    continue;
                };
                if self.shape(grad) != self.shape(input) {
                    return Err(Error::Graph(format!(
                        "{}: gradient shape {:?} differs from input shape {:?}",
                        node.op.name(),
                        self.shape(grad),
                        self.shape(input)
                    )));
                }
                let total = match grads.get(&input) {
                    Some(&earlier) => self.add(earlier, grad)?,
                    None => grad,
                };
                grads.insert(input, total);
            }
        }

        let of = grads
            .into_iter()
            .filter(|(t, _)| matches!(self.tensors[t.0].source, Source::Param(_)))
            .collect();
        Ok(Gradients { of })
    }

    /// Marks every tensor that depends on a parameter.
    fn tensors_needing_grad(&self) -> Vec<bool> {
        let mut needs: Vec<bool> = self
            .tensors
            .iter()
            .map(|t| matches!(t.source, Source::Param(_)))
            .collect();
        for node in &self.nodes {
            if node.inputs.iter().any(|t| needs[t.0]) {
                for t in &node.outputs {
                    needs[t.0] = true;
                }
            }
        }
        needs
    }
}
