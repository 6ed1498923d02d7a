"""Opens a posflow checkpoint in PyTorch and prints what it holds: the interoperability check for
the format documented in src/checkpoint.rs. Not run by the tests (they generate nothing with Python);
run it by hand on any checkpoint, e.g. the one the round-trip test leaves behind:

    cargo test --test checkpoint
    python3 tests/reference/read_checkpoint.py \
        $CARGO_TARGET_DIR/tmp/checkpoint/round_trip/mlp.safetensors

The model's tensors are a plain state dict once the `optim.` entries (AdamW's moments) are dropped.
"""

import json
import sys

from safetensors import safe_open
from safetensors.torch import load_file


def main(path):
    tensors = load_file(path)
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    assert metadata.get("format") == "posflow/1", f"{path}: not a posflow/1 checkpoint: {metadata}"

    model = {k: v for k, v in tensors.items() if not k.startswith(("optim.", "state."))}
    moments = {k: v for k, v in tensors.items() if k.startswith("optim.")}
    state = {k: v for k, v in tensors.items() if k.startswith("state.")}
    print(f"{path}: {len(model)} parameters, {len(moments)} optimizer tensors, {len(state)} run state")
    for name, t in sorted(tensors.items()):
        print(f"  {name:32} {str(t.dtype):14} {list(t.shape)}  mean {t.double().mean().item():+.6f}")
    for key in sorted(metadata):
        value = metadata[key]
        shown = json.loads(value) if key != "format" else value
        print(f"  metadata {key}: {shown}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: read_checkpoint.py CHECKPOINT.safetensors")
    main(sys.argv[1])
