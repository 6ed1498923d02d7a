"""How large FLOATER's q/k/v biases are at each position when a freshly initialised Chomsky model
(the studies' d 64, 5 layers; the compatible form as its authors run it) reads positions up to
2048, the range randomized positions draw from: the flow solved in float64 by the PyTorch port
(python/posflow_torch) from the parameters posflow initialises, for several seeds, at the
authors' Δ = 0.01 and at a Δ that maps 0..2048 onto their solved range (255 positions × 0.01).
Draws the norms by position (log scale) as an SVG and prints them as a table.

    python3 docs/floater_horizon.py --posflow target/release/posflow -o docs/floater_horizon.svg

Needs torch and torchdiffeq (as python/ does). Each seed's parameters come from one step of
`posflow train` at a learning rate of 1e-12, so they are posflow's initialisation to ~1e-12.
"""

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
from posflow_torch.checkpoint import load_checkpoint  # noqa: E402
from posflow_torch.encodings import floater_solve  # noqa: E402

RANGE = 2048
# The authors solve at most 255 positions at Δ 0.01 (src/model/posenc/floater.rs).
AUTHORS_POSITIONS = 255
DELTAS = [(0.01, "Δ 0.01 (the authors')", "#c0392b"), (0.01 * AUTHORS_POSITIONS / RANGE, "Δ 0.01·255/2048", "#2471a3")]
# The studies' longest test: 100 input symbols and 100 placeholders.
LONGEST_TEST = 200
PRINTED = [0, 40, 100, 200, 255, 500, 1000, 1500, 2047]

CONFIG = """
[data]
task = "chomsky"
name = "bucket_sort"
train_max_len = 10

[model]
d_model = 64
heads = 8
layers = 5
ffn = 256
max_len = {range}
norm = "post"
embedding_norm = false
attention_biases = false
activation = "relu"
dropout = 0.1
embed_scale = "sqrt_d"
kind = {{ type = "token_classifier", n_classes = 5 }}
posenc = {{ type = "floater", resolve_every = 100 }}
random_positions = {range}

[train]
seed = {seed}
steps = 1
batch = 4
lr = 1e-12
eval_every = 1
eval_lengths = [4]
eval_batches = 1
checkpoint = "{checkpoint}"
"""


def initial_parameters(posflow, seed, workdir):
    """The checkpoint of a model posflow initialises with `seed` (one step at lr 1e-12)."""
    checkpoint = workdir / f"seed{seed}.safetensors"
    config = workdir / f"seed{seed}.toml"
    config.write_text(CONFIG.format(range=RANGE, seed=seed, checkpoint=checkpoint))
    subprocess.run([posflow, "--device", "cpu", "train", "--config", str(config)], check=True, capture_output=True)
    return load_checkpoint(checkpoint)


def bias_norms(checkpoint, delta):
    """Mean over q, k, v and blocks of ‖b(t_i)‖ at every position i < RANGE, and the norm the
    projections give a post-LN hidden state (‖W‖_F: a unit-variance input's expected norm)."""
    cfg = checkpoint.config
    p = {k: torch.as_tensor(v).double() for k, v in checkpoint.params.items()}
    enc = dict(cfg["posenc"], delta=delta, gradient="backprop")
    d, layers = cfg["d_model"], cfg["layers"]
    b0 = p["posenc.floater.qkv_initial"].reshape(3 * layers, d)
    with torch.no_grad():
        b = floater_solve(enc, p, "posenc.floater", b0, RANGE)
    norms = b.norm(dim=-1).mean(dim=-1)
    projection = torch.stack([p[f"blocks.{i}.attn.qkv.weight"].reshape(d, 3, d).norm(dim=(0, 2)) for i in range(layers)])
    return norms.tolist(), projection.mean().item()


def svg(curves, projection, path):
    """Norm by position, log scale: one line per seed and Δ, the projections' scale dashed."""
    width, height, left, right, top, bottom = 680, 380, 64, 200, 20, 46
    lo, hi = -1, 7
    x = lambda i: left + (width - left - right) * i / (RANGE - 1)
    y = lambda v: top + (height - top - bottom) * (hi - math.log10(max(v, 10.0**lo))) / (hi - lo)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for e in range(lo, hi + 1):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(10.0**e):.1f}" y2="{y(10.0**e):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{y(10.0**e) + 4:.1f}" text-anchor="end">1e{e}</text>')
    for i in range(0, RANGE + 1, 256):
        out.append(f'<text x="{x(min(i, RANGE - 1)):.1f}" y="{height - bottom + 16}" text-anchor="middle">{i}</text>')
    for i, label in [(LONGEST_TEST, "longest test"), (AUTHORS_POSITIONS, "authors' range")]:
        out.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{top}" y2="{height - bottom}" stroke="#888" stroke-dasharray="2,3"/>')
        anchor = "end" if i == LONGEST_TEST else "start"
        shift = -3 if i == LONGEST_TEST else 3
        out.append(f'<text x="{x(i) + shift:.1f}" y="{height - bottom - 6}" text-anchor="{anchor}" fill="#555">{label}</text>')
    yp = y(projection)
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{yp:.1f}" y2="{yp:.1f}" stroke="#333" stroke-dasharray="6,4"/>')
    for (delta, label, colour), runs in curves:
        for norms in runs:
            points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(norms) if i % 8 == 0 or i == RANGE - 1)
            out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.2" opacity="0.8"/>')
    legend = [(label, colour, "") for (_, label, colour), _ in curves] + [("q/k/v of a hidden state", "#333", ' stroke-dasharray="6,4"')]
    for k, (label, colour, dash) in enumerate(legend):
        ly = top + 20 + 20 * k
        out.append(f'<line x1="{width - right + 12}" x2="{width - right + 36}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{width - right + 42}" y="{ly + 4}">{label}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" text-anchor="middle">position</text>')
    out.append(
        f'<text x="14" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {(top + height - bottom) / 2:.0f})">‖q/k/v bias‖ at initialisation</text>'
    )
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posflow", required=True, help="the posflow binary")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (default 0-4)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the SVG to write")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        checkpoints = [initial_parameters(args.posflow, seed, Path(tmp)) for seed in seeds]
    curves, projections = [], []
    for spec in DELTAS:
        runs = []
        for checkpoint in checkpoints:
            norms, projection = bias_norms(checkpoint, spec[0])
            runs.append(norms)
            projections.append(projection)
        curves.append((spec, runs))
    projection = sum(projections) / len(projections)
    print(f"‖W‖_F of the q/k/v projections (a post-LN hidden state's q, k, v norm): {projection:.2f}")
    print("| position | " + " | ".join(label for _, label, _ in DELTAS) + " |")
    print("|---|" + "---|" * len(DELTAS))
    for i in PRINTED:
        cells = []
        for _, runs in curves:
            values = [norms[i] for norms in runs]
            cells.append(f"{min(values):.3g}–{max(values):.3g}")
        print(f"| {i} | " + " | ".join(cells) + " |")
    svg(curves, projection, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
