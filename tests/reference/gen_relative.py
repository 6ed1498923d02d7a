"""Reference bucket indices of T5's relative position bias, from T5's own bucket function.

`t5_bucket` (in posflow_torch) is HF transformers' `T5Attention._relative_position_bucket`, copied verbatim (torch,
float32 logs as there). A bucket depends only on j − i, so each case stores the buckets of every
relative position −(L−1)..(L−1) (`<case>/by_offset`, index j − i + L − 1) for L = 300, and the
full [L, L] matrix of a short length built as T5Attention.compute_bias does (`<case>/matrix`).
"""

import torch
from common import save
from posflow_torch.encodings import t5_bucket

LONG = 300
SHORT = 20


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

