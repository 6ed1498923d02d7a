//! Position encodings: what each one adds to the graph of one sequence length.
//!
//! An encoding contributes terms at fixed places in the Transformer: an additive `[L, d_model]`
//! term at the input or at each block's input (the same for every block, or FLOATER's own per
//! block), or an additive attention bias shared by every layer: TUPE's `[H, L, L]` tensor, or
//! T5's table and buckets, which the attention op looks up in its kernels; or RoPE's rotation of
//! every layer's queries and keys by a constant `[L, Dh]` table. TUPE also changes the attention
//! op's scale; FLOATER's solve reports a status to check after each run.

mod alibi;
mod choice;
mod floater;
mod learned;
mod relative;
mod sinusoidal;
mod tupe;

pub use alibi::{alibi_slopes, alibi_table};
pub use choice::{PosEnc, TupeForm};
pub(crate) use choice::{is_default, refuse_other_settings};
pub use floater::{
    ENCODINGS_INPUT, EncodingSource, FloaterConfig, FloaterForm, GradientMethod, Nonlinearity,
    QKV_INITIAL_NAME, SolverMethod, encodings_shape, old_layout, qkv_initial_from_static_biases,
};
pub use relative::{bucket_matrix, buckets_by_offset, cls_bucket_matrix, relative_bucket};
pub use sinusoidal::sinusoidal_table;

use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::ops::attention::RelativeBias;
use crate::tensor::TensorMeta;

/// The position terms of one graph.
#[derive(Clone, Debug, Default)]
pub struct PositionTerms {
    /// `[L, d_model]`, added to the token embeddings (broadcast over the batch).
    pub at_input: Option<TensorId>,
    /// `[L, d_model]` per block, added to the input of block i; empty when none.
    pub at_block: Vec<TensorId>,
    /// `[L, 3·d_model]` per block, added to its q|k|v projection (FLOATER's compatible form).
    pub qkv_bias: Vec<TensorId>,
    /// `[heads, L, L]`, added to every layer's attention logits (shared by the batch): TUPE's
    /// positional term, whose length is bounded by its table's `max_len`.
    pub attention_bias: Option<TensorId>,
    /// T5's relative bias, added to every layer's attention logits inside the attention kernels,
    /// so that no `[heads, L, L]` tensor exists at any length.
    pub relative_bias: Option<RelativeBias>,
    /// The attention op's factor on q·k when it is not the usual `1/√Dh` (TUPE: `1/√(2·Dh)`).
    pub attention_scale: Option<f32>,
    /// Constant inputs and their values, written before each run.
    pub constants: Vec<(TensorId, Constant)>,
    /// FLOATER: every block's encodings in one tensor ([`encodings_shape`]), solved by the graph
    /// or its input ([`EncodingSource`]).
    pub encodings: Option<TensorId>,
    /// RoPE: the `[L, Dh]` table ([`crate::ops::rope::rope_table`]) every layer's queries and
    /// keys are turned by.
    pub rope: Option<TensorId>,
}

/// The values of a constant graph input.
#[derive(Clone, Debug)]
pub enum Constant {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// The sizes of the model an encoding is built for: all it reads of a model config
/// ([`crate::model::ModelConfig::dims`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelDims {
    pub d_model: usize,
    pub heads: usize,
    pub layers: usize,
    /// The longest sequence a learned position table holds.
    pub max_len: usize,
    /// An encoder: positions attend both ways (T5's buckets tell left from right).
    pub bidirectional: bool,
}

/// Declares `posenc` for a model of `dims` and sequences of length `len` in `g`.
pub fn build(g: &mut Graph, posenc: &PosEnc, dims: ModelDims, len: usize) -> Result<PositionTerms> {
    build_from(g, posenc, dims, len, EncodingSource::Solve)
}

/// [`build`], with FLOATER's encodings from `source` (other encodings ignore it).
pub fn build_from(
    g: &mut Graph,
    posenc: &PosEnc,
    config: ModelDims,
    len: usize,
    source: EncodingSource,
) -> Result<PositionTerms> {
    match *posenc {
        PosEnc::None => Ok(PositionTerms::default()),
        PosEnc::Sinusoidal { every_block } => {
            let (table, values) = sinusoidal::build(g, len, config.d_model);
            let mut terms = PositionTerms {
                constants: vec![(table, Constant::F32(values))],
                ..PositionTerms::default()
            };
            if every_block {
                terms.at_block = vec![table; config.layers];
            } else {
                terms.at_input = Some(table);
            }
            Ok(terms)
        }
        PosEnc::Learned => Ok(PositionTerms {
            at_input: Some(learned::build(g, len, config.max_len, config.d_model)?),
            ..PositionTerms::default()
        }),
        PosEnc::Relative {
            buckets,
            max_distance,
            learned_absolute,
        } => {
            let values = buckets_by_offset(len, config.bidirectional, buckets, max_distance);
            let bias = relative::build(g, config.heads, buckets, &values)?;
            let at_input = learned_absolute
                .then(|| learned::build(g, len, config.max_len, config.d_model))
                .transpose()?;
            Ok(PositionTerms {
                at_input,
                relative_bias: Some(bias),
                constants: vec![(bias.buckets, Constant::I32(values))],
                ..PositionTerms::default()
            })
        }
        PosEnc::TupeA { untie_cls, form } => build_tupe(g, config, len, None, untie_cls, form),
        PosEnc::Floater(floater) => match floater.form {
            FloaterForm::Additive => {
                let terms = floater::build(g, &floater, len, config.d_model, config.layers, source)?;
                let mut positions = PositionTerms {
                    encodings: Some(terms.encodings),
                    ..PositionTerms::default()
                };
                if floater.every_block {
                    positions.at_block = terms.per_block;
                } else {
                    positions.at_input = terms.per_block.first().copied();
                }
                Ok(positions)
            }
            FloaterForm::Bias => {
                let (table, values) = sinusoidal::build(g, len, config.d_model);
                let terms = floater::build_bias(g, &floater, len, config.d_model, config.layers, source)?;
                Ok(PositionTerms {
                    at_input: Some(table),
                    qkv_bias: terms.per_block,
                    encodings: Some(terms.encodings),
                    constants: vec![(table, Constant::F32(values))],
                    ..PositionTerms::default()
                })
            }
        },
        PosEnc::TupeR {
            untie_cls,
            buckets,
            max_distance,
            form,
        } => {
            let relative = Some((config.bidirectional, buckets, max_distance));
            build_tupe(g, config, len, relative, untie_cls, form)
        }
        PosEnc::Alibi => {
            let bias = alibi::build(g, config.heads, len)?;
            let offsets: Vec<i32> = (0..bias_rows(len)).collect();
            let table = alibi_table(len, config.heads, config.bidirectional);
            Ok(PositionTerms {
                relative_bias: Some(bias),
                constants: vec![
                    (bias.table, Constant::F32(table)),
                    (bias.buckets, Constant::I32(offsets)),
                ],
                ..PositionTerms::default()
            })
        }
        PosEnc::Rope { base } => {
            let head_dim = config.d_model / config.heads.max(1);
            let table = g.input("rope_table", TensorMeta::f32(&[len, head_dim]));
            let values = crate::ops::rope::rope_table(len, head_dim, base);
            Ok(PositionTerms {
                rope: Some(table),
                constants: vec![(table, Constant::F32(values))],
                ..PositionTerms::default()
            })
        }
    }
}

/// The rows of ALiBi's table for sequences of `len`: one per offset −(len − 1) ..= len − 1.
fn bias_rows(len: usize) -> i32 {
    i32::try_from((2 * len).saturating_sub(1)).unwrap_or(i32::MAX)
}

/// A seq2seq decoder's position terms over `len` target positions (`dims` the decoder's, not
/// bidirectional), and its cross-attention q biases `[T, D]` per block (empty but for FLOATER):
/// [`build`]'s terms, except that FLOATER's compatible form solves one flow of 4 parts per block,
/// the self-attention's q, k, v biases and the cross-attention's q bias (the authors'
/// `proj_bias_selfattn`).
pub fn build_decoder(
    g: &mut Graph,
    posenc: &PosEnc,
    dims: ModelDims,
    len: usize,
) -> Result<(PositionTerms, Vec<TensorId>)> {
    let PosEnc::Floater(floater) = posenc else {
        return Ok((build(g, posenc, dims, len)?, Vec::new()));
    };
    if floater.form == FloaterForm::Additive {
        return Ok((build(g, posenc, dims, len)?, Vec::new()));
    }
    let (table, values) = sinusoidal::build(g, len, dims.d_model);
    let (encodings, parts) = floater::solve_biases(
        g,
        floater,
        len,
        dims.d_model,
        dims.layers,
        4,
        EncodingSource::Solve,
    )?;
    let mut qkv_bias = Vec::with_capacity(dims.layers);
    let mut cross_q = Vec::with_capacity(dims.layers);
    for block in &parts {
        qkv_bias.push(g.concat(&block[..3], 1)?);
        cross_q.push(block[3]);
    }
    let terms = PositionTerms {
        at_input: Some(table),
        qkv_bias,
        encodings: Some(encodings),
        constants: vec![(table, Constant::F32(values))],
        ..PositionTerms::default()
    };
    Ok((terms, cross_q))
}

/// FLOATER's compatible form in a seq2seq decoder: the cross-attention k|v biases `[S, 2D]` of
/// each of the decoder's `dims.layers` blocks, from one flow over the `len` source positions (the
/// authors' `proj_bias_encattn_kv`); empty for every other encoding.
pub fn build_cross_kv(g: &mut Graph, posenc: &PosEnc, dims: ModelDims, len: usize) -> Result<Vec<TensorId>> {
    match posenc {
        PosEnc::Floater(floater) if floater.form == FloaterForm::Bias => {
            let (_, parts) = floater::solve_biases(
                g,
                floater,
                len,
                dims.d_model,
                dims.layers,
                2,
                EncodingSource::Solve,
            )?;
            parts.iter().map(|block| g.concat(block, 1)).collect()
        }
        _ => Ok(Vec::new()),
    }
}

/// One incremental decoding step's position terms: the decoder's, for its one query at position
/// `t` over the keys 0..=t (`dims` the decoder's), and the cross-attention q biases `[1, D]` per
/// block (FLOATER's compatible form). Everything is this graph's own (a table row, T5's table
/// through the buckets of offsets −t..0, TUPE's `[H, 1, t + 1]` row of its term), except
/// FLOATER's flow: it is solved once for every position ([`build_decoder`]) and its row t is the
/// input [`PositionTerms::encodings`] `[1, rows, D]`.
pub fn build_step(
    g: &mut Graph,
    posenc: &PosEnc,
    dims: ModelDims,
    t: usize,
) -> Result<(PositionTerms, Vec<TensorId>)> {
    let row_of_table = |g: &mut Graph| {
        let table = sinusoidal::sinusoidal_table(t + 1, dims.d_model);
        let row = g.input(
            sinusoidal::INPUT_NAME,
            crate::tensor::TensorMeta::f32(&[1, dims.d_model]),
        );
        (row, Constant::F32(table[t * dims.d_model..].to_vec()))
    };
    if let PosEnc::Rope { .. } | PosEnc::Alibi = posenc {
        // Refused by the config check; kept an error so that no path reaches a wrong graph.
        return Err(crate::error::Error::Input(
            "rope and alibi are for the causal LM and the encoder so far; a seq2seq decoder cannot have them yet"
                .into(),
        ));
    }
    match *posenc {
        PosEnc::None | PosEnc::Rope { .. } | PosEnc::Alibi => Ok((PositionTerms::default(), Vec::new())),
        PosEnc::Sinusoidal { every_block } => {
            let (row, values) = row_of_table(g);
            let mut terms = PositionTerms {
                constants: vec![(row, values)],
                ..PositionTerms::default()
            };
            if every_block {
                terms.at_block = vec![row; dims.layers];
            } else {
                terms.at_input = Some(row);
            }
            Ok((terms, Vec::new()))
        }
        PosEnc::Learned => {
            let rows = learned::build(g, t + 1, dims.max_len, dims.d_model)?;
            let terms = PositionTerms {
                at_input: Some(g.slice(rows, 0, t, t + 1)?),
                ..PositionTerms::default()
            };
            Ok((terms, Vec::new()))
        }
        PosEnc::Relative {
            buckets,
            max_distance,
            learned_absolute,
        } => {
            // The op reads entry j for key j of the one query: the offsets −t..0, the first t + 1
            // of the 2t + 1 a square graph's input holds.
            let mut values = buckets_by_offset(t + 1, false, buckets, max_distance);
            values.truncate(t + 1);
            let bias = relative::build(g, dims.heads, buckets, &values)?;
            let at_input = if learned_absolute {
                let rows = learned::build(g, t + 1, dims.max_len, dims.d_model)?;
                Some(g.slice(rows, 0, t, t + 1)?)
            } else {
                None
            };
            let terms = PositionTerms {
                at_input,
                relative_bias: Some(bias),
                constants: vec![(bias.buckets, Constant::I32(values))],
                ..PositionTerms::default()
            };
            Ok((terms, Vec::new()))
        }
        PosEnc::TupeA { untie_cls, form } => tupe_row(g, dims, t, None, untie_cls, form),
        PosEnc::TupeR {
            untie_cls,
            buckets,
            max_distance,
            form,
        } => tupe_row(g, dims, t, Some((false, buckets, max_distance)), untie_cls, form),
        PosEnc::Floater(floater) => {
            let source = EncodingSource::Input;
            match floater.form {
                FloaterForm::Additive => {
                    let terms = floater::build(g, &floater, 1, dims.d_model, dims.layers, source)?;
                    let mut positions = PositionTerms {
                        encodings: Some(terms.encodings),
                        ..PositionTerms::default()
                    };
                    if floater.every_block {
                        positions.at_block = terms.per_block;
                    } else {
                        positions.at_input = terms.per_block.first().copied();
                    }
                    Ok((positions, Vec::new()))
                }
                FloaterForm::Bias => {
                    let (row, values) = row_of_table(g);
                    let (encodings, parts) =
                        floater::solve_biases(g, &floater, 1, dims.d_model, dims.layers, 4, source)?;
                    let mut qkv_bias = Vec::with_capacity(dims.layers);
                    let mut cross_q = Vec::with_capacity(dims.layers);
                    for block in &parts {
                        qkv_bias.push(g.concat(&block[..3], 1)?);
                        cross_q.push(block[3]);
                    }
                    let terms = PositionTerms {
                        at_input: Some(row),
                        qkv_bias,
                        encodings: Some(encodings),
                        constants: vec![(row, values)],
                        ..PositionTerms::default()
                    };
                    Ok((terms, cross_q))
                }
            }
        }
    }
}

/// TUPE's term for the query at `t`: row t of the `[H, t + 1, t + 1]` term of the first t + 1
/// positions.
fn tupe_row(
    g: &mut Graph,
    dims: ModelDims,
    t: usize,
    relative: Option<(bool, usize, usize)>,
    untie_cls: bool,
    form: TupeForm,
) -> Result<(PositionTerms, Vec<TensorId>)> {
    let mut terms = build_tupe(g, dims, t + 1, relative, untie_cls, form)?;
    if let Some(square) = terms.attention_bias {
        terms.attention_bias = Some(g.slice(square, 1, t, t + 1)?);
    }
    Ok((terms, Vec::new()))
}

fn build_tupe(
    g: &mut Graph,
    config: ModelDims,
    len: usize,
    relative: Option<(bool, usize, usize)>,
    untie_cls: bool,
    form: TupeForm,
) -> Result<PositionTerms> {
    let tupe = tupe::Tupe {
        len,
        max_len: config.max_len,
        d_model: config.d_model,
        heads: config.heads,
        relative,
        untie_cls,
        form,
    };
    let (bias, constants) = tupe.build(g)?;
    Ok(PositionTerms {
        attention_bias: Some(bias),
        attention_scale: Some(tupe.scale()),
        constants,
        ..PositionTerms::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// d_model 8, 2 heads, 1 layer, a table of 4.
    fn dims(bidirectional: bool) -> ModelDims {
        ModelDims {
            d_model: 8,
            heads: 2,
            layers: 1,
            max_len: 4,
            bidirectional,
        }
    }

    const RELATIVE: PosEnc = PosEnc::Relative {
        buckets: 8,
        max_distance: 20,
        learned_absolute: false,
    };

    /// The encoder's buckets are bidirectional, the causal LM's look only back; the bias is the
    /// table `[buckets, heads]` and the bucket of each offset `[2L − 1]`, nothing is `[L, L]`, and
    /// nothing is added to the input.
    #[test]
    fn relative_terms_use_the_kind_s_bucket_layout() {
        for bidirectional in [true, false] {
            let kind = if bidirectional { "encoder" } else { "causal LM" };
            let mut g = Graph::new();
            let terms = build(&mut g, &RELATIVE, dims(bidirectional), 6).unwrap();
            assert!(terms.at_input.is_none() && terms.at_block.is_empty());
            assert!(terms.attention_bias.is_none());
            let bias = terms.relative_bias.unwrap();
            assert_eq!(g.info(bias.table).meta.shape, [8, 2]);
            assert_eq!(g.info(bias.buckets).meta.shape, [11]);
            let [(input, Constant::I32(buckets))] = terms.constants.as_slice() else {
                panic!("{kind:?}: expected one i32 constant, got {:?}", terms.constants);
            };
            assert_eq!(*input, bias.buckets);
            assert_eq!(buckets, &buckets_by_offset(6, bidirectional, 8, 20), "{kind:?}");
        }
    }

    /// TUPE adds nothing to the input, scales the word term by 1/√(2·Dh), and feeds the buckets
    /// of the kind's layout (TUPE-R) and the three [CLS] masks (with untie_cls).
    #[test]
    fn tupe_terms_scale_the_word_term_and_feed_their_constants() {
        let tupe_r = |untie_cls| PosEnc::TupeR {
            untie_cls,
            buckets: 8,
            max_distance: 20,
            form: TupeForm::Paper,
        };
        let cases = [
            (
                false,
                PosEnc::TupeA {
                    untie_cls: false,
                    form: TupeForm::Paper,
                },
                None,
                0,
            ),
            (false, tupe_r(false), Some(false), 1),
            (true, tupe_r(true), Some(true), 4),
        ];
        for (encoder, posenc, bidirectional, n_constants) in cases {
            let mut g = Graph::new();
            let terms = build(&mut g, &posenc, dims(encoder), 4).unwrap();
            assert!(terms.at_input.is_none() && terms.at_block.is_empty());
            assert_eq!(g.info(terms.attention_bias.unwrap()).meta.shape, [2, 4, 4]);
            // d_model 8, 2 heads: Dh = 4.
            assert_eq!(terms.attention_scale, Some(1.0 / 8f32.sqrt()), "{posenc:?}");
            assert_eq!(terms.constants.len(), n_constants, "{posenc:?}");
            if let Some(bidirectional) = bidirectional {
                let Some((_, Constant::I32(buckets))) = terms.constants.first() else {
                    panic!(
                        "{posenc:?}: expected the buckets first, got {:?}",
                        terms.constants
                    );
                };
                assert_eq!(buckets, &bucket_matrix(4, bidirectional, 8, 20), "{posenc:?}");
            }
        }
    }
}
