"""A checkpoint from someone else, into the port: what posflow refuses (src/model/config.rs's size
limits, src/checkpoint.rs's training state, finite weights, tensors that fit the config), the port
refuses too, each with an error naming the file and the field; its limits are posflow's own."""

import json
import pathlib
import re

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from posflow_torch import CheckpointError, PosflowModel, Unsupported, load_checkpoint
from posflow_torch.checks import MAX_PARAMETERS, SIZE_LIMITS

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE = ROOT / "tests" / "reference" / "models" / "lm_code_rk2_gated_dense.safetensors"


def hostile(tmp_path, config=None, training=None, tensors=None):
    """The base checkpoint with its config, training state or tensors changed by the functions
    given, written to tmp_path; its path."""
    with safe_open(str(BASE), framework="pt") as f:
        metadata = dict(f.metadata())
        params = {name: f.get_tensor(name) for name in f.keys()}
    if config:
        metadata["config"] = json.dumps(config(json.loads(metadata["config"])))
    if training:
        metadata["training"] = json.dumps(training(json.loads(metadata["training"])))
    if tensors:
        params = tensors(params)
    path = tmp_path / "hostile.safetensors"
    save_file(params, str(path), metadata=metadata)
    return path


def test_the_base_checkpoint_loads_and_builds(tmp_path):
    PosflowModel.from_checkpoint(hostile(tmp_path))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("d_model", 10**9, "config field `d_model` is 1000000000, over posflow's limit of 16384"),
        ("layers", 0, "config field `layers` is 0: a size is a positive integer"),
        ("vocab", "20", "config field `vocab` is '20': a size is a positive integer"),
        ("ffn", 2.5, "config field `ffn` is 2.5: a size is a positive integer"),
        ("heads", 3, "config field `heads` (3) does not divide `d_model` (16)"),
    ],
)
def test_a_config_past_posflows_limits_is_refused_naming_the_field(tmp_path, field, value, message):
    path = hostile(tmp_path, config=lambda c: dict(c, **{field: value}))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert str(e.value) == f"{path}: {message}"


@pytest.mark.parametrize(
    "field, value",
    [("step", -1), ("seed", "7"), ("seed", 2**64), ("step", 1.5), ("step", True), ("seed", None)],
)
def test_a_training_state_posflow_would_not_write_is_refused(tmp_path, field, value):
    path = hostile(tmp_path, training=lambda t: dict(t, **{field: value}))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert str(e.value) == f"{path}: training field `{field}` is {value!r}: posflow writes an integer of 0..2^64"


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_parameter_that_is_not_finite_is_refused(tmp_path, bad):
    def spoil(params):
        params["blocks.1.ffn.up.weight"][3, 5] = bad
        return params

    path = hostile(tmp_path, tensors=spoil)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert str(e.value) == f"{path}: parameter blocks.1.ffn.up.weight holds 1 values that are NaN or infinite"


@pytest.mark.parametrize(
    "change, message",
    [
        # A config that lies about the sizes the tensors have (within posflow's limits).
        (
            dict(config=lambda c: dict(c, d_model=32)),
            "parameter tok_emb.weight is [20, 16]; its config needs [20, 32]",
        ),
        (
            dict(config=lambda c: dict(c, ffn=64)),
            "parameter blocks.0.ffn.up.weight is [16, 32]; its config needs [16, 64]",
        ),
        # A bias that PyTorch would broadcast without a word.
        (
            dict(tensors=lambda p: dict(p, **{"blocks.2.attn.out.bias": torch.zeros(1)})),
            "parameter blocks.2.attn.out.bias is [1]; its config needs [16]",
        ),
        # One layer fewer than the config says.
        (
            dict(tensors=lambda p: {k: v for k, v in p.items() if not k.startswith("blocks.2.")}),
            "the model has no parameter blocks.2.ln1.gain, which its config needs",
        ),
    ],
)
def test_tensors_that_do_not_fit_the_config_are_refused(tmp_path, change, message):
    path = hostile(tmp_path, **change)
    with pytest.raises(CheckpointError) as e:
        PosflowModel.from_checkpoint(path)
    assert str(e.value).startswith(f"{path}: its tensors do not fit its config: "), e.value
    assert message in str(e.value)


def test_a_tensor_the_model_does_not_read_is_refused_naming_the_file(tmp_path):
    path = hostile(tmp_path, tensors=lambda p: dict(p, **{"blocks.0.extra": torch.zeros(2)}))
    with pytest.raises(Unsupported) as e:
        PosflowModel.from_checkpoint(path)
    assert str(e.value) == f"{path}: parameters the model does not use: ['blocks.0.extra']"


def test_the_limits_are_posflows():
    source = (ROOT / "src" / "model" / "config.rs").read_text()
    table = re.search(r"pub const SIZE_LIMITS: \[\(&str, usize\); \d+\] = \[(.*?)\];", source, re.S).group(1)
    rust = {name: 1 << int(shift) if shift else int(plain) for name, shift, plain in re.findall(r'\("(\w+)", (?:1 << (\d+)|(\d+))\)', table)}
    assert rust == SIZE_LIMITS
    assert f"pub const MAX_PARAMETERS: u64 = 1 << {MAX_PARAMETERS.bit_length() - 1};" in source
