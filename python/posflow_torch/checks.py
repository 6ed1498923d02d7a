"""What posflow refuses in a checkpoint, refused here too, before anything is built from it: a
size past posflow's limits (src/model/config.rs: `SIZE_LIMITS`, `MAX_PARAMETERS`), a training
state whose step or seed is not an unsigned integer (src/checkpoint.rs: `TrainingState`), and a
parameter that is not finite. That the tensors fit the config is checked where the model reads
each one (`UsedParams.shaped`), by a forward of one token when a model is built.

Every error is a CheckpointError naming the file and the field.
"""

import torch


class CheckpointError(ValueError):
    """A file that is not a posflow checkpoint, or not one this package can read; the message
    names the file and the problem."""


# posflow's limits, field by field; python/tests checks them against src/model/config.rs.
SIZE_LIMITS = {
    "vocab": 1 << 20,
    "d_model": 1 << 14,
    "heads": 1 << 10,
    "layers": 256,
    "ffn": 1 << 17,
    "max_len": 1 << 20,
}
MAX_PARAMETERS = 1 << 32
U64_END = 1 << 64


def is_int(value):
    """A JSON integer (a bool is not one, though Python counts it as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(path, config):
    """Each size of the model config a positive integer within posflow's limit; heads dividing
    d_model; a seq2seq decoder's layers within the layers' limit."""
    sizes = dict((field, config.get(field)) for field in SIZE_LIMITS)
    kind = config.get("kind")
    if isinstance(kind, dict) and "decoder_layers" in kind:
        sizes["decoder_layers"] = kind["decoder_layers"]
    for field, value in sizes.items():
        limit = SIZE_LIMITS.get(field, SIZE_LIMITS["layers"])
        if not is_int(value) or value < 1:
            raise CheckpointError(f"{path}: config field `{field}` is {value!r}: a size is a positive integer")
        if value > limit:
            raise CheckpointError(f"{path}: config field `{field}` is {value}, over posflow's limit of {limit}")
    if sizes["d_model"] % sizes["heads"]:
        raise CheckpointError(
            f"{path}: config field `heads` ({sizes['heads']}) does not divide `d_model` ({sizes['d_model']})"
        )


def check_training(path, training):
    """The training state's step and seed: integers of 0..2⁶⁴, as posflow writes them."""
    for field in ("step", "seed"):
        value = training.get(field)
        if not is_int(value) or not 0 <= value < U64_END:
            raise CheckpointError(f"{path}: training field `{field}` is {value!r}: posflow writes an integer of 0..2^64")


def check_parameters(path, params):
    """At most MAX_PARAMETERS values in all, each of them finite."""
    total = sum(t.numel() for t in params.values())
    if total > MAX_PARAMETERS:
        raise CheckpointError(f"{path}: {total} parameter values, over posflow's limit of {MAX_PARAMETERS}")
    for name, tensor in params.items():
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            raise CheckpointError(f"{path}: parameter {name} holds {bad} values that are NaN or infinite")
