"""Reference values for layer normalisation over the last axis with affine gamma and beta."""

import torch
from common import case, rand, save


def layer_norm(eps):
    def f(x, gamma, beta):
        return torch.nn.functional.layer_norm(x, gamma.shape, gamma, beta, eps)

    return f


def main(path):
    s = {}
    case(s, "small", layer_norm(1e-5), {"x": rand(3, 5, 16, low=-2.0, high=3.0), "gamma": rand(16), "beta": rand(16)})
    case(s, "long_rows", layer_norm(1e-5), {"x": rand(2, 300), "gamma": rand(300), "beta": rand(300)})
    case(s, "large_eps", layer_norm(0.1), {"x": rand(4, 7), "gamma": rand(7), "beta": rand(7)})
    # Rows whose mean is 100 times their spread.
    case(s, "offset_rows", layer_norm(1e-5), {"x": rand(4, 50, low=9.9, high=10.1), "gamma": rand(50), "beta": rand(50)})

    # The residual add fused into the norm (`Graph::add_layernorm`): s = x + r and its norm, joined
    # along the first axis as the Rust test reads them.
    def residual(x, r, gamma, beta):
        s_ = x + r
        return torch.cat([s_, layer_norm(1e-5)(s_, gamma, beta)], dim=0)

    case(s, "residual", residual, {"x": rand(3, 4, 16), "r": rand(3, 4, 16), "gamma": rand(16), "beta": rand(16)})
    save(s, path)
