"""Reference values of TUPE's position-only attention bias (src/model/posenc/tupe.rs).

For a [max_len, D] table p, its layer norm, per-head projections U_Q, U_K ([D, D], head h = column
block h of Dh), the bias of L positions is

    term[h, i, j] = (LN(p)_i U_Q^h) . (LN(p)_j U_K^h) / sqrt(2 Dh)   (+ rel[bucket(i, j), h], TUPE-R)

and with the [CLS] reset (the paper's eq. 9) row 0 is replaced by theta1[h] and column 0 below
row 0 by theta2[h]. The reset is written here with index assignment, not with the masks the Rust
graph uses. Sizes: L = 7 of a 9-row table, D = 12, H = 3; the TUPE-R case uses the encoder's
bidirectional buckets (8 buckets, max_distance 20), from T5's bucket function in gen_relative.py.
"""

import math

import torch
from common import case, rand, save
from gen_relative import matrix

L, MAX_LEN, D, H = 7, 9, 12, 3
BUCKETS, MAX_DISTANCE = 8, 20


def tupe(relative, untie):
    dh = D // H

    def f(**kw):
        p = kw["posenc.tupe.weight"][:L]
        p = torch.nn.functional.layer_norm(p, (D,), kw["posenc.tupe.ln.gain"], kw["posenc.tupe.ln.bias"], 1e-5)
        q = (p @ kw["posenc.tupe.query.weight"]).view(L, H, dh).transpose(0, 1)
        k = (p @ kw["posenc.tupe.key.weight"]).view(L, H, dh).transpose(0, 1)
        term = q @ k.transpose(1, 2) / math.sqrt(2 * dh)
        if relative:
            buckets = kw["posenc.relative.buckets"].long()
            term = term + kw["posenc.relative.weight"][buckets].permute(2, 0, 1)
        if untie:
            term = term.clone()
            term[:, :, 0] = kw["posenc.tupe.others_to_cls"].view(H, 1)
            term[:, 0, :] = kw["posenc.tupe.cls_to_others"].view(H, 1)
        return term

    return f


def params(relative, untie):
    ps = {
        "posenc.tupe.weight": rand(MAX_LEN, D),
        "posenc.tupe.ln.gain": rand(D, low=0.5, high=1.5),
        "posenc.tupe.ln.bias": rand(D),
        "posenc.tupe.query.weight": rand(D, D),
        "posenc.tupe.key.weight": rand(D, D),
    }
    if relative:
        ps["posenc.relative.weight"] = rand(BUCKETS, H)
    if untie:
        ps["posenc.tupe.cls_to_others"] = rand(H)
        ps["posenc.tupe.others_to_cls"] = rand(H)
    return ps


def main(path):
    s = {}
    buckets = matrix(L, bidirectional=True, num_buckets=BUCKETS, max_distance=MAX_DISTANCE)
    for name, relative, untie in [("tupe_a", False, False), ("tupe_a_untie", False, True), ("tupe_r_untie", True, True)]:
        ints = {"posenc.relative.buckets": buckets} if relative else None
        case(s, name, tupe(relative, untie), params(relative, untie), ints)
    save(s, path)
