"""Reference values for concat, slice, permute, transpose and reshape (checked through a scale)."""

import torch
from common import case, rand, save


def main(path):
    torch.manual_seed(0)  # the same file whether run alone or by generate.py
    s = {}
    case(
        s,
        "concat",
        lambda x0, x1, x2: torch.cat([x0, x1, x2], dim=1),
        {"x0": rand(2, 3, 4), "x1": rand(2, 1, 4), "x2": rand(2, 2, 4)},
    )
    case(s, "slice", lambda x: x[:, 2:5, :], {"x": rand(4, 6, 3)})
    case(s, "permute", lambda x: x.permute(2, 0, 3, 1), {"x": rand(2, 3, 4, 5)})
    case(s, "transpose", lambda x: x.transpose(0, 2), {"x": rand(3, 4, 5)})
    case(s, "reshape", lambda x: x.reshape(2, 3, 4) * 2.0, {"x": rand(4, 6)})
    save(s, path)
