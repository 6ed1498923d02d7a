//! The fixed sinusoidal encoding of Vaswani et al. (2017), fed to the graph as a constant input
//! and added to the embeddings, or to the input of every block (FLOATER's "inject at every layer"
//! baseline). In TOML: `posenc = { type = "sinusoidal", every_block = true }`; with
//! `layout = "fairseq"` the table is fairseq's (the ODE Transformer's and FLOATER's translation
//! code), not Vaswani et al.'s.

use serde::{Deserialize, Serialize};

use super::encoding::{
    Constant, Description, Drawn, Encoding, EncodingSource, ModelDims, ModelFacts, PositionTerms, Preset,
    Presets, TermInputs, is_default,
};
use super::positions::Positions;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::math;
use crate::tensor::TensorMeta;

/// The graph input that holds the table.
pub const INPUT_NAME: &str = "posenc.sinusoidal";

/// Where the table is added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sinusoidal {
    /// To the input of every block rather than to the embeddings. Default false.
    #[serde(default)]
    pub every_block: bool,
    /// How the table lays out its sines and cosines. Default `interleaved` (Vaswani et al.'s).
    #[serde(default, skip_serializing_if = "is_default")]
    pub layout: SinusoidLayout,
}

/// How a sinusoid table lays out its values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinusoidLayout {
    /// Vaswani et al.'s: `pe[p, 2i] = sin(p·ω_i)`, `pe[p, 2i+1] = cos(p·ω_i)`,
    /// `ω_i = 10000^(−2i/d)` ([`sinusoidal_table`]).
    #[default]
    Interleaved,
    /// fairseq's `SinusoidalPositionalEmbedding`, as the ODE Transformer's and FLOATER's
    /// translation code run it: the sines of the d/2 frequencies `ω_i = 10000^(−i/(d/2 − 1))`,
    /// then their cosines, and position p reads row p + 2 (fairseq numbers positions from its
    /// padding index, 1, plus 1); computed in f32 as fairseq does ([`fairseq_table`]).
    Fairseq,
}

/// The first row fairseq's positions read: its padding index (1) plus 1.
const FAIRSEQ_FIRST_ROW: usize = 2;

/// `[len, d]` in `layout`.
pub fn sinusoid_table(layout: SinusoidLayout, len: usize, d: usize) -> Vec<f32> {
    match layout {
        SinusoidLayout::Interleaved => sinusoidal_table(len, d),
        SinusoidLayout::Fairseq => fairseq_table(len, d),
    }
}

/// fairseq's table for positions 0..len (its rows 2..len + 2), `[len, d]`, `d` even and at
/// least 4: row `r` is `sin(r·ω_0) … sin(r·ω_{h−1}), cos(r·ω_0) … cos(r·ω_{h−1})` with `h = d/2`,
/// `ω_i = exp(−i·ln(10000)/(h − 1))`, each step in f32 as fairseq's `get_embedding`.
pub fn fairseq_table(len: usize, d: usize) -> Vec<f32> {
    let half = d / 2;
    let step = (math::ln(10000f64) / (half as f64 - 1.0)) as f32;
    let frequencies: Vec<f32> = (0..half).map(|i| math::exp(i as f32 * -step)).collect();
    let mut table = vec![0.0; len * d];
    for (p, row) in table.chunks_mut(d).enumerate() {
        let r = (p + FAIRSEQ_FIRST_ROW) as f32;
        let (sines, cosines) = row.split_at_mut(half);
        for ((sine, cosine), &w) in sines.iter_mut().zip(cosines).zip(&frequencies) {
            let angle = r * w;
            *sine = math::sin(angle);
            *cosine = math::cos(angle);
        }
    }
    table
}

impl Sinusoidal {
    /// The table's `rows` (its rows at the positions, or one decoding step's row) wherever these
    /// settings add them; the table input holds `values`.
    fn placed(&self, table: TensorId, values: Vec<f32>, rows: TensorId, layers: usize) -> PositionTerms {
        let mut terms = PositionTerms {
            inputs: TermInputs {
                constants: vec![(table, Constant::F32(values))],
                ..TermInputs::default()
            },
            ..PositionTerms::default()
        };
        if self.every_block {
            terms.at_block = vec![rows; layers];
        } else {
            terms.at_input = Some(rows);
        }
        terms
    }
}

impl Encoding for Sinusoidal {
    fn name(&self) -> String {
        let name = match (self.every_block, self.layout) {
            (false, SinusoidLayout::Interleaved) => "sinusoidal",
            (true, SinusoidLayout::Interleaved) => "sinusoidal (every block)",
            (false, SinusoidLayout::Fairseq) => "sinusoidal (fairseq layout)",
            (true, SinusoidLayout::Fairseq) => "sinusoidal (every block, fairseq layout)",
        };
        name.into()
    }

    fn check(&self, model: &ModelFacts) -> std::result::Result<(), String> {
        let d = model.dims.d_model;
        if !d.is_multiple_of(2) {
            return Err(format!(
                "sinusoidal position encoding pairs sin and cos, so d_model must be even, got {d}"
            ));
        }
        if self.layout == SinusoidLayout::Fairseq && d < 4 {
            return Err(format!(
                "fairseq's sinusoid spaces d_model / 2 frequencies over d_model / 2 − 1 steps, so \
                 d_model must be at least 4, got {d}"
            ));
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
        let (table, values) = build(g, self.layout, at.extent(), dims.d_model);
        let rows = at.rows(g, table)?;
        Ok(self.placed(table, values, rows, dims.layers))
    }

    fn step_terms(&self, g: &mut Graph, dims: ModelDims, t: usize) -> Result<PositionTerms> {
        let (row, values) = step_row(g, self.layout, dims.d_model, t);
        Ok(self.placed(row, values, row, dims.layers))
    }

    fn adds_a_fixed_table(&self) -> bool {
        true
    }

    fn describe(&self, _: ModelDims, seq2seq: bool, _: usize) -> Description {
        let name = self.name();
        let note = if seq2seq {
            format!("{name}: the same fixed sin/cos table on both sides; any length.")
        } else {
            let place = if self.every_block {
                "input of every block"
            } else {
                "token embeddings"
            };
            format!("{name}: the fixed sin/cos table of Vaswani et al., added to the {place}; any length.")
        };
        Description {
            note,
            drawn: Drawn::Terms,
        }
    }
}

/// `[len, d]` row-major: `pe[p, 2i] = sin(p·ω_i)`, `pe[p, 2i+1] = cos(p·ω_i)`, with
/// `ω_i = 10000^(−2i/d)`; `d` is even. Computed in f64, so every backend gets the same table.
pub fn sinusoidal_table(len: usize, d: usize) -> Vec<f32> {
    let mut table = vec![0.0; len * d];
    for (p, row) in table.chunks_mut(d).enumerate() {
        for (i, pair) in row.chunks_mut(2).enumerate() {
            let angle = p as f64 * math::powf(10000f64, -((2 * i) as f64) / d as f64);
            pair[0] = math::sin(angle) as f32;
            pair[1] = math::cos(angle) as f32;
        }
    }
    table
}

/// The table's graph input `[len, d]` and its values.
pub(super) fn build(g: &mut Graph, layout: SinusoidLayout, len: usize, d: usize) -> (TensorId, Vec<f32>) {
    let table = g.input(INPUT_NAME, TensorMeta::f32(&[len, d]));
    (table, sinusoid_table(layout, len, d))
}

/// Row `t` of the table as a graph input `[1, d]`, and its values: one decoding step's.
pub(super) fn step_row(g: &mut Graph, layout: SinusoidLayout, d: usize, t: usize) -> (TensorId, Vec<f32>) {
    let table = sinusoid_table(layout, t + 1, d);
    let row = g.input(INPUT_NAME, TensorMeta::f32(&[1, d]));
    (row, table[t * d..].to_vec())
}

impl Presets for Sinusoidal {
    const PRESETS: &'static [Preset] = &[Preset {
        name: "sinusoidal",
        label: "sinusoidal",
        posenc: r#"{ type = "sinusoidal" }"#,
        encoder_posenc: None,
        reads_positions: true,
    }];
    const OTHER_FORMS: &'static [&'static str] = &[r#"{ type = "sinusoidal", every_block = true }"#];
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both layouts against `tests/reference/sinusoid.safetensors` (`gen_sinusoid.py`: fairseq's
    /// `get_embedding` as its code computes it, in f32; Vaswani et al.'s formula in f64). Both
    /// sides compute fairseq's in f32, so they differ only where f32 `exp`, `sin` and `cos` round
    /// differently, which grows with the angle (row 301 at the lowest frequency).
    #[test]
    fn both_layouts_match_pytorch() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/reference/sinusoid.safetensors"
        );
        let bytes = std::fs::read(path).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        for (layout, name) in [
            (SinusoidLayout::Fairseq, "fairseq"),
            (SinusoidLayout::Interleaved, "interleaved"),
        ] {
            for (len, d) in [(40, 8), (300, 16)] {
                let key = format!("{name}/{len}x{d}");
                let want: Vec<f32> = bytemuck::pod_collect_to_vec(file.tensor(&key).unwrap().data());
                let got = sinusoid_table(layout, len, d);
                assert_eq!(got.len(), want.len(), "{key}");
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (g - w).abs())
                    .fold(0.0, f32::max);
                assert!(worst <= 1e-6, "{key}: off by {worst}");
            }
        }
    }

    /// fairseq's layout: the sines, then the cosines, position 0 at angle 2·ω_i; its name says it,
    /// it is written only when set, and a width below 4 is refused.
    #[test]
    fn the_fairseq_layout_is_a_setting_of_its_own() {
        let row = &fairseq_table(1, 8)[..];
        let step = math::ln(10000f64) / 3.0;
        for i in 0..4 {
            let angle = 2.0 * math::exp(-(i as f64) * step);
            assert!((row[i] as f64 - math::sin(angle)).abs() < 1e-6, "{row:?}");
            assert!((row[4 + i] as f64 - math::cos(angle)).abs() < 1e-6, "{row:?}");
        }
        let fairseq: Sinusoidal = toml::from_str(r#"layout = "fairseq""#).unwrap();
        assert_eq!(fairseq.name(), "sinusoidal (fairseq layout)");
        assert!(
            serde_json::to_string(&fairseq)
                .unwrap()
                .contains(r#""layout":"fairseq""#)
        );
        let plain: Sinusoidal = toml::from_str("").unwrap();
        assert_eq!(serde_json::to_string(&plain).unwrap(), r#"{"every_block":false}"#);
        let model = |d_model| ModelFacts {
            dims: ModelDims {
                d_model,
                heads: 1,
                layers: 1,
                max_len: 8,
                bidirectional: false,
            },
            seq2seq: false,
            reads_cls: false,
            masked_lm: false,
            random_positions: None,
        };
        assert!(
            fairseq
                .check(&model(2))
                .unwrap_err()
                .contains("at least 4, got 2")
        );
        assert!(fairseq.check(&model(4)).is_ok() && plain.check(&model(2)).is_ok());
    }

    #[test]
    fn table_matches_the_formula_at_a_few_points() {
        let d = 8;
        let t = sinusoidal_table(5, d);
        assert_eq!(t.len(), 40);
        // Position 0: sin 0 = 0, cos 0 = 1 in every pair.
        assert_eq!(&t[..d], &[0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
        // Position 3, pair 1: ω = 10000^(−2/8) = 0.1.
        let angle = 3.0f64 * 0.1;
        assert!((t[3 * d + 2] - math::sin(angle) as f32).abs() < 1e-7);
        assert!((t[3 * d + 3] - math::cos(angle) as f32).abs() < 1e-7);
    }
}
