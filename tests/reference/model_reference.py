"""posflow's Transformer in PyTorch, loaded from a posflow checkpoint by its documented names.

The model is the one of src/model/mod.rs, written out op by op: the parameter names and layouts of
its table (linear weights are [in, out], used as `x @ W + b`; the columns of `attn.qkv` are
[q | k | v], head h taking columns h·Dh..(h+1)·Dh of each), pre-norm blocks, GELU (erf), layer norm
with eps 1e-5, softmax attention with the position encoding's terms, a causal mask for the LM and
the key mask for padding, the tied or untied LM head or the encoder's [CLS] head, and the mean
cross-entropy over targets other than -100. Everything runs in float64.

    python3 model_reference.py generate [DIR]
        writes the checkpoints of examples/reference_checkpoints.rs to DIR (default: models/ beside
        this script) with cargo, then `<name>.expected.safetensors` beside each: `logits`, `loss`
        and `grad/<param>` (float32) on the batch stored in the checkpoint. tests/model_reference.rs
        compares posflow's values with these. The same in two steps:
            cargo run --example reference_checkpoints -- tests/reference/models
            python3 tests/reference/model_reference.py expect tests/reference/models/*.safetensors

    python3 model_reference.py CHECKPOINT [TEXT]
        the loss and logits of any posflow checkpoint: on TEXT (encoded with the checkpoint's
        tokenizer, BOS first; next-character loss for a causal LM), or else on the checkpoint's
        `reference_batch`.

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

IGNORE_INDEX = -100
BOS = 1
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
    layer's attention logits; `attention_scale`, the factor on q·k when it is not 1/√Dh (TUPE)."""

    def __init__(self, at_input=None, at_every_block=None, attention_bias=None, attention_scale=None,
                 at_block=None, qkv_bias=None, qkv_static_bias=True):
        self.at_input = at_input
        self.at_every_block = at_every_block
        self.at_block = at_block
        self.qkv_bias = qkv_bias
        self.qkv_static_bias = qkv_static_bias
        self.attention_bias = attention_bias
        self.attention_scale = attention_scale


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


def posenc_sinusoidal(cfg, p, length):
    table = sinusoidal_table(length, cfg["d_model"])
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
        bidirectional=cfg["kind"]["type"] == "encoder",
        num_buckets=enc.get("buckets", 32),
        max_distance=enc.get("max_distance", 128),
    )
    bias = p["posenc.relative.weight"][buckets]  # [L, L, H]
    return bias.permute(2, 0, 1)


def posenc_relative(cfg, p, length):
    return PositionTerms(attention_bias=relative_bias(cfg, p, length))


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


def posenc_floater(cfg, p, length):
    enc, d, layers = cfg["posenc"], cfg["d_model"], cfg["layers"]
    if enc["form"] == "bias":
        # The compatible form as the authors ran it: the sinusoidal model whose q/k/v biases
        # (none static) are one flow's solution over [3, layers, D] from the learned b(0).
        b0 = p["posenc.floater.qkv_initial"]
        b = floater_solve(enc, p, "posenc.floater", b0.reshape(3 * layers, d), length)
        b = b.reshape(length, 3, layers, d)
        biases = [torch.cat([b[:, 0, i], b[:, 1, i], b[:, 2, i]], dim=-1) for i in range(layers)]
        return PositionTerms(at_input=sinusoidal_table(length, d), qkv_bias=biases, qkv_static_bias=False)
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


# ---- the Transformer ----------------------------------------------------------------------------


def linear(p, prefix, x):
    return x @ p[f"{prefix}.weight"] + p[f"{prefix}.bias"]


def layer_norm(p, prefix, x):
    return F.layer_norm(x, x.shape[-1:], p[f"{prefix}.gain"], p[f"{prefix}.bias"], LN_EPS)


def self_attention(cfg, p, prefix, x, terms, key_mask, qkv_bias=None):
    b, length, d = x.shape
    h = cfg["heads"]
    dh = d // h
    if terms.qkv_static_bias:
        qkv = linear(p, f"{prefix}.qkv", x)
    else:
        qkv = x @ p[f"{prefix}.qkv.weight"]
    if qkv_bias is not None:
        qkv = qkv + qkv_bias
    q, k, v = qkv.split(d, dim=-1)
    q, k, v = (t.view(b, length, h, dh).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2)
    if terms.attention_scale is None:
        scores = scores / math.sqrt(dh)
    else:
        scores = scores * terms.attention_scale
    if terms.attention_bias is not None:
        scores = scores + terms.attention_bias
    allowed = torch.ones(b, 1, length, length, dtype=torch.bool)
    if cfg["kind"]["type"] == "causal_lm":
        allowed = allowed & torch.ones(length, length, dtype=torch.bool).tril()
    if key_mask is not None:
        allowed = allowed & (key_mask != 0)[:, None, None, :]
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return linear(p, f"{prefix}.out", out.transpose(1, 2).reshape(b, length, d))


def forward(cfg, p, tokens, key_mask=None):
    """Logits: [B, L, vocab] for a causal LM, [B, n_classes] for an encoder. Checks that every
    parameter of the checkpoint is used and that none is missing."""
    used = set()
    p = UsedParams(p, used)
    b, length = tokens.shape
    d = cfg["d_model"]
    block = cfg.get("block", {"type": "residual"})["type"]
    if block != "residual":
        # gen_rk_block.py holds the reference of one Runge-Kutta block; this model is residual only.
        raise SystemExit(f"model_reference.py builds residual blocks only, this checkpoint has {block} blocks")
    if cfg["posenc"]["type"] not in POSENCS:
        raise SystemExit(f"model_reference.py has no {cfg['posenc']['type']} position encoding yet")
    terms = POSENCS[cfg["posenc"]["type"]](cfg, p, length)
    x = p["tok_emb.weight"][tokens]
    if cfg.get("embed_scale", "none") == "sqrt_d":
        x = x * math.sqrt(d)
    if terms.at_input is not None:
        x = x + terms.at_input
    for i in range(cfg["layers"]):
        if terms.at_every_block is not None:
            x = x + terms.at_every_block
        if terms.at_block is not None:
            x = x + terms.at_block[i]
        normed = layer_norm(p, f"blocks.{i}.ln1", x)
        qkv_bias = None if terms.qkv_bias is None else terms.qkv_bias[i]
        x = x + self_attention(cfg, p, f"blocks.{i}.attn", normed, terms, key_mask, qkv_bias)
        hidden = F.gelu(linear(p, f"blocks.{i}.ffn.up", layer_norm(p, f"blocks.{i}.ln2", x)))
        x = x + linear(p, f"blocks.{i}.ffn.down", hidden)
    kind = cfg["kind"]
    if kind["type"] == "causal_lm":
        x = layer_norm(p, "ln_f", x)
        # The tied head reads the table unscaled, whatever embed_scale.
        logits = x @ (p["tok_emb.weight"].T if kind.get("tied_head", True) else p["lm_head.weight"])
    else:
        logits = linear(p, "cls_head", layer_norm(p, "ln_f", x[:, 0]))
    unused = set(p.params) - used
    if unused:
        sys.exit(f"checkpoint tensors the model does not use: {sorted(unused)}")
    return logits


class UsedParams:
    """The parameters by name, recording which were read; a missing name is a clear error."""

    def __init__(self, params, used):
        self.params, self.used = params, used

    def __getitem__(self, name):
        if name not in self.params:
            sys.exit(f"the checkpoint has no tensor {name}, which its config needs")
        self.used.add(name)
        return self.params[name]


def loss_of(cfg, logits, targets):
    """Mean cross-entropy over the targets that are not IGNORE_INDEX."""
    flat = logits.reshape(-1, logits.shape[-1])
    return F.cross_entropy(flat, targets.reshape(-1), ignore_index=IGNORE_INDEX)


def reference_batch(metadata):
    """(tokens [B, L], targets, key mask or None) stored by examples/reference_checkpoints.rs."""
    batch = json.loads(metadata["training"]).get("reference_batch")
    if batch is None:
        sys.exit("this checkpoint stores no reference_batch: give a TEXT to evaluate it on")
    shape = (batch["batch"], batch["len"])
    tokens = torch.tensor(batch["tokens"], dtype=torch.long).view(shape)
    targets = torch.tensor(batch["targets"], dtype=torch.long)
    mask = batch["mask"]
    mask = None if mask is None else torch.tensor(mask, dtype=torch.long).view(shape)
    return tokens, targets, mask


# ---- commands -----------------------------------------------------------------------------------


def expect(path):
    """Writes `<name>.expected.safetensors` beside the checkpoint: logits, loss, grad/<param>."""
    path = pathlib.Path(path)
    cfg, metadata, params = load(path)
    tokens, targets, mask = reference_batch(metadata)
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    logits = forward(cfg, leaves, tokens, mask)
    loss = loss_of(cfg, logits, targets)
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for name, leaf in leaves.items():
        out[f"grad/{name}"] = leaf.grad
    out = {k: v.float().contiguous() for k, v in out.items()}
    target = path.with_name(path.name.removesuffix(".safetensors") + ".expected.safetensors")
    save_file(out, str(target))
    print(f"{target.name}: loss {loss.item():.6f}, {len(leaves)} gradients")


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
        tokens, targets, mask = reference_batch(metadata)
        print(f"{path}: the checkpoint's reference batch, {tuple(tokens.shape)}")
    else:
        tokens, mask = encode(metadata, text), None
        # Next characters for a causal LM; an encoder's class is unknown, so no loss.
        targets = torch.cat([tokens[:, 1:], torch.tensor([[IGNORE_INDEX]])], dim=1)
    with torch.no_grad():
        logits = forward(cfg, params, tokens, mask)
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
