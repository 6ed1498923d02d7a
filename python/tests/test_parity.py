"""posflow_torch against posflow itself: for every committed reference checkpoint
(tests/reference/models/, one per model form), the torch model's logits, loss and every gradient
equal what `posflow forward` computes on posflow's CPU backend from the same checkpoint and batch,
to 1e-5 of each tensor's largest value; a form the package does not have is refused, naming it."""

import os
import pathlib
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import load_file

from posflow_torch import PosflowModel, Unsupported, load_checkpoint, loss_of
from posflow_torch.checkpoint import reference_batch

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "reference" / "models"
CASES = sorted(p.name.removesuffix(".safetensors") for p in MODELS.glob("*.safetensors") if ".expected." not in p.name)
# Relative to each tensor's largest |value| (posflow computes in float32, the torch model here in
# float64, so this is posflow's rounding), and a floor for gradients that are 0 in exact
# arithmetic (TUPE's untied [CLS] bias: posflow's is float32 rounding of a cancelling sum, ~1e-9).
RELATIVE = 1e-5
FLOOR = 1e-3


def posflow_binary():
    """The posflow binary: POSFLOW_BIN, or cargo's build of this checkout."""
    if "POSFLOW_BIN" in os.environ:
        return os.environ["POSFLOW_BIN"]
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("debug", "release"):
        candidate = target / profile / "posflow"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("posflow")
    if found is None:
        pytest.fail("no posflow binary: build it (cargo build) or set POSFLOW_BIN")
    return found


def posflow_values(case, tmp_path):
    out = tmp_path / f"{case}.values.safetensors"
    command = [posflow_binary(), "forward", "--checkpoint", str(MODELS / f"{case}.safetensors"), "--out", str(out), "--device", "cpu"]
    subprocess.run(command, check=True, capture_output=True)
    return load_file(str(out))


def torch_values(case):
    model = PosflowModel.from_checkpoint(MODELS / f"{case}.safetensors", dtype=torch.float64)
    inputs, targets = reference_batch(model.checkpoint)
    logits = model(*inputs)
    loss = loss_of(logits, targets)
    loss.backward()
    values = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    values.update({f"grad/{name}": p.grad for name, p in model.named_parameters()})
    return values


def supported(case):
    try:
        PosflowModel(load_checkpoint(MODELS / f"{case}.safetensors").config, {})
        return True
    except Unsupported:
        return False


@pytest.mark.parametrize("case", [c for c in CASES if supported(c)])
def test_logits_loss_and_gradients_equal_posflow(case, tmp_path):
    ours = torch_values(case)
    theirs = posflow_values(case, tmp_path)
    assert set(ours) == set(theirs), set(ours) ^ set(theirs)
    for name, want in theirs.items():
        got = ours[name].to(torch.float64)
        want = want.to(torch.float64)
        assert got.shape == want.shape, f"{name}: {tuple(got.shape)} vs {tuple(want.shape)}"
        scale = max(float(want.abs().max()), FLOOR)
        worst = float((got - want).abs().max())
        assert worst <= RELATIVE * scale, f"{case} {name}: |torch - posflow| = {worst:.3g}, scale {scale:.3g}"


@pytest.mark.parametrize("case", [c for c in CASES if not supported(c)])
def test_a_form_not_here_is_refused_with_the_reason(case):
    with pytest.raises(Unsupported, match="not in posflow_torch yet|so far"):
        PosflowModel.from_checkpoint(MODELS / f"{case}.safetensors")


def test_the_supported_forms_are_the_ones_expected():
    """Which reference forms the package has, so that losing one fails here."""
    missing = sorted(c for c in CASES if not supported(c))
    assert all("_code_" in c for c in missing), missing
    assert len(CASES) - len(missing) >= 15
