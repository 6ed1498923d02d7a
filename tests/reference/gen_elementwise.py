"""Reference values for add/sub/mul/div with broadcasting, scale, sum, mean and broadcast_to."""

import torch
from common import case, rand, save


def main(path):
    s = {}
    case(s, "add", lambda a, b: a + b, {"a": rand(3, 4, 5), "b": rand(4, 1)})
    case(s, "sub", lambda a, b: a - b, {"a": rand(2, 3), "b": rand(3)})
    case(s, "mul", lambda a, b: a * b, {"a": rand(3, 1, 5), "b": rand(2, 1)})
    # The posflow test adds 3 to b (a fill node), keeping the divisor away from zero.
    case(s, "div", lambda a, b: a / (b + 3.0), {"a": rand(4, 6), "b": rand(4, 1)})
    case(s, "scale", lambda x: x * -2.5, {"x": rand(7, 3)})
    case(s, "sum", lambda x: x.sum(dim=1), {"x": rand(3, 70, 2)})
    case(s, "mean_keepdim", lambda x: x.mean(dim=0, keepdim=True), {"x": rand(5, 4)})
    case(s, "broadcast_to", lambda x: x.expand(2, 3, 4), {"x": rand(3, 1)})
    save(s, path)
