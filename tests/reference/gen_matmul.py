"""Reference values for matmul: plain, transposed operands, batched, and a matrix shared by a batch."""

import torch
from common import case, rand, save


def t(x, flag):
    return x.transpose(-1, -2) if flag else x


def product(ta, tb):
    return lambda a, b: torch.matmul(t(a, ta), t(b, tb))


def main(path):
    s = {}
    case(s, "plain", product(False, False), {"a": rand(5, 7), "b": rand(7, 3)})
    case(s, "trans_a", product(True, False), {"a": rand(7, 5), "b": rand(7, 3)})
    case(s, "trans_b", product(False, True), {"a": rand(5, 7), "b": rand(3, 7)})
    case(s, "trans_ab", product(True, True), {"a": rand(7, 5), "b": rand(3, 7)})
    case(s, "batched", product(False, False), {"a": rand(2, 4, 6), "b": rand(2, 6, 3)})
    case(s, "batched_trans_b", product(False, True), {"a": rand(2, 3, 4, 6), "b": rand(2, 3, 5, 6)})
    # A linear layer: one weight for every row of the batch.
    case(s, "shared_weight", product(False, False), {"a": rand(2, 3, 4, 6), "b": rand(6, 5)})
    case(s, "shared_weight_trans", product(True, True), {"a": rand(2, 6, 4), "b": rand(5, 6)})
    case(s, "shared_a", product(False, False), {"a": rand(4, 6), "b": rand(3, 6, 5)})
    save(s, path)
