//! A trained position table `pos_emb.weight [max_len, d]`, sliced to the sequence length.

use crate::error::{Error, Result};
use crate::graph::{Graph, Init, TensorId};

pub const PARAM_NAME: &str = "pos_emb.weight";

/// GPT-2's initialisation for its position table.
const INIT_STD: f32 = 0.02;

/// The first `len` rows of the table, `[len, d]`; an error when `len` is over `max_len`.
pub(super) fn build(g: &mut Graph, len: usize, max_len: usize, d: usize) -> Result<TensorId> {
    if len > max_len {
        return Err(Error::Input(format!(
            "sequence length {len} is over the learned position table's max_len {max_len}"
        )));
    }
    let table = g.param(PARAM_NAME, &[max_len, d], Init::Normal(INIT_STD))?;
    if len == max_len {
        return Ok(table);
    }
    g.slice(table, 0, 0, len)
}
