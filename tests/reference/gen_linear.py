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
    # GELU in the erf form, posflow's; each activation alone, then beside the product.
    for name, act in [("gelu", torch.nn.functional.gelu), ("relu", torch.nn.functional.relu)]:

        def alone(x, w, bias, act=act):
            return act(torch.nn.functional.linear(x, w.t(), bias))

        def both(x, w, bias, act=act):
            z = torch.nn.functional.linear(x, w.t(), bias)
            return act(z) + 0.5 * z

        case(s, f"linear_{name}", alone, {"x": rand(2, 3, 4), "w": rand(4, 5), "bias": rand(5)})
        case(s, f"linear_{name}_both", both, {"x": rand(2, 3, 4), "w": rand(4, 5), "bias": rand(5)})
    save(s, path)
