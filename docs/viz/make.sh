#!/usr/bin/env bash
# Makes the README's viewer pictures (docs/viz/*.png): three small Moby Dick runs (d 64, 2 layers,
# 4 heads, 300 steps on windows of 64; sinusoidal, FLOATER, TUPE-A — configs/web_demo.toml with
# the position encoding swapped), then `posflow viz --export` on them. About 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
cargo build --release -q --bin posflow
posflow=${CARGO_TARGET_DIR:-target}/release/posflow

declare -A posencs=(
    [sinusoidal]='{ type = "sinusoidal" }'
    [floater]='{ type = "floater", form = "additive", every_block = true, delta = 0.1, method = "midpoint", substeps = 1, gradient = "backprop" }'
    [tupe_a]='{ type = "tupe_a", untie_cls = false }'
)
for name in sinusoidal floater tupe_a; do
    sed -e "s|^posenc = .*|posenc = ${posencs[$name]}|" \
        -e 's|^steps = .*|steps = 300|' -e 's|^eval_every = .*|eval_every = 100|' \
        -e "s|runs/web_demo|$runs/$name|" configs/web_demo.toml >"$runs/$name.toml"
    "$posflow" --device cpu train --config "$runs/$name.toml" --sample-chars 0
done
# The active (last) checkpoint is the one the attention, prompt and fine-tuning views use: FLOATER;
# the TUPE view needs TUPE-A active, so its picture comes from a second export.
export_views() {
    "$posflow" --device cpu viz --checkpoint "$runs/sinusoidal.safetensors" "$@" \
        --metrics "$runs/floater.jsonl" --metrics "$runs/sinusoidal.jsonl" \
        --length 192 --text "Call me Ishmael. Some years ago"
}
export_views --checkpoint "$runs/tupe_a.safetensors" --checkpoint "$runs/floater.safetensors" --export docs/viz
export_views --checkpoint "$runs/floater.safetensors" --checkpoint "$runs/tupe_a.safetensors" --export "$runs/tupe"
cp "$runs/tupe/tupe.png" docs/viz/tupe.png
# The translate view: the seq2seq model the browser demo ships (spelling → pronunciation,
# FLOATER; web/README.md says how it was trained).
"$posflow" --device cpu viz --checkpoint web/assets/cmudict_seq2seq.safetensors --length 24 \
    --source extraordinarily --export "$runs/seq2seq"
cp "$runs/seq2seq/translate.png" docs/viz/translate.png
