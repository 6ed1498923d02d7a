"""Reference values for the Runge-Kutta stage arithmetic: y + Σ cᵢ·Fᵢ and the gated RK2 output."""

from common import case, rand, save


def combine(coeffs):
    def fn(y, **stages):
        return y + sum(c * stages[f"f{i + 1}"] for i, c in enumerate(coeffs))

    return fn


def gated(y, f1, f2, gate):
    return y + gate * f1 + (1 - gate) * f2


def main(path):
    s = {}
    rk4 = [1 / 6, 2 / 6, 2 / 6, 1 / 6]
    case(s, "rk4_output", combine(rk4), {"y": rand(2, 3, 5), **{f"f{i + 1}": rand(2, 3, 5) for i in range(4)}})
    case(s, "half_step", combine([0.5]), {"y": rand(2, 3, 5), "f1": rand(2, 3, 5)})
    case(s, "gated", gated, {"y": rand(2, 3, 5), "f1": rand(2, 3, 5), "f2": rand(2, 3, 5), "gate": rand(2, 3, 1, low=0, high=1)})
    save(s, path)
