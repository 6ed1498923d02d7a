"""Reference values for the FLOATER ODE solvers (src/ode): trajectories and gradients from torchdiffeq.

    pip install torch torchdiffeq safetensors

The dynamics is FLOATER's `flow_func_linear` form, time appended to the input of each linear layer:

    h(t, p) = W2 [act(W1 [p; t] + b1); t] + b2,   W1: [hidden, d + 1], W2: [d, hidden + 1]

solved for all blocks at once (state [blocks, d]) with outputs at t_i = i * delta, i = 0..positions-1.
Everything runs in float64; the file stores float32 (the Rust solvers run in f32).

Fixed-step methods get an explicit grid: `substeps` equal steps inside each output interval, the same
grid posflow steps through (torchdiffeq's `step_size` option rounds the step count with ceil, which
can add a zero-length step). torchdiffeq's `rk4` is Kutta's 3/8 rule (`rk4_alt_step_func`), and so is
posflow's `Scheme::Rk4`.

Per case `<case>`:
    <case>/theta, <case>/p0, <case>/upstream        inputs (theta flattened as W1 | b1 | W2 | b2)
    <case>/out                                        odeint's trajectory [positions, blocks, d]
    <case>/grad/theta, <case>/grad/p0                 autograd through odeint (backprop through the solver)
    <case>/adjoint/grad/theta, <case>/adjoint/grad/p0 odeint_adjoint (same method and options backward)
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchdiffeq import odeint, odeint_adjoint
from torchdiffeq._impl.misc import _rms_norm, _select_initial_step

from common import rand, save
from posflow_torch.encodings import substep_grid as grid

DIM, HIDDEN, BLOCKS, POSITIONS, DELTA = 6, 6, 2, 9, 0.1


class Floater(nn.Module):
    def __init__(self, theta, act):
        super().__init__()
        d, k = DIM, HIDDEN
        sizes = [k * (d + 1), k, d * (k + 1), d]
        w1, b1, w2, b2 = torch.split(theta, sizes)
        self.w1 = nn.Parameter(w1.reshape(k, d + 1).clone())
        self.b1 = nn.Parameter(b1.clone())
        self.w2 = nn.Parameter(w2.reshape(d, k + 1).clone())
        self.b2 = nn.Parameter(b2.clone())
        self.act = act

    def forward(self, t, p):
        tt = t.to(p).expand(p.shape[0], 1)
        hidden = self.act(F.linear(torch.cat([p, tt], 1), self.w1, self.b1))
        return F.linear(torch.cat([hidden, tt], 1), self.w2, self.b2)

    def flat_grad(self):
        return torch.cat([p.grad.reshape(-1) for p in (self.w1, self.b1, self.w2, self.b2)])


def case(store, name, method, act, substeps=1, rtol=None, atol=None):
    d, k = DIM, HIDDEN
    # Xavier-normal weights as in FLOATER, with small random biases so every gradient is exercised.
    theta = torch.cat([
        torch.randn(k * (d + 1), dtype=torch.float64) * (2.0 / (d + 1 + k)) ** 0.5,
        rand(k, low=-0.1, high=0.1),
        torch.randn(d * (k + 1), dtype=torch.float64) * (2.0 / (k + 1 + d)) ** 0.5,
        rand(d, low=-0.1, high=0.1),
    ])
    p0 = rand(BLOCKS, d)
    upstream = rand(POSITIONS, BLOCKS, d)
    t = torch.arange(POSITIONS, dtype=torch.float64) * DELTA
    if method == "dopri5":
        adjoint_kwargs = dict(method=method, rtol=rtol, atol=atol)
        # torch autograd differentiates dopri5's first step size (a function of p0 and theta) but no
        # later one; posflow holds every step size constant. Giving odeint the same first step,
        # computed without gradient, makes autograd do the same (the difference is ~1e-5 with tanh,
        # ~2e-3 with relu in d/dp0).
        with torch.no_grad():
            func = Floater(theta, act)
            first = _select_initial_step(func, t[0], p0, 4, torch.tensor(rtol, dtype=torch.float64),
                                         torch.tensor(atol, dtype=torch.float64), _rms_norm)
        backprop_kwargs = dict(adjoint_kwargs, options=dict(first_step=first))
    else:
        adjoint_kwargs = dict(method=method, options=dict(grid_constructor=grid(substeps)))
        backprop_kwargs = adjoint_kwargs

    for solve, kwargs, prefix in ((odeint, backprop_kwargs, ""), (odeint_adjoint, adjoint_kwargs, "adjoint/")):
        func = Floater(theta, act)
        y0 = p0.clone().requires_grad_(True)
        out = solve(func, y0, t, **kwargs)
        (out * upstream).sum().backward()
        store[f"{name}/{prefix}grad/theta"] = func.flat_grad().float().contiguous()
        store[f"{name}/{prefix}grad/p0"] = y0.grad.float().contiguous()
        if prefix == "":
            store[f"{name}/out"] = out.detach().float().contiguous()
    store[f"{name}/theta"] = theta.float().contiguous()
    store[f"{name}/p0"] = p0.float().contiguous()
    store[f"{name}/upstream"] = upstream.float().contiguous()


def main(path):
    s = {}
    case(s, "euler_relu", "euler", torch.relu)
    case(s, "midpoint_relu", "midpoint", torch.relu)
    case(s, "rk4_relu", "rk4", torch.relu)
    # The translation model's setting: rk4 with a step of delta / 5.
    case(s, "rk4_relu_sub5", "rk4", torch.relu, substeps=5)
    case(s, "midpoint_tanh_sub3", "midpoint", torch.tanh, substeps=3)
    case(s, "dopri5_tanh", "dopri5", torch.tanh, rtol=1e-5, atol=1e-7)
    case(s, "dopri5_relu", "dopri5", torch.relu, rtol=1e-5, atol=1e-7)
    save(s, path)
