//! No position encoding: nothing is added anywhere. A causal model can still infer positions from
//! its mask; a masked LM cannot, so it is refused one. In TOML: `posenc = { type = "none" }`.

use serde::{Deserialize, Serialize};

use super::encoding::{
    Description, Drawn, Encoding, EncodingSource, ModelDims, ModelFacts, PositionTerms, Preset, Presets,
};
use super::positions::Positions;
use crate::error::Result;
use crate::graph::Graph;

/// No settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoEncoding {}

impl Encoding for NoEncoding {
    fn name(&self) -> String {
        "no position encoding".into()
    }

    fn check(&self, model: &ModelFacts) -> std::result::Result<(), String> {
        if model.masked_lm {
            return Err(
                "masked_lm attends both ways, and without a position encoding (posenc \"none\") \
                 it cannot tell one position from another: a model without one learns order only \
                 from a causal mask. Choose an encoding (e.g. learned, as BERT)"
                    .into(),
            );
        }
        if model.random_positions.is_some() {
            return Err(
                "posenc \"none\" reads no positions, so random_positions has nothing to randomize; \
                 remove it or choose an encoding"
                    .into(),
            );
        }
        Ok(())
    }

    fn terms(&self, _: &mut Graph, _: ModelDims, _: Positions, _: EncodingSource) -> Result<PositionTerms> {
        Ok(PositionTerms::default())
    }

    fn step_terms(&self, _: &mut Graph, _: ModelDims, _: usize) -> Result<PositionTerms> {
        Ok(PositionTerms::default())
    }

    fn describe(&self, _: ModelDims, seq2seq: bool, _: usize) -> Description {
        let note = if seq2seq {
            "No position encoding: the encoder reads its source as a bag of tokens; the decoder has only its \
             causal mask."
        } else {
            "No position encoding: only the causal mask tells the model where a token is."
        };
        Description {
            note: note.into(),
            drawn: Drawn::Nothing,
        }
    }
}

impl Presets for NoEncoding {
    const PRESETS: &'static [Preset] = &[Preset {
        name: "none",
        label: "no position encoding",
        posenc: r#"{ type = "none" }"#,
        encoder_posenc: None,
        reads_positions: false,
    }];
}
