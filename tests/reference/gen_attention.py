"""Reference values for fused attention (posflow's Attention) and its probabilities.

Attention cases compute torch.nn.functional.scaled_dot_product_attention in float64 with an
additive mask: the bias [H, Lq, Lk] where present, and −inf for hidden keys (causal: keys after the
query; key_mask [B, Lk]: 0 marks a padded key). Every row keeps at least one visible key (torch
gives NaN for a row with none; posflow gives 0, which the Rust tests check on their own).

The cross_* cases have queries and keys of different lengths (a decoder's queries over an
encoder's keys, or new queries over cached keys). Causal attention there is aligned at the end:
query i sits at key position i + Lk − Lq, as in FlashAttention 2.1 and later (torch's own
`is_causal` aligns at the start, so the mask is built here instead).
"""

import torch
import torch.nn.functional as F
from common import case, rand, save

B, H, L, DH = 2, 2, 7, 6
SCALE = 0.4
# Batch entry 0 is full length, entry 1 has 4 real tokens.
KEY_MASK = torch.tensor([[1] * L, [1] * 4 + [0] * (L - 4)], dtype=torch.int32)


def scores_mask(causal, bias, key_mask, batch, q_len, k_len):
    """The additive [B, H or 1, Lq, Lk] mask: bias, then −inf where a key is hidden."""
    mask = torch.zeros(batch, 1, q_len, k_len, dtype=torch.float64)
    if bias is not None:
        mask = mask + bias
    hidden = torch.zeros(batch, 1, q_len, k_len, dtype=torch.bool)
    if causal:
        hidden |= torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len + 1)
    if key_mask is not None:
        hidden |= (key_mask == 0)[:, None, None, :]
    return mask.masked_fill(hidden, float("-inf"))


def attention(causal):
    def f(q, k, v, bias=None, key_mask=None):
        mask = scores_mask(causal, bias, key_mask, q.shape[0], q.shape[2], k.shape[2])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=SCALE)

    return f


def probs(causal):
    def f(q, k, bias=None, key_mask=None):
        mask = scores_mask(causal, bias, key_mask, q.shape[0], q.shape[2], k.shape[2])
        return torch.softmax(q @ k.transpose(-1, -2) * SCALE + mask, dim=-1)

    return f


def main(path):
    s = {}

    def qkv():
        return {"q": rand(B, H, L, DH), "k": rand(B, H, L, DH), "v": rand(B, H, L, DH)}

    case(s, "plain", attention(False), qkv())
    case(s, "causal", attention(True), qkv())
    case(s, "bias", attention(False), {**qkv(), "bias": rand(H, L, L)})
    case(s, "mask", attention(False), qkv(), ints={"key_mask": KEY_MASK.clone()})
    case(s, "causal_bias_mask", attention(True), {**qkv(), "bias": rand(H, L, L)}, ints={"key_mask": KEY_MASK.clone()})
    qk = qkv()
    del qk["v"]
    case(s, "probs", probs(True), {**qk, "bias": rand(H, L, L)}, ints={"key_mask": KEY_MASK.clone()})
    # Queries shorter than keys: a decoder over a longer source; the key mask pads entry 1's keys.
    lq, lk = 5, 9
    cross_mask = torch.tensor([[1] * lk, [1] * 6 + [0] * (lk - 6)], dtype=torch.int32)

    def cross(q_len, k_len):
        return {"q": rand(B, H, q_len, DH), "k": rand(B, H, k_len, DH), "v": rand(B, H, k_len, DH)}

    case(s, "cross_mask", attention(False), cross(lq, lk), ints={"key_mask": cross_mask.clone()})
    case(s, "cross_causal_bias", attention(True), {**cross(lq, lk), "bias": rand(H, lq, lk)})
    # Queries longer than keys, causal: query i sees keys up to i − 3, so rows 0..2 see none
    # (torch gives NaN there); bias only, checked without causal.
    case(s, "cross_long_queries_bias", attention(False), {**cross(7, 4), "bias": rand(H, 7, 4)})
    save(s, path)
