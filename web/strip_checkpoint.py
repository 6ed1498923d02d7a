"""Writes a posflow checkpoint without its optimizer state (AdamW's moments, a third of the file
each, and its step): what inference needs, a third of the size. Resuming from the result is
refused by `posflow train --resume`, as for any checkpoint without optimizer state.

    python3 web/strip_checkpoint.py runs/web_demo.safetensors web/assets/web_demo.safetensors
"""

import sys

from safetensors import safe_open
from safetensors.numpy import save_file

OPTIMIZER_PREFIX = "optim."  # src/checkpoint.rs: OPTIMIZER_PREFIX
OPTIMIZER_KEY = "optimizer"  # src/checkpoint.rs: OPTIMIZER_KEY


def main(source, destination):
    with safe_open(source, framework="numpy") as f:
        metadata = {k: v for k, v in f.metadata().items() if k != OPTIMIZER_KEY}
        tensors = {name: f.get_tensor(name) for name in f.keys() if not name.startswith(OPTIMIZER_PREFIX)}
    save_file(tensors, destination, metadata=metadata)
    print(f"{destination}: {len(tensors)} tensors, metadata {sorted(metadata)}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
