#!/usr/bin/env python3
"""The peers' PyTorch step (torch_train.py, beside this file on the GPU machine) at posflow's
`bench train --shape` sizes, eager or under torch.compile:

    python torch_shapes.py --device cuda --shape large --compile --steps 20 --warmup 3

torch_train.py reads its sizes from module globals when it builds the model, so they are set
here rather than copied; everything else (data, AdamW, fp32 with TF32 off, timing, the printed
line) is the peers' own. With --compile the model is compiled before the first step, whose
compilation the warm-up steps absorb; `peer=` then says torch-compile-<device>.
"""
import argparse
import sys

import torch

import torch_train as peer

SHAPES = {
    # d_model, heads, layers, ffn, batch, seq
    "peers": (128, 4, 4, 512, 16, 128),
    "large": (512, 8, 8, 2048, 32, 256),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", choices=sorted(SHAPES), default="peers")
    p.add_argument("--compile", action="store_true")
    a, rest = p.parse_known_args()
    d, heads, layers, ffn, batch, seq = SHAPES[a.shape]
    peer.D_MODEL, peer.N_HEADS, peer.N_LAYERS, peer.D_FF = d, heads, layers, ffn
    if a.compile:
        eager = peer.Lm
        peer.Lm = lambda s: torch.compile(eager(s))
        real_print = print

        def labelled(line, **kw):
            real_print(line.replace("peer=torch-", "peer=torch-compile-", 1), **kw)

        peer.print = labelled
    sys.argv = [sys.argv[0], "--batch", str(batch), "--seq", str(seq)] + rest
    peer.main()


if __name__ == "__main__":
    main()
