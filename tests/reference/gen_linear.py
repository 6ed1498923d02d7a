"""Reference values for a product with a bias (`Graph::matmul_bias`): torch.nn.functional.linear."""

import torch
from common import case, rand, save


def main(path):
    torch.manual_seed(0)  # the same file whether run alone or by generate.py
    s = {}
    # posflow's w is [in, out]; PyTorch's weight is its transpose.
    case(
        s,
        "linear",
        lambda x, w, bias: torch.nn.functional.linear(x, w.t(), bias),
        {"x": rand(2, 3, 4), "w": rand(4, 5), "bias": rand(5)},
    )
    save(s, path)
