"""Shared helpers for the PyTorch reference generators.

Each case computes an op in float64 PyTorch on random inputs, then a loss sum(out * upstream) and
its gradients, and stores everything as float32 (ints as int32) under `<case>/<name>`:

    <case>/<param>        an input that gets a gradient (a posflow parameter in the test)
    <case>/<int input>    an integer input (token ids, targets)
    <case>/upstream       the weights of the loss
    <case>/out            the op's output
    <case>/grad/<param>   d loss / d param

The Rust tests (`crate::testing::check_reference`) load the file, feed the same values to the same
op built in posflow, and compare.
"""

import pathlib
import sys

import torch
from safetensors.torch import save_file

# posflow_torch (python/ in this checkout) holds the transcriptions the model shares with these
# references: T5's buckets, fairseq's sinusoid, the ODE solvers' grid.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))

torch.manual_seed(0)


def rand(*shape, low=-1.0, high=1.0):
    return torch.rand(*shape, dtype=torch.float64) * (high - low) + low


def case(store, name, fn, params, ints=None):
    ints = ints or {}
    leaves = {k: v.detach().clone().to(torch.float64).requires_grad_(True) for k, v in params.items()}
    out = fn(**leaves, **ints)
    upstream = rand(*out.shape)
    (out * upstream).sum().backward()
    for k, v in leaves.items():
        store[f"{name}/{k}"] = v.detach().float().contiguous()
        store[f"{name}/grad/{k}"] = v.grad.float().contiguous()
    for k, v in ints.items():
        store[f"{name}/{k}"] = v.to(torch.int32).contiguous()
    store[f"{name}/upstream"] = upstream.float().contiguous()
    store[f"{name}/out"] = out.detach().float().contiguous()


def save(store, path):
    save_file(store, path)
    print(f"wrote {len(store)} tensors to {path}")
