"""Reference values for RoPE (Su et al., "RoFormer", eq. 34): each pair (2i, 2i+1) of a head
vector at position l turned by l * base^(-2i/Dh), computed here from the formula in float64 (the
Rust test builds posflow's own table, so this pins the table and the rotation together)."""

import torch
from common import case, rand, save


def rope(x, base=10000.0):
    length, dh = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * theta[None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def main(path):
    s = {}
    case(s, "short", rope, {"x": rand(2, 3, 5, 8)})
    case(s, "long", rope, {"x": rand(1, 300, 8)})
    case(s, "base_100", lambda x: rope(x, base=100.0), {"x": rand(2, 7, 4)})
    save(s, path)
