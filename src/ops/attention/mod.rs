//! Fused multi-head softmax attention, its gradient, and its probabilities for inspection.
//!
//! `out = softmax(q·kᵀ·scale + bias + hidden)·v` per batch entry and head, where
//! - q and out are `[B, H, Lq, Dh]`, k and v `[B, H, Lk, Dh]` (batch, heads, lengths, head
//!   dimension, `Dh ≤ 128`). Lq = Lk in self-attention; they differ in cross-attention (a
//!   decoder's queries, an encoder's keys) and when new queries meet cached keys. Query i sits at
//!   position `i + Lk − Lq` among the keys (the last query with the last key): that is where
//!   causal attention and the relative bias measure from;
//! - the bias (optional, [`AttentionBias`]) is shared by the batch and added to the score of
//!   query i and key j in head h. Either a dense `[H, Lq, Lk]` tensor that the caller built, or
//!   T5's relative bias `table[bucket(offset), h]`, which the kernels look up themselves from the
//!   `[buckets, H]` table and the bucket of each offset, so that it costs memory linear in L
//!   (or, for randomized positions, whose offsets are not j − i, the bucket of each pair);
//! - `key_mask` (optional) is i32 `[B, Lk]`: 1 for a real token, 0 for padding. A padded key is
//!   hidden from every query of its batch entry, as is every key after the query when `causal`;
//! - dropout on the probabilities (optional, training): `out = (Z ∘ softmax(…))·v` with Z 0 or
//!   1/(1 − p) per (b, h, i, j), drawn from the hash of its index, the step's seed (an i32 `[1]`
//!   input, the last) and a salt, as the dropout op's ([`DropMask`]), so that the backward draws
//!   the same Z and nothing `[Lq, Lk]` is stored.
//!
//! The forward also outputs `lse [B, H, Lq]`, each query row's log Σ exp(score) over its visible
//! keys, which the backward reads to recompute the probabilities instead of storing them. A row
//! with no visible key at all (every key padded) outputs 0, has lse = −∞ (the log of an empty
//! sum) and gets zero gradients; it never produces a NaN.
//!
//! On the GPU the forward is one FlashAttention-2 kernel with an online softmax, and the backward
//! is four deterministic passes; see `shaders/attention.wgsl`. Here: the op and its shape rule;
//! `cpu.rs` the CPU reference, blocks of queries in vector lanes (`lanes.rs`) and dk, dv in
//! register tiles of key rows (`tiles.rs`); `backward.rs` the gradient op; `probs.rs` the probabilities;
//! `relative.rs` T5's relative bias and its gradient.

mod backward;
mod cpu;
mod lanes;
mod probs;
mod relative;
#[cfg(test)]
mod tests;
mod tiles;

pub use backward::AttentionBackward;
pub use probs::AttentionProbs;
pub use relative::BucketedBias;

use rayon::prelude::*;

use super::{Arg, Dispatch, GpuKernels, In, Op, Out, VjpArgs, grid, word};
use crate::error::{Error, Result, shape_err};
use crate::graph::{Graph, TensorId};
use crate::kernel::{AdapterKind, uniform};
use crate::ops::dropout::DropMask;
use crate::tensor::{DType, TensorMeta};
use cpu::{Problem, forward_head, forward_scratch};

/// The largest head dimension the GPU kernels hold (eight vec4 registers per thread, four
/// threads per row).
pub const MAX_HEAD_DIM: usize = 128;

/// Query rows (and key rows, in the backward) per workgroup of the tiles kernels; `ROWS` in the
/// shader.
const ROWS: usize = 16;
/// Rows per invocation in the rows kernels, and the widest head they hold (eight vec4s a row).
const THREAD_ROWS: usize = 4;
const ROWS_MAX_DH: usize = 32;

/// The two kernel families of attention.wgsl, which compute the same thing: `Tiles` (64-thread
/// workgroups staging K and V, for GPUs) and `Rows` (each invocation owns four rows whole, for
/// software adapters, where each lane's load costs as much as a register's arithmetic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernels {
    Tiles,
    Rows,
}

impl Kernels {
    fn choose(adapter: AdapterKind, d: &Dims) -> Self {
        match adapter {
            AdapterKind::Software if d.dh <= ROWS_MAX_DH => Self::Rows,
            _ => Self::Tiles,
        }
    }

    /// The entry point of a pass: its tiles kernel, or the same name with `_rows`.
    fn entry(self, tiles: &'static str, rows: &'static str) -> &'static str {
        match self {
            Self::Tiles => tiles,
            Self::Rows => rows,
        }
    }

    /// The workgroups of a pass over `len` rows of each of `slices` (b, h) slices.
    fn grid(self, slices: usize, len: usize) -> [u32; 3] {
        match self {
            Self::Tiles => grid(slices * len.div_ceil(ROWS), 1),
            Self::Rows => grid(slices * len.div_ceil(THREAD_ROWS), 64),
        }
    }
}

uniform! {
    /// The uniform of every attention kernel: forward, backward passes and probabilities.
    pub struct AttnUniform = ATTENTION "Attn" {
        batch: u32,
        heads: u32,
        q_len: u32,
        k_len: u32,
        dh: u32,
        scale: f32,
        causal: u32,
        bias_kind: u32,
        has_mask: u32,
        buckets: u32,
        pair_buckets: u32,
        drop_threshold: u32,
        drop_scale: f32,
        drop_salt: u32,
    }
}

/// What an [`Attention`] adds to the scores, and so which inputs follow q, k, v.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BiasKind {
    None,
    /// One input: the bias f32 `[H, Lq, Lk]`.
    Dense,
    /// Two inputs: the table f32 `[buckets, H]` and the bucket of each offset or pair ([`BucketedBias`]),
    /// the table trained or constant.
    Bucketed {
        trained: bool,
    },
}

impl BiasKind {
    fn inputs(self) -> usize {
        match self {
            Self::None => 0,
            Self::Dense => 1,
            Self::Bucketed { .. } => 2,
        }
    }

    /// `bias_kind` in the shader's uniform.
    fn code(self) -> usize {
        match self {
            Self::None => 0,
            Self::Dense => 1,
            Self::Bucketed { trained: true } => 2,
            Self::Bucketed { trained: false } => 3,
        }
    }
}

/// Attention as a graph op. Inputs: q, k, v, then the bias inputs of `bias` ([`BiasKind`]), then
/// `key_mask` if `has_key_mask`, then the dropout seed if `dropout` (see the module doc for
/// shapes and meaning). Outputs: out `[B, H, Lq, Dh]` and lse `[B, H, Lq]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    /// Query i sees keys 0..=i + Lk − Lq only.
    pub causal: bool,
    /// Multiplies q·kᵀ before the bias is added; usually 1/√Dh.
    pub scale: f32,
    pub bias: BiasKind,
    pub has_key_mask: bool,
    /// Dropout on the probabilities, in training.
    pub dropout: Option<DropMask>,
}

/// The additive bias of [`AttentionOpts`].
#[derive(Clone, Copy, Debug)]
pub enum AttentionBias {
    /// f32 `[H, Lq, Lk]`, built by the caller: memory quadratic in L. TUPE's positional term uses
    /// it; TUPE's lengths are bounded by its learned position table's `max_len`, so that is
    /// bounded too.
    Dense(TensorId),
    /// A table read by bucket inside the kernels (T5's relative bias, ALiBi's distances): memory
    /// linear in L.
    Bucketed(BucketedBias),
}

/// The options of [`Graph::attention`]: `AttentionOpts::new(scale)`, then what the attention
/// also takes, e.g. `AttentionOpts::new(0.25).causal(true).with_key_mask(mask)`.
#[derive(Clone, Copy, Debug)]
pub struct AttentionOpts {
    causal: bool,
    /// The factor on q·k, usually 1/√Dh.
    scale: f32,
    /// An additive bias shared by the batch.
    bias: Option<AttentionBias>,
    /// i32 `[B, Lk]`, 1 for real tokens and 0 for padded keys.
    key_mask: Option<TensorId>,
    /// The step's seed (i32 `[1]`) and the mask of dropout on the probabilities.
    dropout: Option<(TensorId, DropMask)>,
}

impl AttentionOpts {
    /// Attention over every key, q·k scaled by `scale`, no bias, no mask.
    pub fn new(scale: f32) -> Self {
        Self {
            causal: false,
            scale,
            bias: None,
            key_mask: None,
            dropout: None,
        }
    }

    /// Whether each position attends only to itself and earlier ones (a causal LM).
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Adds `bias` (if any) to every score.
    pub fn with_bias(mut self, bias: impl Into<Option<AttentionBias>>) -> Self {
        self.bias = bias.into();
        self
    }

    /// Hides the keys where `key_mask` (if any; i32 `[B, Lk]`) is 0: padding.
    pub fn with_key_mask(mut self, key_mask: impl Into<Option<TensorId>>) -> Self {
        self.key_mask = key_mask.into();
        self
    }

    /// Drops each probability with probability `p` (in [0, 1); none at 0) and scales the rest
    /// by 1 / (1 − p), the mask following `seed` (an i32 `[1]` input, new every step) at site
    /// `salt`, as [`Graph::dropout`]'s.
    pub fn with_dropout(mut self, seed: TensorId, p: f32, salt: u32) -> Result<Self> {
        let mask = DropMask::new("attention", p, salt)?;
        self.dropout = (p > 0.0).then_some((seed, mask));
        Ok(self)
    }
}

/// (batch, heads, query and key lengths, head dimension), and the rows of the relative bias's
/// table (0 without one).
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    h: usize,
    lq: usize,
    lk: usize,
    dh: usize,
    buckets: usize,
    /// The relative bias's buckets are given per (query, key) pair `[Lq, Lk]`, not per offset
    /// (randomized positions, whose offsets are not j − i).
    pair_buckets: bool,
}

impl Dims {
    /// The floating-point operations of one product the size of q·kᵀ over every head: each
    /// query with each key, a multiply-add per head dimension.
    fn products(&self) -> u64 {
        2 * [self.b, self.h, self.lq, self.lk, self.dh]
            .iter()
            .map(|&x| x as u64)
            .product::<u64>()
    }

    /// Query rows.
    fn rows(&self) -> usize {
        self.b * self.h * self.lq
    }

    /// The length of the relative bias's bucket list: one per offset, or one per pair.
    fn bucket_list(&self) -> usize {
        if self.pair_buckets {
            self.lq * self.lk
        } else {
            self.lq + self.lk - 1
        }
    }

    /// Where query i's buckets start in the list: key j's is entry `bucket_row(i) + j`.
    fn bucket_row(&self, i: usize) -> usize {
        if self.pair_buckets {
            i * self.lk
        } else {
            self.lq - 1 - i
        }
    }
}

/// Where the optional inputs sit among an op's inputs.
#[derive(Clone, Copy, Debug)]
struct Slots {
    /// The dense bias, or the relative bias's table.
    bias: Option<usize>,
    /// The relative bias's bucket of each offset.
    buckets: Option<usize>,
    mask: Option<usize>,
    /// The dropout seed.
    seed: Option<usize>,
}

impl Attention {
    fn optional_count(&self) -> usize {
        self.bias.inputs() + self.has_key_mask as usize + self.dropout.is_some() as usize
    }

    /// The optional inputs' indices, given where they start (after q, k and, if present, v).
    fn slots(&self, first: usize) -> Slots {
        let n = self.bias.inputs();
        Slots {
            bias: (n >= 1).then_some(first),
            buckets: matches!(self.bias, BiasKind::Bucketed { .. }).then_some(first + 1),
            mask: self.has_key_mask.then_some(first + n),
            seed: self
                .dropout
                .is_some()
                .then_some(first + n + self.has_key_mask as usize),
        }
    }

    /// The bias, mask and bucket slots of a dispatch: the inputs, or q (input 0) as a placeholder
    /// that the kernels never read because the uniform says the input is absent.
    fn optional_args(&self, first: usize) -> [Arg; 3] {
        let s = self.slots(first);
        [s.bias, s.mask, s.buckets].map(|i| Arg::In(i.unwrap_or(0)))
    }

    /// The dimensions of checked inputs (q, k first, the optional ones from `first`).
    fn dims(&self, inputs: &[&TensorMeta], first: usize) -> Dims {
        let s = &inputs[0].shape;
        Dims {
            b: s[0],
            h: s[1],
            lq: s[2],
            lk: inputs[1].shape[2],
            dh: s[3],
            // The table `[buckets, H]` is the first optional input.
            buckets: match self.bias {
                BiasKind::Bucketed { .. } => inputs[first].shape[0],
                _ => 0,
            },
            pair_buckets: match self.bias {
                BiasKind::Bucketed { .. } => inputs[first + 1].rank() == 2,
                _ => false,
            },
        }
    }

    fn uniform(&self, d: Dims) -> AttnUniform {
        AttnUniform {
            batch: word(d.b),
            heads: word(d.h),
            q_len: word(d.lq),
            k_len: word(d.lk),
            dh: word(d.dh),
            scale: self.scale,
            causal: u32::from(self.causal),
            bias_kind: word(self.bias.code()),
            has_mask: u32::from(self.has_key_mask),
            buckets: word(d.buckets),
            pair_buckets: u32::from(d.pair_buckets),
            drop_threshold: self.dropout.map_or(0, |m| m.threshold),
            drop_scale: self.dropout.map_or(1.0, |m| m.scale),
            drop_salt: self.dropout.map_or(0, |m| m.salt),
        }
    }

    /// Checks q and k (and v when given) and the optional inputs that start after them; returns
    /// the dimensions, or an error that names the op and every shape.
    fn check(&self, op: &'static str, inputs: &[&TensorMeta], with_v: bool) -> Result<Dims> {
        let first = if with_v { 3 } else { 2 };
        let expected = first + self.optional_count();
        let slots = self.slots(first);
        let listed = |inputs: &[&TensorMeta]| {
            let bias = match self.bias {
                BiasKind::Bucketed { .. } => "table",
                _ => "bias",
            };
            let named = [("q", Some(0)), ("k", Some(1)), ("v", with_v.then_some(2))]
                .into_iter()
                .chain([
                    (bias, slots.bias),
                    ("buckets", slots.buckets),
                    ("key_mask", slots.mask),
                    ("seed", slots.seed),
                ]);
            let parts: Vec<String> = named
                .filter_map(|(name, i)| Some(format!("{name} {}", inputs.get(i?)?)))
                .collect();
            parts.join(", ")
        };
        if inputs.len() != expected {
            return shape_err(
                op,
                format!(
                    "needs {expected} inputs, got {}: {}",
                    inputs.len(),
                    listed(inputs)
                ),
            );
        }
        let (q, k) = (inputs[0], inputs[1]);
        // k (and v) may differ from q in length only.
        let like_q = |m: &TensorMeta| {
            m.dtype == DType::F32
                && m.rank() == 4
                && m.shape[..2] == q.shape[..2]
                && m.shape[3] == q.shape[3]
                && m.shape[2] > 0
        };
        let fits = like_q(q)
            && q.shape.iter().all(|&d| d > 0)
            && q.shape[3] <= MAX_HEAD_DIM
            && like_q(k)
            && inputs[1..first].iter().all(|m| *m == k);
        if !fits {
            return shape_err(
                op,
                format!(
                    "needs q f32 [B, H, Lq, Dh] and k{} f32 [B, H, Lk, Dh], non-empty, with Dh ≤ {MAX_HEAD_DIM}; got {}",
                    if with_v { ", v" } else { "" },
                    listed(inputs)
                ),
            );
        }
        let (h, lq, lk) = (q.shape[1], q.shape[2], k.shape[2]);
        match self.bias {
            BiasKind::None => {}
            BiasKind::Dense => {
                if *inputs[first] != TensorMeta::f32(&[h, lq, lk]) {
                    return shape_err(
                        op,
                        format!(
                            "needs bias f32 [H, Lq, Lk] = [{h}, {lq}, {lk}]; got {}",
                            listed(inputs)
                        ),
                    );
                }
            }
            BiasKind::Bucketed { .. } => relative::check(inputs[first], inputs[first + 1], h, lq, lk)
                .or_else(|e| shape_err(op, format!("{e}; got {}", listed(inputs))))?,
        }
        if let Some(i) = slots.mask
            && *inputs[i] != TensorMeta::i32(&[q.shape[0], lk])
        {
            return shape_err(
                op,
                format!(
                    "needs key_mask i32 [B, Lk] = [{}, {lk}]; got {}",
                    q.shape[0],
                    listed(inputs)
                ),
            );
        }
        if let Some(i) = slots.seed
            && *inputs[i] != TensorMeta::i32(&[1])
        {
            return shape_err(
                op,
                format!("needs the dropout seed i32 [1]; got {}", listed(inputs)),
            );
        }
        if !self.scale.is_finite() {
            return shape_err(op, format!("needs a finite scale, got {}", self.scale));
        }
        Ok(self.dims(inputs, first))
    }
}

impl Op for Attention {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn infer(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>> {
        let d = self.check(self.name(), inputs, true)?;
        Ok(vec![inputs[0].clone(), TensorMeta::f32(&[d.b, d.h, d.lq])])
    }

    fn cpu(&self, inputs: &[In], outputs: &mut [Out]) {
        let pr = Problem::new(*self, inputs, true);
        let Dims { lq, dh, .. } = pr.d;
        let [out, lse] = outputs else {
            unreachable!("attention has two outputs")
        };
        // One task per (b, h).
        out.data
            .par_chunks_mut(lq * dh)
            .zip(lse.data.par_chunks_mut(lq))
            .enumerate()
            .for_each_init(
                || forward_scratch(pr.d),
                |scratch, (bh, (out, lse))| forward_head(&pr, bh, scratch, out, lse),
            );
    }

    /// q·kᵀ and p·v, every key of every query counted (a causal mask's hidden half too).
    fn flops(&self, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> Option<u64> {
        Some(2 * self.dims(inputs, 3).products())
    }

    fn gpu(&self, adapter: AdapterKind, inputs: &[&TensorMeta], _outputs: &[&TensorMeta]) -> GpuKernels {
        let d = self.dims(inputs, 3);
        let [bias, mask, buckets] = self.optional_args(3);
        let kernels = Kernels::choose(adapter, &d);
        let mut args = vec![
            Arg::In(0),
            Arg::In(1),
            Arg::In(2),
            bias,
            mask,
            buckets,
            Arg::Out(0),
            Arg::Out(1),
        ];
        // Only the dropout entries bind the seed: the others keep to WebGPU's eight buffers.
        let entry = match self.slots(3).seed {
            Some(seed) => {
                args.push(Arg::In(seed));
                kernels.entry("attention_forward_dropout", "attention_forward_rows_dropout")
            }
            None => kernels.entry("attention_forward", "attention_forward_rows"),
        };
        GpuKernels::single(Dispatch::new(
            entry,
            &self.uniform(d),
            args,
            kernels.grid(d.b * d.h, d.lq),
        ))
    }

    fn vjp(&self, g: &mut Graph, args: &VjpArgs) -> Result<Vec<Option<TensorId>>> {
        if args.grads[1].is_some() {
            return Err(Error::Graph(
                "attention: lse is a cache for the backward and has no gradient".into(),
            ));
        }
        let Some(dout) = args.grads[0] else {
            return Ok(vec![None; args.inputs.len()]);
        };
        let mut inputs = args.inputs.to_vec();
        inputs.extend([args.outputs[0], args.outputs[1], dout]);
        let grads = g.apply(AttentionBackward(*self), &inputs)?;
        let mut result: Vec<Option<TensorId>> = grads[..3].iter().copied().map(Some).collect();
        match self.bias {
            BiasKind::None => {}
            BiasKind::Dense => result.push(Some(grads[3])),
            BiasKind::Bucketed { trained: true } => {
                // The bucket ids are integers: no gradient.
                result.extend([Some(relative::table_gradient(g, grads[3])?), None]);
            }
            BiasKind::Bucketed { trained: false } => result.extend([None, None]),
        }
        // The key mask and the seed are integers: no gradient.
        result.extend(std::iter::repeat_n(
            None,
            self.has_key_mask as usize + self.dropout.is_some() as usize,
        ));
        Ok(result)
    }
}

impl AttentionOpts {
    fn op(&self) -> Attention {
        Attention {
            causal: self.causal,
            scale: self.scale,
            bias: match self.bias {
                None => BiasKind::None,
                Some(AttentionBias::Dense(_)) => BiasKind::Dense,
                Some(AttentionBias::Bucketed(bias)) => BiasKind::Bucketed {
                    trained: bias.trained,
                },
            },
            has_key_mask: self.key_mask.is_some(),
            dropout: self.dropout.map(|(_, mask)| mask),
        }
    }

    fn optional_inputs(&self) -> Vec<TensorId> {
        let bias = match self.bias {
            None => vec![],
            Some(AttentionBias::Dense(bias)) => vec![bias],
            Some(AttentionBias::Bucketed(r)) => vec![r.table, r.buckets],
        };
        let seed = self.dropout.map(|(seed, _)| seed);
        bias.into_iter().chain(self.key_mask).chain(seed).collect()
    }
}

impl Graph {
    /// Multi-head attention of q `[B, H, Lq, Dh]` over k, v `[B, H, Lk, Dh]`; returns out
    /// `[B, H, Lq, Dh]`. See [`Attention`] and the module doc for the options.
    pub fn attention(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        opts: AttentionOpts,
    ) -> Result<TensorId> {
        let inputs: Vec<TensorId> = [q, k, v].into_iter().chain(opts.optional_inputs()).collect();
        Ok(self.apply(opts.op(), &inputs)?[0])
    }

    /// The probabilities `[B, H, Lq, Lk]` that [`Graph::attention`] with the same options would
    /// use (before any dropout); for inspection, with no gradient.
    pub fn attention_probs(&mut self, q: TensorId, k: TensorId, opts: AttentionOpts) -> Result<TensorId> {
        let opts = AttentionOpts {
            dropout: None,
            ..opts
        };
        let inputs: Vec<TensorId> = [q, k].into_iter().chain(opts.optional_inputs()).collect();
        self.apply1(AttentionProbs(opts.op()), &inputs)
    }
}
