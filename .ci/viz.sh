#!/usr/bin/env bash
# Smoke test of the native visualizer: opens `posflow viz` on a tiny freshly trained checkpoint
# in a virtual X display (Xvfb; egui renders through wgpu on lavapipe), lets it draw a few frames
# and closes it. Fails unless the window rendered every frame it was asked for.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for tool in xvfb-run xauth; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ! dpkg -s mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
    missing+=(vulkan)
fi
if ((${#missing[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends xvfb xauth mesa-vulkan-drivers libvulkan1 >/dev/null
fi

export WGPU_BACKEND="${WGPU_BACKEND:-vulkan}"
XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
export XDG_RUNTIME_DIR
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/posflow-target}"

cargo build --bin posflow
posflow="$CARGO_TARGET_DIR/debug/posflow"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/tiny.toml" <<'TOML'
[data]
task = "moby_dick"
seq_len = 32

[model]
d_model = 16
heads = 2
layers = 2
ffn = 32
max_len = 32
kind = { type = "causal_lm" }
posenc = { type = "sinusoidal" }

[train]
steps = 3
batch = 4
lr = 1e-2
eval_every = 3
eval_lengths = [32]
checkpoint = "tiny.safetensors"
metrics = "tiny.jsonl"
sample_prompt = "Call me "
TOML
(cd "$work" && "$posflow" --device cpu train --config tiny.toml >/dev/null)

frames=5
echo "== posflow viz under Xvfb, $frames frames"
out=$(cd "$work" && xvfb-run -a -s '-screen 0 1280x800x24' \
    timeout 300 "$posflow" --device cpu viz --checkpoint tiny.safetensors --metrics tiny.jsonl --frames "$frames")
echo "$out"
if ! grep -q "^rendered $frames frames (ready)$" <<<"$out"; then
    echo "viz.sh: expected 'rendered $frames frames (ready)'" >&2
    exit 1
fi
echo "viz.sh: ok"
