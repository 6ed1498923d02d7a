//! A trained position table `pos_emb.weight [max_len, d]` (BERT, GPT-2), sliced to the sequence
//! length and added to the token embeddings. In TOML: `posenc = { type = "learned" }`.

use serde::{Deserialize, Serialize};

use super::encoding::{
    Description, Drawn, Encoding, EncodingSource, ModelDims, ModelFacts, PositionTerms, Preset, Presets,
};
use super::positions::{Positions, check_rows};
use crate::error::{Error, Result};
use crate::graph::{Graph, Init, TensorId};

pub const PARAM_NAME: &str = "pos_emb.weight";

/// GPT-2's initialisation for its position table.
const INIT_STD: f32 = 0.02;

/// No settings: the table's size is the model's `max_len`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Learned {}

impl Encoding for Learned {
    fn name(&self) -> String {
        "learned table".into()
    }

    fn check(&self, model: &ModelFacts) -> std::result::Result<(), String> {
        check_rows(
            model.dims.max_len,
            model.random_positions,
            "learned position table",
        )
    }

    fn terms(
        &self,
        g: &mut Graph,
        dims: ModelDims,
        at: Positions,
        _: EncodingSource,
    ) -> Result<PositionTerms> {
        Ok(PositionTerms {
            at_input: Some(build(g, at, dims.max_len, dims.d_model)?),
            ..PositionTerms::default()
        })
    }

    fn step_terms(&self, g: &mut Graph, dims: ModelDims, t: usize) -> Result<PositionTerms> {
        Ok(PositionTerms {
            at_input: Some(step_row(g, dims, t)?),
            ..PositionTerms::default()
        })
    }

    fn has_table(&self) -> bool {
        true
    }

    fn describe(&self, dims: ModelDims, seq2seq: bool, _: usize) -> Description {
        let name = self.name();
        let max_len = dims.max_len;
        let note = if seq2seq {
            format!(
                "{name}: each side has its own trained [max_len = {max_len}, d] table added to its token embeddings."
            )
        } else {
            format!(
                "{name}: a trained [max_len = {max_len}, d] table added to the token embeddings; a model cannot read \
                 positions past its end."
            )
        };
        Description { note, drawn: TABLE }
    }
}

/// The table as the viewer draws it.
pub(super) const TABLE: Drawn = Drawn::Table {
    parameter: PARAM_NAME,
    label: "input",
};

/// The table's rows at `at`, `[len, d]`; an error when a position is past `max_len`.
pub(super) fn build(g: &mut Graph, at: Positions, max_len: usize, d: usize) -> Result<TensorId> {
    if at.extent() > max_len {
        return Err(Error::Input(match at.sampled {
            None => format!(
                "sequence length {} is over the learned position table's max_len {max_len}",
                at.len
            ),
            Some(s) => format!(
                "randomized positions up to {} are past the learned position table's max_len {max_len}",
                s.range - 1
            ),
        }));
    }
    let table = g.param(PARAM_NAME, &[max_len, d], Init::Normal(INIT_STD))?;
    at.rows(g, table)
}

/// Row `t` of the table, `[1, d]`, for one decoding step.
pub(super) fn step_row(g: &mut Graph, dims: ModelDims, t: usize) -> Result<TensorId> {
    let rows = build(g, Positions::contiguous(t + 1), dims.max_len, dims.d_model)?;
    g.slice(rows, 0, t, t + 1)
}

impl Presets for Learned {
    const PRESETS: &'static [Preset] = &[Preset {
        name: "learned",
        label: "learned table",
        posenc: r#"{ type = "learned" }"#,
        encoder_posenc: None,
        reads_positions: true,
    }];
}
