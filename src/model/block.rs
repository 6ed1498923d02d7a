//! One block of the model: the pre-norm attention+FFN sub-block `F`, stepped as a residual
//! (Euler) block or as a Runge-Kutta block of the ODE Transformer (see [`Block`]).
//!
//! `F(y) = a + Drop(FFN(LN2(y + a)))` with `a = Drop(Attn(LN1(y)))`, so that the residual block
//! `y + F(y)` is the usual pre-norm block. A seq2seq decoder block also attends to the encoder's
//! output: `a = s + Drop(Cross(LN_cross(y + s)))` with `s = Drop(Attn(LN1(y)))`. The parameters are
//! declared once per block and every stage evaluates `F` with them. The stage inputs (`y + ½F1`,
//! …) and the block's output are each one `rk_combine` (or `rk_gated`) node, whose backward is one
//! kernel too.
//!
//! A stage's value `k_i` is `F(y_i)` (the paper's form) or, with `rk_stage = "layer"`, the whole
//! layer `G(y_i) = y_i + F(y_i)` (the authors' code); the combinations are the same either way.
//!
//! With `norm = "post"` a block is the post-LN residual block instead (BERT's, fairseq's: the
//! same parameters, its layer norms after each residual add).

use super::config::{Activation, Block, Coefficients, ModelConfig, Norm, RkStage};
use super::posenc::AttentionTerms;
use crate::error::Result;
use crate::graph::{Graph, Init, TensorId};
use crate::ops::attention::AttentionOpts;

/// Layer normalisation's epsilon (PyTorch's default).
pub const LN_EPS: f32 = 1e-5;

/// What every block of one stack (the model's, or a seq2seq model's encoder or decoder) shares.
pub(super) struct BlockInputs {
    /// How each block steps (the config's `block`, or a decoder's `decoder_block`).
    pub step: Block,
    /// The number of blocks in the stack (the residual projections' init and the dropout salts
    /// depend on it).
    pub layers: usize,
    /// Each position attends only to itself and earlier ones (the causal LM, a decoder).
    pub causal: bool,
    pub key_mask: Option<TensorId>,
    /// What position adds inside every block's attention (its `scale` is `attention_scale`'s).
    pub attention: AttentionTerms,
    /// The factor on q·k: the encoding's, or the config's `word_scale`.
    pub attention_scale: f32,
    /// The step's seed and each site's drop probability, in training graphs of a model with
    /// dropout.
    pub dropout: Option<Dropouts>,
    /// What each Runge-Kutta stage returns (the config's `rk_stage`).
    pub rk_stage: RkStage,
    /// The stack's dropout salts start here, so that no two stacks of a graph share a mask.
    pub salt_base: u32,
    /// Probed graphs ([`super::GraphOptions::probed`]): each block also outputs its attention
    /// probabilities ([`BlockOutput::attention_probs`]).
    pub probed: bool,
    /// A decoder's attention to the encoder's output; `None` in every other stack.
    pub cross: Option<CrossInputs>,
    /// Incremental decoding: the keys and values `[B, H, t, Dh]` of the earlier positions, for
    /// each block and stage (`cache[layer][stage]`), put before this step's own; empty when the
    /// graph sees the whole sequence.
    pub cache: Vec<Vec<(TensorId, TensorId)>>,
}

/// A decoder's cross-attention inputs.
pub(super) struct CrossInputs {
    /// Per block, the encoder output's keys and values `[B, H, S, Dh]` ([`cross_keys_values`]).
    pub keys_values: Vec<(TensorId, TensorId)>,
    /// i32 `[B, S]`: 1 for a source token, 0 for padding.
    pub key_mask: TensorId,
    /// `[T, D]` per block: the q biases of FLOATER's compatible form, in place of the static
    /// bias; empty when none.
    pub q_bias: Vec<TensorId>,
}

/// The dropout of a training graph: the step's seed input (i32 `[1]`, see
/// [`super::ModelGraph::set_dropout_seed`]) and each site's probability.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dropouts {
    pub seed: TensorId,
    /// The embeddings and every sub-block's outputs (the config's `dropout`).
    pub residual: f32,
    /// The FFN's activations (`activation_dropout`).
    pub activation: f32,
    /// The attention probabilities (`attention_dropout`).
    pub attention: f32,
}

impl Dropouts {
    /// The seed input and the config's probabilities, in a training graph of a model with any
    /// dropout; `None` otherwise (no seed input either).
    pub fn declare(g: &mut Graph, c: &ModelConfig, training: bool) -> Option<Self> {
        let any = c.dropout > 0.0 || c.activation_dropout > 0.0 || c.attention_dropout > 0.0;
        (training && any).then(|| Self {
            seed: g.input("dropout_seed", crate::tensor::TensorMeta::i32(&[1])),
            residual: c.dropout,
            activation: c.activation_dropout,
            attention: c.attention_dropout,
        })
    }

    /// `x` through dropout of probability `p` (itself when `p` is 0).
    pub fn apply(&self, g: &mut Graph, x: TensorId, p: f32, salt: u32) -> Result<TensorId> {
        if p > 0.0 {
            g.dropout(x, self.seed, p, salt)
        } else {
            Ok(x)
        }
    }
}

/// What [`block`] adds to a graph.
pub(super) struct BlockOutput {
    pub out: TensorId,
    /// In probed graphs, the attention probabilities `[B, H, L, L]` of the block's first stage
    /// (the one that sees its input; a residual block has only that one).
    pub attention_probs: Option<TensorId>,
    /// In probed decoder graphs, the first stage's cross-attention probabilities `[B, H, T, S]`.
    pub cross_probs: Option<TensorId>,
    /// Every stage's self-attention keys and values `[B, H, L, Dh]` (this step's own, without
    /// the cache): what incremental decoding keeps for the next step.
    pub keys_values: Vec<(TensorId, TensorId)>,
}

/// `x · W + b` with `W [inputs, outputs]` (PyTorch's `nn.Linear.weight` is its transpose), or
/// `x · W` without a bias.
pub(super) struct Linear {
    weight: TensorId,
    bias: Option<TensorId>,
}

impl Linear {
    /// Declares `{prefix}.weight` (initialised `weight_init`) and a zero `{prefix}.bias`.
    pub fn declare(
        g: &mut Graph,
        prefix: &str,
        inputs: usize,
        outputs: usize,
        weight_init: Init,
    ) -> Result<Self> {
        let mut linear = Self::declare_without_bias(g, prefix, inputs, outputs, weight_init)?;
        linear.bias = Some(g.param(&format!("{prefix}.bias"), &[outputs], Init::Zeros)?);
        Ok(linear)
    }

    /// Declares `{prefix}.weight` only.
    pub fn declare_without_bias(
        g: &mut Graph,
        prefix: &str,
        inputs: usize,
        outputs: usize,
        weight_init: Init,
    ) -> Result<Self> {
        Ok(Self {
            weight: g.param(&format!("{prefix}.weight"), &[inputs, outputs], weight_init)?,
            bias: None,
        })
    }

    pub fn apply(&self, g: &mut Graph, x: TensorId) -> Result<TensorId> {
        match self.bias {
            Some(bias) => g.matmul_bias(x, self.weight, bias),
            None => g.matmul(x, self.weight),
        }
    }

    /// `activation` of the layer's output, applied as the product writes it where the layer
    /// has a bias.
    pub fn apply_activated(&self, g: &mut Graph, x: TensorId, activation: Activation) -> Result<TensorId> {
        match self.bias {
            Some(bias) => Ok(g.matmul_bias_activated(x, self.weight, bias, activation)?.1),
            None => {
                let h = g.matmul(x, self.weight)?;
                g.activate(activation, h)
            }
        }
    }
}

/// A layer norm's `{prefix}.gain` (ones) and `{prefix}.bias` (zeros).
pub(super) struct LayerNorm {
    gain: TensorId,
    bias: TensorId,
}

impl LayerNorm {
    pub fn declare(g: &mut Graph, prefix: &str, d: usize) -> Result<Self> {
        Ok(Self {
            gain: g.param(&format!("{prefix}.gain"), &[d], Init::Ones)?,
            bias: g.param(&format!("{prefix}.bias"), &[d], Init::Zeros)?,
        })
    }

    pub fn apply(&self, g: &mut Graph, x: TensorId) -> Result<TensorId> {
        g.layernorm(x, self.gain, self.bias, LN_EPS)
    }

    /// The residual sum `x + r` and its norm, in one op.
    pub fn apply_to_sum(&self, g: &mut Graph, x: TensorId, r: TensorId) -> Result<(TensorId, TensorId)> {
        g.add_layernorm(x, r, self.gain, self.bias, LN_EPS)
    }
}

/// The parameters of block `layer`, shared by all its stages.
struct BlockParams {
    layer: usize,
    ln1: LayerNorm,
    qkv: Linear,
    out: Linear,
    cross: Option<CrossParams>,
    ln2: LayerNorm,
    up: Linear,
    down: Linear,
}

/// A decoder block's cross-attention: its layer norm and q and output projections (the k/v
/// projection of the encoder's output is [`cross_keys_values`]').
struct CrossParams {
    ln: LayerNorm,
    q: Linear,
    out: Linear,
}

/// An attention's input projection (q|k|v, a cross-attention's q or k|v), initialised as the
/// config's scheme says, with a static bias unless the position encoding supplies one
/// (FLOATER's compatible form).
fn attention_in(
    g: &mut Graph,
    c: &ModelConfig,
    prefix: &str,
    outputs: usize,
    bias_given: bool,
) -> Result<Linear> {
    let (inputs, init) = (c.d_model, c.init_scheme().attention_in(c.d_model));
    if bias_given || !c.has_attention_biases() {
        Linear::declare_without_bias(g, prefix, inputs, outputs, init)
    } else {
        Linear::declare(g, prefix, inputs, outputs, init)
    }
}

/// An attention's output projection, with a static bias unless the config has none.
fn attention_out(g: &mut Graph, c: &ModelConfig, prefix: &str, init: Init) -> Result<Linear> {
    let d = c.d_model;
    if c.has_attention_biases() {
        Linear::declare(g, prefix, d, d, init)
    } else {
        Linear::declare_without_bias(g, prefix, d, d, init)
    }
}

impl BlockParams {
    fn declare(g: &mut Graph, c: &ModelConfig, layer: usize, shared: &BlockInputs) -> Result<Self> {
        let prefix = format!("blocks.{layer}");
        let d = c.d_model;
        let scheme = c.init_scheme();
        let out_init = scheme.into_residual(d, d, shared.layers);
        let ln1 = LayerNorm::declare(g, &format!("{prefix}.ln1"), d)?;
        let qkv = attention_in(
            g,
            c,
            &format!("{prefix}.attn.qkv"),
            3 * d,
            !shared.attention.qkv_bias.is_empty(),
        )?;
        let out = attention_out(g, c, &format!("{prefix}.attn.out"), out_init)?;
        let cross = match &shared.cross {
            Some(cross) => Some(CrossParams {
                ln: LayerNorm::declare(g, &format!("{prefix}.ln_cross"), d)?,
                q: attention_in(g, c, &format!("{prefix}.cross.q"), d, !cross.q_bias.is_empty())?,
                out: attention_out(g, c, &format!("{prefix}.cross.out"), out_init)?,
            }),
            None => None,
        };
        Ok(Self {
            layer,
            ln1,
            qkv,
            out,
            cross,
            ln2: LayerNorm::declare(g, &format!("{prefix}.ln2"), d)?,
            up: Linear::declare(g, &format!("{prefix}.ffn.up"), d, c.ffn, scheme.ffn_up(d, c.ffn))?,
            down: Linear::declare(
                g,
                &format!("{prefix}.ffn.down"),
                c.ffn,
                d,
                scheme.into_residual(c.ffn, d, shared.layers),
            )?,
        })
    }
}

/// The keys and values `[B, H, S, Dh]` of decoder block `layer`'s cross-attention, from the
/// encoder's output `memory [B, S, D]`: one `[D, 2D]` projection `blocks.{layer}.cross.kv` (k
/// columns, then v), its bias static or FLOATER's `[S, 2D]` source-position biases.
pub(super) fn cross_keys_values(
    g: &mut Graph,
    c: &ModelConfig,
    layer: usize,
    memory: TensorId,
    kv_bias: Option<TensorId>,
) -> Result<(TensorId, TensorId)> {
    let kv = attention_in(
        g,
        c,
        &format!("blocks.{layer}.cross.kv"),
        2 * c.d_model,
        kv_bias.is_some(),
    )?;
    let mut kv = kv.apply(g, memory)?;
    if let Some(bias) = kv_bias {
        kv = g.add(kv, bias)?;
    }
    let [k, v] = g.split_heads(kv, 2, c.heads)?[..] else {
        unreachable!("split_heads returns one tensor per part")
    };
    Ok((k, v))
}

/// One evaluation of the sub-block: `a = Drop(Attn(LN1 y))` (a decoder's: plus its
/// cross-attention) and `h = Drop(FFN(LN2(y + a)))`.
struct Stage {
    /// `y + a`.
    mid: TensorId,
    a: TensorId,
    h: TensorId,
    /// The attention probabilities, where the stage was asked for them.
    probs: Option<TensorId>,
    cross_probs: Option<TensorId>,
    /// The self-attention's own keys and values.
    keys_values: (TensorId, TensorId),
}

/// The block's output for input `x` (the position term, if it goes to every block, already
/// added).
pub(super) fn block(
    g: &mut Graph,
    c: &ModelConfig,
    x: TensorId,
    layer: usize,
    shared: &BlockInputs,
) -> Result<BlockOutput> {
    let p = BlockParams::declare(g, c, layer, shared)?;
    if c.norm == Norm::Post {
        return post_norm_block(g, c, &p, x, shared);
    }
    let mut keys_values = Vec::new();
    let mut f = |g: &mut Graph, y: TensorId, stage: usize| -> Result<TensorId> {
        let s = sub_block(g, c, &p, y, stage, shared)?;
        keys_values.push(s.keys_values);
        s.value(g, shared.rk_stage)
    };
    // Every kind begins with a stage on the block's input: the one probed.
    let first = sub_block(g, c, &p, x, 0, shared)?;
    let out = match shared.step {
        // (y + a) + h, as the pre-norm block has always been computed.
        Block::Residual => g.add(first.mid, first.h),
        Block::Rk2 { gamma } => {
            let f1 = first.value(g, shared.rk_stage)?;
            let y2 = g.rk_combine(x, &[(1.0, f1)])?;
            let f2 = f(g, y2, 1)?;
            g.rk_combine(x, &[(gamma[0], f1), (gamma[1], f2)])
        }
        Block::Rk2Learned { gamma, coefficients } => {
            let f1 = first.value(g, shared.rk_stage)?;
            let y2 = g.rk_combine(x, &[(1.0, f1)])?;
            let f2 = f(g, y2, 1)?;
            let shape = match coefficients {
                Coefficients::Scalar => 1,
                Coefficients::Channel => c.d_model,
            };
            let mut out = x;
            for (i, (start, stage)) in gamma.into_iter().zip([f1, f2]).enumerate() {
                let name = format!("alpha{}", i + 1);
                let alpha = rk_param(g, layer, shared.rk_stage, &name, &[shape], Init::Constant(start))?;
                let term = g.mul(stage, alpha)?;
                out = g.add(out, term)?;
            }
            Ok(out)
        }
        Block::Rk2Gated => {
            let f1 = first.value(g, shared.rk_stage)?;
            let y2 = g.rk_combine(x, &[(1.0, f1)])?;
            let f2 = f(g, y2, 1)?;
            let init = gate_init(c.d_model, shared.rk_stage);
            let weight = rk_param(
                g,
                layer,
                shared.rk_stage,
                "gate.weight",
                &[2 * c.d_model, 1],
                init,
            )?;
            let bias = rk_param(g, layer, shared.rk_stage, "gate.bias", &[1], Init::Zeros)?;
            let gate = Linear {
                weight,
                bias: Some(bias),
            };
            let both = g.concat(&[f1, f2], 2)?;
            let gate = gate.apply(g, both)?;
            let gate = g.sigmoid(gate)?;
            g.rk_gated(x, f1, f2, gate)
        }
        Block::Rk4 => {
            let f1 = first.value(g, shared.rk_stage)?;
            let y2 = g.rk_combine(x, &[(0.5, f1)])?;
            let f2 = f(g, y2, 1)?;
            let y3 = g.rk_combine(x, &[(0.5, f2)])?;
            let f3 = f(g, y3, 2)?;
            let y4 = g.rk_combine(x, &[(1.0, f3)])?;
            let f4 = f(g, y4, 3)?;
            let sixth = 1.0 / 6.0;
            g.rk_combine(
                x,
                &[(sixth, f1), (2.0 * sixth, f2), (2.0 * sixth, f3), (sixth, f4)],
            )
        }
    }?;
    keys_values.insert(0, first.keys_values);
    Ok(BlockOutput {
        out,
        attention_probs: first.probs,
        cross_probs: first.cross_probs,
        keys_values,
    })
}

/// A Runge-Kutta block's own parameter (the gate, learned coefficients): block `layer`'s
/// `blocks.{layer}.{name}` in the paper's form; in the authors' code one module of the stack
/// (`gate_linear`, `alpha`) serves every block, so there it is the stack's `rk.{name}`, shared.
fn rk_param(
    g: &mut Graph,
    layer: usize,
    stage: RkStage,
    name: &str,
    shape: &[usize],
    init: Init,
) -> Result<TensorId> {
    match stage {
        RkStage::SubBlock => g.param(&format!("blocks.{layer}.{name}"), shape, init),
        RkStage::Layer => g.shared_param(&format!("rk.{name}"), shape, init),
    }
}

/// The gate's weight `[2D, 1]` (its bias starts at 0). The paper's form starts it at 0: g = ½
/// everywhere, RK2 with γ = ½, ½ (the paper gives no init). The authors' code builds it with
/// fairseq's `Linear`: Xavier-uniform, bound √(6 / (2D + 1)).
fn gate_init(d: usize, stage: RkStage) -> Init {
    match stage {
        RkStage::SubBlock => Init::Zeros,
        RkStage::Layer => Init::Uniform((6.0 / (2 * d + 1) as f32).sqrt()),
    }
}

impl Stage {
    /// The stage's `k`: `F(y) = a + h`, or the whole layer `G(y) = (y + a) + h`.
    fn value(&self, g: &mut Graph, form: RkStage) -> Result<TensorId> {
        match form {
            RkStage::SubBlock => g.add(self.a, self.h),
            RkStage::Layer => g.add(self.mid, self.h),
        }
    }
}

/// The attention and FFN outputs of stage `stage` (from 0) on input `y`.
fn sub_block(
    g: &mut Graph,
    c: &ModelConfig,
    p: &BlockParams,
    y: TensorId,
    stage: usize,
    shared: &BlockInputs,
) -> Result<Stage> {
    let probed = shared.probed && stage == 0;
    let salt = |site| shared.salt_base + dropout_salt(shared.layers, p.layer, stage, site);
    let h = p.ln1.apply(g, y)?;
    let attended = self_attention(g, c, p, h, stage, shared, probed, salt(1))?;
    let mut a = dropout(g, attended.out, shared, salt(1))?;
    let mut cross_probs = None;
    // Each residual sum is formed by the norm that reads it.
    let (mid, normed) = match (&p.cross, &shared.cross) {
        (Some(params), Some(cross)) => {
            let (mid, h) = params.ln.apply_to_sum(g, y, a)?;
            let (h, probs) = cross_attention(g, c, params, p.layer, h, cross, shared, probed, salt(1))?;
            cross_probs = probs;
            let h = dropout(g, h, shared, salt(1) + site_offset(shared.layers, CROSS_SITES))?;
            a = g.add(a, h)?;
            p.ln2.apply_to_sum(g, mid, h)?
        }
        _ => p.ln2.apply_to_sum(g, y, a)?,
    };
    let h = feed_forward(g, c, p, normed, shared, salt(2))?;
    Ok(Stage {
        mid,
        a,
        h,
        probs: attended.probs,
        cross_probs,
        keys_values: attended.keys_values,
    })
}

/// `Drop(down(Drop(act(up(x)))))` with the config's activation, the FFN output's site salted
/// `salt` and its activations' from that site's range.
fn feed_forward(
    g: &mut Graph,
    c: &ModelConfig,
    p: &BlockParams,
    x: TensorId,
    shared: &BlockInputs,
    salt: u32,
) -> Result<TensorId> {
    let mut h = p.up.apply_activated(g, x, c.activation)?;
    if let Some(d) = &shared.dropout {
        let salt = salt + site_offset(shared.layers, ACTIVATION_SITES);
        h = d.apply(g, h, d.activation, salt)?;
    }
    let h = p.down.apply(g, h)?;
    dropout(g, h, shared, salt)
}

/// The post-LN block ([`Norm::Post`]): `m = LN1(y + Drop(Attn(y)))`, a decoder's
/// `m = LN_cross(m + Drop(Cross(m)))` (fairseq's decoder layer), `y' = LN2(m + Drop(FFN(m)))`,
/// with the pre-norm residual block's dropout salts.
fn post_norm_block(
    g: &mut Graph,
    c: &ModelConfig,
    p: &BlockParams,
    y: TensorId,
    shared: &BlockInputs,
) -> Result<BlockOutput> {
    let salt = |site| shared.salt_base + dropout_salt(shared.layers, p.layer, 0, site);
    let attended = self_attention(g, c, p, y, 0, shared, shared.probed, salt(1))?;
    let a = dropout(g, attended.out, shared, salt(1))?;
    let (_, mut mid) = p.ln1.apply_to_sum(g, y, a)?;
    let mut cross_probs = None;
    if let (Some(params), Some(cross)) = (&p.cross, &shared.cross) {
        let (h, probs) = cross_attention(g, c, params, p.layer, mid, cross, shared, shared.probed, salt(1))?;
        cross_probs = probs;
        let h = dropout(g, h, shared, salt(1) + site_offset(shared.layers, CROSS_SITES))?;
        mid = params.ln.apply_to_sum(g, mid, h)?.1;
    }
    let h = feed_forward(g, c, p, mid, shared, salt(2))?;
    let (_, out) = p.ln2.apply_to_sum(g, mid, h)?;
    Ok(BlockOutput {
        out,
        attention_probs: attended.probs,
        cross_probs,
        keys_values: vec![attended.keys_values],
    })
}

/// A self-attention's output `[B, L, D]`, its probabilities if asked, and its own keys and
/// values.
struct Attended {
    out: TensorId,
    probs: Option<TensorId>,
    keys_values: (TensorId, TensorId),
}

/// Multi-head self-attention of `x [B, L, D]`: one fused q|k|v projection, heads split to
/// `[B, H, L, Dh]`, the cached keys and values of earlier positions (incremental decoding) put
/// first, the fused attention op (its probabilities' dropout salted from the stage's attention
/// site `salt`), heads merged, the output projection.
#[allow(clippy::too_many_arguments)]
fn self_attention(
    g: &mut Graph,
    c: &ModelConfig,
    p: &BlockParams,
    x: TensorId,
    stage: usize,
    shared: &BlockInputs,
    probed: bool,
    salt: u32,
) -> Result<Attended> {
    let mut qkv = p.qkv.apply(g, x)?;
    if let Some(&bias) = shared.attention.qkv_bias.get(p.layer) {
        qkv = g.add(qkv, bias)?;
    }
    let [mut q, mut k, v] = g.split_heads(qkv, 3, c.heads)?[..] else {
        unreachable!("split_heads returns one tensor per part")
    };
    if let Some(table) = shared.attention.rope {
        q = g.rope(q, table)?;
        k = g.rope(k, table)?;
    }
    let (all_k, all_v) = match shared.cache.get(p.layer).and_then(|stages| stages.get(stage)) {
        Some(&(cached_k, cached_v)) => (g.concat(&[cached_k, k], 2)?, g.concat(&[cached_v, v], 2)?),
        None => (k, v),
    };
    let opts = AttentionOpts::new(shared.attention_scale)
        .causal(shared.causal)
        .with_bias(shared.attention.bias)
        .with_key_mask(shared.key_mask);
    let opts = probability_dropout(opts, shared, salt + site_offset(shared.layers, ATTENTION_SITES))?;
    let probs = probed.then(|| g.attention_probs(q, all_k, opts)).transpose()?;
    let out = g.attention(q, all_k, all_v, opts)?;
    let out = g.merge_heads(&[out])?;
    Ok(Attended {
        out: p.out.apply(g, out)?,
        probs,
        keys_values: (k, v),
    })
}

/// A decoder block's attention from `x [B, T, D]` to the encoder's output, at the usual scale
/// 1/√Dh and with no position bias (the positions are in the queries and, through the encoder,
/// in the keys), source padding hidden.
#[allow(clippy::too_many_arguments)]
fn cross_attention(
    g: &mut Graph,
    c: &ModelConfig,
    params: &CrossParams,
    layer: usize,
    x: TensorId,
    cross: &CrossInputs,
    shared: &BlockInputs,
    probed: bool,
    salt: u32,
) -> Result<(TensorId, Option<TensorId>)> {
    let mut q = params.q.apply(g, x)?;
    if let Some(&bias) = cross.q_bias.get(layer) {
        q = g.add(q, bias)?;
    }
    let q = g.split_heads(q, 1, c.heads)?[0];
    let (k, v) = cross.keys_values[layer];
    let opts = AttentionOpts::new(1.0 / (c.head_dim() as f32).sqrt()).with_key_mask(Some(cross.key_mask));
    let opts = probability_dropout(
        opts,
        shared,
        salt + site_offset(shared.layers, CROSS_ATTENTION_SITES),
    )?;
    let probs = probed.then(|| g.attention_probs(q, k, opts)).transpose()?;
    let out = g.attention(q, k, v, opts)?;
    let out = g.merge_heads(&[out])?;
    Ok((params.out.apply(g, out)?, probs))
}

/// The dropout salt of the embeddings; see [`dropout_salt`] for the blocks'.
pub(super) const EMBEDDING_DROPOUT_SALT: u32 = 0;

/// The salt of `site` (1 = attention, 2 = FFN output) in stage `stage` of block `layer`:
/// `2·(stage·layers + layer) + site`. Stage 0 keeps the residual block's salts `2·layer + 1` and
/// `2·layer + 2`, and no two sites of a graph share one, so each draws its own mask.
fn dropout_salt(layers: usize, layer: usize, stage: usize, site: usize) -> u32 {
    (2 * (stage * layers + layer) + site) as u32
}

/// The dropout sites beyond a stage's attention and FFN outputs, each a range of salts above
/// theirs: a decoder's cross-attention (on the attention site's salt) and the FFN's
/// activations (on the FFN output's).
const CROSS_SITES: u32 = 1;
const ACTIVATION_SITES: u32 = 2;
/// The self- and cross-attention's probabilities (on the attention site's salt).
const ATTENTION_SITES: u32 = 3;
const CROSS_ATTENTION_SITES: u32 = 4;

/// How far the salts of sites `range` sit above the self-attention and FFN outputs' salts: past
/// every site of the stack's (up to 4) stages, once per range before it.
fn site_offset(layers: usize, range: u32) -> u32 {
    range * (2 * 4 * layers) as u32
}

/// An attention's options with the model's dropout on its probabilities, in training graphs of a
/// model with `attention_dropout`.
fn probability_dropout(opts: AttentionOpts, shared: &BlockInputs, salt: u32) -> Result<AttentionOpts> {
    match &shared.dropout {
        Some(d) => opts.with_dropout(d.seed, d.attention, salt),
        None => Ok(opts),
    }
}

/// `x` through the residual sites' dropout in training graphs of a model with dropout; `x`
/// itself otherwise.
fn dropout(g: &mut Graph, x: TensorId, shared: &BlockInputs, salt: u32) -> Result<TensorId> {
    match &shared.dropout {
        Some(d) => d.apply(g, x, d.residual, salt),
        None => Ok(x),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EmbedScale, ModelKind, PosEnc};
    use crate::testing::*;

    /// The sizes of `tests/reference/gen_rk_block.py`.
    const B: usize = 2;
    const L: usize = 5;
    const D: usize = 8;

    fn config(block: Block) -> ModelConfig {
        ModelConfig {
            vocab: 30,
            d_model: D,
            heads: 2,
            layers: 1,
            ffn: 16,
            dropout: 0.0,
            max_len: L,
            kind: ModelKind::CausalLm { tied_head: true },
            posenc: PosEnc::default(),
            embed_scale: EmbedScale::None,
            block,
            ..ModelConfig::default()
        }
    }

    /// Block 0 of a causal model on a parameter `x [B, L, D]`.
    fn one_block(kind: Block) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let c = config(kind);
            let x = param(g, "x", &[B, L, D]);
            let shared = BlockInputs {
                step: kind,
                layers: 1,
                salt_base: 0,
                cross: None,
                cache: Vec::new(),
                causal: true,
                key_mask: None,
                attention: AttentionTerms::default(),
                attention_scale: 1.0 / (c.head_dim() as f32).sqrt(),
                dropout: None,
                rk_stage: RkStage::SubBlock,
                probed: false,
            };
            Built {
                out: block(g, &c, x, 0, &shared).unwrap().out,
                feeds: vec![],
            }
        }
    }

    const KINDS: [(&str, Block); 5] = [
        ("residual", Block::Residual),
        ("rk2_half", Block::Rk2 { gamma: [0.5, 0.5] }),
        ("rk2_one", Block::Rk2 { gamma: [1.0, 1.0] }),
        ("rk2_gated", Block::Rk2Gated),
        ("rk4", Block::Rk4),
    ];

    /// Output and the gradients of x and of every parameter (the gate's included), on the CPU and
    /// the GPU, against float64 PyTorch.
    #[test]
    fn every_kind_matches_pytorch() {
        for (case, kind) in KINDS {
            check_reference("rk_block", case, &one_block(kind), 1e-5, 1e-4);
        }
    }

    #[test]
    fn every_dropout_site_has_its_own_salt() {
        let (layers, stages) = (3, 4);
        let mut salts: Vec<u32> = (0..layers)
            .flat_map(|layer| (0..stages).flat_map(move |stage| [1, 2].map(|site| (layer, stage, site))))
            .map(|(layer, stage, site)| dropout_salt(layers, layer, stage, site))
            .flat_map(|salt| {
                [
                    0,
                    CROSS_SITES,
                    ACTIVATION_SITES,
                    ATTENTION_SITES,
                    CROSS_ATTENTION_SITES,
                ]
                .map(|range| salt + site_offset(layers, range))
            })
            .collect();
        salts.push(EMBEDDING_DROPOUT_SALT);
        // Stage 0 keeps the residual block's salts.
        assert_eq!(dropout_salt(layers, 2, 0, 1), 5);
        assert_eq!(dropout_salt(layers, 2, 0, 2), 6);
        let count = salts.len();
        salts.sort();
        salts.dedup();
        assert_eq!(salts.len(), count);
    }
}
