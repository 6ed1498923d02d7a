"""posflow_torch against posflow itself: for every committed reference checkpoint
(tests/reference/models/, one per model form: every encoding, kind and block, both forms of TUPE
and the ODE Transformer, randomized positions), the torch model's logits, loss and every gradient
equal what `posflow forward` computes on posflow's CPU backend from the same checkpoint and batch,
to 1e-5 of each tensor's largest value; a form the package does not have is refused, naming it."""

import pathlib
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


def posflow_values(posflow, case, tmp_path):
    out = tmp_path / f"{case}.values.safetensors"
    command = [posflow, "forward", "--checkpoint", str(MODELS / f"{case}.safetensors"), "--out", str(out), "--device", "cpu"]
    subprocess.run(command, check=True, capture_output=True)
    return load_file(str(out))


def torch_values(case):
    model = PosflowModel.from_checkpoint(MODELS / f"{case}.safetensors", dtype=torch.float64).eval()
    inputs, targets = reference_batch(model.checkpoint)
    logits = model(*inputs)
    loss = loss_of(logits, targets)
    loss.backward()
    values = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    values.update({f"grad/{name}": p.grad for name, p in model.named_parameters()})
    return values


@pytest.mark.parametrize("case", CASES)
def test_logits_loss_and_gradients_equal_posflow(posflow, case, tmp_path):
    ours = torch_values(case)
    theirs = posflow_values(posflow, case, tmp_path)
    positions = theirs.pop("positions", None)
    if positions is not None:
        # posflow read the positions stored with the batch, as the torch model did.
        assert positions.tolist() == model_positions(case), case
    assert set(ours) == set(theirs), set(ours) ^ set(theirs)
    for name, want in theirs.items():
        got = ours[name].to(torch.float64)
        want = want.to(torch.float64)
        assert got.shape == want.shape, f"{name}: {tuple(got.shape)} vs {tuple(want.shape)}"
        scale = max(float(want.abs().max()), FLOOR)
        worst = float((got - want).abs().max())
        assert worst <= RELATIVE * scale, f"{case} {name}: |torch - posflow| = {worst:.3g}, scale {scale:.3g}"


def model_positions(case):
    inputs, _ = reference_batch(load_checkpoint(MODELS / f"{case}.safetensors"))
    return inputs[2].tolist()


def test_every_form_posflow_has_is_among_the_cases():
    """Each encoding, model kind and block posflow has appears in some reference case, so that a
    form missing here fails rather than passes unchecked."""
    configs = [load_checkpoint(MODELS / f"{case}.safetensors").config for case in CASES]
    encodings = {c["posenc"]["type"] for c in configs}
    kinds = {c["kind"]["type"] for c in configs}
    blocks = {c.get("block", {"type": "residual"})["type"] for c in configs}
    assert encodings == {"none", "sinusoidal", "learned", "relative", "tupe_a", "tupe_r", "floater", "rope", "alibi"}
    assert kinds == {"causal_lm", "masked_lm", "encoder", "token_classifier", "seq2seq"}
    assert blocks == {"residual", "rk2", "rk2_gated", "rk4"}
    assert any(c.get("random_positions") for c in configs)
    assert any(c.get("history", "none") != "none" for c in configs)
    assert any(c["posenc"].get("form") == "code" for c in configs)


def test_a_form_it_does_not_have_is_refused_by_name():
    config = load_checkpoint(MODELS / "lm_rope.safetensors").config
    with pytest.raises(Unsupported, match="position encoding 'xpos'"):
        PosflowModel(dict(config, posenc={"type": "xpos"}), {})
    with pytest.raises(Unsupported, match="model kind 'vision'"):
        PosflowModel(dict(config, kind={"type": "vision"}), {})


def test_a_randomized_model_needs_its_positions():
    model = PosflowModel.from_checkpoint(MODELS / "tagger_random_rope.safetensors")
    (tokens, mask, positions), _ = reference_batch(model.checkpoint)
    with pytest.raises(ValueError, match="randomized positions of 0..40: give them"):
        model(tokens, mask)
    with pytest.raises(ValueError, match="sorted row of distinct positions"):
        model(tokens, mask, positions.flip(0))
    with pytest.raises(ValueError, match="must lie in 0..40"):
        model(tokens, mask, positions + 40)


def test_dropout_acts_in_training_only():
    """Dropout at posflow's sites: a model in training mode draws new masks at every call; in
    evaluation mode it is the model without dropout."""
    checkpoint = load_checkpoint(MODELS / "mlm_tupe_a_untie_cls.safetensors")
    (tokens, mask), _ = reference_batch(checkpoint)
    plain = PosflowModel(checkpoint.config, checkpoint.params).eval()(tokens, mask)
    for site in ("dropout", "activation_dropout", "attention_dropout"):
        model = PosflowModel(dict(checkpoint.config, **{site: 0.3}), checkpoint.params)
        first, second = model.train()(tokens, mask), model(tokens, mask)
        assert not torch.equal(first, second) and not torch.equal(first, plain), site
        assert torch.equal(model.eval()(tokens, mask), plain), site
