"""posflow checkpoints (format `posflow/1`, src/checkpoint.rs): one safetensors file with every
parameter under posflow's own name, AdamW's moments under `optim.`, run state under `state.`, and
string metadata: `format`, `config` (the model config as JSON), `training` (step, seed and what a
resumed run needs), `tokenizer` and `optimizer` where the run has them.

A checkpoint is someone else's file: its metadata is checked before anything is built from it, and
saving writes a temporary file beside the target and renames it, so an interrupted save never
destroys the checkpoint that was there.
"""

import json
import os
import pathlib
from dataclasses import dataclass, field

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .checks import CheckpointError, check_config, check_parameters, check_training

FORMAT = "posflow/1"
IGNORE_INDEX = -100
BOS = 1
SPECIALS = ["<pad>", "<bos>", "<eos>"]


@dataclass
class Checkpoint:
    """A checkpoint in memory: the model config, the parameters by posflow name, and the
    metadata kept verbatim (training state, tokenizer, optimizer)."""

    config: dict
    params: dict
    training: dict = field(default_factory=lambda: {"step": 0, "seed": 0})
    tokenizer: str | None = None
    # Tensors that are not parameters (`optim.*`, `state.*`), kept to be written back.
    extra_tensors: dict = field(default_factory=dict)
    optimizer: str | None = None


def load_checkpoint(path) -> Checkpoint:
    """Reads the posflow checkpoint at `path`; a file that is not one is a CheckpointError naming
    what is wrong."""
    path = pathlib.Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as e:  # safetensors raises its own types for every malformed file
        raise CheckpointError(f"{path}: cannot be read as safetensors: {e}") from e
    if metadata.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: format {metadata.get('format')!r}, not {FORMAT!r}: it is not a posflow checkpoint"
        )
    for key in ("config", "training"):
        if key not in metadata:
            raise CheckpointError(f"{path}: has no `{key}` in its metadata")
    try:
        config = json.loads(metadata["config"])
        training = json.loads(metadata["training"])
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: its config or training metadata is not JSON: {e}") from e
    if not isinstance(config, dict) or not isinstance(training, dict):
        raise CheckpointError(f"{path}: its config and training metadata must be JSON objects")
    check_config(path, config)
    check_training(path, training)
    params, extra = {}, {}
    for name, tensor in tensors.items():
        if name.startswith(("optim.", "state.")):
            extra[name] = tensor
        elif tensor.dtype != torch.float32:
            raise CheckpointError(f"{path}: parameter {name} is {tensor.dtype}; posflow's are float32")
        else:
            params[name] = tensor
    check_parameters(path, params)
    return Checkpoint(
        config=config,
        params=params,
        training=training,
        tokenizer=metadata.get("tokenizer"),
        extra_tensors=extra,
        optimizer=metadata.get("optimizer"),
    )


def save_checkpoint(checkpoint: Checkpoint, path):
    """Writes `checkpoint` to `path` as posflow writes one (float32 parameters), through a
    temporary file renamed over the target."""
    path = pathlib.Path(path)
    metadata = {
        "format": FORMAT,
        "config": json.dumps(checkpoint.config),
        "training": json.dumps(checkpoint.training),
    }
    if checkpoint.tokenizer is not None:
        metadata["tokenizer"] = checkpoint.tokenizer
    tensors = {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in checkpoint.params.items()}
    if checkpoint.optimizer is not None:
        metadata["optimizer"] = checkpoint.optimizer
        tensors.update({k: v.contiguous() for k, v in checkpoint.extra_tensors.items() if k.startswith("optim.")})
    tensors.update({k: v.contiguous() for k, v in checkpoint.extra_tensors.items() if k.startswith("state.")})
    tmp = path.with_name(path.name + ".tmp")
    try:
        save_file(tensors, str(tmp), metadata=metadata)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def reference_batch(checkpoint: Checkpoint):
    """(the model's inputs, targets) stored in the checkpoint's training state by
    tests/tools/reference_checkpoints.rs: inputs (tokens [B, L], key mask or None, and a randomized
    model's positions [L]), or a seq2seq
    model's (source [B, S], source mask, target_in [B, T])."""
    batch = checkpoint.training.get("reference_batch")
    if batch is None:
        raise CheckpointError("this checkpoint stores no reference_batch")
    ids = lambda name, *shape: torch.tensor(batch[name], dtype=torch.long).view(*shape)
    targets = torch.tensor(batch["targets"], dtype=torch.long)
    if checkpoint.config["kind"]["type"] == "seq2seq":
        rows, source, target = batch["batch"], batch["source_len"], batch["target_len"]
        return (ids("source", rows, source), ids("source_mask", rows, source), ids("target_in", rows, target)), targets
    shape = (batch["batch"], batch["len"])
    mask = None if batch["mask"] is None else ids("mask", *shape)
    if batch.get("positions") is not None:
        return (ids("tokens", *shape), mask, ids("positions", batch["len"])), targets
    return (ids("tokens", *shape), mask), targets


def encode(checkpoint: Checkpoint, text):
    """`text` as the checkpoint's character tokenizer encodes it, BOS first: [1, 1 + len]."""
    if checkpoint.tokenizer is None:
        raise CheckpointError("this checkpoint has no tokenizer, so it cannot read text")
    tokenizer = json.loads(checkpoint.tokenizer)
    if tokenizer.get("specials") != SPECIALS:
        raise CheckpointError(f"a tokenizer with specials {tokenizer.get('specials')}: only {SPECIALS} is read here")
    ids = {c: len(SPECIALS) + i for i, c in enumerate(tokenizer["chars"])}
    unknown = sorted(set(text) - set(ids))
    if unknown:
        raise CheckpointError(f"characters {unknown} are not in the checkpoint's vocabulary")
    return torch.tensor([[BOS] + [ids[c] for c in text]], dtype=torch.long)
