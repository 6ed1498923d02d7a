"""posflow's Transformer in PyTorch, loaded from a posflow checkpoint by its documented names: the
package python/posflow_torch (imported from the checkout, no install needed), run in float64.

The model is the one of src/model/mod.rs, written out op by op: the parameter names and layouts of
its table (linear weights are [in, out], used as `x @ W + b`; the columns of `attn.qkv` are
[q | k | v], head h taking columns h·Dh..(h+1)·Dh of each), pre-norm blocks stepped as residual or
Runge-Kutta blocks (src/model/config.rs, `Block`) or post-LN residual blocks (`norm = "post"`: the
layer norm after each residual add, no final norm, `emb_ln` on the embeddings unless
`embedding_norm` is false), the FFN's GELU (erf) or ReLU (the config's `activation`), layer norm
with eps 1e-5, the sinusoid table in either layout, softmax
attention with the position encoding's terms, a causal mask for the LM and the key mask for
padding, the tied or untied LM head or the encoder's [CLS] head, and the mean cross-entropy over
targets other than -100. Everything runs in float64.

The seq2seq kind is src/model/seq2seq.rs's: an encoder (bidirectional, source padding masked,
final norm `encoder.ln_f`) and a causal decoder whose blocks also attend to the encoder's output
(`ln_cross`, `cross.q`, `cross.kv` = [k | v] of the memory, `cross.out`; scale 1/√Dh, no
position bias, padded sources masked), each side with its own position parameters under its
prefix, one token table for both sides and the tied head. FLOATER's compatible form solves three
flows: the encoder's [3, layers, D] q/k/v biases, the decoder's [4, decoder_layers, D] (self q/k/v
and cross q) over target positions, and `decoder.cross.`'s [2, decoder_layers, D] (cross k/v) over
source positions.

    python3 model_reference.py generate [DIR]
        writes the checkpoints of tests/tools/reference_checkpoints.rs to DIR (default: models/ beside
        this script) with cargo, then `<name>.expected.safetensors` beside each: `logits`, `loss`
        and `grad/<param>` (float32) on the batch stored in the checkpoint. tests/suite/model_reference.rs
        compares posflow's values with these. The same in two steps:
            cargo run --example reference_checkpoints -- tests/reference/models
            python3 tests/reference/model_reference.py expect tests/reference/models/*.safetensors

    python3 model_reference.py CHECKPOINT [TEXT]
        the loss and logits of any posflow checkpoint: on TEXT (encoded with the checkpoint's
        tokenizer, BOS first; next-character loss for a causal LM; not for a seq2seq model), or
        else on the checkpoint's `reference_batch`.

A position encoding is one function of posflow_torch/encodings.py, registered in POSENCS by its
config `type`: it returns the terms it contributes (see PositionTerms), so a new one is one more
function and one more entry. authors_ode.py and authors_tupe.py use the helpers below.
"""

import pathlib
import subprocess
import sys

import torch
from safetensors.torch import save_file

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "python"))

from posflow_torch import encodings, model  # noqa: E402
from posflow_torch.checkpoint import encode as encode_text, load_checkpoint  # noqa: E402
from posflow_torch.checkpoint import reference_batch as stored_batch  # noqa: E402

IGNORE_INDEX = -100
SEQ2SEQ = model.SEQ2SEQ
side = model.side


def load(path):
    """(config dict, metadata, {name: float64 tensor}) of a posflow checkpoint; optimizer
    moments (`optim.*`) and run state (`state.*`) are dropped. The metadata is the checkpoint
    (`training`, `tokenizer`)."""
    checkpoint = load_checkpoint(path)
    params = {k: v.double() for k, v in checkpoint.params.items()}
    return checkpoint.config, checkpoint, params


def reference_batch(cfg, metadata):
    """(the model's inputs, targets) stored by tests/tools/reference_checkpoints.rs."""
    return stored_batch(metadata)


def position_terms(cfg, p, length):
    """The terms of the config's encoding for tokens at 0..length."""
    return encodings.position_terms(cfg, model.UsedParams(p, set()), encodings.Positions.contiguous(length))


def allowed_keys(b, queries, keys, causal, key_mask):
    return model.allowed_keys(b, queries, keys, causal, key_mask, "cpu")


def forward(cfg, p, inputs):
    """The model's logits on `inputs` (see reference_batch); every parameter used, none missing."""
    model.check_supported(cfg)
    return model.forward(cfg, p, inputs)


def loss_of(cfg, logits, targets):
    """Mean cross-entropy over the targets that are not IGNORE_INDEX."""
    return model.loss_of(logits, targets)


def encode(metadata, text):
    """`text` in the checkpoint's characters, BOS first: [1, 1 + len]."""
    return encode_text(metadata, text)


# ---- commands -----------------------------------------------------------------------------------


def expect(path):
    """Writes `<name>.expected.safetensors` beside the checkpoint: logits, loss, grad/<param>. The
    ODE Transformer's code form is authors_ode.py's, TUPE's code form and the masked LM
    authors_tupe.py's, each written from its authors' code instead."""
    path = pathlib.Path(path)
    cfg, metadata, params = load(path)
    import authors_ode
    import authors_tupe

    for authors in (authors_ode, authors_tupe):
        if authors.uses_authors_form(cfg):
            authors.expect(path)
            return
    inputs, targets = reference_batch(cfg, metadata)
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    logits = forward(cfg, leaves, inputs)
    loss = loss_of(cfg, logits, targets)
    loss.backward()
    write_expected(path, logits, loss, {name: leaf.grad for name, leaf in leaves.items()})


def write_expected(path, logits, loss, grads, source=""):
    """`<name>.expected.safetensors` beside the checkpoint at `path`: logits, loss and
    grad/<param>, as float32; `source` says whose code computed them."""
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for name, grad in grads.items():
        out[f"grad/{name}"] = grad
    out = {k: v.float().contiguous() for k, v in out.items()}
    target = path.with_name(path.name.removesuffix(".safetensors") + ".expected.safetensors")
    save_file(out, str(target))
    print(f"{target.name}: loss {loss.item():.6f}, {len(grads)} gradients{source}")


def generate(outdir):
    outdir = pathlib.Path(outdir).resolve()
    command = ["cargo", "run", "--quiet", "--example", "reference_checkpoints", "--", str(outdir)]
    subprocess.run(command, cwd=ROOT, check=True)
    expect_all(sorted(outdir.glob("*.safetensors")))


def expect_all(paths):
    """`expect` on each checkpoint among `paths`, skipping expected-value files."""
    for path in map(pathlib.Path, paths):
        if not path.name.endswith(".expected.safetensors"):
            expect(path)


def evaluate(path, text=None):
    cfg, metadata, params = load(path)
    if text is None:
        inputs, targets = reference_batch(cfg, metadata)
        shapes = [tuple(x.shape) for x in inputs if x is not None]
        print(f"{path}: the checkpoint's reference batch, {shapes}")
    elif cfg["kind"]["type"] == SEQ2SEQ:
        sys.exit("a seq2seq checkpoint is evaluated on its reference batch only")
    else:
        tokens = encode(metadata, text)
        inputs = tokens, None
        # Next characters for a causal LM; an encoder's class is unknown, so no loss.
        targets = torch.cat([tokens[:, 1:], torch.tensor([[IGNORE_INDEX]])], dim=1)
    with torch.no_grad():
        logits = forward(cfg, params, inputs)
        if cfg["kind"]["type"] == "causal_lm" or text is None:
            print(f"loss {loss_of(cfg, logits, targets).item():.6f}")
    torch.set_printoptions(precision=4, linewidth=120)
    print(f"logits {tuple(logits.shape)}:\n{logits}")


def main(argv):
    if len(argv) >= 1 and argv[0] == "generate":
        generate(argv[1] if len(argv) > 1 else HERE / "models")
    elif len(argv) >= 2 and argv[0] == "expect":
        expect_all(argv[1:])
    elif len(argv) in (1, 2):
        evaluate(argv[0], argv[1] if len(argv) == 2 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
