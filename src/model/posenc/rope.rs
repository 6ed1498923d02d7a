//! RoPE (Su et al., RoFormer): every layer's queries and keys turned pair by pair by angles growing
//! with the position, `l · base^(−2i/Dh)`, so that attention sees only offsets; nothing is added to
//! the input, nothing is trained, any length. This file is the encoding's table; the rotation is
//! the op `ops::rope`. In TOML: `posenc = { type = "rope" }` (default base 10,000).

use serde::{Deserialize, Serialize};

use super::encoding::{
    AttentionTerms, Constant, Description, Drawn, Encoding, EncodingSource, ModelDims, ModelFacts,
    PositionTerms, Preset, Presets, TermInputs,
};
use super::positions::Positions;
use crate::error::Result;
use crate::graph::Graph;
use crate::ops::rope::{ROPE_BASE, rope_table};
use crate::tensor::TensorMeta;

/// The graph input that holds the table.
pub const INPUT_NAME: &str = "rope_table";

/// The angles' base.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rope {
    /// Default 10,000 (RoFormer's).
    #[serde(default = "rope_base")]
    pub base: f64,
}

impl Default for Rope {
    fn default() -> Self {
        Self { base: ROPE_BASE }
    }
}

fn rope_base() -> f64 {
    ROPE_BASE
}

impl Encoding for Rope {
    fn name(&self) -> String {
        "RoPE".into()
    }

    fn check(&self, model: &ModelFacts) -> std::result::Result<(), String> {
        let base = self.base;
        if !(base.is_finite() && base > 1.0) {
            return Err(format!("rope's base must be finite and above 1, got {base}"));
        }
        let d = model.dims;
        if !d.head_dim().is_multiple_of(2) {
            return Err(format!(
                "rope turns pairs of a head's coordinates: the head width d_model / heads = {} / {} = {} \
                 must be even",
                d.d_model,
                d.heads,
                d.head_dim()
            ));
        }
        if model.seq2seq {
            return Err(
                "rope is for the causal LM and the encoder so far; a seq2seq model cannot have it yet".into(),
            );
        }
        Ok(())
    }

    fn terms(
        &self,
        g: &mut Graph,
        dims: ModelDims,
        at: Positions,
        _: EncodingSource,
    ) -> Result<PositionTerms> {
        let (extent, dh) = (at.extent(), dims.head_dim());
        let table = g.input(INPUT_NAME, TensorMeta::f32(&[extent, dh]));
        Ok(PositionTerms {
            attention: AttentionTerms {
                rope: Some(at.rows(g, table)?),
                ..AttentionTerms::default()
            },
            inputs: TermInputs {
                constants: vec![(table, Constant::F32(rope_table(extent, dh, self.base)))],
                ..TermInputs::default()
            },
            ..PositionTerms::default()
        })
    }

    fn describe(&self, dims: ModelDims, _: bool, len: usize) -> Description {
        let (name, base, dh) = (self.name(), self.base, dims.head_dim());
        Description {
            note: format!(
                "{name}: nothing is added to the tokens; every layer turns each pair (2i, 2i+1) of a head's \
                 query and key by the angle l·θ_i, θ_i = {base}^(-2i/{dh}), so attention sees only offsets. \
                 Drawn: cos(l·θ_i) for the {half} frequencies, then sin(l·θ_i); fast pairs on the left, \
                 slow ones on the right. Any length.",
                half = dh / 2,
            ),
            drawn: Drawn::Fixed {
                label: "rotation angles (cos | sin)",
                columns: dh,
                values: rope_table(len, dh, base),
            },
        }
    }
}

impl Presets for Rope {
    const PRESETS: &'static [Preset] = &[Preset {
        name: "rope",
        label: "RoPE",
        posenc: r#"{ type = "rope" }"#,
        encoder_posenc: None,
        reads_positions: true,
    }];
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::model::{ModelConfig, PosEnc};
    use crate::testing::{SINUSOIDAL, TINY_CONFIG, tiny_with_posenc};

    #[test]
    fn rope_reads_its_base_and_refuses_what_it_cannot_turn() {
        let rope = tiny_with_posenc;
        assert_eq!(
            rope(r#"{ "type": "rope" }"#).unwrap().posenc,
            PosEnc::Rope(Rope { base: 10_000.0 })
        );
        assert_eq!(
            rope(r#"{ "type": "rope", "base": 500 }"#).unwrap().posenc,
            PosEnc::Rope(Rope { base: 500.0 })
        );
        let err = rope(r#"{ "type": "rope", "base": 1 }"#).unwrap_err().to_string();
        assert!(
            err.contains("rope's base must be finite and above 1, got 1"),
            "{err}"
        );
        let err = rope(r#"{ "type": "rope", "buckets": 8 }"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `buckets`, expected `base`"), "{err}");
        let odd = TINY_CONFIG
            .replace(SINUSOIDAL, r#"{ "type": "rope" }"#)
            .replace(r#""heads": 2"#, r#""heads": 4"#)
            .replace(r#""d_model": 32"#, r#""d_model": 36"#);
        let err = ModelConfig::from_json(&odd).unwrap_err().to_string();
        assert!(
            err.contains("the head width d_model / heads = 36 / 4 = 9 must be even"),
            "{err}"
        );
        let seq2seq = TINY_CONFIG.replace(SINUSOIDAL, r#"{ "type": "rope" }"#).replace(
            r#"{ "type": "causal_lm" }"#,
            r#"{ "type": "seq2seq", "decoder_layers": 1 }"#,
        );
        let err = ModelConfig::from_json(&seq2seq).unwrap_err().to_string();
        assert!(err.contains("a seq2seq model cannot have it yet"), "{err}");
    }
}
