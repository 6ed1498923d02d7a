//! One block of the model: the pre-norm attention+FFN sub-block `F`, stepped as a residual
//! (Euler) block or as a Runge-Kutta block of the ODE Transformer (see [`Block`]).
//!
//! `F(y) = a + Drop(FFN(LN2(y + a)))` with `a = Drop(Attn(LN1(y)))`, so that the residual block
//! `y + F(y)` is the usual pre-norm block. The parameters are declared once per block and every
//! stage evaluates `F` with them. The stage inputs (`y + ½F1`, …) and the block's output are each
//! one `rk_combine` (or `rk_gated`) node, whose backward is one kernel too.

use super::config::{Block, ModelConfig};
use crate::error::Result;
use crate::graph::{Graph, Init, TensorId};
use crate::ops::attention::{AttentionBias, AttentionOpts};

/// GPT-2's standard deviation for every weight matrix and embedding table.
pub(super) const INIT_STD: f32 = 0.02;

/// Layer normalisation's epsilon (PyTorch's default).
pub const LN_EPS: f32 = 1e-5;

/// What every block of one graph shares.
pub(super) struct BlockInputs {
    pub batch: usize,
    pub len: usize,
    /// Each position attends only to itself and earlier ones (the causal LM).
    pub causal: bool,
    pub key_mask: Option<TensorId>,
    /// Added to every layer's attention logits.
    pub attention_bias: Option<AttentionBias>,
    /// The factor on q·k.
    pub attention_scale: f32,
    /// The step's seed input and the drop probability, in training graphs of a model with dropout.
    pub dropout: Option<(TensorId, f32)>,
    /// `[L, 3D]` per block: its q|k|v biases (FLOATER's compatible form), in place of the
    /// projection's static bias; empty when none.
    pub qkv_bias: Vec<TensorId>,
    /// Probed graphs ([`super::GraphOptions::probed`]): each block also outputs its attention
    /// probabilities ([`BlockOutput::attention_probs`]).
    pub probed: bool,
}

/// What [`block`] adds to a graph.
pub(super) struct BlockOutput {
    pub out: TensorId,
    /// In probed graphs, the attention probabilities `[B, H, L, L]` of the block's first stage
    /// (the one that sees its input; a residual block has only that one).
    pub attention_probs: Option<TensorId>,
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
        let y = g.matmul(x, self.weight)?;
        match self.bias {
            Some(bias) => g.add(y, bias),
            None => Ok(y),
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
}

/// The parameters of block `layer`, shared by all its stages.
struct BlockParams {
    layer: usize,
    ln1: LayerNorm,
    qkv: Linear,
    out: Linear,
    ln2: LayerNorm,
    up: Linear,
    down: Linear,
}

impl BlockParams {
    /// `qkv_bias_given`: the position encoding supplies the q|k|v biases, so the projection has none.
    fn declare(g: &mut Graph, c: &ModelConfig, layer: usize, qkv_bias_given: bool) -> Result<Self> {
        let prefix = format!("blocks.{layer}");
        let d = c.d_model;
        let normal = Init::Normal(INIT_STD);
        // GPT-2: the projections into the residual stream start smaller, so the stream's variance
        // does not grow with depth.
        let residual = Init::Normal(INIT_STD / (2.0 * c.layers as f32).sqrt());
        Ok(Self {
            layer,
            ln1: LayerNorm::declare(g, &format!("{prefix}.ln1"), d)?,
            qkv: if qkv_bias_given {
                Linear::declare_without_bias(g, &format!("{prefix}.attn.qkv"), d, 3 * d, normal)?
            } else {
                Linear::declare(g, &format!("{prefix}.attn.qkv"), d, 3 * d, normal)?
            },
            out: Linear::declare(g, &format!("{prefix}.attn.out"), d, d, residual)?,
            ln2: LayerNorm::declare(g, &format!("{prefix}.ln2"), d)?,
            up: Linear::declare(g, &format!("{prefix}.ffn.up"), d, c.ffn, normal)?,
            down: Linear::declare(g, &format!("{prefix}.ffn.down"), c.ffn, d, residual)?,
        })
    }
}

/// One evaluation of the sub-block: `a = Drop(Attn(LN1 y))` and `h = Drop(FFN(LN2(y + a)))`.
struct Stage {
    /// `y + a`.
    mid: TensorId,
    a: TensorId,
    h: TensorId,
    /// The attention probabilities, where the stage was asked for them.
    probs: Option<TensorId>,
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
    let p = BlockParams::declare(g, c, layer, !shared.qkv_bias.is_empty())?;
    let f = |g: &mut Graph, y: TensorId, stage: usize| -> Result<TensorId> {
        let s = sub_block(g, c, &p, y, stage, shared)?;
        g.add(s.a, s.h)
    };
    // Every kind begins with a stage on the block's input: the one probed.
    let first = sub_block(g, c, &p, x, 0, shared)?;
    let out = match c.block {
        // (y + a) + h, as the pre-norm block has always been computed.
        Block::Residual => g.add(first.mid, first.h),
        Block::Rk2 { gamma } => {
            let f1 = g.add(first.a, first.h)?;
            let y2 = g.rk_combine(x, &[(1.0, f1)])?;
            let f2 = f(g, y2, 1)?;
            g.rk_combine(x, &[(gamma[0], f1), (gamma[1], f2)])
        }
        Block::Rk2Gated => {
            let f1 = g.add(first.a, first.h)?;
            let y2 = g.rk_combine(x, &[(1.0, f1)])?;
            let f2 = f(g, y2, 1)?;
            // `[2D, 1]` and `[1]`, zero: g = ½ everywhere at the start, RK2 with γ = ½, ½.
            let gate = Linear::declare(g, &format!("blocks.{layer}.gate"), 2 * c.d_model, 1, Init::Zeros)?;
            let both = g.concat(&[f1, f2], 2)?;
            let gate = gate.apply(g, both)?;
            let gate = g.sigmoid(gate)?;
            g.rk_gated(x, f1, f2, gate)
        }
        Block::Rk4 => {
            let f1 = g.add(first.a, first.h)?;
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
    Ok(BlockOutput {
        out,
        attention_probs: first.probs,
    })
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
    let h = p.ln1.apply(g, y)?;
    let (h, probs) = self_attention(g, c, p, h, shared, shared.probed && stage == 0)?;
    let a = dropout(g, h, shared, dropout_salt(c.layers, p.layer, stage, 1))?;
    let mid = g.add(y, a)?;
    let h = p.ln2.apply(g, mid)?;
    let h = p.up.apply(g, h)?;
    let h = g.gelu(h)?;
    let h = p.down.apply(g, h)?;
    let h = dropout(g, h, shared, dropout_salt(c.layers, p.layer, stage, 2))?;
    Ok(Stage { mid, a, h, probs })
}

/// Multi-head self-attention of `x [B, L, D]`: one fused q|k|v projection, heads split to
/// `[B, H, L, Dh]`, the fused attention op, heads merged, the output projection.
fn self_attention(
    g: &mut Graph,
    c: &ModelConfig,
    p: &BlockParams,
    x: TensorId,
    shared: &BlockInputs,
    probed: bool,
) -> Result<(TensorId, Option<TensorId>)> {
    let (b, l, d, h, dh) = (shared.batch, shared.len, c.d_model, c.heads, c.head_dim());
    let mut qkv = p.qkv.apply(g, x)?;
    if let Some(&bias) = shared.qkv_bias.get(p.layer) {
        qkv = g.add(qkv, bias)?;
    }
    let mut split = |part: usize| -> Result<TensorId> {
        let t = g.slice(qkv, 2, part * d, (part + 1) * d)?;
        let t = g.reshape(t, &[b, l, h, dh])?;
        g.permute(t, &[0, 2, 1, 3])
    };
    let (q, k, v) = (split(0)?, split(1)?, split(2)?);
    let opts = AttentionOpts::new(shared.attention_scale)
        .causal(shared.causal)
        .with_bias(shared.attention_bias)
        .with_key_mask(shared.key_mask);
    let probs = probed.then(|| g.attention_probs(q, k, opts)).transpose()?;
    let out = g.attention(q, k, v, opts)?;
    let out = g.permute(out, &[0, 2, 1, 3])?;
    let out = g.reshape(out, &[b, l, d])?;
    Ok((p.out.apply(g, out)?, probs))
}

/// The dropout salt of the embeddings; see [`dropout_salt`] for the blocks'.
pub(super) const EMBEDDING_DROPOUT_SALT: u32 = 0;

/// The salt of `site` (1 = attention, 2 = FFN output) in stage `stage` of block `layer`:
/// `2·(stage·layers + layer) + site`. Stage 0 keeps the residual block's salts `2·layer + 1` and
/// `2·layer + 2`, and no two sites of a graph share one, so each draws its own mask.
fn dropout_salt(layers: usize, layer: usize, stage: usize, site: usize) -> u32 {
    (2 * (stage * layers + layer) + site) as u32
}

/// `x` through dropout in training graphs of a model with dropout; `x` itself otherwise.
fn dropout(g: &mut Graph, x: TensorId, shared: &BlockInputs, salt: u32) -> Result<TensorId> {
    match shared.dropout {
        Some((seed, p)) => g.dropout(x, seed, p, salt),
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
            posenc: PosEnc::None,
            embed_scale: EmbedScale::None,
            block,
        }
    }

    /// Block 0 of a causal model on a parameter `x [B, L, D]`.
    fn one_block(kind: Block) -> impl Fn(&mut Graph) -> Built {
        move |g| {
            let c = config(kind);
            let x = param(g, "x", &[B, L, D]);
            let shared = BlockInputs {
                batch: B,
                len: L,
                causal: true,
                key_mask: None,
                attention_bias: None,
                attention_scale: 1.0 / (c.head_dim() as f32).sqrt(),
                dropout: None,
                qkv_bias: Vec::new(),
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
