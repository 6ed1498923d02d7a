"""Reference values of TUPE's position-only attention bias (src/model/posenc/tupe.rs).

For a [max_len, D] table p, its layer norm, per-head projections U_Q, U_K ([D, D], head h = column
block h of Dh), the bias of L positions is

    term[h, i, j] = (LN(p)_i U_Q^h) . (LN(p)_j U_K^h) / sqrt(2 Dh)   (+ rel[bucket(i, j), h], TUPE-R)

and with the [CLS] reset (the paper's eq. 9) row 0 is replaced by theta1[h] and column 0 below
row 0 by theta2[h]. The reset is written here with index assignment, not with the masks the Rust
graph uses. Sizes: L = 7 of a 9-row table, D = 12, H = 3; the TUPE-R case uses the encoder's
bidirectional buckets (8 buckets, max_distance 20), from T5's bucket function in gen_relative.py.

The `code_*` cases are the authors' form (guolinke/TUPE, transformer_sentence_encoder.py): a table
of 9 + 1 rows, rows 0..=L through the layer norm and U_Q, U_K with biases, θ1 and θ2 the
self-correlations of rows 0 and 1, the term the correlation of rows 1..=L with its [CLS] row and
column set to them; TUPE-R's relative table has one more bucket, [CLS]'s column in bucket 8 and its
row in bucket 8 // 2, and is added after the reset.
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


def tupe_code(relative):
    dh = D // H

    def f(**kw):
        p = kw["posenc.tupe.weight"][: L + 1]
        p = torch.nn.functional.layer_norm(p, (D,), kw["posenc.tupe.ln.gain"], kw["posenc.tupe.ln.bias"], 1e-5)
        q = (p @ kw["posenc.tupe.query.weight"] + kw["posenc.tupe.query.bias"]).view(L + 1, H, dh).transpose(0, 1)
        k = (p @ kw["posenc.tupe.key.weight"] + kw["posenc.tupe.key.bias"]).view(L + 1, H, dh).transpose(0, 1)
        correlation = (q / math.sqrt(2 * dh)) @ k.transpose(1, 2)
        cls_2_other, other_2_cls = correlation[:, 0, 0], correlation[:, 1, 1]
        term = correlation[:, 1:, 1:].clone()
        term[:, :, 0] = other_2_cls.view(-1, 1)
        term[:, 0, :] = cls_2_other.view(-1, 1)
        if relative:
            buckets = kw["posenc.relative.buckets"].long()
            term = term + kw["posenc.relative.weight"][buckets].permute(2, 0, 1)
        return term

    return f


def params_code(relative):
    ps = {
        "posenc.tupe.weight": rand(MAX_LEN + 1, D),
        "posenc.tupe.ln.gain": rand(D, low=0.5, high=1.5),
        "posenc.tupe.ln.bias": rand(D),
        "posenc.tupe.query.weight": rand(D, D),
        "posenc.tupe.query.bias": rand(D),
        "posenc.tupe.key.weight": rand(D, D),
        "posenc.tupe.key.bias": rand(D),
    }
    if relative:
        ps["posenc.relative.weight"] = rand(BUCKETS + 1, H)
    return ps


def main(path):
    s = {}
    buckets = matrix(L, bidirectional=True, num_buckets=BUCKETS, max_distance=MAX_DISTANCE)
    for name, relative, untie in [("tupe_a", False, False), ("tupe_a_untie", False, True), ("tupe_r_untie", True, True)]:
        ints = {"posenc.relative.buckets": buckets} if relative else None
        case(s, name, tupe(relative, untie), params(relative, untie), ints)
    cls_buckets = buckets.clone()
    cls_buckets[:, 0] = BUCKETS
    cls_buckets[0, :] = BUCKETS // 2
    for name, relative in [("code_tupe_a_untie", False), ("code_tupe_r_untie", True)]:
        ints = {"posenc.relative.buckets": cls_buckets} if relative else None
        case(s, name, tupe_code(relative), params_code(relative), ints)
    save(s, path)
