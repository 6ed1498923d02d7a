//! T5's relative position bias (Raffel et al., 2020): a learned scalar per head and per bucket of
//! the offset j − i between key j and query i, added to every layer's attention logits.
//!
//! The bucket indices depend only on the length, so the host computes them once per graph, as a
//! constant input: the bucket of each offset, i32 `[2L − 1]`, which the attention op looks up in
//! its kernels with the table ([`crate::ops::attention::BucketedBias`]), so that nothing is
//! `[L, L]`. Any length works; offsets beyond `max_distance` share the last bucket. TUPE-R adds
//! the bias to its dense positional term instead ([`build_dense`]), at lengths up to `max_len`.
//!
//! In TOML: `posenc = { type = "relative", buckets = 32, max_distance = 128 }`; with
//! `learned_absolute = true` a learned table is added to the embeddings too (the TUPE paper's
//! BERT-R baseline).

use serde::{Deserialize, Serialize};

use super::encoding::{
    AttentionTerms, Constant, Description, Drawn, Encoding, EncodingSource, ModelDims, ModelFacts,
    PositionTerms, Preset, Presets, TermInputs, is_default,
};
use super::learned;
use super::positions::{OffsetInput, OffsetValues, Positions, check_rows};
use crate::error::{Error, Result};
use crate::graph::{Graph, Init, TensorId};
use crate::math;
use crate::ops::attention::{AttentionBias, BucketedBias};
use crate::tensor::TensorMeta;

pub const PARAM_NAME: &str = "posenc.relative.weight";

/// The graph input that holds the bucket of each offset (the relative encoding).
pub const INPUT_NAME: &str = "posenc.relative.buckets_by_offset";

/// The graph input that holds the bucket of each (query, key) pair (TUPE-R).
pub const MATRIX_INPUT_NAME: &str = "posenc.relative.buckets";

/// The table starts small, so training starts close to no position information (T5 itself uses
/// N(0, 1/√d_model)); 0.02 is the std of every other table here.
const INIT_STD: f32 = 0.02;

/// The bucket count and distance stay within the positions posflow runs.
const MAX_BUCKETS: usize = 1 << 12;
const MAX_DISTANCE: usize = 1 << 20;

/// T5's relative bias: a trained `[buckets, heads]` table of attention-logit biases, indexed by
/// the bucket of the key-minus-query offset and shared by every layer. The encoder splits the
/// buckets between both signs; the causal LM spends them all on the past. Half of each side's
/// buckets are exact offsets, the rest log-spaced up to `max_distance`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Relative {
    /// Default 32.
    #[serde(default = "t5_buckets")]
    pub buckets: usize,
    /// Default 128.
    #[serde(default = "t5_max_distance")]
    pub max_distance: usize,
    /// A learned absolute table added to the embeddings too. Default false.
    #[serde(default, skip_serializing_if = "is_default")]
    pub learned_absolute: bool,
}

impl Default for Relative {
    fn default() -> Self {
        Self {
            buckets: t5_buckets(),
            max_distance: t5_max_distance(),
            learned_absolute: false,
        }
    }
}

pub(super) fn t5_buckets() -> usize {
    32
}

pub(super) fn t5_max_distance() -> usize {
    128
}

/// The bucket layout's limits: the encoder's half of the buckets must still split into exact and
/// log-spaced ones, and the log-spaced range must start below `max_distance`.
pub(super) fn check_buckets(buckets: usize, max_distance: usize) -> std::result::Result<(), String> {
    if !(4..=MAX_BUCKETS).contains(&buckets) {
        return Err(format!(
            "relative position encoding needs 4 ≤ buckets ≤ {MAX_BUCKETS}, got {buckets}"
        ));
    }
    if max_distance > MAX_DISTANCE {
        return Err(format!(
            "relative position encoding's max_distance is {max_distance}, over posflow's limit of {MAX_DISTANCE}"
        ));
    }
    if max_distance <= buckets / 2 {
        return Err(format!(
            "relative position encoding needs max_distance > buckets / 2 = {}, got {max_distance}",
            buckets / 2
        ));
    }
    Ok(())
}

impl Relative {
    /// The terms of a graph whose keys have the buckets `values` (one per key offset the op
    /// reads), with the absolute table's rows `at_input` (BERT-R's).
    fn with_bias(
        &self,
        g: &mut Graph,
        dims: ModelDims,
        values: Vec<i32>,
        at_input: Option<TensorId>,
    ) -> Result<PositionTerms> {
        let bias = BucketedBias {
            table: table(g, dims.heads, self.buckets)?,
            buckets: g.input(INPUT_NAME, TensorMeta::i32(&[values.len()])),
            trained: true,
        };
        Ok(PositionTerms {
            at_input,
            attention: AttentionTerms::biased(AttentionBias::Bucketed(bias)),
            inputs: TermInputs {
                constants: vec![(bias.buckets, Constant::I32(values))],
                ..TermInputs::default()
            },
            ..PositionTerms::default()
        })
    }
}

impl Encoding for Relative {
    fn name(&self) -> String {
        if self.learned_absolute {
            "learned table + T5 relative (BERT-R)".into()
        } else {
            "T5 relative".into()
        }
    }

    fn check(&self, model: &ModelFacts) -> std::result::Result<(), String> {
        check_buckets(self.buckets, self.max_distance)?;
        if self.learned_absolute {
            check_rows(
                model.dims.max_len,
                model.random_positions,
                "learned position table",
            )?;
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
        let (bidirectional, buckets, max_distance) = (dims.bidirectional, self.buckets, self.max_distance);
        let at_input = self
            .learned_absolute
            .then(|| learned::build(g, at, dims.max_len, dims.d_model))
            .transpose()?;
        let bucket = |offset| relative_bucket(offset, bidirectional, buckets, max_distance);
        let ids = at.offset_buckets(g, INPUT_NAME, bucket, false);
        let mut inputs = TermInputs::default();
        let bias = BucketedBias {
            table: table(g, dims.heads, buckets)?,
            buckets: inputs.read(ids),
            trained: true,
        };
        Ok(PositionTerms {
            at_input,
            attention: AttentionTerms::biased(AttentionBias::Bucketed(bias)),
            inputs,
            ..PositionTerms::default()
        })
    }

    fn step_terms(&self, g: &mut Graph, dims: ModelDims, t: usize) -> Result<PositionTerms> {
        // The op reads entry j for key j of the one query: the offsets −t..0, the first t + 1 of
        // the 2t + 1 a square graph's input holds.
        let mut values = buckets_by_offset(t + 1, false, self.buckets, self.max_distance);
        values.truncate(t + 1);
        let at_input = self
            .learned_absolute
            .then(|| learned::step_row(g, dims, t))
            .transpose()?;
        self.with_bias(g, dims, values, at_input)
    }

    fn has_table(&self) -> bool {
        self.learned_absolute
    }

    fn describe(&self, dims: ModelDims, seq2seq: bool, _: usize) -> Description {
        let (name, buckets, max_distance) = (self.name(), self.buckets, self.max_distance);
        let note = match (seq2seq, self.learned_absolute) {
            (false, false) => format!(
                "T5 relative position bias: nothing is added to the tokens; every layer's attention logits get a \
                 trained bias per head for the bucket of the offset j - i ({buckets} buckets, log-spaced up to \
                 {max_distance}). It has no absolute table to draw."
            ),
            (false, true) => format!(
                "{name}: a trained [max_len = {}, d] table added to the token embeddings (drawn), and T5's \
                 relative bias in every layer's attention logits ({buckets} buckets up to {max_distance}).",
                dims.max_len
            ),
            (true, absolute) => format!(
                "T5 relative position bias on both sides: a trained bias per head for the bucket of j - i \
                 ({buckets} buckets up to {max_distance}); the encoder's buckets tell left from right, the \
                 decoder's look back only. Cross-attention has none.{}",
                if absolute {
                    " Each side also adds its own trained absolute table (drawn) to its token embeddings."
                } else {
                    " No absolute table to draw."
                }
            ),
        };
        let drawn = if self.learned_absolute {
            learned::TABLE
        } else {
            Drawn::Nothing
        };
        Description { note, drawn }
    }
}

/// The bucket of the offset `relative = j − i`, exactly as T5's `_relative_position_bucket`.
///
/// Bidirectional (encoder): half the buckets for j ≤ i, half for j > i. Unidirectional (causal):
/// every bucket for j ≤ i, and j > i (masked anyway) falls in bucket 0. Within each half, the
/// first half of the buckets are exact offsets, the rest log-spaced up to `max_distance`, after
/// which the last bucket holds every offset. The log is taken in f32 as T5 does (for the sizes
/// tested, f64 gives the same buckets).
pub fn relative_bucket(relative: i64, bidirectional: bool, buckets: usize, max_distance: usize) -> i32 {
    let (mut buckets, mut base) = (buckets as i64, 0);
    let distance = if bidirectional {
        buckets /= 2;
        if relative > 0 {
            base = buckets;
        }
        relative.abs()
    } else {
        (-relative).max(0)
    };
    let max_exact = buckets / 2;
    let bucket = if distance < max_exact {
        distance
    } else {
        let ratio = math::ln(distance as f32 / max_exact as f32)
            / (math::ln(max_distance as f64 / max_exact as f64) as f32);
        let log_spaced = max_exact + (ratio * (buckets - max_exact) as f32) as i64;
        log_spaced.min(buckets - 1)
    };
    (base + bucket) as i32
}

/// The `[2·len − 1]` bucket of each offset j − i between a query and a key of a length-`len`
/// sequence, at index `j − i + len − 1` (offsets −(len − 1) ..= len − 1 in order).
pub fn buckets_by_offset(len: usize, bidirectional: bool, buckets: usize, max_distance: usize) -> Vec<i32> {
    let reach = len as i64 - 1;
    (-reach..=reach)
        .map(|offset| relative_bucket(offset, bidirectional, buckets, max_distance))
        .collect()
}

/// The `[len, len]` row-major bucket of (query i, key j), from the offset j − i.
pub fn bucket_matrix(len: usize, bidirectional: bool, buckets: usize, max_distance: usize) -> Vec<i32> {
    let by_offset = buckets_by_offset(len, bidirectional, buckets, max_distance);
    (0..len)
        .flat_map(|i| by_offset[len - 1 - i..][..len].iter().copied())
        .collect()
}

/// The trained table `[buckets, heads]` the attention op looks each offset's bucket up in.
fn table(g: &mut Graph, heads: usize, buckets: usize) -> Result<TensorId> {
    g.param(PARAM_NAME, &[buckets, heads], Init::Normal(INIT_STD))
}

/// The bias as a `[heads, len, len]` tensor (TUPE-R, which adds it to its positional term before
/// the [CLS] reset): the table looked up at each (i, j)'s bucket, heads moved first. Quadratic
/// in `len`, which TUPE bounds by `max_len`. With `cls_buckets` (TUPE-R in its authors' code), row
/// 0 takes bucket `buckets / 2` and column 0 below it an added bucket `buckets`
/// ([`cls_bucket_matrix`]). Returns the bias and its bucket input.
pub(super) fn build_dense(
    g: &mut Graph,
    at: Positions,
    heads: usize,
    (bidirectional, buckets, max_distance): (bool, usize, usize),
    cls_buckets: bool,
) -> Result<(TensorId, OffsetInput)> {
    let bucket = |offset| relative_bucket(offset, bidirectional, buckets, max_distance);
    let mut ids = at.offset_buckets(g, MATRIX_INPUT_NAME, bucket, true);
    let rows = if cls_buckets {
        let OffsetValues::Fixed(matrix) = &mut ids.values else {
            return Err(Error::Input(
                "TUPE-R's [CLS] buckets sit at position 0, which randomized positions do not keep".into(),
            ));
        };
        give_cls_its_buckets(matrix, at.len, buckets);
        buckets + 1
    } else {
        buckets
    };
    let table = g.param(PARAM_NAME, &[rows, heads], Init::Normal(INIT_STD))?;
    let per_pair = g.embedding(table, ids.input)?;
    let bias = g.permute(per_pair, &[2, 0, 1])?;
    Ok((bias, ids))
}

/// [`bucket_matrix`] with `[CLS]` buckets of its own, as TUPE's code: column 0 (the others attending
/// to `[CLS]`) is bucket `buckets`, then row 0 (`[CLS]` attending to every position, (0, 0) included)
/// is bucket `buckets / 2`, which the bidirectional bucketing never gives an offset (it would be
/// the first bucket of the positive half, offset +0).
pub fn cls_bucket_matrix(len: usize, bidirectional: bool, buckets: usize, max_distance: usize) -> Vec<i32> {
    let mut matrix = bucket_matrix(len, bidirectional, buckets, max_distance);
    give_cls_its_buckets(&mut matrix, len, buckets);
    matrix
}

/// Row 0 of a `[len, len]` bucket matrix to bucket `buckets / 2`, column 0 below it to `buckets`.
fn give_cls_its_buckets(matrix: &mut [i32], len: usize, buckets: usize) {
    for (k, bucket) in matrix.iter_mut().enumerate() {
        let (i, j) = (k / len, k % len);
        if i == 0 {
            *bucket = (buckets / 2) as i32;
        } else if j == 0 {
            *bucket = buckets as i32;
        }
    }
}

impl Presets for Relative {
    const PRESETS: &'static [Preset] = &[Preset {
        name: "relative",
        label: "T5 relative",
        posenc: r#"{ type = "relative" }"#,
        encoder_posenc: None,
        reads_positions: true,
    }];
}

#[cfg(test)]
mod tests {
    use super::{bucket_matrix, buckets_by_offset};

    /// `tests/reference/relative.safetensors` (from `gen_relative.py`): HF transformers' T5
    /// bucket function on every offset of length 300 and on a `[20, 20]` matrix.
    #[test]
    fn buckets_match_t5_s_function() {
        let path = format!(
            "{}/tests/reference/relative.safetensors",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let ints = |name: &str| -> Vec<i32> {
            let view = file.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(view.dtype(), safetensors::Dtype::I32, "{name}");
            bytemuck::pod_collect_to_vec(view.data())
        };
        for (buckets, max_distance) in [(32, 128), (8, 20)] {
            for bidirectional in [true, false] {
                let case = format!(
                    "{}_{buckets}_{max_distance}",
                    if bidirectional { "bi" } else { "uni" }
                );
                let expected = ints(&format!("{case}/matrix"));
                assert_eq!(
                    bucket_matrix(20, bidirectional, buckets, max_distance),
                    expected,
                    "{case}"
                );
                let by_offset = ints(&format!("{case}/by_offset"));
                let len = 300;
                assert_eq!(by_offset.len(), 2 * len - 1);
                assert_eq!(
                    buckets_by_offset(len, bidirectional, buckets, max_distance),
                    by_offset,
                    "{case}"
                );
                let ours = bucket_matrix(len, bidirectional, buckets, max_distance);
                for (k, bucket) in ours.iter().enumerate() {
                    let (i, j) = (k / len, k % len);
                    assert_eq!(*bucket, by_offset[j + len - 1 - i], "{case}: query {i}, key {j}");
                }
            }
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::model::{ModelConfig, PosEnc};
    use crate::testing::{TINY_CONFIG, config_error};

    #[test]
    fn relative_encoding_has_t5_s_defaults_and_checks_its_sizes() {
        let config =
            ModelConfig::from_json(&TINY_CONFIG.replace(r#""sinusoidal""#, r#""relative""#)).unwrap();
        assert_eq!(
            config.posenc,
            PosEnc::Relative(Relative {
                buckets: 32,
                max_distance: 128,
                learned_absolute: false
            })
        );
        let relative = |fields: &str| {
            config_error(
                r#"{ "type": "sinusoidal" }"#,
                &format!(r#"{{ "type": "relative", {fields} }}"#),
            )
        };
        for buckets in [2, 5000] {
            let err = relative(&format!(r#""buckets": {buckets}"#));
            assert!(
                err.contains(&format!("needs 4 ≤ buckets ≤ 4096, got {buckets}")),
                "{err}"
            );
        }
        let err = relative(r#""max_distance": 1000000000000"#);
        assert!(
            err.contains("max_distance is 1000000000000, over posflow's limit"),
            "{err}"
        );
        let err = relative(r#""buckets": 32, "max_distance": 16"#);
        assert!(err.contains("max_distance > buckets / 2 = 16, got 16"), "{err}");
        let err = relative(r#""buckets": 32, "distance": 16"#);
        assert!(err.contains("unknown field `distance`"), "{err}");
    }

    #[test]
    fn relative_adds_a_learned_table_only_when_asked() {
        let config = ModelConfig::from_json(&TINY_CONFIG.replace(
            r#"{ "type": "sinusoidal" }"#,
            r#"{ "type": "relative", "learned_absolute": true }"#,
        ))
        .unwrap();
        assert_eq!(
            config.posenc,
            PosEnc::Relative(Relative {
                buckets: 32,
                max_distance: 128,
                learned_absolute: true
            })
        );
        // The table bounds the length, as a learned encoding's.
        assert!(config.posenc.has_table());
        let t5 = ModelConfig::from_json(&TINY_CONFIG.replace(r#""sinusoidal""#, r#""relative""#)).unwrap();
        assert!(!t5.posenc.has_table());
        assert!(!serde_json::to_string(&t5).unwrap().contains("learned_absolute"));
    }
}
