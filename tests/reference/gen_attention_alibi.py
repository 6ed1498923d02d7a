"""Reference values for attention with ALiBi (Press et al., "Train Short, Test Long").

The slopes are the authors' `get_slopes` (ofirpress/attention_with_linear_biases, copied
verbatim); the bias of query i and key j in head h is -m_h * (i - j) for a causal model (their
code adds m_h * j, the same softmax) and -m_h * |i - j| for an encoder. posflow looks the bias up
in its kernels from a constant table [2L - 1, H] and the identity offsets; here it is built
densely [H, L, L] and attention is `gen_attention.py`'s. Six heads take the non-power-of-two
branch of `get_slopes`.

    python3 tests/reference/gen_attention_alibi.py   (or generate.py for every file)
"""

import math
import pathlib

import torch
from common import case, rand, save
from gen_attention import DH, attention

B, L = 2, 9
# Batch entry 0 is full length, entry 1 has 5 real tokens.
LENGTHS_MASK = torch.tensor([[1] * L, [1] * 5 + [0] * (L - 5)], dtype=torch.int32)


def get_slopes(n):
    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2)
        + get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


def alibi(causal, heads):
    def f(q, k, v, key_mask=None):
        i = torch.arange(L, dtype=torch.float64)[:, None]
        j = torch.arange(L, dtype=torch.float64)[None, :]
        distance = (i - j).clamp(min=0) if causal else (i - j).abs()
        slopes = torch.tensor(get_slopes(heads), dtype=torch.float64)
        bias = -slopes[:, None, None] * distance[None, :, :]
        return attention(causal)(q, k, v, bias=bias, key_mask=key_mask)

    return f


def main(path):
    s = {}
    for name, causal, heads, mask in [("causal", True, 4, None), ("bidirectional_mask", False, 6, LENGTHS_MASK)]:
        params = {"q": rand(B, heads, L, DH), "k": rand(B, heads, L, DH), "v": rand(B, heads, L, DH)}
        ints = {"key_mask": mask.clone()} if mask is not None else {}
        case(s, name, alibi(causal, heads), params, ints=ints)
    save(s, path)


if __name__ == "__main__":
    torch.manual_seed(0)
    main(str(pathlib.Path(__file__).resolve().parent / "attention_alibi.safetensors"))
