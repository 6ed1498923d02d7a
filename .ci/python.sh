#!/usr/bin/env bash
# posflow_torch (python/): installs the package and its test needs, then checks it against the
# posflow binary that `cargo test` built (python/tests call `posflow forward`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/posflow-target}"
export POSFLOW_BIN="${POSFLOW_BIN:-$CARGO_TARGET_DIR/debug/posflow}"
[ -x "$POSFLOW_BIN" ] || cargo build

# The CPU build of torch is a tenth of the CUDA one's download; keep a torch that is there.
# CI's network may not reach PyTorch's own index (the run of 2026-12-01 could not resolve it):
# then PyPI's build, which runs on the CPU too (~5.5 GB installed, ~2 min).
if ! python3 -c "import torch" 2>/dev/null; then
    if ! python3 -m pip install -q --retries 0 --timeout 20 torch \
        --index-url https://download.pytorch.org/whl/cpu 2>/dev/null; then
        echo "PyTorch's CPU index is out of reach: torch from PyPI"
        python3 -m pip install -q torch
    fi
fi
python3 -m pip install -q -e "python[test]"
python3 -m pytest python/tests -q
