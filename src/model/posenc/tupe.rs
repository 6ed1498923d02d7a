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
//! layers, as the paper does. The projections have no bias: the paper writes `p_i U^Q` (the
//! authors' code has them: see below).
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
//! In the paper's form θ1, θ2 are trained scalars per head, initialised to 0 (no preference at
//! the start), as eq. 9 states them. θ1 shifts a whole row of logits by one value, which softmax
//! ignores: it never gets a gradient and has no effect (in both forms); the reset still matters,
//! because it removes the positional term from [CLS]'s row. It is kept because eq. 9 has it. For
//! TUPE-R the reset applies to the sum of the positional correlation and the relative bias. The
//! paper resets the "content-free (position-only) correlation", gives its form for eq. 7 and for
//! eq. 8, and says the reset applies to "any position-only correlations"; our copy of the text has
//! lost those formulas (docs/fidelity.md restates the rest), so for TUPE-R we take the
//! position-only correlation to be both position-only terms.
//! # The authors' code (`form = "code"`)
//!
//! The numbers in the paper came from github.com/guolinke/TUPE
//! (`fairseq/modules/transformer_sentence_encoder.py`), which differs from the equations above in
//! three ways (docs/fidelity.md §2 reads them beside the paper):
//! - `U_Q` and `U_K` are `nn.Linear`s with biases (zero-initialised): `p̂_i U_Q + b_Q`.
//! - The table has `max_len + 1` rows and position i uses row i + 1. θ1 and θ2 are not free:
//!   they are the correlations of rows 0 and 1 with themselves, `θ1 = c[h, 0, 0]`,
//!   `θ2 = c[h, 1, 1]` of the `[H, L + 1, L + 1]` correlation `c` of rows 0..=L, through the same
//!   layer norm, projections and scale (the paper's §3.3 "parameterise θ through learnable
//!   vectors to obtain similar scales"). The reset is then applied to `c[:, 1:, 1:]`.
//! - TUPE-R: the reset replaces the absolute term only; the relative bias sends row 0 ([CLS] to
//!   the others) to bucket `buckets / 2`, which the bidirectional bucketing never produces, and
//!   column 0 below it to an added bucket `buckets` (the table has `buckets + 1` rows), so the
//!   [CLS] row and column are still one trained value per head each, split over two parameters.
//!
//! In the code form without `untie_cls` (not in the authors' code, which always unties) the
//! biases and the layout stay and the reset goes.
//!
//! The reset is `term · keep + θ1 · cls_row + θ2 · cls_column` with three constant `[L, L]` masks
//! (graph inputs, written by the host like the relative buckets).

use serde::{Deserialize, Serialize};

use super::encoding::{
    AttentionTerms, Constant, Description, Drawn, Encoding, EncodingSource, ModelDims, ModelFacts,
    PositionTerms, Preset, Presets, TermInputs, is_default,
};
use super::positions::{Positions, check_rows};
use super::relative::{self, t5_buckets, t5_max_distance};
use crate::error::{Error, Result};
use crate::graph::{Graph, Init, TensorId};
use crate::model::LN_EPS;
use crate::ops::attention::AttentionBias;
use crate::tensor::TensorMeta;

/// The position table `[max_len, D]` (the code form: `[max_len + 1, D]`).
pub const TABLE_NAME: &str = "posenc.tupe.weight";
/// The layer norm on the table's rows: `<prefix>.gain`, `<prefix>.bias` `[D]`.
pub const LN_PREFIX: &str = "posenc.tupe.ln";
/// `U_Q` `[D, D]`, and in the code form its bias `<prefix>.bias` `[D]`.
pub const QUERY_PREFIX: &str = "posenc.tupe.query";
/// `U_K` `[D, D]`, and in the code form its bias `<prefix>.bias` `[D]`.
pub const KEY_PREFIX: &str = "posenc.tupe.key";
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

/// Which TUPE: as the paper writes it, or as its authors' code ran it (guolinke/TUPE,
/// `transformer_sentence_encoder.py`; see above). In TOML: `form = "code"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TupeForm {
    /// The paper's equations: `U_Q`, `U_K` without biases, a table row per position, θ1 and θ2
    /// free per-head scalars, TUPE-R's `[CLS]` reset applied to the sum of both terms.
    #[default]
    Paper,
    /// The authors' code: `U_Q`, `U_K` with biases, a table of `max_len + 1` rows whose row i + 1
    /// is position i, θ1 and θ2 the correlations of rows 0 and 1 with themselves (through the same
    /// layer norm, projections and scale), TUPE-R's `[CLS]` row and column two buckets of their own.
    Code,
}

/// TUPE-A: no position is added to the input; each layer's attention logits get the positional
/// correlation `(p_i U_Q)·(p_j U_K) / √(2·Dh)` per head, from a trained `[max_len, d_model]`
/// table `p` (layer-normed) with its own projections, shared by every layer; the word logits are
/// scaled by `1/√(2·Dh)` too. In TOML:
/// `posenc = { type = "tupe_a", untie_cls = true, form = "code" }`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TupeA {
    /// Replace the positional term of `[CLS]` (position 0, an encoder's) by trained per-head
    /// values. Required.
    pub untie_cls: bool,
    /// The paper's (default) or the authors' code's.
    #[serde(default, skip_serializing_if = "is_default")]
    pub form: TupeForm,
}

/// TUPE-R: TUPE-A plus T5's relative bias (as `relative`, with the same defaults), summed before
/// the `[CLS]` reset (in the code form, given `[CLS]` buckets of its own). In TOML:
/// `posenc = { type = "tupe_r", untie_cls = true, buckets = 32, max_distance = 128 }`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TupeR {
    pub untie_cls: bool,
    #[serde(default = "t5_buckets")]
    pub buckets: usize,
    #[serde(default = "t5_max_distance")]
    pub max_distance: usize,
    #[serde(default, skip_serializing_if = "is_default")]
    pub form: TupeForm,
}

impl TupeR {
    /// Its TUPE-A part: the same table, projections and `[CLS]` settings without the relative bias.
    pub fn absolute(&self) -> TupeA {
        TupeA {
            untie_cls: self.untie_cls,
            form: self.form,
        }
    }
}

/// TUPE's terms at `at` (`relative`: TUPE-R's bias, as [`Tupe::relative`]).
fn tupe_terms(
    g: &mut Graph,
    dims: ModelDims,
    at: Positions,
    relative: Option<(bool, usize, usize)>,
    (untie_cls, form): (bool, TupeForm),
) -> Result<PositionTerms> {
    let tupe = Tupe {
        at,
        max_len: dims.max_len,
        d_model: dims.d_model,
        heads: dims.heads,
        relative,
        untie_cls,
        form,
    };
    let (bias, inputs) = tupe.build(g)?;
    Ok(PositionTerms {
        attention: AttentionTerms {
            bias: Some(AttentionBias::Dense(bias)),
            scale: Some(tupe.scale()),
            ..AttentionTerms::default()
        },
        inputs,
        ..PositionTerms::default()
    })
}

/// TUPE's terms for the query at `t`: row t of the `[H, t + 1, t + 1]` term of the first t + 1
/// positions.
fn tupe_step(
    g: &mut Graph,
    dims: ModelDims,
    t: usize,
    relative: Option<(bool, usize, usize)>,
    settings: (bool, TupeForm),
) -> Result<PositionTerms> {
    let mut terms = tupe_terms(g, dims, Positions::contiguous(t + 1), relative, settings)?;
    if let Some(AttentionBias::Dense(square)) = terms.attention.bias {
        terms.attention.bias = Some(AttentionBias::Dense(g.slice(square, 1, t, t + 1)?));
    }
    Ok(terms)
}

/// TUPE's checks: its [CLS] setting against the model, its table against randomized positions.
fn check_tupe(untie_cls: bool, model: &ModelFacts) -> std::result::Result<(), String> {
    check_rows(model.dims.max_len, model.random_positions, "TUPE position table")?;
    if untie_cls && !model.reads_cls {
        return Err(
            "untie_cls resets the positional term of [CLS] (position 0), which only an encoder \
             (a classifier or a masked LM) has; set untie_cls = false for a causal LM or a seq2seq \
             model"
                .into(),
        );
    }
    Ok(())
}

/// What the viewer says of either TUPE, named `name`.
fn describe_tupe(name: String, seq2seq: bool) -> Description {
    let note = if seq2seq {
        format!(
            "{name}: in both self-attentions, each side with its own table (never added to the residual \
             stream); cross-attention has no positional term."
        )
    } else {
        format!(
            "{name}: this table never enters the residual stream; its layer-normed rows go through U_Q and U_K \
             into a positional attention term per head (the TUPE tab shows it)."
        )
    };
    Description {
        note,
        drawn: Drawn::Table {
            parameter: TABLE_NAME,
            label: "absolute table",
        },
    }
}

/// "TUPE-A" or "TUPE-R", and which form.
fn tupe_name(kind: &str, form: TupeForm) -> String {
    match form {
        TupeForm::Paper => kind.into(),
        TupeForm::Code => format!("{kind} (authors' code)"),
    }
}

impl Encoding for TupeA {
    fn name(&self) -> String {
        tupe_name("TUPE-A", self.form)
    }

    fn check(&self, model: &ModelFacts) -> std::result::Result<(), String> {
        check_tupe(self.untie_cls, model)
    }

    fn terms(
        &self,
        g: &mut Graph,
        dims: ModelDims,
        at: Positions,
        _: EncodingSource,
    ) -> Result<PositionTerms> {
        tupe_terms(g, dims, at, None, (self.untie_cls, self.form))
    }

    fn step_terms(&self, g: &mut Graph, dims: ModelDims, t: usize) -> Result<PositionTerms> {
        tupe_step(g, dims, t, None, (self.untie_cls, self.form))
    }

    fn has_table(&self) -> bool {
        true
    }

    fn unties_cls(&self) -> bool {
        self.untie_cls
    }

    fn describe(&self, _: ModelDims, seq2seq: bool, _: usize) -> Description {
        describe_tupe(self.name(), seq2seq)
    }
}

impl Encoding for TupeR {
    fn name(&self) -> String {
        tupe_name("TUPE-R", self.form)
    }

    fn check(&self, model: &ModelFacts) -> std::result::Result<(), String> {
        check_tupe(self.untie_cls, model)?;
        relative::check_buckets(self.buckets, self.max_distance)
    }

    fn terms(
        &self,
        g: &mut Graph,
        dims: ModelDims,
        at: Positions,
        _: EncodingSource,
    ) -> Result<PositionTerms> {
        let relative = Some((dims.bidirectional, self.buckets, self.max_distance));
        tupe_terms(g, dims, at, relative, (self.untie_cls, self.form))
    }

    fn step_terms(&self, g: &mut Graph, dims: ModelDims, t: usize) -> Result<PositionTerms> {
        let relative = Some((false, self.buckets, self.max_distance));
        tupe_step(g, dims, t, relative, (self.untie_cls, self.form))
    }

    fn has_table(&self) -> bool {
        true
    }

    fn unties_cls(&self) -> bool {
        self.untie_cls
    }

    fn describe(&self, _: ModelDims, seq2seq: bool, _: usize) -> Description {
        describe_tupe(self.name(), seq2seq)
    }
}

/// The sizes and options of one TUPE position term.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tupe {
    /// Where the tokens sit.
    pub at: Positions,
    pub max_len: usize,
    pub d_model: usize,
    pub heads: usize,
    /// T5's relative bias (TUPE-R): (bidirectional, buckets, max_distance).
    pub relative: Option<(bool, usize, usize)>,
    pub untie_cls: bool,
    pub form: TupeForm,
}

impl Tupe {
    /// The factor of both the word and the position term, `1/√(2·Dh)`.
    pub fn scale(&self) -> f32 {
        1.0 / (2.0 * (self.d_model / self.heads) as f32).sqrt()
    }

    /// The `[H, L, L]` position-only attention bias, and the inputs it reads.
    pub fn build(&self, g: &mut Graph) -> Result<(TensorId, TermInputs)> {
        let (at, d) = (self.at, self.d_model);
        let len = at.len;
        if at.extent() > self.max_len {
            return Err(Error::Input(match at.sampled {
                None => format!(
                    "sequence length {len} is over the TUPE position table's max_len {}",
                    self.max_len
                ),
                Some(s) => format!(
                    "randomized positions up to {} are past the TUPE position table's max_len {}",
                    s.range - 1,
                    self.max_len
                ),
            }));
        }
        if self.untie_cls && at.sampled.is_some() {
            return Err(Error::Input(
                "TUPE's untied [CLS] sits at position 0, which randomized positions do not keep; \
                 set untie_cls = false"
                    .into(),
            ));
        }
        let code = self.form == TupeForm::Code;
        // The code form's row 0 is θ1's, and position i reads row i + 1.
        let table_rows = self.max_len + usize::from(code);
        let table = g.param(TABLE_NAME, &[table_rows, d], Init::Normal(INIT_STD))?;
        // At positions 0..L the code form's correlation also covers row 0 (θ1's), sliced off below.
        let with_row0 = code && at.sampled.is_none();
        let (p, rows) = if with_row0 {
            (Positions::contiguous(len + 1).rows(g, table)?, len + 1)
        } else if code {
            let positions_rows = g.slice(table, 0, 1, table_rows)?;
            (at.rows(g, positions_rows)?, len)
        } else {
            (at.rows(g, table)?, len)
        };
        let gain = g.param(&format!("{LN_PREFIX}.gain"), &[d], Init::Ones)?;
        let bias = g.param(&format!("{LN_PREFIX}.bias"), &[d], Init::Zeros)?;
        let p = g.layernorm(p, gain, bias, LN_EPS)?;
        let (q, k) = (
            self.project(g, p, QUERY_PREFIX, rows)?,
            self.project(g, p, KEY_PREFIX, rows)?,
        );
        let correlation = g.matmul_t(q, k, false, true)?;
        let correlation = g.scale(correlation, self.scale())?;
        let mut terms = TermInputs::default();
        let mut term = if with_row0 {
            let positions = g.slice(correlation, 1, 1, rows)?;
            let positions = g.slice(positions, 2, 1, rows)?;
            if self.untie_cls {
                let diagonal = |g: &mut Graph, row| -> Result<TensorId> {
                    let entry = g.slice(correlation, 1, row, row + 1)?;
                    g.slice(entry, 2, row, row + 1)
                };
                let thetas = [diagonal(g, 0)?, diagonal(g, 1)?];
                self.reset(g, positions, thetas, &mut terms.constants)?
            } else {
                positions
            }
        } else {
            correlation
        };
        if let Some((bidirectional, buckets, max_distance)) = self.relative {
            let cls_buckets = code && self.untie_cls;
            let (relative, ids) = relative::build_dense(
                g,
                at,
                self.heads,
                (bidirectional, buckets, max_distance),
                cls_buckets,
            )?;
            term = g.add(term, relative)?;
            terms.read(ids);
        }
        if self.untie_cls && !code {
            let thetas = [CLS_TO_OTHERS_NAME, OTHERS_TO_CLS_NAME].map(|name| {
                g.param(name, &[self.heads], Init::Zeros)
                    .and_then(|theta| g.reshape(theta, &[self.heads, 1, 1]))
            });
            let [theta1, theta2] = thetas;
            term = self.reset(g, term, [theta1?, theta2?], &mut terms.constants)?;
        }
        Ok((term, terms))
    }

    /// `p̂ U (+ b in the code form)` split into heads, `[H, rows, Dh]`.
    fn project(&self, g: &mut Graph, p: TensorId, prefix: &str, rows: usize) -> Result<TensorId> {
        let d = self.d_model;
        let u = g.param(&format!("{prefix}.weight"), &[d, d], Init::Normal(INIT_STD))?;
        let t = if self.form == TupeForm::Code {
            let b = g.param(&format!("{prefix}.bias"), &[d], Init::Zeros)?;
            g.matmul_bias(p, u, b)?
        } else {
            g.matmul(p, u)?
        };
        let t = g.reshape(t, &[rows, self.heads, d / self.heads])?;
        g.permute(t, &[1, 0, 2])
    }

    /// `term · keep + θ1 · cls_row + θ2 · cls_column`, θ1 and θ2 `[H, 1, 1]`.
    fn reset(
        &self,
        g: &mut Graph,
        term: TensorId,
        [theta1, theta2]: [TensorId; 2],
        constants: &mut Vec<(TensorId, Constant)>,
    ) -> Result<TensorId> {
        let len = self.at.len;
        let masks = untie_masks(len);
        let [keep, cls_row, cls_column] = [KEEP_INPUT, CLS_ROW_INPUT, CLS_COLUMN_INPUT]
            .map(|name| g.input(name, TensorMeta::f32(&[len, len])));
        for (t, values) in [keep, cls_row, cls_column].into_iter().zip(masks) {
            constants.push((t, Constant::F32(values)));
        }
        let mut reset = g.mul(term, keep)?;
        for (theta, mask) in [(theta1, cls_row), (theta2, cls_column)] {
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

impl Presets for TupeA {
    const PRESETS: &'static [Preset] = &[Preset {
        name: "tupe_a",
        label: "TUPE-A",
        posenc: r#"{ type = "tupe_a", untie_cls = false }"#,
        encoder_posenc: None,
        reads_positions: true,
    }];
}

impl Presets for TupeR {
    const PRESETS: &'static [Preset] = &[Preset {
        name: "tupe_r",
        label: "TUPE-R",
        posenc: r#"{ type = "tupe_r", untie_cls = false }"#,
        encoder_posenc: None,
        reads_positions: true,
    }];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Built, Feed, check_gpu_matches_cpu, check_gradients, check_reference};

    /// The reference cases' sizes: L = 7 of a 9-row table, D = 12, H = 3 (Dh = 4).
    fn tupe(relative: Option<(bool, usize, usize)>, untie_cls: bool) -> Tupe {
        Tupe {
            at: Positions::contiguous(7),
            max_len: 9,
            d_model: 12,
            heads: 3,
            relative,
            untie_cls,
            form: TupeForm::Paper,
        }
    }

    fn subgraph(spec: Tupe) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let (out, terms) = spec.build(g).unwrap();
            let constants = terms.constants;
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

    fn code(spec: Tupe) -> Tupe {
        Tupe {
            form: TupeForm::Code,
            ..spec
        }
    }

    /// `tests/reference/tupe.safetensors` (from `gen_tupe.py`): the bias and the gradients of
    /// every parameter in float64 PyTorch, for TUPE-A without and with the [CLS] reset and for
    /// TUPE-R (encoder buckets) with it, and both in the authors' code form (θ from the table's
    /// rows 0 and 1, U with biases, TUPE-R's [CLS] buckets).
    #[test]
    fn bias_and_gradients_match_pytorch() {
        let cases = [
            ("tupe_a", tupe(None, false)),
            ("tupe_a_untie", tupe(None, true)),
            ("tupe_r_untie", tupe(BIDIRECTIONAL_8_20, true)),
            ("code_tupe_a_untie", code(tupe(None, true))),
            ("code_tupe_r_untie", code(tupe(BIDIRECTIONAL_8_20, true))),
        ];
        for (case, spec) in cases {
            check_reference("tupe", case, &subgraph(spec), 1e-5, 1e-4);
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        let spec = Tupe {
            at: Positions::contiguous(5),
            max_len: 6,
            d_model: 8,
            heads: 2,
            relative: Some((false, 8, 20)),
            untie_cls: true,
            form: TupeForm::Paper,
        };
        check_gradients(&subgraph(spec), 1e-2, 1e-2, 12);
        let bidirectional = Tupe {
            relative: Some((true, 8, 20)),
            ..spec
        };
        // θ is quadratic in a layer-normed row of 8: a smaller step keeps the central
        // difference's curvature error (3% at 1e-2) under the tolerance.
        check_gradients(&subgraph(code(bidirectional)), 3e-3, 1e-2, 12);
    }

    /// A whole table (no slice) and a length over one workgroup tile.
    #[test]
    fn gpu_matches_cpu() {
        let spec = Tupe {
            at: Positions::contiguous(37),
            max_len: 37,
            d_model: 24,
            heads: 3,
            relative: BIDIRECTIONAL_8_20,
            untie_cls: true,
            form: TupeForm::Paper,
        };
        check_gpu_matches_cpu(&subgraph(spec), 1e-5, 1e-4);
        check_gpu_matches_cpu(&subgraph(code(spec)), 1e-5, 1e-4);
    }

    /// The code form's θ are the self-correlations of rows 0 and 1, so a table whose rows 0 and 1
    /// are those of positions 2 and 5 gives the term's [CLS] row and column the values of entries
    /// (2, 2) and (5, 5) of the same model without the reset.
    #[test]
    fn code_form_thetas_are_table_rows_through_the_same_projections() {
        let spec = code(tupe(None, true));
        let built = subgraph(spec);
        let tied = subgraph(Tupe {
            untie_cls: false,
            ..spec
        });
        let cpu = std::rc::Rc::new(crate::backend::CpuBackend::new());
        let run = |build: &dyn Fn(&mut Graph) -> Built, table: &[f32]| -> Vec<f32> {
            let mut g = Graph::new();
            let Built { out, feeds } = build(&mut g);
            let params = crate::params::ParamStore::init(cpu.clone(), &g, 3).unwrap();
            params.set(TABLE_NAME, table).unwrap();
            let exec = crate::exec::Executor::new(&g, &[out], &params).unwrap();
            for (t, feed) in feeds {
                match feed {
                    Feed::F32(v) => exec.set_f32(t, &v).unwrap(),
                    Feed::I32(v) => exec.set_i32(t, &v).unwrap(),
                }
            }
            exec.run().unwrap();
            pollster::block_on(exec.read(out)).unwrap()
        };
        let (d, len, rows) = (spec.d_model, spec.at.len, spec.max_len + 1);
        let mut table: Vec<f32> = (0..rows * d)
            .map(|k| ((k * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        // Position i reads row i + 1: rows 0 and 1 become positions 2's and 5's rows.
        let row = |table: &[f32], r: usize| table[r * d..(r + 1) * d].to_vec();
        let (p2, p5) = (row(&table, 3), row(&table, 6));
        table[..d].copy_from_slice(&p2);
        table[d..2 * d].copy_from_slice(&p5);
        let (untied, plain) = (run(&built, &table), run(&tied, &table));
        let at = |v: &[f32], h: usize, i: usize, j: usize| v[(h * len + i) * len + j];
        let close = |a: f32, b: f32, what: String| assert!((a - b).abs() <= 1e-6, "{what}: {a} vs {b}");
        for h in 0..spec.heads {
            assert!(
                at(&plain, h, 2, 2) != at(&plain, h, 5, 5),
                "head {h}: pick other rows"
            );
            for j in 0..len {
                close(
                    at(&untied, h, 0, j),
                    at(&plain, h, 2, 2),
                    format!("head {h}, θ1 at (0, {j})"),
                );
            }
            for i in 1..len {
                close(
                    at(&untied, h, i, 0),
                    at(&plain, h, 5, 5),
                    format!("head {h}, θ2 at ({i}, 0)"),
                );
                for j in 1..len {
                    close(
                        at(&untied, h, i, j),
                        at(&plain, h, i, j),
                        format!("head {h} at ({i}, {j})"),
                    );
                }
            }
        }
    }

    #[test]
    fn cls_buckets_take_the_unused_bucket_and_an_added_one() {
        let plain = relative::bucket_matrix(4, true, 8, 20);
        let cls = relative::cls_bucket_matrix(4, true, 8, 20);
        // Bucket 4 (8 / 2) is offset +0 of the positive half, which no pair has.
        assert!(!plain.contains(&4));
        assert_eq!(&cls[..4], &[4, 4, 4, 4]);
        for i in 1..4 {
            assert_eq!(cls[i * 4], 8, "row {i}");
            assert_eq!(&cls[i * 4 + 1..(i + 1) * 4], &plain[i * 4 + 1..(i + 1) * 4]);
        }
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
            at: Positions::contiguous(10),
            ..tupe(None, false)
        };
        let err = spec.build(&mut Graph::new()).unwrap_err().to_string();
        assert_eq!(
            err,
            "sequence length 10 is over the TUPE position table's max_len 9"
        );
    }
}

#[cfg(test)]
#[path = "tupe_config_tests.rs"]
mod config_tests;
