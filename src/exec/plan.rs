//! The planner: which nodes run, in what order, and which buffer holds each tensor. Intermediate
//! tensors share buffers when their lifetimes do not overlap, so a training step needs far less
//! memory than one buffer per tensor.

use crate::error::{Error, Result};
use crate::graph::{Check, Graph, Source, TensorId};

/// Where a tensor lives while a plan runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    /// In the parameter store, under this name.
    Param(String),
    /// In the plan's buffer with this index.
    Buffer(usize),
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// Nodes that run, in order (views excluded: they run no kernel).
    pub steps: Vec<usize>,
    /// Length in 32-bit words of each plan buffer.
    pub buffers: Vec<usize>,
    /// Where each tensor lives; `None` for tensors the plan never touches.
    pub slots: Vec<Option<Slot>>,
    /// Tensors the caller reads after a run; their buffers are never reused.
    pub outputs: Vec<TensorId>,
    /// The graph's run checks whose tensors this plan computes (kept as outputs).
    pub checks: Vec<Check>,
    /// Buffers to allocate side by side ([`crate::backend::Backend::alloc_packed`]): those of
    /// the tensors asked to be packed that no kernel reads while writing another of them.
    pub packed: Vec<usize>,
}

impl Plan {
    pub fn new(graph: &Graph, outputs: &[TensorId]) -> Result<Plan> {
        Self::packing(graph, outputs, &[])
    }

    /// [`Plan::new`], with the buffers of `packed` (outputs: the gradients) listed to be
    /// allocated side by side, so that one dispatch of the optimizer reaches them all.
    pub fn packing(graph: &Graph, outputs: &[TensorId], packed: &[TensorId]) -> Result<Plan> {
        for &t in outputs {
            graph.check(t)?;
        }
        let n_tensors = graph.tensors.len();
        let needed = needed_nodes(graph, outputs);
        // A check rides along with the node that writes it; it never makes a node run.
        let checks: Vec<Check> = graph
            .checks
            .iter()
            .filter(|c| match graph.tensors[c.tensor.0].source {
                Source::Node { node, .. } => needed[node],
                _ => false,
            })
            .copied()
            .collect();
        let outputs: Vec<TensorId> = outputs
            .iter()
            .copied()
            .chain(checks.iter().map(|c| c.tensor))
            .collect();
        let outputs = outputs.as_slice();

        // A view shares its input's buffer: everything below works on the root of each alias.
        let mut root: Vec<usize> = (0..n_tensors).collect();
        for (n, node) in graph.nodes.iter().enumerate() {
            if needed[n] && node.op.is_view() {
                root[node.outputs[0].0] = root[node.inputs[0].0];
            }
        }

        let mut persistent = vec![false; n_tensors];
        for (t, info) in graph.tensors.iter().enumerate() {
            if !matches!(info.source, Source::Node { .. }) {
                persistent[root[t]] = true;
            }
        }
        for &t in outputs {
            persistent[root[t.0]] = true;
        }

        let steps: Vec<usize> = (0..graph.nodes.len())
            .filter(|&n| needed[n] && !graph.nodes[n].op.is_view())
            .collect();
        let mut last_use = vec![None; n_tensors];
        let mut step_of_node = vec![None; graph.nodes.len()];
        for (s, &n) in steps.iter().enumerate() {
            step_of_node[n] = Some(s);
        }
        for (n, node) in graph.nodes.iter().enumerate() {
            if !needed[n] {
                continue;
            }
            // A view is "used" where its consumers are; the view node itself runs nothing.
            // Steps are in order, so the last assignment is the last use.
            let Some(s) = step_of_node[n] else { continue };
            for t in &node.inputs {
                last_use[root[t.0]] = Some(s);
            }
        }

        let mut slots: Vec<Option<Slot>> = vec![None; n_tensors];
        let mut buffers: Vec<usize> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        for (t, info) in graph.tensors.iter().enumerate() {
            if root[t] != t {
                continue;
            }
            match &info.source {
                Source::Param(_) => slots[t] = Some(Slot::Param(info.name.clone())),
                Source::Input => {
                    buffers.push(info.meta.numel().max(1));
                    slots[t] = Some(Slot::Buffer(buffers.len() - 1));
                }
                Source::Node { .. } => {}
            }
        }
        for (s, &n) in steps.iter().enumerate() {
            let node = &graph.nodes[n];
            for t in &node.outputs {
                let len = graph.tensors[t.0].meta.numel().max(1);
                let buffer = if persistent[t.0] {
                    None
                } else {
                    take_best_fit(&mut free, &buffers, len)
                };
                let buffer = buffer.unwrap_or_else(|| {
                    buffers.push(len);
                    buffers.len() - 1
                });
                buffers[buffer] = buffers[buffer].max(len);
                slots[t.0] = Some(Slot::Buffer(buffer));
            }
            // Inputs are freed after outputs are placed, so no kernel writes what it reads.
            for t in node.inputs.iter().chain(&node.outputs) {
                let r = root[t.0];
                let dead = !persistent[r] && last_use[r].is_none_or(|last| last <= s);
                if let (true, Some(Slot::Buffer(b))) = (dead, &slots[r])
                    && !free.contains(b)
                {
                    free.push(*b);
                }
            }
        }
        for (t, slot) in slots.clone().iter().enumerate() {
            if slot.is_none() && root[t] != t {
                slots[t] = slots[root[t]].clone();
            }
        }
        for &t in outputs {
            if slots[t.0].is_none() {
                return Err(Error::Graph(format!(
                    "output `{}` is not computed by this graph",
                    graph.tensors[t.0].name
                )));
            }
        }
        let packed = packable(graph, &steps, &slots, &root, outputs, packed)?;
        Ok(Plan {
            steps,
            buffers,
            slots,
            outputs: outputs.to_vec(),
            checks,
            packed,
        })
    }
}

/// The plan buffers of `packed` that can share one allocation. A GPU binds an allocation for
/// reading or for writing within a dispatch, never both, so a buffer that some kernel reads while
/// it writes another packed one stays apart (a bias's gradient summed from a weight's, when the
/// two are the same tensor's gradient and its sum).
fn packable(
    graph: &Graph,
    steps: &[usize],
    slots: &[Option<Slot>],
    root: &[usize],
    outputs: &[TensorId],
    packed: &[TensorId],
) -> Result<Vec<usize>> {
    let buffer_of = |t: TensorId| match slots[root[t.0]] {
        Some(Slot::Buffer(b)) => Some(b),
        _ => None,
    };
    let mut chosen: Vec<usize> = Vec::new();
    for &t in packed {
        if !outputs.contains(&t) {
            return Err(Error::Graph(format!(
                "`{}` is to be packed but is not an output of the plan",
                graph.tensors[t.0].name
            )));
        }
        // Parameters and inputs have buffers of their own already.
        let source_is_node = matches!(graph.tensors[root[t.0]].source, Source::Node { .. });
        if let (true, Some(b)) = (source_is_node, buffer_of(t))
            && !chosen.contains(&b)
        {
            chosen.push(b);
        }
    }
    for &n in steps {
        let node = &graph.nodes[n];
        let writes_packed = node
            .outputs
            .iter()
            .any(|&t| buffer_of(t).is_some_and(|b| chosen.contains(&b)));
        if writes_packed {
            let read: Vec<usize> = node.inputs.iter().filter_map(|&t| buffer_of(t)).collect();
            chosen.retain(|b| !read.contains(b));
        }
    }
    Ok(chosen)
}

/// Nodes on some path to an output.
fn needed_nodes(graph: &Graph, outputs: &[TensorId]) -> Vec<bool> {
    let mut needed_tensor = vec![false; graph.tensors.len()];
    for t in outputs {
        needed_tensor[t.0] = true;
    }
    let mut needed = vec![false; graph.nodes.len()];
    for (n, node) in graph.nodes.iter().enumerate().rev() {
        if node.outputs.iter().any(|t| needed_tensor[t.0]) {
            needed[n] = true;
            for t in &node.inputs {
                needed_tensor[t.0] = true;
            }
        }
    }
    needed
}

/// The smallest free buffer that holds `len` words, else the largest free one (it grows).
fn take_best_fit(free: &mut Vec<usize>, buffers: &[usize], len: usize) -> Option<usize> {
    let pick = free
        .iter()
        .enumerate()
        .filter(|&(_, &b)| buffers[b] >= len)
        .min_by_key(|&(_, &b)| buffers[b])
        .or_else(|| free.iter().enumerate().max_by_key(|&(_, &b)| buffers[b]))
        .map(|(i, _)| i)?;
    Some(free.swap_remove(pick))
}

#[cfg(test)]
mod tests {
    use super::{Plan, Slot};
    use crate::graph::{Graph, Init};
    use crate::tensor::TensorMeta;

    #[test]
    fn a_chain_reuses_buffers_and_keeps_outputs() {
        let mut g = Graph::new();
        let x = g.input("x", TensorMeta::f32(&[64]));
        let mut y = x;
        for _ in 0..10 {
            y = g.scale(y, 2.0).unwrap();
        }
        let plan = Plan::new(&g, &[y]).unwrap();
        assert_eq!(plan.steps.len(), 10);
        // x, the output, and two buffers that the intermediates alternate between.
        assert_eq!(plan.buffers.len(), 4, "{:?}", plan.slots);
        let Some(Slot::Buffer(out)) = plan.slots[y.index()] else {
            panic!("output not placed")
        };
        let Some(Slot::Buffer(input)) = plan.slots[x.index()] else {
            panic!("input not placed")
        };
        let others = plan
            .slots
            .iter()
            .enumerate()
            .filter(|&(t, _)| t != y.index() && t != x.index());
        for (_, slot) in others {
            assert!(slot != &Some(Slot::Buffer(out)) && slot != &Some(Slot::Buffer(input)));
        }
    }

    #[test]
    fn unneeded_nodes_are_pruned_and_views_share_buffers() {
        let mut g = Graph::new();
        let w = g.param("w", &[2, 3], Init::Zeros).unwrap();
        let flat = g.reshape(w, &[6]).unwrap();
        let used = g.scale(flat, 3.0).unwrap();
        let _unused = g.scale(w, 5.0).unwrap();
        let plan = Plan::new(&g, &[used]).unwrap();
        assert_eq!(plan.steps.len(), 1, "only the scale that feeds the output runs");
        assert_eq!(plan.slots[flat.index()], Some(Slot::Param("w".into())));
    }

    /// A weight and a bias whose gradients are one tensor and its sum: the sum reads the weight's
    /// gradient while it writes the bias's, so only the bias's gradient is packed.
    #[test]
    fn a_gradient_read_to_make_another_is_not_packed() {
        let mut g = Graph::new();
        let w = g.param("w", &[2, 3], Init::Zeros).unwrap();
        let b = g.param("b", &[3], Init::Zeros).unwrap();
        let v = g.param("v", &[4], Init::Zeros).unwrap();
        let c = g.input("c", TensorMeta::f32(&[2, 3]));
        let wb = g.add(w, b).unwrap();
        let wbc = g.mul(wb, c).unwrap();
        let l1 = g.sum_all(wbc).unwrap();
        let vv = g.mul(v, v).unwrap();
        let l2 = g.sum_all(vv).unwrap();
        let loss = g.add(l1, l2).unwrap();
        let grads = g.backward(loss).unwrap();
        let ids: Vec<_> = grads.iter().map(|(_, grad)| grad).collect();
        let mut outputs = vec![loss];
        outputs.extend(&ids);
        let plan = Plan::packing(&g, &outputs, &ids).unwrap();
        let buffer = |param| {
            let grad = grads.iter().find(|&(p, _)| p == param).unwrap().1;
            match plan.slots[grad.index()] {
                Some(Slot::Buffer(b)) => b,
                ref other => panic!("gradient placed in {other:?}"),
            }
        };
        assert!(!plan.packed.contains(&buffer(w)), "{:?}", plan.packed);
        assert!(plan.packed.contains(&buffer(b)), "{:?}", plan.packed);
        assert!(plan.packed.contains(&buffer(v)), "{:?}", plan.packed);
        let err = Plan::packing(&g, &[loss], &ids).unwrap_err().to_string();
        assert!(err.contains("not an output"), "{err}");
    }
}
