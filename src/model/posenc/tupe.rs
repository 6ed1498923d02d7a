//! TUPE, "Transformer with Untied Positional Encoding" (Ke, He & Liu, 2020): positions never enter
//! the residual stream; attention gets a position-only term next to the word term,
//!
//! ```text
//! logit[h, i, j] = (x_i W_Q^h)·(x_j W_K^h) / √(2·Dh)            word term (the attention op's scale)
//!                + (p̂_i U_Q^h)·(p̂_j U_K^h) / √(2·Dh)            positional correlation (TUPE-A)
//!                + b[h, bucket(j − i)]                            T5 relative bias (TUPE-R only)
//! p̂ = LayerNorm(p[0..L]),  p = posenc.tupe.weight [max_len, D]
//! ```
//!
//! with `U_Q`, `U_K` `[D, D]` whose column blocks of Dh are the heads (as `attn.qkv`). The word and
//! position terms share the factor `1/√(2·Dh)`, so their sum keeps the usual logit scale. The
//! position-only term (everything but the word term) is computed once per graph and added to every
//! layer's attention logits as the `[H, L, L]` bias; `U_Q`, `U_K` and the table are shared by all
//! layers, as the paper does. The projections have no bias: the paper writes `p_i U^Q`.
//! Unlike T5's relative bias on its own, which the attention kernels look up per (i, j), this term
//! stays a dense tensor, quadratic in L: the learned table bounds L by `max_len`, and the [CLS]
//! reset and TUPE-R's sum act on the whole term.
//!
//! # Untying [CLS]
//!
//! With `untie_cls`, the paper's reset function (its eq. 9) replaces the [CLS] entries of the
//! position-only ("content-free") correlation: per head,
//!
//! ```text
//! reset[h, 0, j] = θ1[h]   for every j, j = 0 included           ([CLS] attending to the others)
//! reset[h, i, 0] = θ2[h]   for i ≠ 0                              (the others attending to [CLS])
//! reset[h, i, j] = term[h, i, j] otherwise
//! ```
//!
//! θ1, θ2 are trained scalars per head, initialised to 0 (no preference at the start). θ1 shifts
//! a whole row of logits by one value, which softmax ignores: it never gets a gradient and has no
//! effect; the reset still matters, because it removes the positional term from [CLS]'s row. It
//! is kept because eq. 9 has it (and the reference code's coupled form, below, has it too). For TUPE-R
//! the reset applies to the sum of the positional correlation and the relative bias. The paper
//! resets the "content-free (position-only) correlation", gives its form for eq. 7 and for eq. 8,
//! and says the reset applies to "any position-only correlations"; our copy of the text has lost
//! those formulas (`shared/papers/README.md` restates the rest), so for TUPE-R we take the
//! position-only correlation to be both position-only terms. What differs elsewhere, as far as we
//! can tell:
//! - Section 3.3 of the paper says θ1 and θ2 are parameterised through learnable vectors "to
//!   directly obtain similar scales for every term" (that formula is lost in our copy too). The
//!   reference code (github.com/guolinke/TUPE, `fairseq/modules/transformer_sentence_encoder.py`,
//!   which we read only through a third-party copy that cites it) does this: its table has
//!   `max_len + 1` rows, the sequence's positions use rows 1.., and θ1, θ2 are the diagonal
//!   entries (0, 0) and (1, 1) of the positional correlation of the longer table, so they go
//!   through the same layer norm, `U_Q`, `U_K` (there `nn.Linear`, with biases) and scale. Here
//!   θ1, θ2 are free scalars, as eq. 9 states them: each can still take any value per head, but
//!   it is not coupled to the projections, so it trains differently.
//! - In that code the reset replaces only the absolute correlation. Its relative bias instead
//!   sends row 0 and column 0 to two buckets of their own (bucket `buckets / 2`, which the
//!   bidirectional bucketing never produces, and an added bucket `buckets`), whose values are
//!   added to θ. The [CLS] row and column are still one trained value per head each, as here,
//!   but split over two parameters. We reset the sum, so the relative table keeps T5's `buckets`
//!   rows.
//!
//! The reset is `term · keep + θ1 · cls_row + θ2 · cls_column` with three constant `[L, L]` masks
//! (graph inputs, written by the host like the relative buckets).

use super::Constant;
use super::relative;
use crate::error::{Error, Result};
use crate::graph::{Graph, Init, TensorId};
use crate::model::LN_EPS;
use crate::tensor::TensorMeta;

/// The position table `[max_len, D]`.
pub const TABLE_NAME: &str = "posenc.tupe.weight";
/// The layer norm on the table's rows: `<prefix>.gain`, `<prefix>.bias` `[D]`.
pub const LN_PREFIX: &str = "posenc.tupe.ln";
/// `U_Q` `[D, D]`.
pub const QUERY_NAME: &str = "posenc.tupe.query.weight";
/// `U_K` `[D, D]`.
pub const KEY_NAME: &str = "posenc.tupe.key.weight";
/// θ1 `[H]`: [CLS] attending to every position.
pub const CLS_TO_OTHERS_NAME: &str = "posenc.tupe.cls_to_others";
/// θ2 `[H]`: every other position attending to [CLS].
pub const OTHERS_TO_CLS_NAME: &str = "posenc.tupe.others_to_cls";
/// The untie masks, f32 `[L, L]`: 0 on row 0 and column 0, else 1; 1 on row 0; 1 on column 0 below
/// row 0.
pub const KEEP_INPUT: &str = "posenc.tupe.keep";
pub const CLS_ROW_INPUT: &str = "posenc.tupe.cls_row";
pub const CLS_COLUMN_INPUT: &str = "posenc.tupe.cls_column";

/// BERT's initialisation (the paper follows BERT) for the table and the projections.
const INIT_STD: f32 = 0.02;

/// The sizes and options of one TUPE position term.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tupe {
    pub len: usize,
    pub max_len: usize,
    pub d_model: usize,
    pub heads: usize,
    /// T5's relative bias (TUPE-R): (bidirectional, buckets, max_distance).
    pub relative: Option<(bool, usize, usize)>,
    pub untie_cls: bool,
}

impl Tupe {
    /// The factor of both the word and the position term, `1/√(2·Dh)`.
    pub fn scale(&self) -> f32 {
        1.0 / (2.0 * (self.d_model / self.heads) as f32).sqrt()
    }

    /// The `[H, L, L]` position-only attention bias, and the constant inputs it reads.
    pub fn build(&self, g: &mut Graph) -> Result<(TensorId, Vec<(TensorId, Constant)>)> {
        let (len, d, heads) = (self.len, self.d_model, self.heads);
        if len > self.max_len {
            return Err(Error::Input(format!(
                "sequence length {len} is over the TUPE position table's max_len {}",
                self.max_len
            )));
        }
        let table = g.param(TABLE_NAME, &[self.max_len, d], Init::Normal(INIT_STD))?;
        let p = if len == self.max_len {
            table
        } else {
            g.slice(table, 0, 0, len)?
        };
        let gain = g.param(&format!("{LN_PREFIX}.gain"), &[d], Init::Ones)?;
        let bias = g.param(&format!("{LN_PREFIX}.bias"), &[d], Init::Zeros)?;
        let p = g.layernorm(p, gain, bias, LN_EPS)?;
        let mut per_head = |name: &str| -> Result<TensorId> {
            let u = g.param(name, &[d, d], Init::Normal(INIT_STD))?;
            let t = g.matmul(p, u)?;
            let t = g.reshape(t, &[len, heads, d / heads])?;
            g.permute(t, &[1, 0, 2])
        };
        let (q, k) = (per_head(QUERY_NAME)?, per_head(KEY_NAME)?);
        let correlation = g.matmul_t(q, k, false, true)?;
        let mut term = g.scale(correlation, self.scale())?;
        let mut constants = Vec::new();
        if let Some((bidirectional, buckets, max_distance)) = self.relative {
            let (relative, ids, values) =
                relative::build_dense(g, len, heads, bidirectional, buckets, max_distance)?;
            term = g.add(term, relative)?;
            constants.push((ids, Constant::I32(values)));
        }
        if self.untie_cls {
            term = self.untie(g, term, &mut constants)?;
        }
        Ok((term, constants))
    }

    /// `term · keep + θ1 · cls_row + θ2 · cls_column`.
    fn untie(
        &self,
        g: &mut Graph,
        term: TensorId,
        constants: &mut Vec<(TensorId, Constant)>,
    ) -> Result<TensorId> {
        let (len, heads) = (self.len, self.heads);
        let masks = untie_masks(len);
        let [keep, cls_row, cls_column] = [KEEP_INPUT, CLS_ROW_INPUT, CLS_COLUMN_INPUT]
            .map(|name| g.input(name, TensorMeta::f32(&[len, len])));
        for (t, values) in [keep, cls_row, cls_column].into_iter().zip(masks) {
            constants.push((t, Constant::F32(values)));
        }
        let mut reset = g.mul(term, keep)?;
        for (name, mask) in [(CLS_TO_OTHERS_NAME, cls_row), (OTHERS_TO_CLS_NAME, cls_column)] {
            let theta = g.param(name, &[heads], Init::Zeros)?;
            let theta = g.reshape(theta, &[heads, 1, 1])?;
            let value = g.mul(theta, mask)?;
            reset = g.add(reset, value)?;
        }
        Ok(reset)
    }
}

/// The `[len, len]` masks keep, cls_row and cls_column of the [CLS] reset.
fn untie_masks(len: usize) -> [Vec<f32>; 3] {
    let cell = |select: fn(usize, usize) -> bool| -> Vec<f32> {
        (0..len * len)
            .map(|k| f32::from(u8::from(select(k / len, k % len))))
            .collect()
    };
    [
        cell(|i, j| i != 0 && j != 0),
        cell(|i, _| i == 0),
        cell(|i, j| i != 0 && j == 0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Built, Feed, check_gpu_matches_cpu, check_gradients, check_reference};

    /// The reference cases' sizes: L = 7 of a 9-row table, D = 12, H = 3 (Dh = 4).
    fn tupe(relative: Option<(bool, usize, usize)>, untie_cls: bool) -> Tupe {
        Tupe {
            len: 7,
            max_len: 9,
            d_model: 12,
            heads: 3,
            relative,
            untie_cls,
        }
    }

    fn subgraph(spec: Tupe) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let (out, constants) = spec.build(g).unwrap();
            let feeds = constants
                .into_iter()
                .map(|(t, c)| match c {
                    Constant::F32(v) => (t, Feed::F32(v)),
                    Constant::I32(v) => (t, Feed::I32(v)),
                })
                .collect();
            Built { out, feeds }
        }
    }

    const BIDIRECTIONAL_8_20: Option<(bool, usize, usize)> = Some((true, 8, 20));

    /// `tests/reference/tupe.safetensors` (from `gen_tupe.py`): the bias and the gradients of
    /// every parameter in float64 PyTorch, for TUPE-A without and with the [CLS] reset and for
    /// TUPE-R (encoder buckets) with it.
    #[test]
    fn bias_and_gradients_match_pytorch() {
        let cases = [
            ("tupe_a", tupe(None, false)),
            ("tupe_a_untie", tupe(None, true)),
            ("tupe_r_untie", tupe(BIDIRECTIONAL_8_20, true)),
        ];
        for (case, spec) in cases {
            check_reference("tupe", case, &subgraph(spec), 1e-5, 1e-4);
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        let spec = Tupe {
            len: 5,
            max_len: 6,
            d_model: 8,
            heads: 2,
            relative: Some((false, 8, 20)),
            untie_cls: true,
        };
        check_gradients(&subgraph(spec), 1e-2, 1e-2, 12);
    }

    /// A whole table (no slice) and a length over one workgroup tile.
    #[test]
    fn gpu_matches_cpu() {
        let spec = Tupe {
            len: 37,
            max_len: 37,
            d_model: 24,
            heads: 3,
            relative: BIDIRECTIONAL_8_20,
            untie_cls: true,
        };
        check_gpu_matches_cpu(&subgraph(spec), 1e-5, 1e-4);
    }

    #[test]
    fn untie_masks_split_the_cls_row_and_column() {
        let [keep, row, column] = untie_masks(3);
        assert_eq!(keep, [0., 0., 0., 0., 1., 1., 0., 1., 1.]);
        assert_eq!(row, [1., 1., 1., 0., 0., 0., 0., 0., 0.]);
        assert_eq!(column, [0., 0., 0., 1., 0., 0., 1., 0., 0.]);
    }

    #[test]
    fn a_length_over_the_table_is_an_error_naming_both_lengths() {
        let spec = Tupe {
            len: 10,
            ..tupe(None, false)
        };
        let err = spec.build(&mut Graph::new()).unwrap_err().to_string();
        assert_eq!(
            err,
            "sequence length 10 is over the TUPE position table's max_len 9"
        );
    }
}
