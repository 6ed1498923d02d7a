"""Position encodings: a config's `posenc` -> the terms it adds to the model (PositionTerms), one
function per encoding type, registered in POSENCS. The formulas are posflow's
(src/model/posenc/), under its parameter names."""

import math

import torch
import torch.nn.functional as F


class PositionTerms:
    """What an encoding adds: `at_input` / `at_every_block` [L, D] added to the embeddings / to each
    block's input (`at_block`: block i's own [L, D], FLOATER); `qkv_bias`: block i's [L, 3D] added
    to its q|k|v projection, which then has no static bias (FLOATER's compatible form);
    `attention_bias` [H, L, L] added to every layer's attention logits; `attention_scale`, the
    factor on q·k when it is not 1/√Dh (TUPE); `rope` [L, Dh], RoPE's table at the tokens'
    positions, which turns every layer's queries and keys. A seq2seq decoder's FLOATER also gives block i's
    cross-attention `cross_q_bias` [T, D] and `cross_kv_bias` [S, 2D], in place of their static
    biases."""

    def __init__(self, at_input=None, at_every_block=None, attention_bias=None, attention_scale=None,
                 at_block=None, qkv_bias=None, qkv_static_bias=True, cross_q_bias=None, cross_kv_bias=None,
                 rope=None):
        self.at_input = at_input
        self.rope = rope
        self.at_every_block = at_every_block
        self.at_block = at_block
        self.qkv_bias = qkv_bias
        self.qkv_static_bias = qkv_static_bias
        self.attention_bias = attention_bias
        self.attention_scale = attention_scale
        self.cross_q_bias = cross_q_bias
        self.cross_kv_bias = cross_kv_bias


class Positions:
    """Where a sequence's tokens sit: `index` [L] (long), 0..L−1 or Ruoss et al.'s sorted sample of
    distinct positions of 0..range (`random_positions`, `sampled`), and `extent`, how many positions
    a table must cover (L, or the range). Every encoding reads its table's rows (`rows`) and its
    pairs' offsets (`offsets`) through these, as posflow's src/model/posenc/positions.rs."""

    def __init__(self, index, extent, sampled):
        self.index, self.extent, self.sampled = index, extent, sampled

    @staticmethod
    def contiguous(length, device="cpu"):
        return Positions(torch.arange(length, device=device), length, False)

    @staticmethod
    def randomized(index, range_):
        """The positions `index` [L] drawn from 0..range_: sorted, distinct, within the range."""
        index = torch.as_tensor(index, dtype=torch.long)
        if index.dim() != 1 or (index.numel() > 1 and not bool((index[1:] > index[:-1]).all())):
            raise ValueError("randomized positions must be one sorted row of distinct positions")
        if index.numel() and (int(index[0]) < 0 or int(index[-1]) >= range_):
            raise ValueError(f"randomized positions must lie in 0..{range_}, got {index.tolist()[:8]}")
        return Positions(index, range_, True)

    def rows(self, table):
        """`table`'s rows at these positions."""
        return table[self.index.to(table.device)]

    def offsets(self):
        """[L, L]: key j's position minus query i's."""
        return self.index[None, :] - self.index[:, None]


def posenc_none(cfg, p, at):
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


def posenc_sinusoidal(cfg, p, at):
    table = at.rows(input_table(cfg["posenc"].get("layout", "interleaved"), at.extent, cfg["d_model"], p.like))
    if cfg["posenc"].get("every_block", False):
        return PositionTerms(at_every_block=table)
    return PositionTerms(at_input=table)


def table_rows(p, name, at, what, d):
    """The rows of learned table `name` [rows, d] at `at`; a position past the table is an error."""
    table = p.shaped(name, None, d)
    if at.extent > table.shape[0]:
        raise ValueError(f"positions up to {at.extent - 1} are over the {what}'s max_len {table.shape[0]}")
    return at.rows(table)


def posenc_learned(cfg, p, at):
    return PositionTerms(at_input=table_rows(p, "pos_emb.weight", at, "learned table", cfg["d_model"]))


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


def relative_buckets(cfg, at, cls_buckets=False):
    """[L, L] T5 buckets of each pair's offset; with `cls_buckets` (TUPE-R's code form) row 0 is
    bucket buckets/2 and column 0 below it bucket `buckets`, [CLS]'s own."""
    enc = cfg["posenc"]
    buckets = enc.get("buckets", 32)
    ids = t5_bucket(at.offsets(), bidirectional=cfg["bidirectional"], num_buckets=buckets,
                    max_distance=enc.get("max_distance", 128))
    if cls_buckets:
        ids = ids.clone()
        ids[1:, 0] = buckets
        ids[0, :] = buckets // 2
    return ids


def relative_bias(cfg, p, at, cls_buckets=False):
    """T5's bias [H, L, L]: b[h, i, j] = posenc.relative.weight[bucket(pos j − pos i), h]."""
    table = p.shaped("posenc.relative.weight", None, cfg["heads"])
    return table[relative_buckets(cfg, at, cls_buckets)].permute(2, 0, 1)


def posenc_relative(cfg, p, at):
    """T5's bias, and with `learned_absolute` a learned table at the input too (TUPE's BERT-R)."""
    at_input = None
    if cfg["posenc"].get("learned_absolute", False):
        at_input = posenc_learned(cfg, p, at).at_input
    return PositionTerms(at_input=at_input, attention_bias=relative_bias(cfg, p, at))


def rope_table(length, dh, base):
    """RoPE's table [L, Dh]: the cosines of l·θ_i (θ_i = base^(−2i/Dh), i < Dh/2), then their sines,
    computed in float64 and rounded to float32 as posflow's (src/ops/rope.rs)."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    theta = base ** (-2 * torch.arange(dh // 2, dtype=torch.float64) / dh)
    angles = pos * theta
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=1).float()


def posenc_rope(cfg, p, at):
    dh = cfg["d_model"] // cfg["heads"]
    table = rope_table(at.extent, dh, cfg["posenc"].get("base", 10000.0)).to(p.like)
    return PositionTerms(rope=at.rows(table))


def rotate(x, table):
    """x [.., L, Dh] with each pair (2i, 2i + 1) turned by its position's angle: RoPE."""
    half = x.shape[-1] // 2
    c, s = table[:, :half], table[:, half:]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)


def alibi_slopes(heads):
    """Each head's slope, as the ALiBi authors' get_slopes."""
    def power_of_two(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]

    if heads & (heads - 1) == 0:
        return power_of_two(heads)
    closest = 2 ** int(math.log2(heads))
    return power_of_two(closest) + alibi_slopes(2 * closest)[0::2][: heads - closest]


def posenc_alibi(cfg, p, at):
    """ALiBi's bias [H, L, L]: −m_h · distance; an encoder counts keys on the left `left_offset`
    nearer (the authors' encoder ALiBi), a causal model only keys on the left."""
    offsets = at.offsets().to(torch.float64)
    if cfg["bidirectional"]:
        left = cfg["posenc"].get("left_offset", 0.0)
        distance = torch.where(offsets < 0, -offsets - left, offsets)
    else:
        distance = (-offsets).clamp(min=0)
    slopes = torch.tensor(alibi_slopes(cfg["heads"]), dtype=torch.float64, device=offsets.device)
    bias = (-slopes[:, None, None] * distance[None]).float()
    return PositionTerms(attention_bias=bias.to(p.like))


def layer_norm(p, prefix, x, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], p[f"{prefix}.gain"], p[f"{prefix}.bias"], eps)


def tupe_correlation(cfg, p, rows):
    """TUPE's positional correlation [H, R, R] of table rows `rows` [R, D] (Ke, He & Liu 2020):
    (p̂_i U_Q^h)·(p̂_j U_K^h) / √(2·Dh) with p̂ = LayerNorm(p_i) (`posenc.tupe.ln`); U^h is column
    block h (Dh wide) of the [D, D] `posenc.tupe.query/key`, which have biases in the authors'
    code form."""
    d, h = cfg["d_model"], cfg["heads"]
    dh = d // h
    code = cfg["posenc"].get("form", "paper") == "code"
    normed = layer_norm(p, "posenc.tupe.ln", rows)

    def project(prefix):
        t = normed @ p[f"{prefix}.weight"]
        if code:
            t = t + p[f"{prefix}.bias"]
        return t.view(rows.shape[0], h, dh).transpose(0, 1)

    q, k = project("posenc.tupe.query"), project("posenc.tupe.key")
    return q @ k.transpose(-1, -2) / math.sqrt(2 * dh)


def reset_cls(term, theta1, theta2):
    """The paper's reset of the position-only term (its eq. 9), per head h: [CLS] (position 0)
    attending to any j gets θ1[h], any i ≠ 0 attending to [CLS] gets θ2[h]; the rest is unchanged."""
    h, length, _ = term.shape
    rest = torch.cat([theta2[:, None, None].expand(h, length - 1, 1), term[:, 1:, 1:]], dim=2)
    return torch.cat([theta1[:, None, None].expand(h, 1, length), rest], dim=1)


def tupe_bias(cfg, p, at, relative):
    """TUPE's position-only bias [H, L, L] (src/model/posenc/tupe.rs): the correlation of the
    table's rows at the positions, plus T5's bias for TUPE-R, reset for [CLS] with untie_cls. The
    paper's θ1, θ2 are `posenc.tupe.cls_to_others` / `others_to_cls`; the authors' code form reads
    position i at row i + 1 and takes θ1, θ2 from the correlation of rows 0 and 1 with themselves,
    and gives TUPE-R's [CLS] row and column buckets of their own."""
    enc = cfg["posenc"]
    code, untie = enc.get("form", "paper") == "code", enc["untie_cls"]
    table = p.shaped("posenc.tupe.weight", None, cfg["d_model"])
    length, max_len = len(at.index), table.shape[0] - int(code)
    if at.extent > max_len:
        raise ValueError(f"positions up to {at.extent - 1} are over the TUPE table's max_len {max_len}")
    if untie and at.sampled:
        raise ValueError("TUPE's untied [CLS] sits at position 0, which randomized positions do not keep")
    if code and not at.sampled:
        correlation = tupe_correlation(cfg, p, table[: length + 1])
        term = correlation[:, 1:, 1:]
        if untie:
            term = reset_cls(term, correlation[:, 0, 0], correlation[:, 1, 1])
    else:
        term = tupe_correlation(cfg, p, at.rows(table[1:] if code else table))
    if relative:
        term = term + relative_bias(cfg, p, at, cls_buckets=code and untie)
    if untie and not code:
        heads = cfg["heads"]
        term = reset_cls(term, p.shaped("posenc.tupe.cls_to_others", heads), p.shaped("posenc.tupe.others_to_cls", heads))
    return term


def tupe_terms(cfg, p, at, relative):
    """TUPE's terms: the position-only bias and 1/√(2·Dh) on the word term, so word and position
    logits share one scale."""
    dh = cfg["d_model"] // cfg["heads"]
    return PositionTerms(attention_bias=tupe_bias(cfg, p, at, relative), attention_scale=1 / math.sqrt(2 * dh))


def posenc_tupe_a(cfg, p, at):
    return tupe_terms(cfg, p, at, relative=False)


def posenc_tupe_r(cfg, p, at):
    """TUPE-A plus T5's relative bias; the paper's form resets [CLS] in their sum."""
    return tupe_terms(cfg, p, at, relative=True)


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
    # Imported here: only FLOATER needs torchdiffeq (and through it SciPy).
    from torchdiffeq import odeint, odeint_adjoint

    act = {"relu": F.relu, "tanh": torch.tanh}[enc.get("activation", "relu")]
    d = p0.shape[-1]
    w1 = p.shaped(f"{prefix}.w1", None, d + 1)
    hidden = w1.shape[0]
    b1, w2, b2 = p.shaped(f"{prefix}.b1", hidden), p.shaped(f"{prefix}.w2", d, hidden + 1), p.shaped(f"{prefix}.b2", d)

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


def floater_biases(cfg, p, prefix, parts, at):
    """The compatible form's flow `prefix` over [parts, layers, D] from the learned b(0) =
    `{prefix}.qkv_initial`, solved through the positions' extent: for each block i, its parts
    [L, D] at the positions (part j is b[:, j, i])."""
    d, layers = cfg["d_model"], cfg["layers"]
    b0 = p[f"{prefix}.qkv_initial"]
    b = at.rows(floater_solve(cfg["posenc"], p, prefix, b0.reshape(parts * layers, d), at.extent))
    b = b.reshape(len(at.index), parts, layers, d)
    return [[b[:, j, i] for j in range(parts)] for i in range(layers)]


def posenc_floater(cfg, p, at):
    enc, d, layers = cfg["posenc"], cfg["d_model"], cfg["layers"]
    if enc["form"] == "bias":
        # The compatible form as the authors ran it: the sinusoidal model whose q/k/v biases
        # (none static) are one flow's solution over [3, layers, D] from the learned b(0).
        biases = [torch.cat(qkv, dim=-1) for qkv in floater_biases(cfg, p, "posenc.floater", 3, at)]
        table = at.rows(input_table(enc.get("sinusoid", "interleaved"), at.extent, d, p.like))
        return PositionTerms(at_input=table, qkv_bias=biases, qkv_static_bias=False)
    trajectory = at.rows(floater_solve(enc, p, "posenc.floater", p["posenc.floater.initial"], at.extent))
    if enc.get("every_block", True):
        return PositionTerms(at_block=[trajectory[:, i] for i in range(layers)])
    return PositionTerms(at_input=trajectory[:, 0])


POSENCS = {
    "alibi": posenc_alibi,
    "floater": posenc_floater,
    "rope": posenc_rope,
    "none": posenc_none,
    "sinusoidal": posenc_sinusoidal,
    "learned": posenc_learned,
    "relative": posenc_relative,
    "tupe_a": posenc_tupe_a,
    "tupe_r": posenc_tupe_r,
}

# The config's `word_scale`: the factor on q·k for heads of Dh, whatever the encoding's.
WORD_SCALES = {"standard": lambda dh: 1 / math.sqrt(dh), "tupe": lambda dh: 1 / math.sqrt(2 * dh)}


def position_terms(cfg, p, at):
    """The terms of the config's encoding for tokens at `at` (Positions)."""
    terms = POSENCS[cfg["posenc"]["type"]](cfg, p, at)
    if "word_scale" in cfg:
        terms.attention_scale = WORD_SCALES[cfg["word_scale"]](cfg["d_model"] // cfg["heads"])
    return terms


def decoder_terms(cfg, p, target_len, source_len):
    """A seq2seq decoder's terms: its side's encoding over the targets, except FLOATER's compatible
    form: the sinusoidal table at the input, one flow of 4 parts per block over the targets (self
    q, k, v; cross q) and one of 2 under `cross.` over the sources (cross k, v)."""
    enc = cfg["posenc"]
    targets = Positions.contiguous(target_len, p.like.device)
    if enc["type"] != "floater" or enc["form"] != "bias":
        return position_terms(cfg, p, targets)
    parts = floater_biases(cfg, p, "posenc.floater", 4, targets)
    kv = floater_biases(cfg, p, "cross.posenc.floater", 2, Positions.contiguous(source_len, p.like.device))
    return PositionTerms(
        at_input=input_table(enc.get("sinusoid", "interleaved"), target_len, cfg["d_model"], p.like),
        qkv_bias=[torch.cat(block[:3], dim=-1) for block in parts],
        qkv_static_bias=False,
        cross_q_bias=[block[3] for block in parts],
        cross_kv_bias=[torch.cat(block, dim=-1) for block in kv],
    )
