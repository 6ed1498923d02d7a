//! ALiBi (Press et al., "Train Short, Test Long", 2022): no position is added to the input; every
//! layer's attention logit of query i and key j gets `−m_h · |i − j|`, a fixed slope `m_h` per head
//! (a geometric sequence, [`alibi_slopes`]). Causal models see only j ≤ i, so the bias is `−m_h ·
//! (i − j)`; the authors' code adds `m_h · j` instead, which differs by a constant per row and so
//! gives the same softmax. The encoder (bidirectional) takes the symmetric distance.
//!
//! The attention op looks the bias up inside its kernels as a relative bias whose "buckets" are
//! the offsets themselves: a constant table `[2L − 1, H]` of each offset's bias per head, and the
//! identity bucket list. So no `[H, L, L]` tensor exists at any length, and the table gets no
//! gradient (`BucketedBias::trained` false).
//!
//! An encoder's symmetric distance cannot tell a key on the left from one on the right.
//! Delétang et al.'s and Ruoss et al.'s encoder counts keys left of the query `left_offset` = 0.5
//! nearer (their `compute_alibi_encodings_biases`), which breaks the tie.
//!
//! In TOML: `posenc = { type = "alibi" }`, or `{ type = "alibi", left_offset = 0.5 }`.

use serde::{Deserialize, Serialize};

use super::encoding::is_default;
use super::encoding::{
    AttentionTerms, Constant, Description, Drawn, Encoding, EncodingSource, ModelDims, ModelFacts,
    PositionTerms, Preset, Presets, TermInputs,
};
use super::positions::Positions;
use crate::error::Result;
use crate::graph::Graph;
use crate::math;
use crate::ops::attention::{AttentionBias, BucketedBias};
use crate::tensor::TensorMeta;

/// The slopes follow from the number of heads; an encoder may count keys on the left nearer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Alibi {
    /// How much nearer an encoder's keys left of the query count (Delétang et al.'s and Ruoss et
    /// al.'s 0.5); default 0, the symmetric distance.
    #[serde(default, skip_serializing_if = "is_default")]
    pub left_offset: f64,
}

impl Encoding for Alibi {
    fn name(&self) -> String {
        "ALiBi".into()
    }

    fn check(&self, model: &ModelFacts) -> std::result::Result<(), String> {
        let offset = self.left_offset;
        if !(0.0..1.0).contains(&offset) {
            return Err(format!("alibi's left_offset must be in [0, 1), got {offset}"));
        }
        if offset != 0.0 && !model.dims.bidirectional {
            return Err(
                "alibi's left_offset tells an encoder's left keys from its right ones; a causal model \
                 sees only keys on the left, so it has none to tell apart: remove left_offset"
                    .into(),
            );
        }
        if model.seq2seq {
            return Err(
                "alibi is for the causal LM and the encoder so far; a seq2seq model cannot have it yet"
                    .into(),
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
        // A table row per offset of the positions' extent, each offset its own "bucket".
        let extent = at.extent();
        let table = g.input(
            TABLE_INPUT,
            TensorMeta::f32(&[(2 * extent).saturating_sub(1), dims.heads]),
        );
        let mut inputs = TermInputs {
            constants: vec![(
                table,
                Constant::F32(alibi_table(
                    extent,
                    dims.heads,
                    dims.bidirectional,
                    self.left_offset,
                )),
            )],
            ..TermInputs::default()
        };
        let reach = extent as i64 - 1;
        let ids = at.offset_buckets(g, OFFSETS_INPUT, |offset| (offset + reach) as i32, false);
        let bias = BucketedBias {
            table,
            buckets: inputs.read(ids),
            trained: false,
        };
        Ok(PositionTerms {
            attention: AttentionTerms::biased(AttentionBias::Bucketed(bias)),
            inputs,
            ..PositionTerms::default()
        })
    }

    fn describe(&self, dims: ModelDims, _: bool, len: usize) -> Description {
        let slopes = alibi_slopes(dims.heads);
        let first: Vec<String> = slopes.iter().take(3).map(|m| format!("{m:.4}")).collect();
        Description {
            note: format!(
                "{}: nothing is added to the tokens; every layer's attention logit of query i and key j gets \
                 -m_h·|i - j|, a fixed slope per head (m_h = {}, ...). Drawn: that bias by distance (rows) for \
                 each head (columns). Any length.",
                self.name(),
                first.join(", ")
            ),
            drawn: Drawn::Fixed {
                label: "logit bias by distance (per head)",
                columns: dims.heads,
                values: (0..len)
                    .flat_map(|d| slopes.iter().map(move |m| (-m * d as f64) as f32))
                    .collect(),
            },
        }
    }
}

/// The graph input that holds each offset's bias per head.
pub const TABLE_INPUT: &str = "posenc.alibi.table";

/// The graph input that holds each offset's row of the table (the identity; at randomized
/// positions, each pair's offset's row).
pub const OFFSETS_INPUT: &str = "posenc.alibi.offsets";

/// Each head's slope, exactly as the authors' `get_slopes`: for a power of two `n`, the geometric
/// sequence from `2^(−8/n)` with that ratio; otherwise the largest power of two's slopes and then
/// every other slope of twice that power's, as many as are missing.
pub fn alibi_slopes(heads: usize) -> Vec<f64> {
    fn power_of_two(n: usize) -> Vec<f64> {
        let start = math::powf(2f64, -(math::powf(2f64, -(math::log2(n as f64) - 3.0))));
        (0..n).map(|i| start * math::powf(start, i as f64)).collect()
    }
    if heads.is_power_of_two() {
        return power_of_two(heads);
    }
    let closest = 1 << heads.ilog2();
    let mut slopes = power_of_two(closest);
    slopes.extend(
        alibi_slopes(2 * closest)
            .into_iter()
            .step_by(2)
            .take(heads - closest),
    );
    slopes
}

/// The `[2·len − 1, heads]` table: row `j − i + len − 1` holds each head's bias for key j and
/// query i, `−m_h` times their distance (|i − j| in an encoder, less `left_offset` for a key on
/// the left; i − j for the keys a causal model sees, 0 for those it masks).
pub fn alibi_table(len: usize, heads: usize, bidirectional: bool, left_offset: f64) -> Vec<f32> {
    let slopes = &alibi_slopes(heads);
    let reach = len as i64 - 1;
    (-reach..=reach)
        .flat_map(move |offset| {
            let distance = match (bidirectional, offset < 0) {
                (true, true) => -offset as f64 - left_offset,
                (true, false) => offset as f64,
                (false, _) => (-offset).max(0) as f64,
            };
            slopes.iter().map(move |m| (-m * distance) as f32)
        })
        .collect()
}

/// In an encoder, with Ruoss et al.'s offset of half a position to the left.
impl Presets for Alibi {
    const PRESETS: &'static [Preset] = &[Preset {
        name: "alibi",
        label: "ALiBi",
        posenc: r#"{ type = "alibi" }"#,
        encoder_posenc: Some(r#"{ type = "alibi", left_offset = 0.5 }"#),
        reads_positions: true,
    }];
}

#[cfg(test)]
mod tests {
    use super::{alibi_slopes, alibi_table};

    /// The slopes the paper lists: 1/2 … 1/256 for 8 heads; 16 heads interleave 8 heads' with the
    /// halfway points; 6 heads take 4 heads' and then every other of 8 heads'.
    #[test]
    fn slopes_are_the_papers() {
        let close = |got: Vec<f64>, want: &[f64]| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
            }
        };
        close(
            alibi_slopes(8),
            &[0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625],
        );
        close(alibi_slopes(4), &[0.25, 0.0625, 0.015625, 0.00390625]);
        let s2 = 0.5f64.sqrt();
        close(alibi_slopes(2), &[0.0625, 0.00390625]);
        close(alibi_slopes(6), &[0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]);
        let sixteen = alibi_slopes(16);
        assert!(
            (sixteen[0] - s2).abs() < 1e-12 && (sixteen[1] - 0.5).abs() < 1e-12,
            "{sixteen:?}"
        );
    }

    #[test]
    fn the_table_is_minus_slope_times_distance() {
        let (len, heads) = (4, 2);
        let slopes = alibi_slopes(heads);
        for (bidirectional, offset, distance) in [(true, -3, 3), (true, 2, 2), (false, -3, 3), (false, 2, 0)]
        {
            let table = alibi_table(len, heads, bidirectional, 0.0);
            let row = (offset + len as i64 - 1) as usize;
            for (h, m) in slopes.iter().enumerate() {
                assert_eq!(table[row * heads + h], (-m * distance as f64) as f32);
            }
        }
    }

    /// Delétang et al.'s encoder bias (`compute_alibi_encodings_biases`, worked by hand for 3
    /// positions): `−m·|i − j|` with `+0.5·m` where the key is left of the query.
    #[test]
    fn the_left_offset_is_the_authors_symmetry_breaking() {
        let (len, heads) = (3, 1);
        let m = alibi_slopes(heads)[0];
        let table = alibi_table(len, heads, true, 0.5);
        // Offsets −2, −1, 0, 1, 2.
        let want = [-1.5 * m, -0.5 * m, 0.0, -m, -2.0 * m].map(|b| b as f32);
        assert_eq!(table, want);
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::model::{ModelConfig, PosEnc};
    use crate::testing::{SINUSOIDAL, TINY_CONFIG, tiny_with_posenc};

    #[test]
    fn alibi_takes_its_left_offset_and_no_seq2seq_model() {
        let alibi = tiny_with_posenc;
        assert_eq!(
            alibi(r#"{ "type": "alibi" }"#).unwrap().posenc,
            PosEnc::Alibi(Alibi::default())
        );
        let err = alibi(r#"{ "type": "alibi", "base": 2 }"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown field `base`, expected `left_offset`"),
            "{err}"
        );
        // A causal model sees keys on the left only: nothing for the offset to tell apart.
        let err = alibi(r#"{ "type": "alibi", "left_offset": 0.5 }"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a causal model sees only keys on the left"), "{err}");
        let seq2seq = TINY_CONFIG.replace(SINUSOIDAL, r#"{ "type": "alibi" }"#).replace(
            r#"{ "type": "causal_lm" }"#,
            r#"{ "type": "seq2seq", "decoder_layers": 1 }"#,
        );
        let err = ModelConfig::from_json(&seq2seq).unwrap_err().to_string();
        assert!(
            err.contains("alibi is for the causal LM and the encoder so far"),
            "{err}"
        );
    }
}
