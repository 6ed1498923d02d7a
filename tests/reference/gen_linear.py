"""Reference values for a product with a bias (`Graph::matmul_bias`): torch.nn.functional.linear;
and with an activation applied as it is written (`Graph::matmul_bias_activated`): gelu(linear)
and relu(linear), each alone and beside the product it was applied to (both outputs carry
gradients). The ReLU cases come after the GELU ones, so the GELU values do not change."""

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
    gelu = torch.nn.functional.gelu  # the erf form, posflow's
    case(
        s,
        "linear_gelu",
        lambda x, w, bias: gelu(torch.nn.functional.linear(x, w.t(), bias)),
        {"x": rand(2, 3, 4), "w": rand(4, 5), "bias": rand(5)},
    )

    def both(x, w, bias):
        z = torch.nn.functional.linear(x, w.t(), bias)
        return gelu(z) + 0.5 * z

    case(s, "linear_gelu_both", both, {"x": rand(2, 3, 4), "w": rand(4, 5), "bias": rand(5)})
    relu = torch.nn.functional.relu
    case(
        s,
        "linear_relu",
        lambda x, w, bias: relu(torch.nn.functional.linear(x, w.t(), bias)),
        {"x": rand(2, 3, 4), "w": rand(4, 5), "bias": rand(5)},
    )

    def relu_both(x, w, bias):
        z = torch.nn.functional.linear(x, w.t(), bias)
        return relu(z) + 0.5 * z

    case(s, "linear_relu_both", relu_both, {"x": rand(2, 3, 4), "w": rand(4, 5), "bias": rand(5)})
    save(s, path)
