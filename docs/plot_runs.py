"""Compares training runs from their metrics logs (`[train] metrics`, JSON lines written by
`posflow train`): the training loss over steps, and the last evaluation's loss per length bin,
where bins past the training length show how each position encoding extrapolates.

    python3 docs/plot_runs.py runs/moby_dick.jsonl:"T5 relative" runs/moby_learned.jsonl:learned \\
        --train-len 128 -o docs/moby_dick_encodings.png

Needs matplotlib (pip install matplotlib).
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def smooth(values, weight=0.9):
    out, s = [], None
    for v in values:
        s = v if s is None else weight * s + (1 - weight) * v
        out.append(s)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", help="FILE or FILE:LABEL")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--train-len", type=int, help="mark the bins longer than this")
    parser.add_argument("--title", default="")
    args = parser.parse_args()

    fig, (curves, bins_ax) = plt.subplots(1, 2, figsize=(12, 4.2), dpi=120)
    bin_names = []
    # The first steps of a run with scaled embeddings start far higher; keep the rest readable.
    settled_top = 0.0
    last_evals = []
    for run in args.runs:
        path, _, label = run.partition(":")
        records = [json.loads(line) for line in open(path) if line.strip()]
        train = [r for r in records if r["kind"] == "train"]
        smoothed = smooth([r["loss"] for r in train])
        curves.plot([r["step"] for r in train], smoothed, label=label or path, lw=1.8)
        settled_top = max(settled_top, max(smoothed[len(smoothed) // 10 :], default=0.0))
        evals = [r for r in records if r["kind"] == "eval"]
        last_step = max((r["step"] for r in evals), default=None)
        last = {r["bin"]: r["loss"] for r in evals if r["step"] == last_step}
        for name in last:
            if name not in bin_names:
                bin_names.append(name)
        last_evals.append((label or path, last))
    curves.set_xlabel("step")
    curves.set_ylabel("training loss (nats per character, smoothed)")
    if settled_top > 0:
        curves.set_ylim(top=settled_top * 1.25)
    curves.grid(True, alpha=0.3)
    curves.legend()

    bin_names.sort(key=lambda b: int(b.split("-")[0]))
    width = 0.8 / max(len(last_evals), 1)
    for i, (label, last) in enumerate(last_evals):
        xs = [j + i * width for j, b in enumerate(bin_names) if b in last]
        ys = [last[b] for b in bin_names if b in last]
        bins_ax.bar(xs, ys, width, label=label)
    ticks = []
    for b in bin_names:
        start = int(b.split("-")[0])
        beyond = args.train_len is not None and start > args.train_len
        ticks.append(f"{b}\n(beyond training)" if beyond else b)
    bins_ax.set_xticks([j + width * (len(last_evals) - 1) / 2 for j in range(len(bin_names))], ticks)
    bins_ax.set_xlabel("sequence length")
    bins_ax.set_ylabel("validation loss, last evaluation")
    bins_ax.grid(True, axis="y", alpha=0.3)
    bins_ax.legend(loc="upper left", fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
