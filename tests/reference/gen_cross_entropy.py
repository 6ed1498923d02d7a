"""Reference values for the mean cross-entropy with ignored targets.

posflow returns shape [1]; PyTorch's scalar is reshaped to match. Every case keeps at least one
counted target: with none, PyTorch gives NaN where posflow gives 0 (tested without PyTorch).
"""

import torch
import torch.nn.functional as F
from common import case, rand, save


def loss(ignore_index):
    def fn(logits, targets):
        vocab = logits.shape[-1]
        flat = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=ignore_index)
        return flat.reshape(1)

    return fn


def main(path):
    torch.manual_seed(0)  # the same file whether run alone or by generate.py
    s = {}
    case(s, "plain", loss(-100), {"logits": rand(6, 7, low=-3, high=3)}, {"targets": torch.randint(0, 7, (6,))})
    targets = torch.randint(0, 9, (3, 5))
    targets[0, 1] = targets[1, 3] = targets[2, 0] = targets[2, 4] = -100
    case(s, "ignored", loss(-100), {"logits": rand(3, 5, 9, low=-3, high=3)}, {"targets": targets})
    # Padding id 0 as the ignore index, as a language model with a pad token uses it.
    targets = torch.tensor([0, 3, 0, 5, 1, 0, 2, 4])
    case(s, "ignore_zero", loss(0), {"logits": rand(8, 6, low=-3, high=3)}, {"targets": targets})
    case(
        s,
        "long_rows",
        loss(-100),
        {"logits": rand(3, 700, low=-5, high=5)},
        {"targets": torch.tensor([5, 699, 321])},
    )
    save(s, path)
