//! A throwaway position encoding, which `tests/tools/throwaway_encoding.sh` puts into a copy of
//! the tree as `src/model/posenc/ramp.rs` (with its `mod` line and its registry line, nothing
//! else) to show that an encoding is a file and a line: position i adds i / 1000 to every channel
//! of the embeddings.

use serde::{Deserialize, Serialize};

use super::encoding::{
    Constant, Description, Drawn, Encoding, EncodingSource, ModelDims, PositionTerms, Preset, Presets,
    TermInputs,
};
use super::positions::Positions;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::tensor::TensorMeta;

const INPUT_NAME: &str = "posenc.ramp.table";

/// No settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ramp {}

/// The terms of a table input `[rows, d]` holding `values`, whose rows `at_input` the model adds.
fn ramp_terms(table: TensorId, values: Vec<f32>, at_input: TensorId) -> PositionTerms {
    PositionTerms {
        at_input: Some(at_input),
        inputs: TermInputs {
            constants: vec![(table, Constant::F32(values))],
            ..TermInputs::default()
        },
        ..PositionTerms::default()
    }
}

impl Encoding for Ramp {
    fn name(&self) -> String {
        "ramp".into()
    }

    fn terms(
        &self,
        g: &mut Graph,
        dims: ModelDims,
        at: Positions,
        _: EncodingSource,
    ) -> Result<PositionTerms> {
        let (extent, d) = (at.extent(), dims.d_model);
        let table = g.input(INPUT_NAME, TensorMeta::f32(&[extent, d]));
        let values = (0..extent * d).map(|i| (i / d) as f32 / 1000.0).collect();
        let rows = at.rows(g, table)?;
        Ok(ramp_terms(table, values, rows))
    }

    fn step_terms(&self, g: &mut Graph, dims: ModelDims, t: usize) -> Result<PositionTerms> {
        let row = g.input(INPUT_NAME, TensorMeta::f32(&[1, dims.d_model]));
        Ok(ramp_terms(row, vec![t as f32 / 1000.0; dims.d_model], row))
    }

    fn describe(&self, _: ModelDims, _: bool, _: usize) -> Description {
        Description {
            note: "A ramp at the input: position i adds i / 1000 to every channel.".into(),
            drawn: Drawn::Nothing,
        }
    }
}

impl Presets for Ramp {
    const PRESETS: &'static [Preset] = &[Preset {
        name: "ramp",
        label: "ramp",
        posenc: r#"{ type = "ramp" }"#,
        encoder_posenc: None,
        reads_positions: true,
    }];
}
