"""Reference values for one block of the model (src/model/block.rs) of each kind: residual, RK2 with
γ = ½, ½ and with γ = 1, 1, gated RK2 and RK4 (ODE Transformer, Li et al. 2022), on an input x
[B, L, D] with causal attention.

F(y) = a + FFN(LN2(y + a)) with a = Attn(LN1(y)) is the pre-norm attention+FFN sub-block minus
its input; every stage of a block uses the same parameters (named as posflow's, `blocks.0.*`,
linear weights [in, out]). The gate of the gated block is g = sigmoid([F1, F2]·W + b) per position,
W [2D, 1], b [1]. The parameters are random (not the model's init) so that every term, the gate's
included, is far from trivial.
"""

import math

import torch
import torch.nn.functional as F

from common import case, rand, save

B, L, D, HEADS, FFN = 2, 5, 8, 2, 16
LN_EPS = 1e-5
P = "blocks.0"


def linear(p, name, x):
    return x @ p[f"{P}.{name}.weight"] + p[f"{P}.{name}.bias"]


def layer_norm(p, name, x):
    return F.layer_norm(x, x.shape[-1:], p[f"{P}.{name}.gain"], p[f"{P}.{name}.bias"], LN_EPS)


def attention(p, x):
    b, length, d = x.shape
    dh = d // HEADS
    q, k, v = linear(p, "attn.qkv", x).split(d, dim=-1)
    q, k, v = (t.view(b, length, HEADS, dh).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    out = scores.softmax(-1) @ v
    return linear(p, "attn.out", out.transpose(1, 2).reshape(b, length, d))


def sub_block(p, y):
    """F(y): the pre-norm block's output minus its input."""
    a = attention(p, layer_norm(p, "ln1", y))
    return a + linear(p, "ffn.down", F.gelu(linear(p, "ffn.up", layer_norm(p, "ln2", y + a))))


def residual(x, **p):
    return x + sub_block(p, x)


def rk2(gamma):
    def fn(x, **p):
        f1 = sub_block(p, x)
        f2 = sub_block(p, x + f1)
        return x + gamma[0] * f1 + gamma[1] * f2

    return fn


def rk2_gated(x, **p):
    f1 = sub_block(p, x)
    f2 = sub_block(p, x + f1)
    g = torch.sigmoid(linear(p, "gate", torch.cat([f1, f2], dim=-1)))
    return x + g * f1 + (1 - g) * f2


def rk4(x, **p):
    f1 = sub_block(p, x)
    f2 = sub_block(p, x + f1 / 2)
    f3 = sub_block(p, x + f2 / 2)
    f4 = sub_block(p, x + f3)
    return x + (f1 + 2 * f2 + 2 * f3 + f4) / 6


def params(gated):
    p = {}
    for ln in ("ln1", "ln2"):
        p[f"{P}.{ln}.gain"] = rand(D, low=0.7, high=1.3)
        p[f"{P}.{ln}.bias"] = rand(D, low=-0.2, high=0.2)
    shapes = {"attn.qkv": (D, 3 * D), "attn.out": (D, D), "ffn.up": (D, FFN), "ffn.down": (FFN, D)}
    if gated:
        shapes["gate"] = (2 * D, 1)
    for name, (fan_in, fan_out) in shapes.items():
        bound = 1 / math.sqrt(fan_in)
        p[f"{P}.{name}.weight"] = rand(fan_in, fan_out, low=-bound, high=bound)
        p[f"{P}.{name}.bias"] = rand(fan_out, low=-0.1, high=0.1)
    return p


def main(path):
    s = {}
    kinds = {
        "residual": residual,
        "rk2_half": rk2((0.5, 0.5)),
        "rk2_one": rk2((1.0, 1.0)),
        "rk2_gated": rk2_gated,
        "rk4": rk4,
    }
    for name, fn in kinds.items():
        case(s, name, fn, {"x": rand(B, L, D), **params(gated=name == "rk2_gated")})
    save(s, path)
