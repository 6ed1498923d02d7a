"""Reference for AdamW with gradient clipping: three steps on constant gradients.

The loss is sum(w * cw) + sum(b * cb), so the gradients are cw and cb at every step. Weight decay
applies to the matrix w only, as posflow's AdamW does (rank >= 2).
"""

import torch
from common import rand, save


def main(path):
    w = rand(5, 3).requires_grad_(True)
    b = rand(3).requires_grad_(True)
    cw, cb = rand(5, 3, low=-3, high=3), rand(3, low=-3, high=3)
    w0, b0 = w.detach().clone(), b.detach().clone()
    opt = torch.optim.AdamW(
        [{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
        lr=0.1, betas=(0.9, 0.999), eps=1e-8,
    )
    for _ in range(3):
        opt.zero_grad()
        ((w * cw).sum() + (b * cb).sum()).backward()
        norm = torch.nn.utils.clip_grad_norm_([w, b], max_norm=0.5)
        opt.step()
    s = {
        "w0": w0, "b0": b0, "cw": cw, "cb": cb,
        "w3": w.detach(), "b3": b.detach(), "grad_norm": norm.reshape(1),
    }
    save({k: v.float().contiguous() for k, v in s.items()}, path)
