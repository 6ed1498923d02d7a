//! A checkpoint's values on one batch, read out: its logits, its loss and the gradient of every
//! parameter, with the positions a randomized model read. What a port of posflow's models to
//! another framework is checked against (`posflow forward`; `python/tests` checks the PyTorch
//! package with it), and what `tests/suite/model_reference.rs` compares with PyTorch's values.
//!
//! The batch is the checkpoint's own (`reference_batch` in its training state, as
//! `tests/tools/reference_checkpoints.rs` stores it) or a safetensors file of i32 tensors: `tokens`
//! `[B, L]` and `targets` (the model kind's), with `mask` `[B, L]` (1 for a token, 0 for padding)
//! and `positions` `[L]` (for randomized positions) where they apply; a seq2seq model's `source`,
//! `source_mask` `[B, S]`, `target_in` and `targets` `[B, T]`. Both come from someone else, so
//! every size is checked against the model's before anything is allocated for it.

use std::collections::BTreeMap;
use std::rc::Rc;

use safetensors::tensor::{Dtype, TensorView};
use serde::Deserialize;

use super::task::TrainBatch;
use crate::backend::Backend;
use crate::checkpoint::{Checkpoint, Metadata};
use crate::data::{Batch, EOS, Pair, PairBatch};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::inference::INFERENCE_POSITIONS_SEED;
use crate::model::{GraphOptions, Model, ModelConfig, ModelKind, Pairs, Tokens};
use crate::params::ParamStore;

/// One batch to compute values on.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueBatch {
    /// Rows of one token sequence (every kind but seq2seq).
    Tokens {
        batch: usize,
        len: usize,
        tokens: Vec<i32>,
        targets: Vec<i32>,
        /// `[B, L]`, 1 for a token and 0 for padding; `None`: no padding.
        mask: Option<Vec<f32>>,
        /// A randomized model's positions `[L]`; `None`: drawn from
        /// [`INFERENCE_POSITIONS_SEED`] (and written out with the values).
        positions: Option<Vec<i32>>,
    },
    /// A seq2seq model's sources and targets.
    Pairs(PairBatch),
}

/// A tensor read out: its shape and values.
#[derive(Clone, Debug, PartialEq)]
pub struct Read {
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// The values of one forward and backward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Values {
    pub logits: Read,
    pub loss: f32,
    /// Every parameter's gradient, by name.
    pub grads: BTreeMap<String, Read>,
    /// The positions a randomized model's tokens sat at; empty otherwise.
    pub positions: Vec<i32>,
}

/// The checkpoint's values on `batch`, on `backend`: dropout off, as in evaluation.
pub async fn checkpoint_values(
    backend: Rc<dyn Backend>,
    checkpoint: &Checkpoint,
    batch: &ValueBatch,
) -> Result<Values> {
    let model = Model::new(ModelConfig::from_json(&checkpoint.metadata().config)?)?;
    let mut g = Graph::new();
    let built = build(&model, &mut g, batch)?;
    let grads: Vec<(String, TensorId)> = g
        .backward(built.loss)?
        .iter()
        .map(|(p, grad)| (g.info(p).name.clone(), grad))
        .collect();
    checkpoint.check_parameters(g.params())?;
    let params = ParamStore::init(backend, &g, 0)?;
    checkpoint.restore(&params, None)?;
    let mut outputs = vec![built.logits, built.loss];
    outputs.extend(grads.iter().map(|(_, grad)| *grad));
    let exec = Executor::new(&g, &outputs, &params)?;
    let positions = (built.feed)(&exec)?;
    exec.run()?;
    exec.check().await?;
    let read = async |t: TensorId| -> Result<Read> {
        Ok(Read {
            shape: g.meta(t).shape.clone(),
            values: exec.read(t).await?,
        })
    };
    let logits = read(built.logits).await?;
    let loss = exec.read(built.loss).await?[0];
    let mut by_name = BTreeMap::new();
    for (name, grad) in grads {
        by_name.insert(name, read(grad).await?);
    }
    Ok(Values {
        logits,
        loss,
        grads: by_name,
        positions,
    })
}

/// Writes a built graph's batch into an executor of it; returns the positions it read.
type Feed<'a> = Box<dyn Fn(&Executor) -> Result<Vec<i32>> + 'a>;

/// What a built graph reads out, and how its batch is written.
struct Built<'a> {
    logits: TensorId,
    loss: TensorId,
    feed: Feed<'a>,
}

fn build<'a>(model: &Model, g: &mut Graph, batch: &'a ValueBatch) -> Result<Built<'a>> {
    let seq2seq = matches!(model.config().kind, ModelKind::Seq2Seq { .. });
    match batch {
        ValueBatch::Pairs(pairs) if seq2seq => {
            let shape = Pairs {
                batch: pairs.rows(),
                source_len: pairs.source_len(),
                target_len: pairs.target_len(),
            };
            let built = model.build(g, shape, GraphOptions::default())?;
            let (logits, loss) = (built.logits, built.loss);
            let feed = move |exec: &Executor| built.feed(exec, pairs).map(|()| Vec::new());
            Ok(Built {
                logits,
                loss,
                feed: Box::new(feed),
            })
        }
        ValueBatch::Tokens {
            batch,
            len,
            tokens,
            targets,
            mask,
            positions,
        } if !seq2seq => {
            let options = match mask {
                Some(_) => GraphOptions::default().padded(),
                None => GraphOptions::default(),
            };
            let built = model.build(
                g,
                Tokens {
                    batch: *batch,
                    len: *len,
                },
                options,
            )?;
            let (logits, loss) = (built.logits, built.loss);
            let feed = move |exec: &Executor| {
                let read = match positions {
                    Some(positions) => {
                        built.set_positions(exec, positions)?;
                        positions.clone()
                    }
                    None => built.draw_positions(exec, INFERENCE_POSITIONS_SEED)?,
                };
                built.feed(exec, tokens, targets, mask.as_deref())?;
                Ok(read)
            };
            Ok(Built {
                logits,
                loss,
                feed: Box::new(feed),
            })
        }
        ValueBatch::Pairs(_) => Err(Error::Input(
            "the batch is a seq2seq batch (source, target_in), but the model reads one token sequence: \
             give tokens and targets"
                .into(),
        )),
        ValueBatch::Tokens { .. } => Err(Error::Input(
            "the model is seq2seq: its batch needs source, source_mask, target_in and targets, not tokens"
                .into(),
        )),
    }
}

/// The batch `tests/tools/reference_checkpoints.rs` stores in a checkpoint's training state.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredTokens {
    batch: usize,
    len: usize,
    tokens: Vec<i32>,
    targets: Vec<i32>,
    mask: Option<Vec<f32>>,
    #[serde(default)]
    positions: Option<Vec<i32>>,
}

/// A seq2seq checkpoint's stored batch: a [`PairBatch`]'s arrays.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredPairs {
    batch: usize,
    source_len: usize,
    target_len: usize,
    source: Vec<i32>,
    source_mask: Vec<f32>,
    target_in: Vec<i32>,
    targets: Vec<i32>,
}

impl ValueBatch {
    /// The batch stored in a checkpoint's training state under `reference_batch`.
    pub fn from_reference(metadata: &Metadata) -> Result<Self> {
        let Some(stored) = metadata.training.extra.get("reference_batch") else {
            return Err(Error::Input(
                "the checkpoint stores no reference_batch: give a batch file (--batch)".into(),
            ));
        };
        let bad = |e: serde_json::Error| Error::Input(format!("the checkpoint's reference_batch: {e}"));
        let seq2seq = stored.get("source").is_some();
        if seq2seq {
            let s: StoredPairs = serde_json::from_value(stored.clone()).map_err(bad)?;
            return pairs_from_arrays(
                [s.batch, s.source_len, s.target_len],
                &s.source,
                &s.source_mask,
                &s.target_in,
                &s.targets,
            )
            .map(ValueBatch::Pairs);
        }
        let s: StoredTokens = serde_json::from_value(stored.clone()).map_err(bad)?;
        Ok(ValueBatch::Tokens {
            batch: s.batch,
            len: s.len,
            tokens: s.tokens,
            targets: s.targets,
            mask: s.mask,
            positions: s.positions,
        })
    }

    /// A batch from a safetensors file's i32 tensors (see the module's text); `origin` names
    /// the file in errors.
    pub fn from_safetensors(bytes: &[u8], origin: &str) -> Result<Self> {
        let file = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| Error::Input(format!("{origin}: not a safetensors file: {e}")))?;
        let get = |name: &str| -> Result<Option<(Vec<usize>, Vec<i32>)>> {
            let Ok(view) = file.tensor(name) else {
                return Ok(None);
            };
            if view.dtype() != Dtype::I32 {
                return Err(Error::Input(format!(
                    "{origin}: tensor {name} is {:?}; a batch's tensors are i32",
                    view.dtype()
                )));
            }
            // Read as le_bytes writes (any alignment).
            let values = bytemuck::pod_collect_to_vec(view.data());
            Ok(Some((view.shape().to_vec(), values)))
        };
        let need = |name: &str| {
            get(name)?.ok_or_else(|| Error::Input(format!("{origin}: the batch has no tensor {name}")))
        };
        let matrix =
            |name: &str, (shape, values): (Vec<usize>, Vec<i32>)| -> Result<([usize; 2], Vec<i32>)> {
                match shape[..] {
                    [rows, len] if rows > 0 && len > 0 => Ok(([rows, len], values)),
                    _ => Err(Error::Input(format!(
                        "{origin}: tensor {name} has shape {shape:?}; it must be [rows, length], both above 0"
                    ))),
                }
            };
        let as_mask = |values: Vec<i32>| values.into_iter().map(|m| f32::from(u8::from(m != 0))).collect();
        if file.names().contains(&"source") {
            let (source_shape, source) = matrix("source", need("source")?)?;
            let (mask_shape, source_mask) = matrix("source_mask", need("source_mask")?)?;
            let (target_shape, target_in) = matrix("target_in", need("target_in")?)?;
            let (targets_shape, targets) = matrix("targets", need("targets")?)?;
            if mask_shape != source_shape
                || targets_shape != target_shape
                || target_shape[0] != source_shape[0]
            {
                return Err(Error::Input(format!(
                    "{origin}: source {source_shape:?}, source_mask {mask_shape:?}, target_in \
                     {target_shape:?} and targets {targets_shape:?} must share their rows, the mask the \
                     source's shape and the targets target_in's"
                )));
            }
            let mask: Vec<f32> = as_mask(source_mask);
            return pairs_from_arrays(
                [source_shape[0], source_shape[1], target_shape[1]],
                &source,
                &mask,
                &target_in,
                &targets,
            )
            .map(ValueBatch::Pairs);
        }
        let ([batch, len], tokens) = matrix("tokens", need("tokens")?)?;
        let (_, targets) = need("targets")?;
        let mask = match get("mask")? {
            Some(mask) => {
                let (shape, mask) = matrix("mask", mask)?;
                if shape != [batch, len] {
                    return Err(Error::Input(format!(
                        "{origin}: mask has shape {shape:?}, tokens [{batch}, {len}]"
                    )));
                }
                Some(as_mask(mask))
            }
            None => None,
        };
        let positions = get("positions")?.map(|(_, p)| p);
        Ok(ValueBatch::Tokens {
            batch,
            len,
            tokens,
            targets,
            mask,
            positions,
        })
    }
}

/// The [`PairBatch`] whose arrays these are: rebuilt from its pairs (each source up to its mask,
/// each target up to its EOS) and checked to give back exactly these arrays, so the model reads
/// what the batch's author wrote.
fn pairs_from_arrays(
    [rows, source_len, target_len]: [usize; 3],
    source: &[i32],
    source_mask: &[f32],
    target_in: &[i32],
    targets: &[i32],
) -> Result<PairBatch> {
    let sizes = [source.len(), source_mask.len(), target_in.len(), targets.len()];
    let expected = [
        rows * source_len,
        rows * source_len,
        rows * target_len,
        rows * target_len,
    ];
    if sizes != expected {
        return Err(Error::Input(format!(
            "a pair batch of {rows} rows, sources of {source_len} and targets of {target_len} has \
             {expected:?} values in source, source_mask, target_in and targets, got {sizes:?}"
        )));
    }
    let pairs = (0..rows)
        .map(|row| {
            let mask = &source_mask[row * source_len..][..source_len];
            let row_targets = &targets[row * target_len..][..target_len];
            let end = row_targets.iter().position(|&t| t == EOS).ok_or_else(|| {
                Error::Input(format!("target row {row} has no EOS: every target ends in one"))
            })?;
            Ok(Pair {
                source: source[row * source_len..][..mask.iter().filter(|&&m| m > 0.5).count()].to_vec(),
                target: row_targets[..end].to_vec(),
            })
        })
        .collect::<Result<Vec<Pair>>>()?;
    let batch = PairBatch::new(&pairs, source_len, target_len)?;
    if batch.source() != source
        || batch.source_mask() != source_mask
        || batch.target_in() != target_in
        || batch.target_out() != targets
    {
        return Err(Error::Input(
            "the pair batch's arrays are not posflow's layout: each source left-aligned with its mask \
             1 over it, target_in BOS then the target, targets the target then EOS, IGNORE_INDEX (-100) \
             after"
                .into(),
        ));
    }
    Ok(batch)
}

impl ValueBatch {
    /// A training batch as posflow feeds it (a randomized model's positions are the caller's
    /// to set: they come from the step, not the data).
    pub fn from_train_batch(batch: &TrainBatch) -> Self {
        let tokens = |rows: &Batch, targets: Vec<i32>| {
            let [batch, len] = rows.shape();
            ValueBatch::Tokens {
                batch,
                len,
                tokens: rows.tokens().to_vec(),
                targets,
                mask: rows.mask().map(<[f32]>::to_vec),
                positions: None,
            }
        };
        match batch {
            TrainBatch::Tokens(rows) => tokens(rows, rows.targets().to_vec()),
            TrainBatch::Classes(classes) => tokens(&classes.batch, classes.classes.clone()),
            TrainBatch::Pairs(pairs) => ValueBatch::Pairs(pairs.clone()),
        }
    }

    /// The batch as named i32 tensors under `prefix` (the names [`ValueBatch::from_safetensors`]
    /// reads): name, shape, values.
    pub fn tensors(&self, prefix: &str) -> Vec<(String, Vec<usize>, Vec<i32>)> {
        let as_ints = |mask: &[f32]| mask.iter().map(|&m| i32::from(m > 0.5)).collect::<Vec<i32>>();
        let named =
            |name: &str, shape: Vec<usize>, values: Vec<i32>| (format!("{prefix}{name}"), shape, values);
        match self {
            ValueBatch::Tokens {
                batch,
                len,
                tokens,
                targets,
                mask,
                positions,
            } => {
                let mut out = vec![
                    named("tokens", vec![*batch, *len], tokens.clone()),
                    named(
                        "targets",
                        targets_shape(targets.len(), *batch, *len),
                        targets.clone(),
                    ),
                ];
                if let Some(mask) = mask {
                    out.push(named("mask", vec![*batch, *len], as_ints(mask)));
                }
                if let Some(positions) = positions {
                    out.push(named("positions", vec![*len], positions.clone()));
                }
                out
            }
            ValueBatch::Pairs(pairs) => {
                let source = vec![pairs.rows(), pairs.source_len()];
                let target = vec![pairs.rows(), pairs.target_len()];
                vec![
                    named("source", source.clone(), pairs.source().to_vec()),
                    named("source_mask", source, as_ints(pairs.source_mask())),
                    named("target_in", target.clone(), pairs.target_in().to_vec()),
                    named("targets", target, pairs.target_out().to_vec()),
                ]
            }
        }
    }
}

/// `[B, L]` for targets per token, `[B]` for a class per row.
fn targets_shape(count: usize, batch: usize, len: usize) -> Vec<usize> {
    if count == batch * len {
        vec![batch, len]
    } else {
        vec![count]
    }
}

/// A safetensors file of i32 tensors (name, shape, values).
pub fn i32_safetensors(tensors: &[(String, Vec<usize>, Vec<i32>)]) -> Result<Vec<u8>> {
    let bytes = tensors
        .iter()
        .map(|(name, shape, values)| (name.clone(), Dtype::I32, shape.clone(), le_bytes(values)))
        .collect::<Vec<_>>();
    serialize(&bytes, "the batches")
}

/// Values as the bytes a safetensors file holds: little-endian on every target posflow builds
/// for, as checkpoint.rs writes them.
fn le_bytes<T: bytemuck::Pod>(values: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

/// A safetensors file of tensors given as (name, dtype, shape, bytes); `what` names it in errors.
fn serialize(tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)], what: &str) -> Result<Vec<u8>> {
    let views = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|view| (name.as_str(), view))
                .map_err(|e| Error::Input(format!("tensor {name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, None).map_err(|e| Error::Input(format!("writing {what}: {e}")))
}

impl Values {
    /// A safetensors file: `logits`, `loss` `[1]`, `grad/<param>` (f32) and, for a randomized
    /// model, `positions` (i32).
    pub fn to_safetensors(&self) -> Result<Vec<u8>> {
        let f32s = |name: String, read: &Read| (name, Dtype::F32, read.shape.clone(), le_bytes(&read.values));
        let mut tensors = vec![
            f32s("logits".into(), &self.logits),
            ("loss".into(), Dtype::F32, vec![1], le_bytes(&[self.loss])),
        ];
        tensors.extend(
            self.grads
                .iter()
                .map(|(name, grad)| f32s(format!("grad/{name}"), grad)),
        );
        if !self.positions.is_empty() {
            let shape = vec![self.positions.len()];
            tensors.push(("positions".into(), Dtype::I32, shape, le_bytes(&self.positions)));
        }
        serialize(&tensors, "the values")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file of the given i32 tensors (or, for `f32_name`, that one as f32).
    fn batch_file(tensors: &[(&str, Vec<usize>, Vec<i32>)], f32_name: Option<&str>) -> Vec<u8> {
        let tensors: Vec<_> = tensors
            .iter()
            .map(|(name, shape, values)| {
                let dtype = if Some(*name) == f32_name {
                    Dtype::F32
                } else {
                    Dtype::I32
                };
                (name.to_string(), dtype, shape.clone(), le_bytes(values))
            })
            .collect();
        serialize(&tensors, "the test batch").unwrap()
    }

    #[test]
    fn a_batch_file_reads_tokens_targets_mask_and_positions() {
        let file = batch_file(
            &[
                ("tokens", vec![2, 3], vec![1, 4, 5, 1, 6, 0]),
                ("targets", vec![2, 3], vec![4, 5, -100, 6, -100, -100]),
                ("mask", vec![2, 3], vec![1, 1, 1, 1, 1, 0]),
                ("positions", vec![3], vec![2, 9, 40]),
            ],
            None,
        );
        let batch = ValueBatch::from_safetensors(&file, "b.safetensors").unwrap();
        assert_eq!(
            batch,
            ValueBatch::Tokens {
                batch: 2,
                len: 3,
                tokens: vec![1, 4, 5, 1, 6, 0],
                targets: vec![4, 5, -100, 6, -100, -100],
                mask: Some(vec![1.0, 1.0, 1.0, 1.0, 1.0, 0.0]),
                positions: Some(vec![2, 9, 40]),
            }
        );
    }

    #[test]
    fn a_bad_batch_file_is_refused_naming_the_tensor() {
        let err = |tensors: &[(&str, Vec<usize>, Vec<i32>)], f32_name| {
            ValueBatch::from_safetensors(&batch_file(tensors, f32_name), "b.safetensors")
                .unwrap_err()
                .to_string()
        };
        let tokens = ("tokens", vec![1, 2], vec![1, 4]);
        let targets = ("targets", vec![1, 2], vec![4, 5]);
        assert!(err(std::slice::from_ref(&tokens), None).contains("the batch has no tensor targets"));
        let e = err(&[tokens.clone(), targets.clone()], Some("tokens"));
        assert!(e.contains("tensor tokens is F32") && e.contains("i32"), "{e}");
        let e = err(&[("tokens", vec![2], vec![1, 4]), targets.clone()], None);
        assert!(e.contains("tokens has shape [2]"), "{e}");
        let e = err(&[tokens, targets, ("mask", vec![2, 1], vec![1, 1])], None);
        assert!(e.contains("mask has shape [2, 1], tokens [1, 2]"), "{e}");
        let e = ValueBatch::from_safetensors(b"not a file", "b.safetensors")
            .unwrap_err()
            .to_string();
        assert!(e.contains("b.safetensors: not a safetensors file"), "{e}");
        // A pair batch whose target has no EOS.
        let e = err(
            &[
                ("source", vec![1, 2], vec![4, 5]),
                ("source_mask", vec![1, 2], vec![1, 1]),
                ("target_in", vec![1, 2], vec![1, 6]),
                ("targets", vec![1, 2], vec![6, 7]),
            ],
            None,
        );
        assert!(e.contains("target row 0 has no EOS"), "{e}");
    }
}
