//! Reverse-mode autodiff on the graph: `backward` appends the VJP nodes of every op that lies
//! between the parameters and the loss. A tensor used several times (shared ODE dynamics, one F
//! reused by RK stages) sums the gradients of its uses.

use std::collections::BTreeMap;

use super::VjpArgs;
use super::{Graph, Source, TensorId};
use crate::error::{Error, Result};

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

    /// Keeps the gradients of the parameters `keep` accepts, to train part of a model: a plan
    /// that outputs only these does not compute the others.
    pub fn retain(&mut self, mut keep: impl FnMut(TensorId) -> bool) {
        self.of.retain(|&p, _| keep(p));
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

#[cfg(test)]
mod tests {
    use crate::exec::Executor;
    use crate::graph::{Graph, Init};
    use crate::params::ParamStore;
    use crate::testing::cpu;

    /// loss = sum(w·w) + sum(3·w): w feeds three uses, so its gradient 2w + 3 is a sum of three.
    #[test]
    fn a_parameter_used_several_times_sums_its_gradients() {
        let mut g = Graph::new();
        let w = g.param("w", &[4], Init::Uniform(1.0)).unwrap();
        let sq = g.mul(w, w).unwrap();
        let a = g.sum_all(sq).unwrap();
        let lin = g.scale(w, 3.0).unwrap();
        let b = g.sum_all(lin).unwrap();
        let loss = g.add(a, b).unwrap();
        let grads = g.backward(loss).unwrap();
        let dw = grads.get(w).unwrap();
        let params = ParamStore::init(cpu(), &g, 3).unwrap();
        let exec = Executor::new(&g, &[dw], &params).unwrap();
        exec.run().unwrap();
        let w_val = pollster::block_on(params.read("w")).unwrap();
        let got = exec.read_blocking(dw).unwrap();
        for (gw, wv) in got.iter().zip(&w_val) {
            assert!((gw - (2.0 * wv + 3.0)).abs() < 1e-6, "{gw} vs {}", 2.0 * wv + 3.0);
        }
    }

    #[test]
    fn backward_of_a_non_scalar_is_an_error() {
        let mut g = Graph::new();
        let w = g.param("w", &[4], Init::Zeros).unwrap();
        let y = g.scale(w, 2.0).unwrap();
        let err = g.backward(y).unwrap_err().to_string();
        assert!(err.contains("scalar") && err.contains("[4]"), "{err}");
    }
}
