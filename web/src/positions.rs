//! The position encodings a loaded model adds, computed by the library on the page's backend:
//! each additive term as a `[positions, dims]` table (FLOATER: one per block).

use posflow::graph::{Executor, Graph, TensorId};
use posflow::model::posenc::{self, Constant};
use posflow::ops::ode_flow::check_status;
use posflow::{Error, Result};

use crate::session::Loaded;

/// One `[positions, dims]` table and what it is.
pub struct Panel {
    pub label: String,
    pub dims: usize,
    pub values: Vec<f32>,
}

/// The additive position terms of `model`'s graph over its `max_len` positions: at the input,
/// at each block's input, and FLOATER's compatible-form q|k|v biases. Empty for encodings that
/// only bias attention (relative, TUPE) or add nothing.
pub async fn panels(model: &Loaded) -> Result<(usize, Vec<Panel>)> {
    let config = model.saved.model.config();
    let len = config.max_len;
    let mut g = Graph::new();
    let terms = posenc::build(&mut g, config, len)?;
    let mut wanted: Vec<(String, TensorId)> = Vec::new();
    if let Some(t) = terms.at_input {
        wanted.push(("input".into(), t));
    }
    for (block, &t) in terms.at_block.iter().enumerate() {
        wanted.push((format!("block {block}"), t));
    }
    for (block, &t) in terms.qkv_bias.iter().enumerate() {
        wanted.push((format!("block {block} q|k|v bias"), t));
    }
    if wanted.is_empty() {
        return Ok((len, Vec::new()));
    }
    let mut outputs: Vec<TensorId> = wanted.iter().map(|(_, t)| *t).collect();
    outputs.extend(&terms.checks);
    // A table shared by every block (sinusoidal every_block) is one output.
    outputs.sort();
    outputs.dedup();
    let exec = Executor::new(&g, &outputs, &model.saved.params)?;
    for (t, values) in &terms.constants {
        match values {
            Constant::F32(v) => exec.set_f32(*t, v)?,
            Constant::I32(v) => exec.set_i32(*t, v)?,
        }
    }
    exec.run()?;
    for &status in &terms.checks {
        check_status(&exec.read(status).await?)?;
    }
    let mut panels = Vec::new();
    for (label, t) in wanted {
        let values = exec.read(t).await?;
        let dims = values.len() / len;
        if dims * len != values.len() {
            return Err(Error::Input(format!(
                "the position term `{label}` has {} values, not a multiple of {len} positions",
                values.len()
            )));
        }
        panels.push(Panel { label, dims, values });
    }
    Ok((len, panels))
}
