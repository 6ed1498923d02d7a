"""Reference values for softmax over the last axis."""

import torch
from common import case, rand, save


def softmax(x):
    return torch.softmax(x, dim=-1)


def main(path):
    s = {}
    case(s, "short_rows", softmax, {"x": rand(2, 3, 7, low=-3.0, high=3.0)})
    case(s, "long_rows", softmax, {"x": rand(2, 1000, low=-3.0, high=3.0)})
    # Logits whose exp overflows f32 unless the row max is subtracted.
    case(s, "large_logits", softmax, {"x": rand(3, 20, low=-100.0, high=100.0)})
    save(s, path)
