#!/usr/bin/env bash
# posflow_torch (python/): installs the package and its test needs, then checks it against the
# posflow binary that `cargo test` built (python/tests call `posflow forward`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/posflow-target}"
export POSFLOW_BIN="${POSFLOW_BIN:-$CARGO_TARGET_DIR/debug/posflow}"
[ -x "$POSFLOW_BIN" ] || cargo build

# The CPU build of torch is a tenth of the CUDA one's download; keep a torch that is there.
if ! python3 -c "import torch" 2>/dev/null; then
    python3 -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
fi
python3 -m pip install -q -e "python[test]"
python3 -m pytest python/tests -q
