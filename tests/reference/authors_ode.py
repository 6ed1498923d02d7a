"""The ODE Transformer as its authors' code runs it, on a posflow checkpoint: the fidelity reference
of posflow's code form (`rk_stage = "layer"`, `history = "dense"` / `"learnable_dense"`, RK2 with
learned coefficients, the gate).

Transcribed from libeineu/ODE-Transformer at bcf51e8 (docs/fidelity.md says what posflow takes
from it), not from posflow's formulas (model_reference.py holds those):

- `Layer` is their TransformerEncoderLayer / TransformerDecoderLayer with
  `normalize_before = True` and no encoder attention (fairseq/models/ode_transformer.py, forward
  of both): LN, self-attention, dropout, residual; LN, fc1, ReLU (their `F.relu(self.fc1(x))`,
  L743 and L874), fc2, dropout, residual. It returns y + F(y). A checkpoint whose config does not
  say `activation = "relu"` is not their model, and is refused.
- `runge_kutta_stack` is their encoder's loop (ode_transformer.py L376-419): each stage calls the
  whole layer, `runge_kutta_list` keeps the layer outputs, stage inputs are `residual + c·x`, and
  the block combines them: RK4 and RK2 `standard` (½, ½), `initialization` (learned α starting at
  1: a scalar pair at HEAD, per channel in the compiled 2021 file), `learnable` (the gate: one
  `Linear(2D, 1)` on cat(G1, G2), Xavier-uniform). One stage is their decoder's `x = layer(x)`.
  Their gate and α belong to the stack (defined in the encoder's __init__), shared by its blocks.
  The compiled decoder of runge_kutta_transformer.pyc runs the same combinations (RK2 ½,½, RK4).
- `DenseLayerHistory` and `LearnableDenseLayerHistory` are fairseq/modules/layer_history.py's
  classes with their pre-norm paths (`normalize_before = True`), kept as written.
- The LM has no final layer norm (`final_norm = False`, ode_transformer.py L279); the encoder
  normalises its output (`self.layer_norm`), then posflow's [CLS] head reads position 0.

Where this differs from their code, on purpose, so that it checks posflow's structure and not
its other choices: the attention's q/k/v is one
[D, 3D] projection (fairseq's in_proj is the same matrix, transposed), the position encoding is
none or posflow's sinusoidal table at the input (theirs: sinusoidal plus Shaw's relative keys),
and dropout is off.

    python3 authors_ode.py CHECKPOINT...
        writes `<name>.expected.safetensors` beside each (logits, loss, grad/<param>), as
        model_reference.py's `expect` does; model_reference.py's `generate` calls this for the
        checkpoints of the code form.
"""

import math
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import model_reference as posflow_reference

LN_EPS = 1e-5


def uses_authors_form(cfg):
    """Whether a checkpoint's config is of the authors' code form (this script's, not
    model_reference.py's)."""
    return cfg.get("rk_stage", "sub_block") == "layer" or cfg.get("history", "none") != "none"


class Linear(nn.Module):
    """posflow's `x·W + b` (W [in, out]) as the nn.Linear of their code (weight [out, in])."""

    def __init__(self, weight, bias=None):
        super().__init__()
        self.weight = nn.Parameter(weight.T.clone())
        self.bias = None if bias is None else nn.Parameter(bias.clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


def layer_norm(gain, bias):
    ln = nn.LayerNorm(gain.shape[0], eps=LN_EPS).double()
    ln.weight.data.copy_(gain)
    ln.bias.data.copy_(bias)
    return ln


class SelfAttention(nn.Module):
    """fairseq's MultiheadAttention (self-attention): q scaled by head_dim^-½, the future masked
    with -inf in the LM, padded keys masked in the encoder."""

    def __init__(self, p, prefix, heads):
        super().__init__()
        self.qkv = Linear(p[f"{prefix}.qkv.weight"], p[f"{prefix}.qkv.bias"])
        self.out = Linear(p[f"{prefix}.out.weight"], p[f"{prefix}.out.bias"])
        self.heads = heads

    def forward(self, x, causal, key_mask):
        b, length, d = x.shape
        q, k, v = (t.view(b, length, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(d, -1))
        scores = (q * (d // self.heads) ** -0.5) @ k.transpose(-1, -2)
        allowed = posflow_reference.allowed_keys(b, length, length, causal, key_mask)
        scores = scores.masked_fill(~allowed, float("-inf"))
        out = torch.softmax(scores, -1) @ v
        return self.out(out.transpose(1, 2).reshape(b, length, d))


class Layer(nn.Module):
    """Their pre-norm Transformer layer: returns y + F(y)."""

    def __init__(self, p, i, heads):
        super().__init__()
        prefix = f"blocks.{i}"
        self.self_attn_layer_norm = layer_norm(p[f"{prefix}.ln1.gain"], p[f"{prefix}.ln1.bias"])
        self.self_attn = SelfAttention(p, f"{prefix}.attn", heads)
        self.final_layer_norm = layer_norm(p[f"{prefix}.ln2.gain"], p[f"{prefix}.ln2.bias"])
        self.fc1 = Linear(p[f"{prefix}.ffn.up.weight"], p[f"{prefix}.ffn.up.bias"])
        self.fc2 = Linear(p[f"{prefix}.ffn.down.weight"], p[f"{prefix}.ffn.down.bias"])

    def forward(self, x, causal, key_mask):
        residual = x
        x = self.self_attn_layer_norm(x)
        x = self.self_attn(x, causal, key_mask)
        x = residual + x
        residual = x
        x = self.final_layer_norm(x)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        x = residual + x
        return x


class DenseLayerHistory(nn.Module):
    """layer_history.py's DenseLayerHistory, pre-norm, `integration_type = 'avg'`, no window."""

    def __init__(self, layer_norms):
        super().__init__()
        self.layer_norms = nn.ModuleList(layer_norms)
        self.normalize_before = True
        self.sum = None
        self.count = 0

    def add(self, layer):
        self.count += 1
        # first layer
        if self.sum is None:
            self.sum = layer
            return
        # following layer
        if self.normalize_before:
            layer = self.layer_norms[self.count - 2](layer)
        self.sum = self.sum + layer

    def pop(self):
        assert self.sum is not None
        ret = self.sum / self.count
        if self.count == 1 or self.normalize_before:
            return ret
        return self.layer_norms[self.count - 2](ret)


class LearnableDenseLayerHistory(nn.Module):
    """layer_history.py's LearnableDenseLayerHistory, pre-norm: `weight` is their lower-triangular
    [layers + 1, layers + 1] matrix, its row i posflow's `history.mix.i`."""

    def __init__(self, layer_norms, rows):
        super().__init__()
        self.layer_norms = nn.ModuleList(layer_norms)
        self.normalize_before = True
        n = len(rows)
        weight = torch.zeros(n, n, dtype=torch.float64)
        for i, row in enumerate(rows):
            weight[i, : i + 1] = row
        self.weight = nn.Parameter(weight)
        self.sum = None
        self.count = 0
        self.layers = []

    def add(self, layer):
        self.count += 1
        # first layer
        if self.sum is None:
            self.sum = layer
            self.layers.append(layer)
            return
        # following layer
        if self.normalize_before:
            layer = self.layer_norms[self.count - 2](layer)
        self.layers.append(layer)

    def pop(self):
        assert len(self.layers) > 0
        ret = (torch.stack(self.layers, 0) * self.weight[self.count - 1, : self.count].view(-1, 1, 1, 1)).sum(0)
        if self.count == 1 or self.normalize_before:
            return ret
        return self.layer_norms[self.count - 2](ret)


class RungeKuttaStack(nn.Module):
    """Their encoder's loop over the layers, with the history around it."""

    def __init__(self, cfg, p):
        super().__init__()
        layers = cfg["layers"]
        self.layers = nn.ModuleList(Layer(p, i, cfg["heads"]) for i in range(layers))
        block = cfg.get("block", {"type": "residual"})
        self.calculate_num = {"residual": 1, "rk2": 2, "rk2_gated": 2, "rk4": 4}[block["type"]]
        if block["type"] == "rk2_gated":
            self.rk_type = "learnable"
            self.gate_linear = Linear(p["rk.gate.weight"], p["rk.gate.bias"])
        elif block["type"] == "rk2" and "learned" in block:
            self.rk_type = "initialization"
            self.alpha = nn.ParameterList([nn.Parameter(p["rk.alpha1"].clone()), nn.Parameter(p["rk.alpha2"].clone())])
        elif block["type"] == "rk2":
            assert block["gamma"] == [0.5, 0.5], "their RK2 without learned coefficients is ½, ½"
            self.rk_type = "standard"
        else:
            self.rk_type = "standard"
        history = cfg.get("history", "none")
        norms = [layer_norm(p[f"history.ln.{i}.gain"], p[f"history.ln.{i}.bias"]) for i in range(layers)]
        if history == "dense":
            self.history = DenseLayerHistory(norms)
        elif history == "learnable_dense":
            self.history = LearnableDenseLayerHistory(norms, [p[f"history.mix.{i}"] for i in range(layers + 1)])
        else:
            sys.exit(f"authors_ode.py runs the authors' layer histories, not history = {history}")

    def forward(self, x, causal, key_mask):
        self.history.add(x)
        for layer in self.layers:
            x = self.history.pop()
            runge_kutta_list = []
            residual = x
            for step_size in range(self.calculate_num):
                x = layer(x, causal, key_mask)
                runge_kutta_list.append(x)
                if self.calculate_num == 4:
                    if step_size == 0 or step_size == 1:
                        x = residual + 1 / 2 * x
                    elif step_size == 2:
                        x = residual + x
                elif self.calculate_num == 2:
                    x = residual + x
            if self.calculate_num == 4:
                x = residual + 1 / 6 * (runge_kutta_list[0] + 2 * runge_kutta_list[1] + 2 * runge_kutta_list[2] + runge_kutta_list[3])
            elif self.calculate_num == 2:
                if self.rk_type == "learnable":
                    alpha = torch.sigmoid(self.gate_linear(torch.cat((runge_kutta_list[0], runge_kutta_list[1]), dim=-1)))
                    x = residual + alpha * runge_kutta_list[0] + (1 - alpha) * runge_kutta_list[1]
                elif self.rk_type == "standard":
                    x = residual + 1 / 2 * (runge_kutta_list[0] + runge_kutta_list[1])
                elif self.rk_type == "initialization":
                    x = residual + self.alpha[0] * runge_kutta_list[0] + self.alpha[1] * runge_kutta_list[1]
            else:
                # Their decoder with one stage: x = layer(x).
                x = runge_kutta_list[0]
            self.history.add(x)
        return self.history.pop()


def model_and_grads(cfg, p, inputs, targets):
    """(logits, loss, {posflow name: gradient}) of their model built from posflow's tensors."""
    tokens, key_mask = inputs
    kind = cfg["kind"]["type"]
    if kind not in ("causal_lm", "encoder"):
        sys.exit(f"authors_ode.py runs a causal LM or an encoder, not {kind}")
    if cfg.get("rk_stage", "sub_block") != "layer":
        sys.exit("the authors' stages are whole layers: this script takes rk_stage = layer only")
    causal = kind == "causal_lm"
    side = posflow_reference.side(cfg, cfg["layers"], bidirectional=not causal)
    terms = posflow_reference.position_terms(side, p, tokens.shape[1])
    if cfg["posenc"]["type"] not in ("none", "sinusoidal") or terms.at_every_block is not None:
        sys.exit("authors_ode.py takes no position encoding or the sinusoidal table at the input")
    embed = nn.Parameter(p["tok_emb.weight"].clone())
    stack = RungeKuttaStack(cfg, p)
    x = embed[tokens]
    if cfg.get("embed_scale", "none") == "sqrt_d":
        x = x * math.sqrt(cfg["d_model"])
    if terms.at_input is not None:
        x = x + terms.at_input
    x = stack(x, causal, key_mask)
    named = {"tok_emb.weight": embed}
    if causal:
        # No final layer norm (final_norm = False); the output layer is the token table.
        logits = F.linear(x, embed)
    else:
        ln_f = layer_norm(p["ln_f.gain"], p["ln_f.bias"])
        head = Linear(p["cls_head.weight"], p["cls_head.bias"])
        logits = head(ln_f(x)[:, 0])
        named |= {"ln_f.gain": ln_f.weight, "ln_f.bias": ln_f.bias, "cls_head.bias": head.bias}
    loss = posflow_reference.loss_of(cfg, logits, targets)
    loss.backward()
    grads = {name: param.grad for name, param in named.items()}
    if not causal:
        grads["cls_head.weight"] = head.weight.grad.T
    grads |= stack_grads(cfg, stack)
    missing = set(p) - set(grads)
    if missing:
        sys.exit(f"checkpoint tensors this script does not place: {sorted(missing)}")
    return logits, loss, grads


def stack_grads(cfg, stack):
    """The gradients of the stack's modules, under posflow's names (weights back to [in, out])."""
    grads = {}
    for i, layer in enumerate(stack.layers):
        parts = {
            "ln1": layer.self_attn_layer_norm,
            "attn.qkv": layer.self_attn.qkv,
            "attn.out": layer.self_attn.out,
            "ln2": layer.final_layer_norm,
            "ffn.up": layer.fc1,
            "ffn.down": layer.fc2,
        }
        for name, module in parts.items():
            if isinstance(module, Linear):
                grads[f"blocks.{i}.{name}.weight"] = module.weight.grad.T
                grads[f"blocks.{i}.{name}.bias"] = module.bias.grad
            else:
                grads[f"blocks.{i}.{name}.gain"] = module.weight.grad
                grads[f"blocks.{i}.{name}.bias"] = module.bias.grad
    for i, ln in enumerate(stack.history.layer_norms):
        grads[f"history.ln.{i}.gain"] = ln.weight.grad
        grads[f"history.ln.{i}.bias"] = ln.bias.grad
    if isinstance(stack.history, LearnableDenseLayerHistory):
        for i in range(cfg["layers"] + 1):
            grads[f"history.mix.{i}"] = stack.history.weight.grad[i, : i + 1]
    if stack.rk_type == "learnable":
        grads["rk.gate.weight"] = stack.gate_linear.weight.grad.T
        grads["rk.gate.bias"] = stack.gate_linear.bias.grad
    if stack.rk_type == "initialization":
        grads["rk.alpha1"] = stack.alpha[0].grad
        grads["rk.alpha2"] = stack.alpha[1].grad
    return grads


def expect(path):
    """Writes `<name>.expected.safetensors` beside the checkpoint, as model_reference.py's."""
    path = pathlib.Path(path)
    cfg, metadata, params = posflow_reference.load(path)
    if cfg.get("activation", "gelu") != "relu":
        sys.exit(f"{path.name}: the authors' FFN is ReLU; this config's activation is "
                 f"{cfg.get('activation', 'gelu')}")
    inputs, targets = posflow_reference.reference_batch(cfg, metadata)
    logits, loss, grads = model_and_grads(cfg, params, inputs, targets)
    posflow_reference.write_expected(path, logits, loss, grads, " (the authors' code)")


if __name__ == "__main__":
    if not sys.argv[1:]:
        sys.exit(__doc__)
    for checkpoint in sys.argv[1:]:
        expect(checkpoint)
