"""Reference values for split_heads and merge_heads: PyTorch's view-and-permute of attention heads."""

import torch
from common import case, rand, save


def main(path):
    torch.manual_seed(0)  # the same file whether run alone or by generate.py
    s = {}
    b, l, parts, heads, dh = 2, 3, 3, 2, 4

    def split(x):
        # [B, L, P·H·Dh] → P × [B, H, L, Dh], joined along the batch axis as the Rust test does.
        parts_ = x.view(b, l, parts, heads, dh).permute(2, 0, 3, 1, 4)
        return torch.cat(list(parts_), dim=0)

    case(s, "split", split, {"x": rand(b, l, parts * heads * dh)})

    def merge(x0, x1):
        # 2 × [B, H, L, Dh] → [B, L, 2·H·Dh]
        stacked = torch.stack([x0, x1], dim=0)  # [P, B, H, L, Dh]
        return stacked.permute(1, 3, 0, 2, 4).reshape(2, 4, 2 * 3 * 5)

    case(s, "merge", merge, {"x0": rand(2, 3, 4, 5), "x1": rand(2, 3, 4, 5)})
    save(s, path)
