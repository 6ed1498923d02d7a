"""Reference values for fused attention (posflow's Attention) and its probabilities.

Attention cases compute torch.nn.functional.scaled_dot_product_attention in float64 with an
additive mask: the bias [H, L, L] where present, and −inf for hidden keys (causal: keys after the
query; key_mask [B, L]: 0 marks a padded key). Every row keeps at least one visible key (torch
gives NaN for a row with none; posflow gives 0, which the Rust tests check on their own).
"""

import torch
import torch.nn.functional as F
from common import case, rand, save

B, H, L, DH = 2, 2, 7, 6
SCALE = 0.4
# Batch entry 0 is full length, entry 1 has 4 real tokens.
KEY_MASK = torch.tensor([[1] * L, [1] * 4 + [0] * (L - 4)], dtype=torch.int32)


def scores_mask(causal, bias, key_mask, batch, length):
    """The additive [B, H or 1, L, L] mask: bias, then −inf where a key is hidden."""
    mask = torch.zeros(batch, 1, length, length, dtype=torch.float64)
    if bias is not None:
        mask = mask + bias
    hidden = torch.zeros(batch, 1, length, length, dtype=torch.bool)
    if causal:
        hidden |= torch.ones(length, length, dtype=torch.bool).triu(1)
    if key_mask is not None:
        hidden |= (key_mask == 0)[:, None, None, :]
    return mask.masked_fill(hidden, float("-inf"))


def attention(causal):
    def f(q, k, v, bias=None, key_mask=None):
        mask = scores_mask(causal, bias, key_mask, q.shape[0], q.shape[2])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=SCALE)

    return f


def probs(causal):
    def f(q, k, bias=None, key_mask=None):
        mask = scores_mask(causal, bias, key_mask, q.shape[0], q.shape[2])
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
    save(s, path)
