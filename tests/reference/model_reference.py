"""posflow's Transformer in PyTorch, loaded from a posflow checkpoint by its documented names.

The model is the one of src/model/mod.rs, written out op by op: the parameter names and layouts of
its table (linear weights are [in, out], used as `x @ W + b`; the columns of `attn.qkv` are
[q | k | v], head h taking columns h·Dh..(h+1)·Dh of each), pre-norm blocks stepped as residual or
Runge-Kutta blocks (src/model/config.rs, `Block`) or post-LN residual blocks (`norm = "post"`: the
layer norm after each residual add, no final norm, `emb_ln` on the embeddings unless
`embedding_norm` is false), the FFN's GELU (erf) or ReLU (the config's `activation`), layer norm
with eps 1e-5, the sinusoid table in either layout, softmax
attention with the position encoding's terms, a causal mask for the LM and the key mask for
padding, the tied or untied LM head or the encoder's [CLS] head, and the mean cross-entropy over
targets other than -100. Everything runs in float64.

The seq2seq kind is src/model/seq2seq.rs's: an encoder (bidirectional, source padding masked,
final norm `encoder.ln_f`) and a causal decoder whose blocks also attend to the encoder's output
(`ln_cross`, `cross.q`, `cross.kv` = [k | v] of the memory, `cross.out`; scale 1/√Dh, no
position bias, padded sources masked), each side with its own position parameters under its
prefix, one token table for both sides and the tied head. FLOATER's compatible form solves three
flows: the encoder's [3, layers, D] q/k/v biases, the decoder's [4, decoder_layers, D] (self q/k/v
and cross q) over target positions, and `decoder.cross.`'s [2, decoder_layers, D] (cross k/v) over
source positions.

    python3 model_reference.py generate [DIR]
        writes the checkpoints of examples/reference_checkpoints.rs to DIR (default: models/ beside
        this script) with cargo, then `<name>.expected.safetensors` beside each: `logits`, `loss`
        and `grad/<param>` (float32) on the batch stored in the checkpoint. tests/model_reference.rs
        compares posflow's values with these. The same in two steps:
            cargo run --example reference_checkpoints -- tests/reference/models
            python3 tests/reference/model_reference.py expect tests/reference/models/*.safetensors

    python3 model_reference.py CHECKPOINT [TEXT]
        the loss and logits of any posflow checkpoint: on TEXT (encoded with the checkpoint's
        tokenizer, BOS first; next-character loss for a causal LM; not for a seq2seq model), or
        else on the checkpoint's `reference_batch`.

A position encoding is one function below, registered in POSENCS by its config `type`: it returns
the terms it contributes (see PositionTerms), so a new one is one more function and one more
entry.
"""

import json
import math
import pathlib
import subprocess
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from torchdiffeq import odeint, odeint_adjoint

# The ODE solvers' grid, as the ODE reference (gen_ode.py) gives torchdiffeq.
from gen_ode import grid as ode_grid
# HF transformers' T5Attention._relative_position_bucket, as the op's own reference uses it.
from gen_relative import t5_bucket
# fairseq's SinusoidalPositionalEmbedding, as the table's own reference transcribes it.
from gen_sinusoid import fairseq as fairseq_sinusoid

IGNORE_INDEX = -100
BOS = 1
# The seq2seq kind's config name (serde's snake case of `ModelKind::Seq2Seq`).
SEQ2SEQ = "seq2seq"
SPECIALS = ["<pad>", "<bos>", "<eos>"]
LN_EPS = 1e-5
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def load(path):
    """(config dict, metadata dict, {name: float64 tensor}) of a posflow checkpoint; optimizer
    moments (`optim.*`) and run state (`state.*`) are dropped."""
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    if metadata.get("format") != "posflow/1":
        sys.exit(f"{path}: not a posflow/1 checkpoint (metadata {metadata})")
    tensors = load_file(str(path))
    params = {k: v.double() for k, v in tensors.items() if not k.startswith(("optim.", "state."))}
    return json.loads(metadata["config"]), metadata, params


# ---- position encodings: config -> PositionTerms ------------------------------------------------


class PositionTerms:
    """What an encoding adds: `at_input` / `at_every_block` [L, D] added to the embeddings / to each
    block's input (`at_block`: block i's own [L, D], FLOATER); `qkv_bias`: block i's [L, 3D] added to
    its q|k|v projection, which then has no static bias (FLOATER's compatible form); `attention_bias` [H, L, L] added to every
    layer's attention logits; `attention_scale`, the factor on q·k when it is not 1/√Dh (TUPE).
    A seq2seq decoder's FLOATER also gives block i's cross-attention `cross_q_bias` [T, D] and
    `cross_kv_bias` [S, 2D], in place of their static biases."""

    def __init__(self, at_input=None, at_every_block=None, attention_bias=None, attention_scale=None,
                 at_block=None, qkv_bias=None, qkv_static_bias=True, cross_q_bias=None, cross_kv_bias=None):
        self.at_input = at_input
        self.at_every_block = at_every_block
        self.at_block = at_block
        self.qkv_bias = qkv_bias
        self.qkv_static_bias = qkv_static_bias
        self.attention_bias = attention_bias
        self.attention_scale = attention_scale
        self.cross_q_bias = cross_q_bias
        self.cross_kv_bias = cross_kv_bias


def posenc_none(cfg, p, length):
    return PositionTerms()


def sinusoidal_table(length, d):
    """pe[pos, 2i] = sin(pos·ω_i), pe[pos, 2i+1] = cos(pos·ω_i), ω_i = 10000^(−2i/d)."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.zeros(length, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * omega)
    table[:, 1::2] = torch.cos(pos * omega)
    # posflow feeds the table as float32.
    return table.float().double()


def input_table(layout, length, d):
    """The sinusoid table of `layout`: posflow's interleaved default, or fairseq's (gen_sinusoid.py
    transcribes its get_embedding)."""
    if layout == "fairseq":
        return fairseq_sinusoid(length, d).double()
    return sinusoidal_table(length, d)


def posenc_sinusoidal(cfg, p, length):
    table = input_table(cfg["posenc"].get("layout", "interleaved"), length, cfg["d_model"])
    if cfg["posenc"].get("every_block", False):
        return PositionTerms(at_every_block=table)
    return PositionTerms(at_input=table)


def posenc_learned(cfg, p, length):
    table = p["pos_emb.weight"]
    if length > table.shape[0]:
        sys.exit(f"sequence length {length} is over the learned table's max_len {table.shape[0]}")
    return PositionTerms(at_input=table[:length])


def relative_bias(cfg, p, length):
    """T5's bias [H, L, L]: b[h, i, j] = posenc.relative.weight[bucket(j − i), h]."""
    enc = cfg["posenc"]
    positions = torch.arange(length, dtype=torch.long)
    buckets = t5_bucket(
        positions[None, :] - positions[:, None],  # key j minus query i
        bidirectional=cfg["bidirectional"],
        num_buckets=enc.get("buckets", 32),
        max_distance=enc.get("max_distance", 128),
    )
    bias = p["posenc.relative.weight"][buckets]  # [L, L, H]
    return bias.permute(2, 0, 1)


def posenc_relative(cfg, p, length):
    """T5's bias, and with `learned_absolute` a learned table at the input too (TUPE's BERT-R)."""
    at_input = None
    if cfg["posenc"].get("learned_absolute", False):
        at_input = posenc_learned(cfg, p, length).at_input
    return PositionTerms(at_input=at_input, attention_bias=relative_bias(cfg, p, length))


def tupe_correlation(cfg, p, length):
    """TUPE's positional correlation [H, L, L] (Ke, He & Liu 2020, untied positions):
    (p̂_i U_Q^h)·(p̂_j U_K^h) / √(2·Dh) with p̂ = LayerNorm(p_i), p = the first L rows of
    `posenc.tupe.weight`; U^h is column block h (Dh wide) of the [D, D] `posenc.tupe.query/key`."""
    d, h = cfg["d_model"], cfg["heads"]
    dh = d // h
    table = p["posenc.tupe.weight"]
    if length > table.shape[0]:
        sys.exit(f"sequence length {length} is over the TUPE table's max_len {table.shape[0]}")
    normed = layer_norm(p, "posenc.tupe.ln", table[:length])
    u_q, u_k = p["posenc.tupe.query.weight"], p["posenc.tupe.key.weight"]
    heads = []
    for head in range(h):
        columns = slice(head * dh, (head + 1) * dh)
        q, k = normed @ u_q[:, columns], normed @ u_k[:, columns]
        heads.append(q @ k.T)
    return torch.stack(heads) / math.sqrt(2 * dh)


def untie_cls(p, term):
    """The paper's reset of the position-only term (its eq. 9), per head h: [CLS] (position 0)
    attending to any j gets θ1[h] = `posenc.tupe.cls_to_others`, any i ≠ 0 attending to [CLS]
    gets θ2[h] = `posenc.tupe.others_to_cls`; the rest is unchanged."""
    h, length, _ = term.shape
    theta1 = p["posenc.tupe.cls_to_others"][:, None].expand(h, length)
    theta2 = p["posenc.tupe.others_to_cls"][:, None].expand(h, length - 1)
    rows = [theta1[:, None, :]]  # row 0: [H, 1, L]
    rest = torch.cat([theta2[:, :, None], term[:, 1:, 1:]], dim=2)  # rows 1..: θ2, then the term
    return torch.cat(rows + [rest], dim=1)


def tupe_terms(cfg, p, bias):
    """TUPE's terms: the position-only bias (reset for [CLS] with untie_cls) and 1/√(2·Dh) on
    the word term, so word and position logits share one scale."""
    if cfg["posenc"]["untie_cls"]:
        bias = untie_cls(p, bias)
    dh = cfg["d_model"] // cfg["heads"]
    return PositionTerms(attention_bias=bias, attention_scale=1 / math.sqrt(2 * dh))


def posenc_tupe_a(cfg, p, length):
    return tupe_terms(cfg, p, tupe_correlation(cfg, p, length))


def posenc_tupe_r(cfg, p, length):
    """TUPE-A plus T5's relative bias; posflow resets [CLS] in their sum (see posenc/tupe.rs: the
    paper's TUPE-R formula of the reset is lost in our copy)."""
    bias = tupe_correlation(cfg, p, length) + relative_bias(cfg, p, length)
    return tupe_terms(cfg, p, bias)


def floater_solve(enc, p, prefix, p0, length):
    """FLOATER's solution [L, rows, D]: dp/dt = h(t, p) = W2·[σ(W1·[p; t] + b1); t] + b2 (the
    reference code's flow_func_linear; W1, W2 in nn.Linear's [out, in] layout) from p(0) = p0
    [rows, D], solved by torchdiffeq at t_i = i·Δ: `odeint` through its autograd for
    `gradient = "backprop"`, `odeint_adjoint` (the authors' call) for `"adjoint"`; fixed-step
    methods take the same grid of `substeps` steps per interval."""
    act = {"relu": F.relu, "tanh": torch.tanh}[enc.get("activation", "relu")]
    w1, b1 = p[f"{prefix}.w1"], p[f"{prefix}.b1"]
    w2, b2 = p[f"{prefix}.w2"], p[f"{prefix}.b2"]

    def h(t, y):
        tt = t.to(y).expand(y.shape[0], 1)
        return F.linear(torch.cat([act(F.linear(torch.cat([y, tt], 1), w1, b1)), tt], 1), w2, b2)

    t = torch.arange(length, dtype=torch.float64) * enc["delta"]
    method = enc["method"]
    if enc["gradient"] == "adjoint":
        solve = lambda *args, **kw: odeint_adjoint(*args, adjoint_params=(w1, b1, w2, b2), **kw)
    else:
        solve = odeint
    if method == "dopri5":
        return solve(h, p0, t, method=method, rtol=enc["rtol"], atol=enc["atol"])
    options = dict(grid_constructor=ode_grid(enc["substeps"]))
    return solve(h, p0, t, method=method, options=options)


def floater_biases(cfg, p, prefix, parts, length):
    """The compatible form's flow `prefix` over [parts, layers, D] from the learned b(0) =
    `{prefix}.qkv_initial`: for each block i, its parts [L, D] (part j is b[:, j, i])."""
    d, layers = cfg["d_model"], cfg["layers"]
    b0 = p[f"{prefix}.qkv_initial"]
    b = floater_solve(cfg["posenc"], p, prefix, b0.reshape(parts * layers, d), length)
    b = b.reshape(length, parts, layers, d)
    return [[b[:, j, i] for j in range(parts)] for i in range(layers)]


def posenc_floater(cfg, p, length):
    enc, d, layers = cfg["posenc"], cfg["d_model"], cfg["layers"]
    if enc["form"] == "bias":
        # The compatible form as the authors ran it: the sinusoidal model whose q/k/v biases
        # (none static) are one flow's solution over [3, layers, D] from the learned b(0).
        biases = [torch.cat(qkv, dim=-1) for qkv in floater_biases(cfg, p, "posenc.floater", 3, length)]
        table = input_table(enc.get("sinusoid", "interleaved"), length, d)
        return PositionTerms(at_input=table, qkv_bias=biases, qkv_static_bias=False)
    trajectory = floater_solve(enc, p, "posenc.floater", p["posenc.floater.initial"], length)
    if enc.get("every_block", True):
        return PositionTerms(at_block=[trajectory[:, i] for i in range(layers)])
    return PositionTerms(at_input=trajectory[:, 0])


POSENCS = {
    "floater": posenc_floater,
    "none": posenc_none,
    "sinusoidal": posenc_sinusoidal,
    "learned": posenc_learned,
    "relative": posenc_relative,
    "tupe_a": posenc_tupe_a,
    "tupe_r": posenc_tupe_r,
}


# The config's `word_scale`: the factor on q·k for heads of Dh, whatever the encoding's.
WORD_SCALES = {"standard": lambda dh: 1 / math.sqrt(dh), "tupe": lambda dh: 1 / math.sqrt(2 * dh)}


def position_terms(cfg, p, length):
    if cfg["posenc"]["type"] not in POSENCS:
        raise SystemExit(f"model_reference.py has no {cfg['posenc']['type']} position encoding yet")
    terms = POSENCS[cfg["posenc"]["type"]](cfg, p, length)
    if "word_scale" in cfg:
        terms.attention_scale = WORD_SCALES[cfg["word_scale"]](cfg["d_model"] // cfg["heads"])
    return terms


def decoder_terms(cfg, p, target_len, source_len):
    """A seq2seq decoder's terms: its side's encoding over the targets, except FLOATER's compatible
    form: the sinusoidal table at the input, one flow of 4 parts per block over the targets (self
    q, k, v; cross q) and one of 2 under `cross.` over the sources (cross k, v)."""
    enc = cfg["posenc"]
    if enc["type"] != "floater" or enc["form"] != "bias":
        return position_terms(cfg, p, target_len)
    parts = floater_biases(cfg, p, "posenc.floater", 4, target_len)
    kv = floater_biases(cfg, p, "cross.posenc.floater", 2, source_len)
    return PositionTerms(
        at_input=input_table(enc.get("sinusoid", "interleaved"), target_len, cfg["d_model"]),
        qkv_bias=[torch.cat(block[:3], dim=-1) for block in parts],
        qkv_static_bias=False,
        cross_q_bias=[block[3] for block in parts],
        cross_kv_bias=[torch.cat(block, dim=-1) for block in kv],
    )


# ---- the Transformer ----------------------------------------------------------------------------


def linear(p, prefix, x):
    return x @ p[f"{prefix}.weight"] + p[f"{prefix}.bias"]


def layer_norm(p, prefix, x):
    return F.layer_norm(x, x.shape[-1:], p[f"{prefix}.gain"], p[f"{prefix}.bias"], LN_EPS)


def heads(x, h):
    """[B, L, D] -> [B, H, L, Dh]: head h is columns h·Dh..(h+1)·Dh."""
    b, length, d = x.shape
    return x.view(b, length, h, d // h).transpose(1, 2)


def attend(q, k, v, scale, bias, allowed):
    """softmax(q·k·scale + bias, where allowed) · v, heads merged back to [B, Lq, D]."""
    scores = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    b, h, length, dh = out.shape
    return out.transpose(1, 2).reshape(b, length, h * dh)


def allowed_keys(b, queries, keys, causal, key_mask):
    """[B, 1, Lq, Lk]: which keys each query may attend to."""
    allowed = torch.ones(b, 1, queries, keys, dtype=torch.bool)
    if causal:
        allowed = allowed & torch.ones(queries, keys, dtype=torch.bool).tril()
    if key_mask is not None:
        allowed = allowed & (key_mask != 0)[:, None, None, :]
    return allowed


def self_attention(cfg, p, prefix, x, terms, causal, key_mask, qkv_bias=None):
    b, length, d = x.shape
    h = cfg["heads"]
    if terms.qkv_static_bias:
        qkv = linear(p, f"{prefix}.qkv", x)
    else:
        qkv = x @ p[f"{prefix}.qkv.weight"]
    if qkv_bias is not None:
        qkv = qkv + qkv_bias
    q, k, v = (heads(t, h) for t in qkv.split(d, dim=-1))
    scale = 1 / math.sqrt(d // h) if terms.attention_scale is None else terms.attention_scale
    out = attend(q, k, v, scale, terms.attention_bias, allowed_keys(b, length, length, causal, key_mask))
    return linear(p, f"{prefix}.out", out)


def cross_attention(cfg, p, prefix, x, cross, q_bias, kv_bias):
    """Decoder block `prefix`'s attention from x [B, T, D] to the encoder's output [B, S, D]: the
    usual 1/√Dh, no position bias, padded sources hidden. Static q and k|v biases, or FLOATER's."""
    b, length, d = x.shape
    h = cfg["heads"]
    if q_bias is None:
        q, kv = linear(p, f"{prefix}.q", x), linear(p, f"{prefix}.kv", cross.memory)
    else:
        q = x @ p[f"{prefix}.q.weight"] + q_bias
        kv = cross.memory @ p[f"{prefix}.kv.weight"] + kv_bias
    q, k, v = heads(q, h), heads(kv[..., :d], h), heads(kv[..., d:], h)
    allowed = allowed_keys(b, length, cross.memory.shape[1], False, cross.source_mask)
    return linear(p, f"{prefix}.out", attend(q, k, v, 1 / math.sqrt(d // h), None, allowed))


class Cross:
    """A decoder's view of the encoder: its output [B, S, D] and the source mask [B, S]."""

    def __init__(self, memory, source_mask):
        self.memory, self.source_mask = memory, source_mask


def sub_block(cfg, p, i, y, terms, causal, key_mask, cross):
    """Block i's F(y) = a + FFN(LN2(y + a)), a = Attn(LN1 y) (a decoder's: s + Cross(LN_cross(y + s)),
    s its self-attention)."""
    prefix = f"blocks.{i}"
    qkv_bias = None if terms.qkv_bias is None else terms.qkv_bias[i]
    normed = layer_norm(p, f"{prefix}.ln1", y)
    a = self_attention(cfg, p, f"{prefix}.attn", normed, terms, causal, key_mask, qkv_bias)
    if cross is not None:
        q_bias = None if terms.cross_q_bias is None else terms.cross_q_bias[i]
        kv_bias = None if terms.cross_kv_bias is None else terms.cross_kv_bias[i]
        normed = layer_norm(p, f"{prefix}.ln_cross", y + a)
        a = a + cross_attention(cfg, p, f"{prefix}.cross", normed, cross, q_bias, kv_bias)
    return a + feed_forward(cfg, p, prefix, layer_norm(p, f"{prefix}.ln2", y + a))


def post_block(cfg, p, i, y, terms, causal, key_mask, cross):
    """Block i with norm = "post": the post-LN layer of fairseq's Transformer (FLOATER's
    FlowTransformerEncoderLayer / DecoderLayer with normalize_before False) and of BERT:
    m = LN1(y + Attn(y)), a decoder's m = LN_cross(m + Cross(m)), out = LN2(m + FFN(m))."""
    prefix = f"blocks.{i}"
    qkv_bias = None if terms.qkv_bias is None else terms.qkv_bias[i]
    a = self_attention(cfg, p, f"{prefix}.attn", y, terms, causal, key_mask, qkv_bias)
    m = layer_norm(p, f"{prefix}.ln1", y + a)
    if cross is not None:
        q_bias = None if terms.cross_q_bias is None else terms.cross_q_bias[i]
        kv_bias = None if terms.cross_kv_bias is None else terms.cross_kv_bias[i]
        m = layer_norm(p, f"{prefix}.ln_cross", m + cross_attention(cfg, p, f"{prefix}.cross", m, cross, q_bias, kv_bias))
    return layer_norm(p, f"{prefix}.ln2", m + feed_forward(cfg, p, prefix, m))


def feed_forward(cfg, p, prefix, x):
    act = {"gelu": F.gelu, "relu": F.relu}[cfg.get("activation", "gelu")]
    return linear(p, f"{prefix}.ffn.down", act(linear(p, f"{prefix}.ffn.up", x)))


def post_norm(cfg):
    return cfg.get("norm", "pre") == "post"


def final_norm(cfg, p, x):
    """A pre-LN stack's `ln_f`; a post-LN stack's output is normalised already."""
    return x if post_norm(cfg) else layer_norm(p, "ln_f", x)


def step(block, f, y):
    """One block's output from its input y and its sub-block f (the ODE Transformer's steps)."""
    kind = block["type"]
    if kind == "residual":
        return y + f(y)
    if kind == "rk2":
        g1, g2 = block["gamma"]
        f1 = f(y)
        return y + g1 * f1 + g2 * f(y + f1)
    if kind == "rk4":
        f1 = f(y)
        f2 = f(y + f1 / 2)
        f3 = f(y + f2 / 2)
        f4 = f(y + f3)
        return y + (f1 + 2 * f2 + 2 * f3 + f4) / 6
    # gen_rk_block.py holds the reference of the gated block.
    raise SystemExit(f"model_reference.py has no {kind} blocks")


def stack(cfg, p, x, terms, block, causal, key_mask, cross=None):
    """cfg["layers"] blocks, each stepped as `block`, with the position terms at their inputs."""
    for i in range(cfg["layers"]):
        if terms.at_every_block is not None:
            x = x + terms.at_every_block
        if terms.at_block is not None:
            x = x + terms.at_block[i]
        if post_norm(cfg):
            assert block["type"] == "residual", "a post-LN block is a residual block"
            x = post_block(cfg, p, i, x, terms, causal, key_mask, cross)
        else:
            x = step(block, lambda y, i=i: sub_block(cfg, p, i, y, terms, causal, key_mask, cross), x)
    return x


def embed(cfg, p, tokens, terms, side_params=None):
    """The token table's rows (· √D), plus the position term at the input, through the embedding
    layer norm `emb_ln` (the stack's own, under `side_params`) where the model has one: BERT's
    post-LN unless `embedding_norm` says otherwise."""
    x = p["tok_emb.weight"][tokens]
    if cfg.get("embed_scale", "none") == "sqrt_d":
        x = x * math.sqrt(cfg["d_model"])
    if terms.at_input is not None:
        x = x + terms.at_input
    if cfg.get("embedding_norm", post_norm(cfg)):
        x = layer_norm(p if side_params is None else side_params, "emb_ln", x)
    return x


def side(cfg, layers, bidirectional):
    """The config a stack and its position encoding read: its number of blocks, and whether T5's
    buckets tell left from right."""
    return dict(cfg, layers=layers, bidirectional=bidirectional)


def lm_head(cfg, p, x, tied):
    # The tied head reads the table unscaled, whatever embed_scale.
    return x @ (p["tok_emb.weight"].T if tied else p["lm_head.weight"])


def forward_decoder_only(cfg, p, tokens, key_mask=None):
    """Logits: [B, L, vocab] for a causal LM, [B, n_classes] for an encoder."""
    kind = cfg["kind"]
    causal = kind["type"] == "causal_lm"
    cfg = side(cfg, cfg["layers"], bidirectional=kind["type"] == "encoder")
    terms = position_terms(cfg, p, tokens.shape[1])
    block = cfg.get("block", {"type": "residual"})
    x = stack(cfg, p, embed(cfg, p, tokens, terms), terms, block, causal, key_mask)
    if causal:
        return lm_head(cfg, p, final_norm(cfg, p, x), kind.get("tied_head", True))
    return linear(p, "cls_head", final_norm(cfg, p, x[:, 0]))


def forward_seq2seq(cfg, p, source, source_mask, target_in):
    """Teacher-forced next-token logits [B, T, vocab]."""
    kind = cfg["kind"]
    encoder, decoder = p.prefixed("encoder."), p.prefixed("decoder.")
    enc_cfg = side(cfg, cfg["layers"], bidirectional=True)
    terms = position_terms(enc_cfg, encoder, source.shape[1])
    x = stack(enc_cfg, encoder, embed(cfg, p, source, terms, encoder), terms, cfg["block"], False, source_mask)
    cross = Cross(final_norm(cfg, encoder, x), source_mask)
    dec_cfg = side(cfg, kind["decoder_layers"], bidirectional=False)
    terms = decoder_terms(dec_cfg, decoder, target_in.shape[1], source.shape[1])
    y = stack(dec_cfg, decoder, embed(cfg, p, target_in, terms, decoder), terms, kind["decoder_block"], True, None, cross)
    return lm_head(cfg, p, final_norm(cfg, decoder, y), kind["tied_head"])


def forward(cfg, p, inputs):
    """The model's logits on `inputs` (see reference_batch). Checks that every parameter of the
    checkpoint is used and that none is missing."""
    used = set()
    p = UsedParams(p, used)
    if cfg["kind"]["type"] == SEQ2SEQ:
        logits = forward_seq2seq(cfg, p, *inputs)
    else:
        logits = forward_decoder_only(cfg, p, *inputs)
    unused = set(p.params) - used
    if unused:
        sys.exit(f"checkpoint tensors the model does not use: {sorted(unused)}")
    return logits


class UsedParams:
    """The parameters by name, recording which were read; a missing name is a clear error."""

    def __init__(self, params, used, prefix=""):
        self.params, self.used, self.prefix = params, used, prefix

    def __getitem__(self, name):
        name = self.prefix + name
        if name not in self.params:
            sys.exit(f"the checkpoint has no tensor {name}, which its config needs")
        self.used.add(name)
        return self.params[name]

    def prefixed(self, prefix):
        """The parameters under `prefix` (a seq2seq side's), by their names without it."""
        return UsedParams(self.params, self.used, self.prefix + prefix)


def loss_of(cfg, logits, targets):
    """Mean cross-entropy over the targets that are not IGNORE_INDEX."""
    flat = logits.reshape(-1, logits.shape[-1])
    return F.cross_entropy(flat, targets.reshape(-1), ignore_index=IGNORE_INDEX)


def reference_batch(cfg, metadata):
    """(the model's inputs, targets) stored by examples/reference_checkpoints.rs: inputs (tokens
    [B, L], key mask or None), or a seq2seq model's (source [B, S], source mask, target_in [B, T])."""
    batch = json.loads(metadata["training"]).get("reference_batch")
    if batch is None:
        sys.exit("this checkpoint stores no reference_batch: give a TEXT to evaluate it on")
    ids = lambda name, *shape: torch.tensor(batch[name], dtype=torch.long).view(*shape)
    targets = torch.tensor(batch["targets"], dtype=torch.long)
    if cfg["kind"]["type"] == SEQ2SEQ:
        rows, source, target = batch["batch"], batch["source_len"], batch["target_len"]
        inputs = ids("source", rows, source), ids("source_mask", rows, source), ids("target_in", rows, target)
        return inputs, targets
    shape = (batch["batch"], batch["len"])
    mask = None if batch["mask"] is None else ids("mask", *shape)
    return (ids("tokens", *shape), mask), targets


# ---- commands -----------------------------------------------------------------------------------


def expect(path):
    """Writes `<name>.expected.safetensors` beside the checkpoint: logits, loss, grad/<param>. The
    ODE Transformer's code form is authors_ode.py's, TUPE's code form and the masked LM
    authors_tupe.py's, each written from its authors' code instead."""
    path = pathlib.Path(path)
    cfg, metadata, params = load(path)
    import authors_ode
    import authors_tupe

    for authors in (authors_ode, authors_tupe):
        if authors.uses_authors_form(cfg):
            authors.expect(path)
            return
    inputs, targets = reference_batch(cfg, metadata)
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    logits = forward(cfg, leaves, inputs)
    loss = loss_of(cfg, logits, targets)
    loss.backward()
    write_expected(path, logits, loss, {name: leaf.grad for name, leaf in leaves.items()})


def write_expected(path, logits, loss, grads, source=""):
    """`<name>.expected.safetensors` beside the checkpoint at `path`: logits, loss and
    grad/<param>, as float32; `source` says whose code computed them."""
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for name, grad in grads.items():
        out[f"grad/{name}"] = grad
    out = {k: v.float().contiguous() for k, v in out.items()}
    target = path.with_name(path.name.removesuffix(".safetensors") + ".expected.safetensors")
    save_file(out, str(target))
    print(f"{target.name}: loss {loss.item():.6f}, {len(grads)} gradients{source}")


def generate(outdir):
    outdir = pathlib.Path(outdir).resolve()
    command = ["cargo", "run", "--quiet", "--example", "reference_checkpoints", "--", str(outdir)]
    subprocess.run(command, cwd=ROOT, check=True)
    expect_all(sorted(outdir.glob("*.safetensors")))


def expect_all(paths):
    """`expect` on each checkpoint among `paths`, skipping expected-value files."""
    for path in map(pathlib.Path, paths):
        if not path.name.endswith(".expected.safetensors"):
            expect(path)


def encode(metadata, text):
    tokenizer = metadata.get("tokenizer")
    if tokenizer is None:
        sys.exit("this checkpoint has no tokenizer, so it cannot read text")
    tokenizer = json.loads(tokenizer)
    assert tokenizer["specials"] == SPECIALS, tokenizer["specials"]
    ids = {c: len(SPECIALS) + i for i, c in enumerate(tokenizer["chars"])}
    unknown = sorted(set(text) - set(ids))
    if unknown:
        sys.exit(f"characters {unknown} are not in the checkpoint's vocabulary")
    return torch.tensor([[BOS] + [ids[c] for c in text]], dtype=torch.long)


def evaluate(path, text=None):
    cfg, metadata, params = load(path)
    if text is None:
        inputs, targets = reference_batch(cfg, metadata)
        shapes = [tuple(x.shape) for x in inputs if x is not None]
        print(f"{path}: the checkpoint's reference batch, {shapes}")
    elif cfg["kind"]["type"] == SEQ2SEQ:
        sys.exit("a seq2seq checkpoint is evaluated on its reference batch only")
    else:
        tokens = encode(metadata, text)
        inputs = tokens, None
        # Next characters for a causal LM; an encoder's class is unknown, so no loss.
        targets = torch.cat([tokens[:, 1:], torch.tensor([[IGNORE_INDEX]])], dim=1)
    with torch.no_grad():
        logits = forward(cfg, params, inputs)
        if cfg["kind"]["type"] == "causal_lm" or text is None:
            print(f"loss {loss_of(cfg, logits, targets).item():.6f}")
    torch.set_printoptions(precision=4, linewidth=120)
    print(f"logits {tuple(logits.shape)}:\n{logits}")


def main(argv):
    if len(argv) >= 1 and argv[0] == "generate":
        generate(argv[1] if len(argv) > 1 else HERE / "models")
    elif len(argv) >= 2 and argv[0] == "expect":
        expect_all(argv[1:])
    elif len(argv) in (1, 2):
        evaluate(argv[0], argv[1] if len(argv) == 2 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
