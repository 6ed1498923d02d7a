"""Reference values for attention with T5's relative bias looked up in the kernels.

posflow's Attention with a relative bias takes the table [buckets, H] (parameter `table`) and the
bucket of each offset j − i (`buckets`, int [2L − 1], entry j − i + L − 1). Here the bias is built
densely as T5 does, table[bucket(j − i)] moved to [H, L, L], with T5's own bucket function
(`gen_relative.py`), and attention is `gen_attention.py`'s. L = 9 with max_distance 6, so some
offsets fall past max_distance into the last bucket.

    python3 tests/reference/gen_attention_relative.py   (or generate.py for every file)
"""

import pathlib

import torch
from common import case, rand, save
from gen_attention import B, DH, H, attention
from gen_relative import t5_bucket

L = 9
BUCKETS, MAX_DISTANCE = 8, 6
# Batch entry 0 is full length, entry 1 has 5 real tokens.
LENGTHS_MASK = torch.tensor([[1] * L, [1] * 5 + [0] * (L - 5)], dtype=torch.int32)


def relative(causal):
    """Attention whose bias is the table looked up at the bucket of each (i, j)'s offset."""

    def f(q, k, v, table, buckets, key_mask=None):
        i = torch.arange(L)[:, None]
        j = torch.arange(L)[None, :]
        bias = table[buckets.long()[j - i + L - 1]].permute(2, 0, 1)
        return attention(causal)(q, k, v, bias=bias, key_mask=key_mask)

    return f


def main(path):
    s = {}
    offsets = torch.arange(-(L - 1), L, dtype=torch.long)

    def params():
        return {
            "q": rand(B, H, L, DH),
            "k": rand(B, H, L, DH),
            "v": rand(B, H, L, DH),
            "table": rand(BUCKETS, H),
        }

    for name, causal, mask in [("bidirectional_mask", False, LENGTHS_MASK), ("causal", True, None)]:
        buckets = t5_bucket(offsets, bidirectional=not causal, num_buckets=BUCKETS, max_distance=MAX_DISTANCE)
        ints = {"buckets": buckets.to(torch.int32)}
        if mask is not None:
            ints["key_mask"] = mask.clone()
        case(s, name, relative(causal), params(), ints=ints)
    save(s, path)


if __name__ == "__main__":
    torch.manual_seed(0)
    main(str(pathlib.Path(__file__).resolve().parent / "attention_relative.safetensors"))
