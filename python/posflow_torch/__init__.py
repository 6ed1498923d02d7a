"""posflow's models in PyTorch.

The same Transformer as posflow's (src/model/), written op by op under posflow's parameter names,
so that a posflow checkpoint loads without renaming and a model trained here goes back to posflow:

    from posflow_torch import PosflowModel
    model = PosflowModel.from_checkpoint("runs/moby_floater.safetensors")
    logits = model(tokens)              # [B, L, vocab] for a causal LM

A checkpoint of a form this package does not have yet is refused with the reason
(`Unsupported`). `python/tests` checks every form it has against `posflow forward`.
"""

from .checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from .model import PosflowModel, Unsupported, check_supported, loss_of

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "PosflowModel",
    "Unsupported",
    "check_supported",
    "load_checkpoint",
    "loss_of",
    "save_checkpoint",
]
