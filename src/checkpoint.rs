//! Checkpoints: a model's parameters, optionally AdamW's state, and what it takes to rebuild the
//! model and resume the run, in one safetensors file that PyTorch opens with
//! `safetensors.torch.load_file`.
//!
//! Format `posflow/1`:
//! - tensor `<name>`: each parameter of the [`ParamStore`] under its own name (F32, row-major);
//! - tensors `optim.adam_m.<name>` and `optim.adam_v.<name>`: AdamW's first and second moments of
//!   parameter `<name>`, when saved with the optimizer. A prefix, not a suffix, so the model's
//!   tensors stay a plain state dict (without the `state.` tensors below:
//!   `{k: v for k, v in sd.items() if not k.startswith(("optim.", "state."))}`) and a parameter can
//!   never be mistaken for optimizer state: parameter names must not start with `optim.`;
//! - tensors `state.<name>`: run state, neither parameters nor optimizer state, that a resumed run
//!   needs to continue exactly where the uninterrupted run would. Only the names in
//!   [`STATE_TENSORS`] are read (any other `state.*` tensor is refused when the file is parsed),
//!   each F32; whoever restores one checks its shape against what the run keeps before anything
//!   is written ([`Checkpoint::run_state`]). A run with no such state refuses a checkpoint that
//!   holds some. Parameter names must not start with `state.` either. Today there is one:
//!   - `state.posenc.floater.encodings` ([`FLOATER_ENCODINGS_STATE`]): FLOATER's encodings of the
//!     last solve, `[len, rows, D]` (the cached graph's `posenc.floater.encodings` input), in
//!     checkpoints of runs with `resolve_every = N > 1` saved at a step that is not a multiple of
//!     N, i.e. whose next step takes that solve instead of solving. At a multiple of N the next step
//!     solves, so the checkpoint carries none. A checkpoint without it at another step (written
//!     before run state existed) still resumes, but its first step solves with the current
//!     parameters: the run then differs from the uninterrupted one from that step on;
//! - metadata (safetensors' string map): `format` = `posflow/1`; `config`, the model's config as
//!   JSON (opaque here: the model layer owns it); `training`, a [`TrainingState`] as JSON;
//!   `tokenizer`, the tokenizer's JSON, if the run has one; `optimizer`, an [`OptimizerState`] as
//!   JSON, present exactly when the moments are.
//!
//! Saving is split into [`Checkpoint::gather`] (async readback, works on the web) and
//! [`Checkpoint::to_bytes`]; natively [`Checkpoint::save`] does both and writes atomically.
//! Loading parses and checks the whole file against the model before it writes anything, so a bad
//! file leaves the parameters and the optimizer as they were.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;

use safetensors::{Dtype, SafeTensors, View};
use serde::{Deserialize, Serialize};

use crate::backend::Buffer;
use crate::error::{Error, Result};
use crate::model::posenc::old_layout;
use crate::optim::{AdamW, Optimizer};
use crate::params::ParamStore;
use crate::tensor::{DType, TensorMeta};

/// The value of the `format` metadata key this build writes and reads.
pub const FORMAT: &str = "posflow/1";

/// Tensor names under this prefix hold optimizer state, never parameters.
pub const OPTIMIZER_PREFIX: &str = "optim.";
const ADAM_M: &str = "optim.adam_m.";
const ADAM_V: &str = "optim.adam_v.";

/// Tensor names under this prefix hold run state (see the format above), never parameters.
pub const STATE_PREFIX: &str = "state.";
/// FLOATER's cached encodings: the last solve's, which the steps up to the next solve take.
pub const FLOATER_ENCODINGS_STATE: &str = "state.posenc.floater.encodings";
/// Every run-state tensor this build reads and writes.
pub const STATE_TENSORS: [&str; 1] = [FLOATER_ENCODINGS_STATE];

const FORMAT_KEY: &str = "format";
const CONFIG_KEY: &str = "config";
const TRAINING_KEY: &str = "training";
const TOKENIZER_KEY: &str = "tokenizer";
const OPTIMIZER_KEY: &str = "optimizer";

/// The tensor name of parameter `param`'s first AdamW moment.
pub fn adam_m_name(param: &str) -> String {
    format!("{ADAM_M}{param}")
}

/// The tensor name of parameter `param`'s second AdamW moment.
pub fn adam_v_name(param: &str) -> String {
    format!("{ADAM_V}{param}")
}

/// Where a run stands, so that `--resume` continues it exactly.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainingState {
    /// Training steps completed.
    pub step: u64,
    /// The seed the run started from (initial parameters, data order).
    pub seed: u64,
    /// Anything else the trainer needs to resume (data position, schedule), kept verbatim.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// What a checkpoint says besides its tensors: enough to rebuild the model without a store.
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata {
    /// The model's config as JSON; the model layer writes and reads it.
    pub config: String,
    pub training: TrainingState,
    /// The tokenizer as JSON, for runs on text.
    pub tokenizer: Option<String>,
}

/// The optimizer's scalar state; its moments are tensors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptimizerState {
    /// Always `adamw` in format `posflow/1`.
    pub algorithm: String,
    /// AdamW's step count t, which sets its bias correction.
    pub step: u64,
    /// The hyperparameters the run used, for the record: a resumed run may change them.
    pub hyperparameters: AdamW,
}

const ADAMW: &str = "adamw";

/// A checkpoint in host memory: parsed and checked, or gathered from a store and ready to write.
#[derive(Debug)]
pub struct Checkpoint {
    /// What errors call the checkpoint: its path, or a name the caller chose.
    origin: String,
    metadata: Metadata,
    optimizer: Option<OptimizerState>,
    tensors: BTreeMap<String, HostTensor>,
}

#[derive(Debug)]
struct HostTensor {
    meta: TensorMeta,
    /// Bit patterns, so that values (NaN payloads included) round-trip exactly.
    words: Vec<u32>,
}

impl View for &HostTensor {
    fn dtype(&self) -> Dtype {
        match self.meta.dtype {
            DType::F32 => Dtype::F32,
            DType::I32 => Dtype::I32,
        }
    }

    fn shape(&self) -> &[usize] {
        &self.meta.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(bytemuck::cast_slice(&self.words))
    }

    fn data_len(&self) -> usize {
        self.words.len() * 4
    }
}

/// Every message about a checkpoint quotes the file (tensor names, metadata): its control
/// characters are escaped here, so that no caller shows them raw.
fn checkpoint_err(origin: &str, detail: impl Display) -> Error {
    let message = format!("checkpoint {origin}: {detail}");
    Error::Input(crate::error::one_line(&message))
}

/// The name of a checkpoint gathered from a store and not yet written or read.
const UNSAVED: &str = "(being saved)";

impl Checkpoint {
    /// Reads every parameter of `params` (and, with `optimizer`, its moments and step) back to the
    /// host. Async because readback is; native callers can use [`Checkpoint::save`].
    pub async fn gather(
        params: &ParamStore,
        optimizer: Option<&Optimizer>,
        metadata: Metadata,
    ) -> Result<Self> {
        check_json(UNSAVED, "the model config", &metadata.config)?;
        if let Some(tokenizer) = &metadata.tokenizer {
            check_json(UNSAVED, "the tokenizer", tokenizer)?;
        }
        let backend = params.backend();
        let read = |buffer: &Buffer, meta: &TensorMeta| {
            let meta = meta.clone();
            let buffer = buffer.clone();
            async move {
                let mut words = backend.read(&buffer).await?;
                words.truncate(meta.numel());
                Ok::<_, Error>(HostTensor { meta, words })
            }
        };
        let mut tensors = BTreeMap::new();
        for (name, p) in params.iter() {
            if name.starts_with(OPTIMIZER_PREFIX) {
                return Err(checkpoint_err(
                    UNSAVED,
                    format!(
                        "parameter `{name}` starts with `{OPTIMIZER_PREFIX}`, which names optimizer state"
                    ),
                ));
            }
            if name.starts_with(STATE_PREFIX) {
                return Err(checkpoint_err(
                    UNSAVED,
                    format!("parameter `{name}` starts with `{STATE_PREFIX}`, which names run state"),
                ));
            }
            tensors.insert(name.to_string(), read(&p.buffer, &p.meta).await?);
            if let Some(opt) = optimizer {
                let moments = opt.moments_of(name)?;
                tensors.insert(adam_m_name(name), read(&moments.m, &p.meta).await?);
                tensors.insert(adam_v_name(name), read(&moments.v, &p.meta).await?);
            }
        }
        Ok(Self {
            origin: UNSAVED.into(),
            metadata,
            optimizer: optimizer.map(|opt| OptimizerState {
                algorithm: ADAMW.into(),
                step: opt.step(),
                hyperparameters: opt.config().clone(),
            }),
            tensors,
        })
    }

    /// The safetensors file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut info = HashMap::from([
            (FORMAT_KEY.to_string(), FORMAT.to_string()),
            (CONFIG_KEY.to_string(), self.metadata.config.clone()),
            (
                TRAINING_KEY.to_string(),
                to_json(&self.metadata.training, &self.origin)?,
            ),
        ]);
        if let Some(tokenizer) = &self.metadata.tokenizer {
            info.insert(TOKENIZER_KEY.into(), tokenizer.clone());
        }
        if let Some(state) = &self.optimizer {
            info.insert(OPTIMIZER_KEY.into(), to_json(state, &self.origin)?);
        }
        let tensors = self.tensors.iter().map(|(name, t)| (name.as_str(), t));
        safetensors::serialize(tensors, Some(info)).map_err(|e| checkpoint_err(&self.origin, e))
    }

    /// Parses a checkpoint and checks that it is self-consistent; `origin` names it in errors.
    pub fn from_bytes(bytes: &[u8], origin: &str) -> Result<Self> {
        let (header_len, header) = parse_header(bytes, origin)?;
        let (metadata, optimizer) = parse_metadata(header.metadata().as_ref(), origin)?;
        // The header validated every tensor's offsets against the file's length.
        let data = bytes.get(8 + header_len..).unwrap_or_default();
        let mut tensors = BTreeMap::new();
        for (name, info) in header.tensors() {
            let dtype = match info.dtype {
                Dtype::F32 => DType::F32,
                Dtype::I32 => DType::I32,
                other => {
                    return Err(checkpoint_err(
                        origin,
                        format!("tensor {name} has dtype {other}, posflow reads F32 and I32"),
                    ));
                }
            };
            let (start, end) = info.data_offsets;
            let bytes = data
                .get(start..end)
                .ok_or_else(|| checkpoint_err(origin, format!("tensor {name} lies outside the file")))?;
            let meta = TensorMeta {
                shape: info.shape.clone(),
                dtype,
            };
            let words: Vec<u32> = bytemuck::pod_collect_to_vec(bytes);
            check_finite(&name, &meta, &words, origin)?;
            tensors.insert(name, HostTensor { meta, words });
        }
        check_optimizer_tensors(&tensors, optimizer.is_some(), origin)?;
        check_state_tensors(&tensors, origin)?;
        Ok(Self {
            origin: origin.into(),
            metadata,
            optimizer,
            tensors,
        })
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The checkpoint without AdamW's state (its moments are two thirds of the file) and without
    /// run state: the parameters, what inference, the browser demo and a warm start need.
    /// `--resume` refuses the result.
    pub fn without_optimizer(mut self) -> Self {
        self.optimizer = None;
        self.tensors.retain(|name, _| is_parameter(name));
        self
    }

    /// The checkpoint with run-state tensor `name` (one of [`STATE_TENSORS`]) of `shape`, as a
    /// trainer adds what its next step needs besides parameters and optimizer state.
    pub fn with_state(mut self, name: &str, shape: &[usize], values: &[f32]) -> Result<Self> {
        let err = |detail: String| checkpoint_err(&self.origin, detail);
        if !STATE_TENSORS.contains(&name) {
            return Err(err(format!(
                "{name} is not run state this build knows ({})",
                STATE_TENSORS.join(", ")
            )));
        }
        let meta = TensorMeta::f32(shape);
        if meta.numel() != values.len() {
            return Err(err(format!(
                "run state {name} is {meta}, got {} values",
                values.len()
            )));
        }
        let words = values.iter().map(|v| v.to_bits()).collect();
        self.tensors.insert(name.into(), HostTensor { meta, words });
        Ok(self)
    }

    /// The values of run-state tensor `name` if the checkpoint holds it, checked against
    /// `expected`, the tensor as the run keeps it (`None`: the run keeps no such state, so a
    /// checkpoint that holds it is not the run's). Call it before [`Checkpoint::restore`], so that
    /// a bad tensor leaves everything as it was.
    pub fn run_state(&self, name: &str, expected: Option<&TensorMeta>) -> Result<Option<Vec<f32>>> {
        if !self.tensors.contains_key(name) {
            return Ok(None);
        }
        let Some(meta) = expected else {
            return Err(checkpoint_err(
                &self.origin,
                format!("holds run state {name}, but this run keeps no such state"),
            ));
        };
        let words = self.tensor_like(name, meta)?;
        Ok(Some(words.iter().map(|&w| f32::from_bits(w)).collect()))
    }

    /// The optimizer's step and hyperparameters, if the checkpoint holds optimizer state.
    pub fn optimizer_state(&self) -> Option<&OptimizerState> {
        self.optimizer.as_ref()
    }

    /// Writes the checkpoint's values into `params` and, with `optimizer`, AdamW's moments and step
    /// (then the checkpoint must hold optimizer state: resuming without it would not continue the
    /// run). Every tensor is checked against the store first, so on error nothing has changed.
    pub fn restore(&self, params: &ParamStore, optimizer: Option<&mut Optimizer>) -> Result<()> {
        let err = |detail: String| checkpoint_err(&self.origin, detail);
        self.check_parameters(params.iter().map(|(name, p)| (name, &p.meta)))?;
        let mut writes: Vec<(&Buffer, &[u32])> = Vec::new();
        for (name, p) in params.iter() {
            writes.push((&p.buffer, self.tensor_like(name, &p.meta)?));
        }
        let step = match (&optimizer, &self.optimizer) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(err(
                    "holds no optimizer state: it was saved without the optimizer, so training cannot resume from it"
                        .into(),
                ));
            }
            (Some(opt), Some(state)) => {
                for (name, p) in params.iter() {
                    let moments = opt.moments_of(name).map_err(|e| err(e.to_string()))?;
                    writes.push((&moments.m, self.tensor_like(&adam_m_name(name), &p.meta)?));
                    writes.push((&moments.v, self.tensor_like(&adam_v_name(name), &p.meta)?));
                }
                Some(state.step)
            }
        };
        for (buffer, words) in writes {
            params.backend().write(buffer, words)?;
        }
        if let (Some(opt), Some(step)) = (optimizer, step) {
            opt.set_step(step);
        }
        Ok(())
    }

    /// Checks that the checkpoint's parameters are exactly `params` (names and metas, as a graph
    /// declares them: [`crate::graph::Graph::params`]), without a store. Loaders call it before
    /// allocating the model a checkpoint's config describes: the config is a few bytes anyone can
    /// edit to claim billions of parameters, the tensors that fill them cannot be smaller than
    /// the model, so checking them first bounds the memory by the file's size.
    pub fn check_parameters<'a>(
        &self,
        params: impl IntoIterator<Item = (&'a str, &'a TensorMeta)>,
    ) -> Result<()> {
        self.refuse_old_layouts()?;
        let params: BTreeMap<&str, &TensorMeta> = params.into_iter().collect();
        for (name, t) in self.tensors.iter().filter(|(n, _)| is_parameter(n)) {
            if !params.contains_key(name.as_str()) {
                return Err(checkpoint_err(
                    &self.origin,
                    format!(
                        "tensor {name} is not a parameter of the model (its shape in the checkpoint is {:?})",
                        t.meta.shape
                    ),
                ));
            }
        }
        for (name, meta) in params {
            self.tensor_like(name, meta)?;
        }
        Ok(())
    }

    /// A warm start: writes the checkpoint's values into the parameters of `params` that it holds
    /// (a shape or dtype that differs is an error, and then nothing has changed) and returns the
    /// names of the parameters it does not hold, which keep their values. Optimizer state is
    /// ignored: the new run starts its own.
    pub fn restore_shared(&self, params: &ParamStore) -> Result<Vec<String>> {
        self.refuse_old_layouts()?;
        let mut writes = Vec::new();
        let mut missing = Vec::new();
        for (name, p) in params.iter() {
            if self.tensors.contains_key(name) {
                writes.push((&p.buffer, self.tensor_like(name, &p.meta)?));
            } else {
                missing.push(name.to_string());
            }
        }
        if writes.is_empty() {
            return Err(checkpoint_err(
                &self.origin,
                "shares no parameter with the model, so there is nothing to start from",
            ));
        }
        for (buffer, words) in writes {
            params.backend().write(buffer, words)?;
        }
        Ok(missing)
    }

    /// The shape and values of the f32 tensor `name`, if the checkpoint holds one.
    pub fn f32_tensor(&self, name: &str) -> Option<(&[usize], Vec<f32>)> {
        let t = self.tensors.get(name).filter(|t| t.meta.dtype == DType::F32)?;
        Some((
            &t.meta.shape,
            t.words.iter().map(|&w| f32::from_bits(w)).collect(),
        ))
    }

    /// A checkpoint in a layout this build no longer reads is refused with what changed, rather
    /// than with the first tensor name that does not fit.
    fn refuse_old_layouts(&self) -> Result<()> {
        match self.tensors.keys().find_map(|name| old_layout(name)) {
            Some(why) => Err(checkpoint_err(&self.origin, why)),
            None => Ok(()),
        }
    }

    /// The words of tensor `name`, which the model expects to be `meta`.
    fn tensor_like(&self, name: &str, meta: &TensorMeta) -> Result<&[u32]> {
        let err = |detail: String| checkpoint_err(&self.origin, detail);
        let t = self.tensors.get(name).ok_or_else(|| {
            err(format!(
                "has no tensor {name}, the model expects shape {:?}",
                meta.shape
            ))
        })?;
        if t.meta.dtype != meta.dtype {
            return Err(err(format!(
                "tensor {name} has dtype {:?}, the model expects {:?}",
                t.meta.dtype, meta.dtype
            )));
        }
        if t.meta.shape != meta.shape {
            return Err(err(format!(
                "tensor {name} has shape {:?}, the model expects {:?}",
                t.meta.shape, meta.shape
            )));
        }
        Ok(&t.words)
    }
}

/// A weight, moment or cached value that is NaN or infinite makes every output NaN: refused on
/// load, naming the tensor and where, rather than evaluated into a table of NaN.
fn check_finite(name: &str, meta: &TensorMeta, words: &[u32], origin: &str) -> Result<()> {
    if meta.dtype != DType::F32 {
        return Ok(());
    }
    match words.iter().position(|&w| !f32::from_bits(w).is_finite()) {
        Some(i) => Err(checkpoint_err(
            origin,
            format!(
                "tensor {name} holds {} at flat index {i} (of {}): a model with non-finite \
                 weights computes nothing but NaN",
                f32::from_bits(words[i]),
                words.len()
            ),
        )),
        None => Ok(()),
    }
}

fn to_json(value: &impl Serialize, origin: &str) -> Result<String> {
    serde_json::to_string(value).map_err(|e| checkpoint_err(origin, e))
}

fn check_json(origin: &str, what: &str, text: &str) -> Result<()> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| checkpoint_err(origin, format!("{what} is not valid JSON ({e})")))
}

fn parse_header(bytes: &[u8], origin: &str) -> Result<(usize, safetensors::tensor::Metadata)> {
    SafeTensors::read_metadata(bytes)
        .map_err(|e| checkpoint_err(origin, format!("is not a valid safetensors file ({e})")))
}

fn parse_metadata(
    map: Option<&HashMap<String, String>>,
    origin: &str,
) -> Result<(Metadata, Option<OptimizerState>)> {
    let err = |detail: String| checkpoint_err(origin, detail);
    let get = |key: &str| map.and_then(|m| m.get(key));
    let required = |key: &str| {
        get(key).ok_or_else(|| {
            err(format!(
                "has no `{key}` in its metadata: it is not a posflow checkpoint"
            ))
        })
    };
    let format = required(FORMAT_KEY)?;
    if format != FORMAT {
        return Err(err(format!("has format `{format}`, this build reads `{FORMAT}`")));
    }
    let config = required(CONFIG_KEY)?.clone();
    check_json(origin, "its `config`", &config)?;
    let training = serde_json::from_str(required(TRAINING_KEY)?).map_err(|e| {
        err(format!(
            "its `{TRAINING_KEY}` metadata is not a training state ({e})"
        ))
    })?;
    let tokenizer = get(TOKENIZER_KEY).cloned();
    if let Some(tokenizer) = &tokenizer {
        check_json(origin, "its `tokenizer`", tokenizer)?;
    }
    let optimizer = get(OPTIMIZER_KEY)
        .map(|text| {
            let state: OptimizerState = serde_json::from_str(text).map_err(|e| {
                err(format!(
                    "its `{OPTIMIZER_KEY}` metadata is not an optimizer state ({e})"
                ))
            })?;
            if state.algorithm != ADAMW {
                return Err(err(format!(
                    "holds state of optimizer `{}`, posflow has `{ADAMW}`",
                    state.algorithm
                )));
            }
            Ok(state)
        })
        .transpose()?;
    let metadata = Metadata {
        config,
        training,
        tokenizer,
    };
    Ok((metadata, optimizer))
}

/// Optimizer tensors must be exactly one `adam_m` and one `adam_v` per parameter, shaped like it,
/// and present exactly when the `optimizer` metadata is.
fn check_optimizer_tensors(
    tensors: &BTreeMap<String, HostTensor>,
    has_state: bool,
    origin: &str,
) -> Result<()> {
    let err = |detail: String| checkpoint_err(origin, detail);
    for (name, t) in tensors.iter().filter(|(n, _)| n.starts_with(OPTIMIZER_PREFIX)) {
        if !has_state {
            return Err(err(format!(
                "has optimizer tensor {name} but no `{OPTIMIZER_KEY}` metadata"
            )));
        }
        let param = name
            .strip_prefix(ADAM_M)
            .or_else(|| name.strip_prefix(ADAM_V))
            .ok_or_else(|| {
                err(format!(
                    "tensor {name} is not a parameter, `{ADAM_M}*` or `{ADAM_V}*`"
                ))
            })?;
        let p = tensors
            .get(param)
            .filter(|_| is_parameter(param))
            .ok_or_else(|| err(format!("has optimizer tensor {name} but no parameter {param}")))?;
        if t.meta != p.meta {
            return Err(err(format!(
                "optimizer tensor {name} is {}, its parameter is {}",
                t.meta, p.meta
            )));
        }
        // A second moment is a mean of squares. A negative one (a flipped sign bit) passes every
        // other check, then the first resumed update divides by its square root: NaN parameters.
        if name.starts_with(ADAM_V)
            && let Some((index, value)) =
                (t.words.iter().map(|&w| f32::from_bits(w)).enumerate()).find(|(_, v)| *v < 0.0)
        {
            return Err(err(format!(
                "optimizer tensor {name} holds {value} at index {index}, but AdamW's second moments are \
                 never negative: the file is damaged"
            )));
        }
    }
    if has_state {
        for name in tensors.keys().filter(|n| is_parameter(n)) {
            for moment in [adam_m_name(name), adam_v_name(name)] {
                if !tensors.contains_key(&moment) {
                    return Err(err(format!("has optimizer state but no tensor {moment}")));
                }
            }
        }
    }
    Ok(())
}

/// Whether tensor `name` of a checkpoint is a parameter: neither optimizer nor run state.
fn is_parameter(name: &str) -> bool {
    !name.starts_with(OPTIMIZER_PREFIX) && !name.starts_with(STATE_PREFIX)
}

/// Run-state tensors must have a name this build knows and be F32; their shapes depend on the
/// run, so [`Checkpoint::run_state`] checks them against it.
fn check_state_tensors(tensors: &BTreeMap<String, HostTensor>, origin: &str) -> Result<()> {
    let err = |detail: String| checkpoint_err(origin, detail);
    for (name, t) in tensors.iter().filter(|(n, _)| n.starts_with(STATE_PREFIX)) {
        if !STATE_TENSORS.contains(&name.as_str()) {
            return Err(err(format!(
                "tensor {name} is not run state this build knows ({})",
                STATE_TENSORS.join(", ")
            )));
        }
        if t.meta.dtype != DType::F32 {
            return Err(err(format!(
                "run-state tensor {name} has dtype {:?}, run state is F32",
                t.meta.dtype
            )));
        }
    }
    Ok(())
}

#[cfg(not(target_arch = "wasm32"))]
pub use native::{remove_interrupted_save, write_atomically};

/// Files: blocking readback, atomic writes.
#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::fs::{self, File};
    use std::io::Write;
    use std::path::{Path, PathBuf};

    use super::{Checkpoint, Metadata, checkpoint_err, parse_header, parse_metadata};
    use crate::error::{Error, Result};
    use crate::optim::Optimizer;
    use crate::params::ParamStore;

    impl Checkpoint {
        /// Saves `params` (and `optimizer`'s state, if given) to `path`, atomically.
        pub fn save(
            params: &ParamStore,
            optimizer: Option<&Optimizer>,
            metadata: Metadata,
            path: impl AsRef<Path>,
        ) -> Result<()> {
            pollster::block_on(Self::gather(params, optimizer, metadata))?.write(path)
        }

        /// Writes the checkpoint to `path` atomically: an interrupted write never destroys the file
        /// that was there.
        pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
            write_atomically(path.as_ref(), &self.to_bytes()?)
        }

        /// Reads and checks the checkpoint at `path`; [`Checkpoint::restore`] puts it into a model.
        pub fn load(path: impl AsRef<Path>) -> Result<Self> {
            let path = path.as_ref();
            Self::from_bytes(&read(path)?, &path.display().to_string())
        }

        /// The config, training state and tokenizer of the checkpoint at `path`, without a model:
        /// what it takes to build the model that [`Checkpoint::load`] then fills.
        pub fn read_metadata(path: impl AsRef<Path>) -> Result<Metadata> {
            let path = path.as_ref();
            let origin = path.display().to_string();
            let bytes = read(path)?;
            let (_, header) = parse_header(&bytes, &origin)?;
            Ok(parse_metadata(header.metadata().as_ref(), &origin)?.0)
        }
    }

    fn read(path: &Path) -> Result<Vec<u8>> {
        crate::memory::read_regular_file(path).map_err(|e| checkpoint_err(&path.display().to_string(), e))
    }

    /// `<path>.tmp`: where [`write_atomically`] writes before renaming.
    fn temporary(path: &Path) -> PathBuf {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        PathBuf::from(tmp)
    }

    /// Removes `<path>.tmp` if a save was killed before its rename left it behind (`path` itself
    /// is then the previous save, intact). Returns whether there was one.
    pub fn remove_interrupted_save(path: &Path) -> Result<bool> {
        let tmp = temporary(path);
        match fs::remove_file(&tmp) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::Input(format!(
                "removing {} (left by an interrupted save): {e}",
                tmp.display()
            ))),
        }
    }

    /// Writes `bytes` to `<path>.tmp` in the same directory, flushes it to disk, and renames it over
    /// `path`. The rename is atomic, so readers see the old file or the new one, never half of one;
    /// on error the old file is untouched and the temporary file removed.
    pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = temporary(path);
        let written = File::create(&tmp)
            .and_then(|mut file| {
                file.write_all(bytes)?;
                file.sync_all()
            })
            .and_then(|()| fs::rename(&tmp, path));
        if let Err(e) = written {
            // Best effort: the error that matters is the one above.
            let _ = fs::remove_file(&tmp);
            return Err(Error::Input(format!("writing {}: {e}", path.display())));
        }
        // Make the rename itself durable. Not every platform can open a directory to sync it; the
        // new file is already complete, so a failure here loses nothing but durability.
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}
