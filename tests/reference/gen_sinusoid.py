"""Reference tables for the sinusoidal encoding's two layouts.

`fairseq/*`: fairseq's `SinusoidalPositionalEmbedding.get_embedding`, transcribed as its code
computes it (float32 tensors, the sines of every frequency, then the cosines, row 1 = the
padding index zeroed), and the rows a sequence's positions 0..len read: 2..len + 2 (fairseq's
`make_positions` counts from the padding index plus one). The ODE Transformer's and FLOATER's
translation code use this module. `interleaved/*`: Vaswani et al.'s formula in float64, posflow's
default layout."""

import math

import torch
from common import save


def fairseq_get_embedding(num_embeddings, embedding_dim, padding_idx):
    half_dim = embedding_dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
    if embedding_dim % 2 == 1:
        emb = torch.cat([emb, torch.zeros(num_embeddings, 1)], dim=1)
    if padding_idx is not None:
        emb[padding_idx, :] = 0
    return emb


def fairseq(length, d, padding_idx=1):
    table = fairseq_get_embedding(length + padding_idx + 1, d, padding_idx)
    return table[padding_idx + 1 :].contiguous()


def interleaved(length, d):
    p = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
    angle = p * 10000.0 ** (-i / d)
    table = torch.empty(length, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


def main(path):
    s = {}
    for length, d in [(40, 8), (300, 16)]:
        s[f"fairseq/{length}x{d}"] = fairseq(length, d)
        s[f"interleaved/{length}x{d}"] = interleaved(length, d)
    save(s, path)


if __name__ == "__main__":
    main("sinusoid.safetensors")
