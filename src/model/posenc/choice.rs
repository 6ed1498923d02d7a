//! Which position encoding a model has, as a config reads it: [`PosEnc`], owned here so that
//! the encodings depend on nothing of the model but the sizes they read ([`super::ModelDims`]).

use serde::{Deserialize, Serialize};

use super::{FloaterConfig, FloaterForm, GradientMethod, Nonlinearity, SolverMethod};

/// Which TUPE: as the paper writes it, or as its authors' code ran it (guolinke/TUPE,
/// `transformer_sentence_encoder.py`; see `posenc::tupe`). In TOML: `form = "code"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TupeForm {
    /// The paper's equations: `U_Q`, `U_K` without biases, a table row per position, θ1 and θ2
    /// free per-head scalars, TUPE-R's [CLS] reset applied to the sum of both terms.
    #[default]
    Paper,
    /// The authors' code: `U_Q`, `U_K` with biases, a table of `max_len + 1` rows whose row i + 1
    /// is position i, θ1 and θ2 the correlations of rows 0 and 1 with themselves (through the same
    /// layer norm, projections and scale), TUPE-R's [CLS] row and column two buckets of their own.
    Code,
}

/// The position encoding.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", try_from = "PosEncSpec")]
pub enum PosEnc {
    /// No position information at all (a causal model can still infer some from the mask).
    None,
    /// The fixed sin/cos table of Vaswani et al., added to the embeddings, or to the input of
    /// every block when `every_block` (as FLOATER's "inject at every layer" baseline). Default
    /// false.
    Sinusoidal { every_block: bool },
    /// A trained `[max_len, d_model]` table (BERT, GPT-2), added to the embeddings.
    Learned,
    /// T5's relative position bias: a trained `[buckets, heads]` table of attention-logit biases,
    /// indexed by the bucket of the key-minus-query offset and shared by every layer. The encoder
    /// splits the buckets between both signs; the causal LM spends them all on the past. Half of
    /// each side's buckets are exact offsets, the rest log-spaced up to `max_distance`. No
    /// absolute position is added to the input, unless `learned_absolute`: then a learned table
    /// is added too, as `learned` (the TUPE paper's BERT-R baseline). Defaults: 32 buckets,
    /// max_distance 128, no absolute table. In TOML:
    /// `posenc = { type = "relative", learned_absolute = true }`.
    Relative {
        buckets: usize,
        max_distance: usize,
        #[serde(default, skip_serializing_if = "is_default")]
        learned_absolute: bool,
    },
    /// TUPE-A (Ke et al., 2020): no position is added to the input; each layer's attention logits
    /// get a positional correlation `(p_i U_Q)·(p_j U_K) / √(2·Dh)` per head, from a trained
    /// `[max_len, d_model]` table `p` (layer-normed) with its own projections, shared by every
    /// layer; the word logits are scaled by `1/√(2·Dh)` too. `untie_cls` (encoder only) replaces
    /// the positional term of [CLS] (position 0) by trained per-head values. `form` is the
    /// paper's (default) or the authors' code's ([`TupeForm`]). In TOML:
    /// `posenc = { type = "tupe_a", untie_cls = true, form = "code" }`. See `posenc::tupe`.
    TupeA {
        untie_cls: bool,
        #[serde(default, skip_serializing_if = "is_default")]
        form: TupeForm,
    },
    /// TUPE-R: TUPE-A plus T5's relative bias (as `relative`, with the same defaults), summed
    /// before the [CLS] reset (in the code form, given [CLS] buckets of its own). In TOML:
    /// `posenc = { type = "tupe_r", untie_cls = true, buckets = 32, max_distance = 128 }`.
    TupeR {
        untie_cls: bool,
        buckets: usize,
        max_distance: usize,
        #[serde(default, skip_serializing_if = "is_default")]
        form: TupeForm,
    },
    /// FLOATER: encodings from a neural ODE along the positions, added at the input of every
    /// block (or of the first); any length. See [`FloaterConfig`] for the solver settings.
    Floater(FloaterConfig),
    /// RoPE (Su et al., RoFormer): every layer's queries and keys turned pair by pair by angles
    /// growing with the position, `l · base^(−2i/Dh)`, so that attention sees only offsets;
    /// nothing is added to the input, nothing is trained, any length. Default base 10,000. In
    /// TOML: `posenc = { type = "rope" }`. See `ops::rope`.
    Rope { base: f64 },
    /// ALiBi (Press et al., "Train Short, Test Long"): every layer's attention logits get `−m_h`
    /// times the query–key distance, a fixed slope per head; nothing trained, any length. The
    /// encoder takes the symmetric distance. In TOML: `posenc = { type = "alibi" }`. See
    /// `posenc::alibi`.
    Alibi,
}

/// A [`PosEnc`] as read: its `type` and every setting of any type, each present or not. Serde's
/// internally tagged enums read the whole table before they pick the variant, and an error in a
/// value then lost its key (`{ type = "floater", substeps = -1 }` was "invalid value: integer
/// `-1`, expected usize in `posenc`", with no `substeps`); a plain struct keeps it. The settings a
/// type does not have are refused when the spec becomes a [`PosEnc`].
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a position encoding: a table with its `type` and settings"
)]
struct PosEncSpec {
    #[serde(rename = "type")]
    kind: PosEncType,
    every_block: Option<bool>,
    buckets: Option<usize>,
    max_distance: Option<usize>,
    untie_cls: Option<bool>,
    learned_absolute: Option<bool>,
    form: Option<FormName>,
    delta: Option<f64>,
    method: Option<SolverMethod>,
    substeps: Option<usize>,
    rtol: Option<f64>,
    atol: Option<f64>,
    max_steps: Option<usize>,
    gradient: Option<GradientMethod>,
    activation: Option<Nonlinearity>,
    resolve_every: Option<usize>,
    base: Option<f64>,
}

/// A `form` as read: FLOATER's ([`FloaterForm`]) or TUPE's ([`TupeForm`]), checked against the
/// type when the spec becomes a [`PosEnc`].
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FormName {
    Additive,
    Bias,
    Paper,
    Code,
}

impl FormName {
    fn floater(self) -> std::result::Result<FloaterForm, String> {
        match self {
            Self::Additive => Ok(FloaterForm::Additive),
            Self::Bias => Ok(FloaterForm::Bias),
            other => Err(format!(
                "floater's form is `bias` or `additive`, got `{}`",
                other.name()
            )),
        }
    }

    fn tupe(self) -> std::result::Result<TupeForm, String> {
        match self {
            Self::Paper => Ok(TupeForm::Paper),
            Self::Code => Ok(TupeForm::Code),
            other => Err(format!(
                "TUPE's form is `paper` or `code`, got `{}`",
                other.name()
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Additive => "additive",
            Self::Bias => "bias",
            Self::Paper => "paper",
            Self::Code => "code",
        }
    }
}

/// Whether a value is its type's default, so that the options added since a checkpoint format
/// was fixed are left out of its metadata when unset (older posflow versions read it unchanged).
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PosEncType {
    None,
    Sinusoidal,
    Learned,
    Relative,
    TupeA,
    TupeR,
    Floater,
    Rope,
    Alibi,
}

impl TryFrom<PosEncSpec> for PosEnc {
    type Error = String;

    fn try_from(spec: PosEncSpec) -> std::result::Result<Self, String> {
        use PosEncType as T;
        let given = [
            ("every_block", spec.every_block.is_some()),
            ("buckets", spec.buckets.is_some()),
            ("max_distance", spec.max_distance.is_some()),
            ("untie_cls", spec.untie_cls.is_some()),
            ("learned_absolute", spec.learned_absolute.is_some()),
            ("form", spec.form.is_some()),
            ("delta", spec.delta.is_some()),
            ("method", spec.method.is_some()),
            ("substeps", spec.substeps.is_some()),
            ("rtol", spec.rtol.is_some()),
            ("atol", spec.atol.is_some()),
            ("max_steps", spec.max_steps.is_some()),
            ("gradient", spec.gradient.is_some()),
            ("activation", spec.activation.is_some()),
            ("resolve_every", spec.resolve_every.is_some()),
            ("base", spec.base.is_some()),
        ];
        let takes: &[&str] = match spec.kind {
            T::None | T::Learned | T::Alibi => &[],
            T::Sinusoidal => &["every_block"],
            T::Relative => &["buckets", "max_distance", "learned_absolute"],
            T::TupeA => &["untie_cls", "form"],
            T::TupeR => &["untie_cls", "buckets", "max_distance", "form"],
            T::Floater => &[
                "form",
                "every_block",
                "delta",
                "method",
                "substeps",
                "rtol",
                "atol",
                "max_steps",
                "gradient",
                "activation",
                "resolve_every",
            ],
            T::Rope => &["base"],
        };
        refuse_other_settings(&given, takes)?;
        let untie_cls = || spec.untie_cls.ok_or("missing field `untie_cls`");
        let buckets = spec.buckets.unwrap_or_else(t5_buckets);
        let max_distance = spec.max_distance.unwrap_or_else(t5_max_distance);
        let tupe_form = || spec.form.map_or(Ok(TupeForm::Paper), FormName::tupe);
        Ok(match spec.kind {
            T::None => Self::None,
            T::Sinusoidal => Self::Sinusoidal {
                every_block: spec.every_block.unwrap_or(false),
            },
            T::Learned => Self::Learned,
            T::Relative => Self::Relative {
                buckets,
                max_distance,
                learned_absolute: spec.learned_absolute.unwrap_or(false),
            },
            T::TupeA => Self::TupeA {
                untie_cls: untie_cls()?,
                form: tupe_form()?,
            },
            T::TupeR => Self::TupeR {
                untie_cls: untie_cls()?,
                buckets,
                max_distance,
                form: tupe_form()?,
            },
            T::Floater => {
                let d = FloaterConfig::default();
                Self::Floater(FloaterConfig {
                    form: spec.form.map_or(Ok(d.form), FormName::floater)?,
                    every_block: spec.every_block.unwrap_or(d.every_block),
                    delta: spec.delta.unwrap_or(d.delta),
                    method: spec.method.unwrap_or(d.method),
                    substeps: spec.substeps.unwrap_or(d.substeps),
                    rtol: spec.rtol.unwrap_or(d.rtol),
                    atol: spec.atol.unwrap_or(d.atol),
                    max_steps: spec.max_steps.unwrap_or(d.max_steps),
                    gradient: spec.gradient.unwrap_or(d.gradient),
                    activation: spec.activation.unwrap_or(d.activation),
                    resolve_every: spec.resolve_every.unwrap_or(d.resolve_every),
                })
            }
            T::Rope => Self::Rope {
                base: spec.base.unwrap_or(crate::ops::rope::ROPE_BASE),
            },
            T::Alibi => Self::Alibi,
        })
    }
}

/// For a config read as a flat spec (see [`PosEncSpec`]): an error naming the first setting
/// `given` (key, whether given) that the variant read, which `takes`, does not have, worded as
/// serde's `deny_unknown_fields`.
pub(crate) fn refuse_other_settings(
    given: &[(&str, bool)],
    takes: &[&str],
) -> std::result::Result<(), String> {
    match given.iter().find(|(key, given)| *given && !takes.contains(key)) {
        None => Ok(()),
        Some((key, _)) if takes.is_empty() => Err(format!("unknown field `{key}`, there are no fields")),
        Some((key, _)) => {
            let keys: Vec<String> = takes.iter().map(|k| format!("`{k}`")).collect();
            Err(format!("unknown field `{key}`, expected {}", keys.join(", ")))
        }
    }
}

impl PosEnc {
    /// Whether the [CLS] position's positional term is replaced by trained values (TUPE).
    pub fn unties_cls(&self) -> bool {
        matches!(
            self,
            Self::TupeA { untie_cls: true, .. } | Self::TupeR { untie_cls: true, .. }
        )
    }

    /// Whether a learned table bounds the sequence length by `max_len`.
    pub fn has_table(&self) -> bool {
        matches!(
            self,
            Self::Learned
                | Self::TupeA { .. }
                | Self::TupeR { .. }
                | Self::Relative {
                    learned_absolute: true,
                    ..
                }
        )
    }

    /// Whether a fixed table of amplitude about 1 is added to the embeddings (the sinusoid, and
    /// FLOATER's, which starts from it or flows from a value of that size): scaled token
    /// embeddings (`embed_scale = "sqrt_d"`) are then the default, as in the papers' models,
    /// since embeddings of std 0.02 are drowned by it (a character LM stayed on the unigram
    /// plateau, 3.07 against 2.35 with √d).
    pub fn adds_a_fixed_table(&self) -> bool {
        matches!(self, Self::Sinusoidal { .. } | Self::Floater(_))
    }

    /// The T5 bucket layout of the encodings that have a relative bias.
    pub(crate) fn relative_buckets(&self) -> Option<(usize, usize)> {
        match *self {
            Self::Relative {
                buckets,
                max_distance,
                ..
            }
            | Self::TupeR {
                buckets,
                max_distance,
                ..
            } => Some((buckets, max_distance)),
            _ => None,
        }
    }
}

fn t5_buckets() -> usize {
    32
}

fn t5_max_distance() -> usize {
    128
}
