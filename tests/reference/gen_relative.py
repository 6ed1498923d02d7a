"""Reference bucket indices of T5's relative position bias, from T5's own bucket function.

`t5_bucket` is HF transformers' `T5Attention._relative_position_bucket`, copied verbatim (torch,
float32 logs as there). A bucket depends only on j − i, so each case stores the buckets of every
relative position −(L−1)..(L−1) (`<case>/by_offset`, index j − i + L − 1) for L = 300, and the
full [L, L] matrix of a short length built as T5Attention.compute_bias does (`<case>/matrix`).
"""

import math

import torch
from common import save

LONG = 300
SHORT = 20


def t5_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
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


def matrix(length, **kw):
    context_position = torch.arange(length, dtype=torch.long)[:, None]
    memory_position = torch.arange(length, dtype=torch.long)[None, :]
    return t5_bucket(memory_position - context_position, **kw)


def main(path):
    s = {}
    for buckets, max_distance in [(32, 128), (8, 20)]:
        for bidirectional in [True, False]:
            name = f"{'bi' if bidirectional else 'uni'}_{buckets}_{max_distance}"
            kw = dict(bidirectional=bidirectional, num_buckets=buckets, max_distance=max_distance)
            offsets = torch.arange(-(LONG - 1), LONG, dtype=torch.long)
            s[f"{name}/by_offset"] = t5_bucket(offsets, **kw).to(torch.int32).contiguous()
            s[f"{name}/matrix"] = matrix(SHORT, **kw).to(torch.int32).contiguous()
    save(s, path)

