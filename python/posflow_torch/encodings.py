"""Position encodings: a config's `posenc` -> the terms it adds to the model (PositionTerms), one
function per encoding type, registered in POSENCS. The formulas are posflow's
(src/model/posenc/), under its parameter names."""

import math

import torch
import torch.nn.functional as F
from torchdiffeq import odeint, odeint_adjoint


class PositionTerms:
    """What an encoding adds: `at_input` / `at_every_block` [L, D] added to the embeddings / to each
    block's input (`at_block`: block i's own [L, D], FLOATER); `qkv_bias`: block i's [L, 3D] added
    to its q|k|v projection, which then has no static bias (FLOATER's compatible form);
    `attention_bias` [H, L, L] added to every layer's attention logits; `attention_scale`, the
    factor on q·k when it is not 1/√Dh (TUPE). A seq2seq decoder's FLOATER also gives block i's
    cross-attention `cross_q_bias` [T, D] and `cross_kv_bias` [S, 2D], in place of their static
    biases."""

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


def interleaved_sinusoid(length, d):
    """posflow's table: pe[pos, 2i] = sin(pos·ω_i), pe[pos, 2i+1] = cos(pos·ω_i), ω_i = 10000^(−2i/d),
    computed in float64 and rounded to float32 (posflow feeds it as float32)."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.zeros(length, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * omega)
    table[:, 1::2] = torch.cos(pos * omega)
    return table.float()


def fairseq_sinusoid(length, d, padding_idx=1):
    """fairseq's SinusoidalPositionalEmbedding.get_embedding (sin half, then cos half), the rows
    of positions padding_idx + 1 onwards, as fairseq reads them."""
    half = d // 2
    rate = math.log(10000) / (half - 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.float) * -rate)
    rows = length + padding_idx + 1
    angles = torch.arange(rows, dtype=torch.float).unsqueeze(1) * freqs.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).view(rows, -1)
    if d % 2 == 1:
        table = torch.cat([table, torch.zeros(rows, 1)], dim=1)
    table[padding_idx, :] = 0
    return table[padding_idx + 1:].contiguous()


def input_table(layout, length, d, like):
    """The sinusoid table of `layout` (posflow's interleaved default, or fairseq's), in `like`'s
    dtype and device."""
    table = fairseq_sinusoid(length, d) if layout == "fairseq" else interleaved_sinusoid(length, d)
    return table.to(like)


def posenc_sinusoidal(cfg, p, length):
    table = input_table(cfg["posenc"].get("layout", "interleaved"), length, cfg["d_model"], p.like)
    if cfg["posenc"].get("every_block", False):
        return PositionTerms(at_every_block=table)
    return PositionTerms(at_input=table)


def posenc_learned(cfg, p, length):
    table = p["pos_emb.weight"]
    if length > table.shape[0]:
        raise ValueError(f"sequence length {length} is over the learned table's max_len {table.shape[0]}")
    return PositionTerms(at_input=table[:length])


def t5_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """HF transformers' T5Attention._relative_position_bucket (posflow's T5 buckets)."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def relative_bias(cfg, p, length):
    """T5's bias [H, L, L]: b[h, i, j] = posenc.relative.weight[bucket(j − i), h]."""
    enc = cfg["posenc"]
    table = p["posenc.relative.weight"]
    positions = torch.arange(length, dtype=torch.long, device=table.device)
    buckets = t5_bucket(
        positions[None, :] - positions[:, None],  # key j minus query i
        bidirectional=cfg["bidirectional"],
        num_buckets=enc.get("buckets", 32),
        max_distance=enc.get("max_distance", 128),
    )
    return table[buckets].permute(2, 0, 1)


def posenc_relative(cfg, p, length):
    """T5's bias, and with `learned_absolute` a learned table at the input too (TUPE's BERT-R)."""
    at_input = None
    if cfg["posenc"].get("learned_absolute", False):
        at_input = posenc_learned(cfg, p, length).at_input
    return PositionTerms(at_input=at_input, attention_bias=relative_bias(cfg, p, length))


def layer_norm(p, prefix, x, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], p[f"{prefix}.gain"], p[f"{prefix}.bias"], eps)


def tupe_correlation(cfg, p, length):
    """TUPE's positional correlation [H, L, L] (Ke, He & Liu 2020, untied positions):
    (p̂_i U_Q^h)·(p̂_j U_K^h) / √(2·Dh) with p̂ = LayerNorm(p_i), p = the first L rows of
    `posenc.tupe.weight`; U^h is column block h (Dh wide) of the [D, D] `posenc.tupe.query/key`."""
    d, h = cfg["d_model"], cfg["heads"]
    dh = d // h
    table = p["posenc.tupe.weight"]
    if length > table.shape[0]:
        raise ValueError(f"sequence length {length} is over the TUPE table's max_len {table.shape[0]}")
    normed = layer_norm(p, "posenc.tupe.ln", table[:length])
    q = (normed @ p["posenc.tupe.query.weight"]).view(length, h, dh).transpose(0, 1)
    k = (normed @ p["posenc.tupe.key.weight"]).view(length, h, dh).transpose(0, 1)
    return q @ k.transpose(-1, -2) / math.sqrt(2 * dh)


def untie_cls(p, term):
    """The paper's reset of the position-only term (its eq. 9), per head h: [CLS] (position 0)
    attending to any j gets θ1[h] = `posenc.tupe.cls_to_others`, any i ≠ 0 attending to [CLS]
    gets θ2[h] = `posenc.tupe.others_to_cls`; the rest is unchanged."""
    h, length, _ = term.shape
    theta1 = p["posenc.tupe.cls_to_others"][:, None].expand(h, length)
    theta2 = p["posenc.tupe.others_to_cls"][:, None].expand(h, length - 1)
    rest = torch.cat([theta2[:, :, None], term[:, 1:, 1:]], dim=2)  # rows 1..: θ2, then the term
    return torch.cat([theta1[:, None, :], rest], dim=1)


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
    """TUPE-A plus T5's relative bias; posflow resets [CLS] in their sum (src/model/posenc/tupe.rs)."""
    bias = tupe_correlation(cfg, p, length) + relative_bias(cfg, p, length)
    return tupe_terms(cfg, p, bias)


def substep_grid(substeps):
    """torchdiffeq's grid for a fixed-step method: `substeps` equal steps in each output interval
    (posflow's `substeps`; the authors' rk4 at Δ/5). Works on decreasing t too: odeint_adjoint
    calls it on each interval backward."""

    def construct(func, y0, t):
        points = [t[j] + k * (t[j + 1] - t[j]) / substeps for j in range(len(t) - 1) for k in range(substeps)]
        return torch.stack(points + [t[-1]])

    return construct


def floater_solve(enc, p, prefix, p0, length):
    """FLOATER's solution [L, rows, D]: dp/dt = h(t, p) = W2·[σ(W1·[p; t] + b1); t] + b2 (the
    authors' flow_func_linear; W1, W2 in nn.Linear's [out, in] layout) from p(0) = p0 [rows, D],
    solved by torchdiffeq at t_i = i·Δ: `odeint` through its autograd for `gradient = "backprop"`,
    `odeint_adjoint` (the authors' call) for `"adjoint"`; fixed-step methods take `substeps` steps
    per interval."""
    act = {"relu": F.relu, "tanh": torch.tanh}[enc.get("activation", "relu")]
    w1, b1 = p[f"{prefix}.w1"], p[f"{prefix}.b1"]
    w2, b2 = p[f"{prefix}.w2"], p[f"{prefix}.b2"]

    def h(t, y):
        tt = t.to(y).expand(y.shape[0], 1)
        return F.linear(torch.cat([act(F.linear(torch.cat([y, tt], 1), w1, b1)), tt], 1), w2, b2)

    t = (torch.arange(length, dtype=torch.float64) * enc["delta"]).to(p0)
    method = enc["method"]
    if enc["gradient"] == "adjoint":
        solve = lambda *args, **kw: odeint_adjoint(*args, adjoint_params=(w1, b1, w2, b2), **kw)
    else:
        solve = odeint
    if method == "dopri5":
        return solve(h, p0, t, method=method, rtol=enc["rtol"], atol=enc["atol"])
    return solve(h, p0, t, method=method, options=dict(grid_constructor=substep_grid(enc["substeps"])))


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
        table = input_table(enc.get("sinusoid", "interleaved"), length, d, p.like)
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
        at_input=input_table(enc.get("sinusoid", "interleaved"), target_len, cfg["d_model"], p.like),
        qkv_bias=[torch.cat(block[:3], dim=-1) for block in parts],
        qkv_static_bias=False,
        cross_q_bias=[block[3] for block in parts],
        cross_kv_bias=[torch.cat(block, dim=-1) for block in kv],
    )
