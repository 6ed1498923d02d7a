"""Reference values for the embedding lookup; repeated ids exercise the gradient's scatter-add."""

import torch
import torch.nn.functional as F
from common import case, rand, save


def main(path):
    torch.manual_seed(0)  # the same file whether run alone or by generate.py
    s = {}
    ids = torch.randint(0, 10, (3, 5))
    ids[0, 0] = ids[2, 4] = ids[1, 2]  # at least one id used three times
    case(s, "embedding", lambda table, ids: F.embedding(ids, table), {"table": rand(10, 4)}, {"ids": ids})
    save(s, path)
