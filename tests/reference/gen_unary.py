"""Reference values for the activations exp, tanh, sigmoid, relu and gelu (erf form)."""

import torch
from common import case, rand, save


def main(path):
    s = {}
    case(s, "exp", torch.exp, {"x": rand(4, 9, low=-3.0, high=3.0)})
    case(s, "tanh", torch.tanh, {"x": rand(4, 9, low=-4.0, high=4.0)})
    case(s, "sigmoid", torch.sigmoid, {"x": rand(4, 9, low=-6.0, high=6.0)})
    case(s, "relu", torch.relu, {"x": rand(4, 9, low=-2.0, high=2.0)})
    # PyTorch's default GELU is the exact erf form (approximate="none").
    case(s, "gelu", torch.nn.functional.gelu, {"x": rand(4, 9, low=-5.0, high=5.0)})
    save(s, path)
