"""posflow's Transformer (src/model/) in PyTorch, op by op under posflow's parameter names.

Linear weights are [in, out], used as `x @ W + b`; the columns of `attn.qkv` are [q | k | v], head
h taking columns h·Dh..(h+1)·Dh of each. Blocks are pre-norm, stepped as residual or Runge-Kutta
blocks (`block`), or post-LN residual layers (`norm = "post"`: the layer norm after each residual
add, no final norm, `emb_ln` on the embeddings unless `embedding_norm` is false); the FFN's GELU
(erf) or ReLU (`activation`); layer norm with eps 1e-5; softmax attention with the position
encoding's terms, a causal mask for the LM and the key mask for padding; the tied or untied LM
head or the encoder's [CLS] head; the mean cross-entropy over targets other than -100.

The seq2seq kind is src/model/seq2seq/'s: an encoder (bidirectional, source padding masked, final
norm `encoder.ln_f`) and a causal decoder whose blocks also attend to the encoder's output
(`ln_cross`, `cross.q`, `cross.kv` = [k | v] of the memory, `cross.out`), each side with its own
position parameters under its prefix, one token table for both sides.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .checkpoint import IGNORE_INDEX, Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from .encodings import POSENCS, Positions, decoder_terms, layer_norm, position_terms, rotate

SEQ2SEQ = "seq2seq"
# The key under which the config handed through the model says whether dropout is on (no posflow
# config key begins with an underscore).
TRAINING = "_training"
KINDS = ("causal_lm", "masked_lm", "encoder", "token_classifier", SEQ2SEQ)
BLOCKS = ("residual", "rk2", "rk2_gated", "rk4")


class ShapeMismatch(ValueError):
    """A parameter whose shape is not the one the model's config gives it."""


class Unsupported(ValueError):
    """A model form posflow has and this package does not yet: the message says which."""


def check_supported(cfg):
    """Raises Unsupported naming the first setting of `cfg` (a posflow model config) this package
    cannot compute as posflow does."""
    kind = cfg["kind"]["type"]
    if kind not in KINDS:
        raise Unsupported(f"model kind {kind!r}: posflow_torch has {', '.join(KINDS)} so far")
    enc = cfg["posenc"]
    if enc["type"] not in POSENCS:
        raise Unsupported(f"position encoding {enc['type']!r}: posflow_torch has {', '.join(sorted(POSENCS))} so far")
    blocks = [cfg.get("block", {"type": "residual"})]
    if kind == SEQ2SEQ:
        blocks.append(cfg["kind"].get("decoder_block", {"type": "residual"}))
    for block in blocks:
        if block["type"] not in BLOCKS:
            raise Unsupported(f"block {block}: posflow_torch has {', '.join(BLOCKS)} so far")


# ---- the Transformer ----------------------------------------------------------------------------


def linear(p, prefix, x, out, bias=True):
    """x @ W + b, W [x's width, out] and b [out] as the config says."""
    y = x @ p.shaped(f"{prefix}.weight", x.shape[-1], out)
    return y + p.shaped(f"{prefix}.bias", out) if bias else y


def heads(x, h):
    """[B, L, D] -> [B, H, L, Dh]: head h is columns h·Dh..(h+1)·Dh."""
    b, length, d = x.shape
    return x.view(b, length, h, d // h).transpose(1, 2)


def drop(cfg, x, site):
    """`x` through dropout of the config's probability at `site` (`dropout`: the embeddings and
    every sub-block's outputs; `activation_dropout`: the FFN's activations; `attention_dropout`:
    the attention probabilities), in training only. The sites are posflow's; its masks come from
    its own hash of the step's seed, so a model trained here matches posflow's in distribution,
    not mask for mask."""
    p = cfg.get(site, 0.0)
    return F.dropout(x, p, training=True) if cfg.get(TRAINING) and p > 0 else x


def attend(cfg, q, k, v, scale, bias, allowed):
    """softmax(q·k·scale + bias, where allowed) · v, heads merged back to [B, Lq, D]."""
    scores = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = drop(cfg, torch.softmax(scores, dim=-1), "attention_dropout") @ v
    b, h, length, dh = out.shape
    return out.transpose(1, 2).reshape(b, length, h * dh)


def allowed_keys(b, queries, keys, causal, key_mask, device):
    """[B, 1, Lq, Lk]: which keys each query may attend to."""
    allowed = torch.ones(b, 1, queries, keys, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed & torch.ones(queries, keys, dtype=torch.bool, device=device).tril()
    if key_mask is not None:
        allowed = allowed & (key_mask != 0)[:, None, None, :]
    return allowed


def projection_biases(cfg):
    """Whether the attention projections have static biases (`attention_biases`, default true)."""
    return cfg.get("attention_biases", True)


def self_attention(cfg, p, prefix, x, terms, causal, key_mask, qkv_bias=None):
    b, length, d = x.shape
    h = cfg["heads"]
    static = projection_biases(cfg)
    qkv = linear(p, f"{prefix}.qkv", x, 3 * d, bias=static and terms.qkv_static_bias)
    if qkv_bias is not None:
        qkv = qkv + qkv_bias
    q, k, v = (heads(t, h) for t in qkv.split(d, dim=-1))
    if terms.rope is not None:
        q, k = rotate(q, terms.rope), rotate(k, terms.rope)
    scale = 1 / math.sqrt(d // h) if terms.attention_scale is None else terms.attention_scale
    allowed = allowed_keys(b, length, length, causal, key_mask, x.device)
    return linear(p, f"{prefix}.out", attend(cfg, q, k, v, scale, terms.attention_bias, allowed), d, bias=static)


class Cross:
    """A decoder's view of the encoder: its output [B, S, D] and the source mask [B, S]."""

    def __init__(self, memory, source_mask):
        self.memory, self.source_mask = memory, source_mask


def cross_attention(cfg, p, prefix, x, cross, q_bias, kv_bias):
    """Decoder block `prefix`'s attention from x [B, T, D] to the encoder's output [B, S, D]: the
    usual 1/√Dh, no position bias, padded sources hidden. Static q and k|v biases, or FLOATER's."""
    b, length, d = x.shape
    h = cfg["heads"]
    static = projection_biases(cfg)
    if q_bias is None:
        q, kv = linear(p, f"{prefix}.q", x, d, static), linear(p, f"{prefix}.kv", cross.memory, 2 * d, static)
    else:
        q = x @ p.shaped(f"{prefix}.q.weight", d, d) + q_bias
        kv = cross.memory @ p.shaped(f"{prefix}.kv.weight", d, 2 * d) + kv_bias
    q, k, v = heads(q, h), heads(kv[..., :d], h), heads(kv[..., d:], h)
    allowed = allowed_keys(b, length, cross.memory.shape[1], False, cross.source_mask, x.device)
    return linear(p, f"{prefix}.out", attend(cfg, q, k, v, 1 / math.sqrt(d // h), None, allowed), d, static)


def feed_forward(cfg, p, prefix, x):
    act = {"gelu": F.gelu, "relu": F.relu}[cfg.get("activation", "gelu")]
    hidden = drop(cfg, act(linear(p, f"{prefix}.ffn.up", x, cfg["ffn"])), "activation_dropout")
    return drop(cfg, linear(p, f"{prefix}.ffn.down", hidden, x.shape[-1]), "dropout")


def sub_block(cfg, p, i, y, terms, causal, key_mask, cross):
    """Block i's F(y) = a + FFN(LN2(y + a)), a = Attn(LN1 y) (a decoder's: s + Cross(LN_cross(y + s)),
    s its self-attention)."""
    prefix = f"blocks.{i}"
    qkv_bias = None if terms.qkv_bias is None else terms.qkv_bias[i]
    normed = layer_norm(p, f"{prefix}.ln1", y)
    a = drop(cfg, self_attention(cfg, p, f"{prefix}.attn", normed, terms, causal, key_mask, qkv_bias), "dropout")
    if cross is not None:
        q_bias = None if terms.cross_q_bias is None else terms.cross_q_bias[i]
        kv_bias = None if terms.cross_kv_bias is None else terms.cross_kv_bias[i]
        normed = layer_norm(p, f"{prefix}.ln_cross", y + a)
        a = a + drop(cfg, cross_attention(cfg, p, f"{prefix}.cross", normed, cross, q_bias, kv_bias), "dropout")
    return a + feed_forward(cfg, p, prefix, layer_norm(p, f"{prefix}.ln2", y + a))


def post_block(cfg, p, i, y, terms, causal, key_mask, cross):
    """Block i with norm = "post": the post-LN layer of fairseq's Transformer and of BERT:
    m = LN1(y + Attn(y)), a decoder's m = LN_cross(m + Cross(m)), out = LN2(m + FFN(m))."""
    prefix = f"blocks.{i}"
    qkv_bias = None if terms.qkv_bias is None else terms.qkv_bias[i]
    a = drop(cfg, self_attention(cfg, p, f"{prefix}.attn", y, terms, causal, key_mask, qkv_bias), "dropout")
    m = layer_norm(p, f"{prefix}.ln1", y + a)
    if cross is not None:
        q_bias = None if terms.cross_q_bias is None else terms.cross_q_bias[i]
        kv_bias = None if terms.cross_kv_bias is None else terms.cross_kv_bias[i]
        c = drop(cfg, cross_attention(cfg, p, f"{prefix}.cross", m, cross, q_bias, kv_bias), "dropout")
        m = layer_norm(p, f"{prefix}.ln_cross", m + c)
    return layer_norm(p, f"{prefix}.ln2", m + feed_forward(cfg, p, prefix, m))


def post_norm(cfg):
    return cfg.get("norm", "pre") == "post"


def final_norm(cfg, p, x):
    """A pre-LN stack's `ln_f`; a post-LN stack's output is normalised already."""
    return x if post_norm(cfg) else layer_norm(p, "ln_f", x)


def rk_param(cfg, p, i, name):
    """A Runge-Kutta block's own parameter: block i's `blocks.{i}.{name}` in the paper's form; with
    `rk_stage = "layer"` (the authors' code) the stack's one `rk.{name}`, shared by its blocks."""
    return p[f"rk.{name}"] if whole_layer_stages(cfg) else p[f"blocks.{i}.{name}"]


def whole_layer_stages(cfg):
    return cfg.get("rk_stage", "sub_block") == "layer"


def step(cfg, p, i, block, f, y):
    """Block i's output from its input y and its stage f (the ODE Transformer's steps, src/model/block.rs)."""
    kind = block["type"]
    if kind == "residual":
        return y + f(y)
    if kind == "rk4":
        f1 = f(y)
        f2 = f(y + f1 / 2)
        f3 = f(y + f2 / 2)
        f4 = f(y + f3)
        return y + (f1 + 2 * f2 + 2 * f3 + f4) / 6
    f1 = f(y)
    f2 = f(y + f1)
    if kind == "rk2_gated":
        gate = torch.sigmoid(torch.cat([f1, f2], dim=-1) @ rk_param(cfg, p, i, "gate.weight") + rk_param(cfg, p, i, "gate.bias"))
        return y + gate * f1 + (1 - gate) * f2
    if block.get("learned"):
        return y + rk_param(cfg, p, i, "alpha1") * f1 + rk_param(cfg, p, i, "alpha2") * f2
    g1, g2 = block.get("gamma", [0.5, 0.5])
    return y + g1 * f1 + g2 * f2


class LayerHistory:
    """The ODE Transformer authors' layer history (src/model/history.rs): block i reads the mean
    (`dense`) or a learned mix (`learnable_dense`, `history.mix.{i}`) of the embeddings and every
    earlier block's output through its own layer norm `history.ln.{j}`; without one, the last
    output."""

    def __init__(self, cfg, p, embeddings):
        self.kind, self.p = cfg.get("history", "none"), p
        self.entries = [embeddings]

    def add(self, output):
        if self.kind == "none":
            self.entries = [output]
        else:
            self.entries.append(layer_norm(self.p, f"history.ln.{len(self.entries) - 1}", output))

    def pop(self):
        n = len(self.entries)
        if self.kind == "none":
            return self.entries[0]
        if self.kind == "dense":
            return sum(self.entries[1:], self.entries[0]) * (1 / n)
        mix = self.p[f"history.mix.{n - 1}"]
        return sum((self.entries[j] * mix[j] for j in range(1, n)), self.entries[0] * mix[0])


def stack(cfg, p, x, terms, block, causal, key_mask, cross=None):
    """cfg["layers"] blocks, each stepped as `block`, with the position terms at their inputs,
    through the layer history where the model has one."""
    history = LayerHistory(cfg, p, x)
    for i in range(cfg["layers"]):
        x = history.pop()
        if terms.at_every_block is not None:
            x = x + terms.at_every_block
        if terms.at_block is not None:
            x = x + terms.at_block[i]
        if post_norm(cfg):
            x = post_block(cfg, p, i, x, terms, causal, key_mask, cross)
        else:
            def f(y, i=i):
                value = sub_block(cfg, p, i, y, terms, causal, key_mask, cross)
                # The authors' code: each Runge-Kutta stage is the whole layer y + F(y) (a
                # residual block is y + F(y) either way).
                return y + value if whole_layer_stages(cfg) and block["type"] != "residual" else value

            x = step(cfg, p, i, block, f, x)
        history.add(x)
    return history.pop()


def embed(cfg, p, tokens, terms, side_params=None):
    """The token table's rows (· √D), plus the position term at the input, through the embedding
    layer norm `emb_ln` (the stack's own, under `side_params`) where the model has one: BERT's
    post-LN unless `embedding_norm` says otherwise."""
    x = p.shaped("tok_emb.weight", cfg["vocab"], cfg["d_model"])[tokens]
    if cfg.get("embed_scale", "none") == "sqrt_d":
        x = x * math.sqrt(cfg["d_model"])
    if terms.at_input is not None:
        x = x + terms.at_input
    if cfg.get("embedding_norm", post_norm(cfg)):
        x = layer_norm(p if side_params is None else side_params, "emb_ln", x)
    return drop(cfg, x, "dropout")


def side(cfg, layers, bidirectional):
    """The config a stack and its position encoding read: its number of blocks, and whether T5's
    buckets tell left from right."""
    return dict(cfg, layers=layers, bidirectional=bidirectional)


def lm_head(p, x, tied):
    # The tied head reads the table unscaled, whatever embed_scale.
    return x @ (p["tok_emb.weight"].T if tied else p.shaped("lm_head.weight", x.shape[-1], p["tok_emb.weight"].shape[0]))


def token_positions(cfg, length, positions, device):
    """Where the tokens sit: 0..L, or for a randomized model (`random_positions`) the positions
    given, as posflow drew them (`posflow forward` writes them out)."""
    range_ = cfg.get("random_positions")
    if range_ is None:
        if positions is not None:
            raise ValueError("this model's tokens sit at 0..L: it takes no positions")
        return Positions.contiguous(length, device)
    if positions is None:
        raise ValueError(f"this model's tokens sit at randomized positions of 0..{range_}: give them (positions [L])")
    at = Positions.randomized(torch.as_tensor(positions, device=device), range_)
    if len(at.index) != length:
        raise ValueError(f"{len(at.index)} positions for {length} tokens")
    return at


def forward_decoder_only(cfg, p, tokens, key_mask=None, positions=None):
    """Logits: [B, L, vocab] for a causal or masked LM, [B, L, n_classes] for a token classifier,
    [B, n_classes] for an encoder."""
    kind = cfg["kind"]
    causal = kind["type"] == "causal_lm"
    cfg = side(cfg, cfg["layers"], bidirectional=not causal)
    terms = position_terms(cfg, p, token_positions(cfg, tokens.shape[1], positions, tokens.device))
    block = cfg.get("block", {"type": "residual"})
    x = stack(cfg, p, embed(cfg, p, tokens, terms), terms, block, causal, key_mask)
    if causal:
        # The authors' LM with a layer history has no final layer norm.
        x = x if cfg.get("history", "none") != "none" else final_norm(cfg, p, x)
        return lm_head(p, x, kind.get("tied_head", True))
    if kind["type"] == "masked_lm":
        # BERT's head: a transform, then the token table (unscaled) and a bias per token.
        x = F.gelu(linear(p, "mlm_head.dense", final_norm(cfg, p, x), cfg["d_model"]))
        return layer_norm(p, "mlm_head.ln", x) @ p["tok_emb.weight"].T + p.shaped("mlm_head.bias", cfg["vocab"])
    if kind["type"] == "token_classifier":
        return linear(p, "token_head", final_norm(cfg, p, x), kind["n_classes"])
    return linear(p, "cls_head", final_norm(cfg, p, x[:, 0]), kind["n_classes"])


def forward_seq2seq(cfg, p, source, source_mask, target_in):
    """Teacher-forced next-token logits [B, T, vocab]."""
    kind = cfg["kind"]
    encoder, decoder = p.prefixed("encoder."), p.prefixed("decoder.")
    block = cfg.get("block", {"type": "residual"})
    enc_cfg = side(cfg, cfg["layers"], bidirectional=True)
    terms = position_terms(enc_cfg, encoder, Positions.contiguous(source.shape[1], source.device))
    x = stack(enc_cfg, encoder, embed(cfg, p, source, terms, encoder), terms, block, False, source_mask)
    cross = Cross(final_norm(cfg, encoder, x), source_mask)
    dec_cfg = side(cfg, kind["decoder_layers"], bidirectional=False)
    terms = decoder_terms(dec_cfg, decoder, target_in.shape[1], source.shape[1])
    dec_block = kind.get("decoder_block", {"type": "residual"})
    y = stack(dec_cfg, decoder, embed(cfg, p, target_in, terms, decoder), terms, dec_block, True, None, cross)
    return lm_head(p, final_norm(cfg, decoder, y), kind.get("tied_head", True))


def forward(cfg, params, inputs):
    """The model's logits on `inputs`: (tokens [B, L], key mask [B, L] or None, and a randomized
    model's positions [L]), or a seq2seq model's (source [B, S], source mask [B, S], target_in
    [B, T]). Every parameter must be used and
    none may be missing (a KeyError names it)."""
    used = set()
    p = UsedParams(params, used)
    if cfg["kind"]["type"] == SEQ2SEQ:
        logits = forward_seq2seq(cfg, p, *inputs)
    else:
        logits = forward_decoder_only(cfg, p, *inputs)
    unused = set(params) - used
    if unused:
        raise Unsupported(f"parameters the model does not use: {sorted(unused)}")
    return logits


class UsedParams:
    """The parameters by name, recording which were read; a missing name is a KeyError naming it."""

    def __init__(self, params, used, prefix=""):
        self.params, self.used, self.prefix = params, used, prefix
        # Tables the model builds (sinusoids) take the parameters' dtype and device.
        self.like = next(iter(params.values()))

    def __getitem__(self, name):
        name = self.prefix + name
        if name not in self.params:
            raise KeyError(f"the model has no parameter {name}, which its config needs")
        self.used.add(name)
        return self.params[name]

    def shaped(self, name, *shape):
        """The parameter `name`, which must have `shape` (None: any size on that axis): posflow
        refuses a checkpoint whose tensors do not fit its config, and so does this package."""
        tensor = self[name]
        if tensor.dim() != len(shape) or any(want not in (None, got) for want, got in zip(shape, tensor.shape)):
            want = ["any" if n is None else n for n in shape]
            raise ShapeMismatch(f"parameter {self.prefix + name} is {list(tensor.shape)}; its config needs {want}")
        return tensor

    def prefixed(self, prefix):
        """The parameters under `prefix` (a seq2seq side's), by their names without it."""
        return UsedParams(self.params, self.used, self.prefix + prefix)


def loss_of(logits, targets):
    """Mean cross-entropy over the targets that are not IGNORE_INDEX (-100)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)


# ---- the module ---------------------------------------------------------------------------------


class PosflowModel(nn.Module):
    """A posflow model as an nn.Module whose parameter names are posflow's: `named_parameters()`
    gives `blocks.0.attn.qkv.weight` etc., so `state_dict()` is a posflow checkpoint's tensors and
    DistributedDataParallel wraps it as it is."""

    def __init__(self, config, params, source="the parameters given"):
        check_supported(config)
        super().__init__()
        self.config = config
        for name, value in params.items():
            self._register(name, nn.Parameter(value.clone()))
        self._check_fit(source)

    def _check_fit(self, source):
        """One token through the model, in evaluation mode and without gradients: every parameter
        is read at the shape its config gives it, and none is left over, or `source` (a
        checkpoint's path) is refused as posflow refuses it."""
        cfg = self.config
        token = torch.zeros(1, 1, dtype=torch.long, device=next(self.parameters()).device)
        if cfg["kind"]["type"] == SEQ2SEQ:
            inputs = (token, None, token)
        else:
            inputs = (token, None, torch.zeros(1, dtype=torch.long) if cfg.get("random_positions") else None)
        try:
            with torch.no_grad():
                forward(dict(cfg, **{TRAINING: False}), dict(self.named_parameters()), inputs)
        except Unsupported as e:
            raise Unsupported(f"{source}: {e}") from e
        except (ShapeMismatch, KeyError, RuntimeError, IndexError) as e:
            raise CheckpointError(f"{source}: its tensors do not fit its config: {e}") from e

    def _register(self, name, parameter):
        """Registers `parameter` under dotted `name` through nested containers (`blocks`, `0`,
        `attn`, `qkv`, then the parameter `weight`)."""
        *path, leaf = name.split(".")
        module = self
        for part in path:
            if part not in module._modules:
                module.add_module(part, nn.Module())
            module = module._modules[part]
        module.register_parameter(leaf, parameter)

    @classmethod
    def from_checkpoint(cls, path, dtype=torch.float32):
        """The model of the posflow checkpoint at `path`, its parameters in `dtype`."""
        checkpoint = load_checkpoint(path)
        model = cls(checkpoint.config, {k: v.to(dtype) for k, v in checkpoint.params.items()}, source=path)
        model.checkpoint = checkpoint
        return model

    def forward(self, *inputs):
        """Logits for `inputs` (see `forward` above), with dropout in training mode."""
        return forward(dict(self.config, **{TRAINING: self.training}), dict(self.named_parameters()), inputs)

    def save(self, path, training=None):
        """Writes the model as a posflow checkpoint (float32), keeping the loaded checkpoint's
        tokenizer and, unless `training` replaces it, its training state."""
        loaded = getattr(self, "checkpoint", None) or Checkpoint(config=self.config, params={})
        params = {name: p.detach() for name, p in self.named_parameters()}
        save_checkpoint(
            Checkpoint(
                config=self.config,
                params=params,
                training=training if training is not None else loaded.training,
                tokenizer=loaded.tokenizer,
            ),
            path,
        )
