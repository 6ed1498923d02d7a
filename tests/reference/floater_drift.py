"""How far FLOATER's compatible-form biases drift from their initial value along the positions,
at the authors' initialisation: the numbers quoted in src/model/posenc/floater.rs.

The flow is the authors' `flow_func_linear` (h(t, b) = W2·[ReLU(W1·[b; t] + b1); t] + b2, Xavier-
normal weights, zero biases) over a state b of shape [3, layers, D] from b(0) Xavier-uniform
(their `proj_bias`), solved with torchdiffeq's rk4 at step Δ/5, in float64. Printed: the median
over draws of ‖b(t_i) − b(0)‖ / ‖b(0)‖ at each position i, for Δ = 0.01 (the authors' code) and
Δ = 0.1 (the paper's text), and the RMS of b(t_i) itself (b(0)'s is about bound/√3).
`--weight-std S` draws W1, W2 from N(0, S) instead (posflow's additive form uses 0.02).

    python3 tests/reference/floater_drift.py [--d 128] [--layers 4] [--draws 5] [--weight-std S]
"""

import argparse
import statistics

import torch
from torchdiffeq import odeint


def drift(d, layers, delta, positions, seed, weight_std):
    torch.manual_seed(seed)
    w1 = torch.empty(d, d + 1, dtype=torch.float64)
    w2 = torch.empty(d, d + 1, dtype=torch.float64)
    for w in (w1, w2):
        if weight_std is None:
            torch.nn.init.xavier_normal_(w)
        else:
            torch.nn.init.normal_(w, std=weight_std)
    b0 = torch.empty(3, layers, d, dtype=torch.float64)
    torch.nn.init.xavier_uniform_(b0)

    def h(t, b):
        time = torch.full(b.shape[:-1] + (1,), float(t), dtype=b.dtype)
        hidden = torch.relu(torch.cat([b, time], -1) @ w1.T)
        return torch.cat([hidden, time], -1) @ w2.T

    grid = torch.arange(max(positions) + 1, dtype=torch.float64) * delta
    b = odeint(h, b0, grid, method="rk4", options={"step_size": delta / 5})
    rms = lambda x: float(x.pow(2).mean().sqrt())
    return {i: (float((b[i] - b0).norm() / b0.norm()), rms(b[i])) for i in positions}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--weight-std", type=float)
    parser.add_argument("--delta", type=float, nargs="+", default=[0.01, 0.1])
    args = parser.parse_args()
    positions = [0, 16, 64, 128, 255, 512]
    init = "Xavier-normal" if args.weight_std is None else f"N(0, {args.weight_std})"
    for delta in args.delta:
        runs = [
            drift(args.d, args.layers, delta, positions, seed, args.weight_std)
            for seed in range(args.draws)
        ]
        print(f"D {args.d}, {args.layers} layers, W {init}, delta {delta} (median of {args.draws} draws):")
        for i in positions:
            relative = statistics.median(r[i][0] for r in runs)
            rms = statistics.median(r[i][1] for r in runs)
            print(f"  position {i:4}  t {i * delta:6.2f}  drift/|b(0)| {relative:10.3g}  rms b {rms:10.3g}")


if __name__ == "__main__":
    main()
