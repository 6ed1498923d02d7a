"""Plots loss curves written by `posflow mlp --log FILE` (JSON lines with "step" and "loss").

    python3 docs/plot_loss.py cpu.jsonl:CPU gpu.jsonl:"GPU (lavapipe)" -o docs/mlp_loss.png

Needs matplotlib (pip install matplotlib).
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", help="FILE or FILE:LABEL")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--title", default="2-32-1 MLP on y = x0*x1, AdamW")
    args = parser.parse_args()

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    styles = ["-", "--", ":", "-."]
    for i, run in enumerate(args.runs):
        path, _, label = run.partition(":")
        rows = [json.loads(line) for line in open(path) if line.strip()]
        ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], styles[i % 4], label=label or path, lw=2)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("mean squared error")
    ax.set_title(args.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
