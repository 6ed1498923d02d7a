"""TUPE's masked LM as its authors ran it, loaded from a posflow checkpoint: the reference of
posflow's `form = "code"` TUPE and `norm = "post"` backbone.

Transcribed from github.com/guolinke/TUPE (4c64ff7), not from posflow's formulas:
- fairseq/modules/transformer_sentence_encoder.py: `TransformerSentenceEncoder.forward` (the
  token embedding, `emb_layer_norm` with `--embedding-normalize`, the position table of
  `max_seq_len + 1` rows through `pos_ln` and one `pos_proj = nn.Linear(D, 2D)` into `pos_q`,
  `pos_k`, `pos_scaling`, θ as the self-correlations of rows 0 and 1, the `[:, 1:, 1:]` offset and
  the [CLS] row and column set to them; with `--rel-pos` the T5 buckets of `relative_position_bucket`
  with the [CLS] column sent to bucket `bins` and the row to `bins // 2`, an `Embedding(bins + 1,
  H)`; `emb_out_layer_norm` after the layers with `encoder_normalize_before`);
- transformer_sentence_encoder_layer.py: the layer, post-LN (`maybe_layer_norm(..., after=True)`)
  or pre-LN, GELU;
- multihead_attention.py: `multi_head_attention_forward` with `scale_factor = 2` (q scaled by
  (2·Dh)^-½, then q·kᵀ, then `attn_bias` added);
- fairseq/models/bert/model.py: `BertLMHead` (dense, GELU, LayerNorm, the token table, a bias).

posflow's tensors are placed into these modules (posflow's linear weights are [in, out], theirs
[out, in]; `posenc.tupe.query` and `.key` are the two halves of their `pos_proj`), the model runs
in float64 on the checkpoint's reference batch, and the gradients go back under posflow's names.
Dropout is 0 (the reference is of the function, not of the masks). Their attention adds the bias
of shape [H, L, L] to every row of the batch; their padding path zeroes padded embeddings, which
posflow does not (it hides padded keys only), so the batches here are unpadded.

    python3 authors_tupe.py CHECKPOINT...   (model_reference.py's `expect` calls it for these)
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
    """Whether a checkpoint's config is this script's: TUPE in its code form or a post-LN model
    other than a seq2seq one (fairseq's translation model, model_reference.py's)."""
    post_bert = cfg.get("norm", "pre") == "post" and cfg["kind"]["type"] != "seq2seq"
    return cfg["posenc"].get("form") == "code" or post_bert


def param(tensor):
    return nn.Parameter(tensor.clone())


def layer_norm(p, prefix):
    ln = nn.LayerNorm(p[f"{prefix}.gain"].shape[0], eps=LN_EPS).double()
    ln.weight, ln.bias = param(p[f"{prefix}.gain"]), param(p[f"{prefix}.bias"])
    return ln


def linear(p, prefix):
    """Their nn.Linear from posflow's `prefix.weight` [in, out] and `prefix.bias`."""
    weight = p[f"{prefix}.weight"]
    module = nn.Linear(weight.shape[0], weight.shape[1]).double()
    module.weight, module.bias = param(weight.T), param(p[f"{prefix}.bias"])
    return module


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """transformer_sentence_encoder.py's copy of T5's bucket function."""
    ret = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0).to(torch.long) * num_buckets
        n = torch.abs(n)
    else:
        n = torch.max(n, torch.zeros_like(n))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    ret += torch.where(is_small, n, val_if_large)
    return ret


class MultiheadAttention(nn.Module):
    """multi_head_attention_forward without the paths these models never take (attn_mask, bias_k,
    zero attention, dropout)."""

    def __init__(self, p, prefix, heads, scale_factor):
        super().__init__()
        qkv = p[f"{prefix}.qkv.weight"]  # [D, 3D]: columns q | k | v
        self.in_proj_weight = param(qkv.T)  # theirs: [3D, D], rows q | k | v
        self.in_proj_bias = param(p[f"{prefix}.qkv.bias"])
        self.out_proj = linear(p, f"{prefix}.out")
        self.num_heads, self.scale_factor = heads, scale_factor

    def forward(self, query, key_padding_mask=None, attn_bias=None):
        tgt_len, bsz, embed_dim = query.size()
        head_dim = embed_dim // self.num_heads
        scaling = float(head_dim * self.scale_factor) ** -0.5
        q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        q = q * scaling
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, head_dim).transpose(0, 1)
        weights = torch.bmm(q, k.transpose(1, 2))
        if attn_bias is not None:
            weights = weights.view(bsz, self.num_heads, tgt_len, tgt_len) + attn_bias
            weights = weights.view(bsz * self.num_heads, tgt_len, tgt_len)
        if key_padding_mask is not None:
            weights = weights.view(bsz, self.num_heads, tgt_len, tgt_len)
            weights = weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))
            weights = weights.view(bsz * self.num_heads, tgt_len, tgt_len)
        weights = F.softmax(weights, dim=-1)
        out = torch.bmm(weights, v)
        out = out.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(out)


class TransformerSentenceEncoderLayer(nn.Module):
    def __init__(self, p, i, heads, scale_factor, normalize_before):
        super().__init__()
        prefix = f"blocks.{i}"
        self.self_attn = MultiheadAttention(p, f"{prefix}.attn", heads, scale_factor)
        self.self_attn_layer_norm = layer_norm(p, f"{prefix}.ln1")
        self.fc1 = linear(p, f"{prefix}.ffn.up")
        self.fc2 = linear(p, f"{prefix}.ffn.down")
        self.final_layer_norm = layer_norm(p, f"{prefix}.ln2")
        self.normalize_before = normalize_before

    def forward(self, x, self_attn_padding_mask=None, self_attn_bias=None):
        residual = x
        x = self.maybe_layer_norm(self.self_attn_layer_norm, x, before=True)
        x = self.self_attn(x, key_padding_mask=self_attn_padding_mask, attn_bias=self_attn_bias)
        x = residual + x
        x = self.maybe_layer_norm(self.self_attn_layer_norm, x, after=True)
        residual = x
        x = self.maybe_layer_norm(self.final_layer_norm, x, before=True)
        x = F.gelu(self.fc1(x))
        x = self.fc2(x)
        x = residual + x
        x = self.maybe_layer_norm(self.final_layer_norm, x, after=True)
        return x

    def maybe_layer_norm(self, layer_norm, x, before=False, after=False):
        assert before ^ after
        if after ^ self.normalize_before:
            return layer_norm(x)
        return x


class TransformerSentenceEncoder(nn.Module):
    """Their encoder with TUPE always on (its only form) and `rel_pos` for TUPE-R."""

    def __init__(self, cfg, p):
        super().__init__()
        d, heads = cfg["d_model"], cfg["heads"]
        enc = cfg["posenc"]
        post = cfg.get("norm", "pre") == "post"
        self.embedding_dim, self.num_attention_heads = d, heads
        self.max_seq_len = cfg["max_len"]
        self.embed_tokens = nn.Embedding.from_pretrained(p["tok_emb.weight"].clone(), freeze=False)
        self.attn_scale_factor = 2
        self.pos = nn.Embedding.from_pretrained(p["posenc.tupe.weight"].clone(), freeze=False)
        assert self.pos.weight.shape[0] == self.max_seq_len + 1
        self.pos_proj = nn.Linear(d, 2 * d).double()
        self.pos_proj.weight = param(torch.cat([p["posenc.tupe.query.weight"].T, p["posenc.tupe.key.weight"].T]))
        self.pos_proj.bias = param(torch.cat([p["posenc.tupe.query.bias"], p["posenc.tupe.key.bias"]]))
        self.pos_scaling = float(self.embedding_dim / heads * self.attn_scale_factor) ** -0.5
        self.pos_ln = layer_norm(p, "posenc.tupe.ln")
        self.layers = nn.ModuleList(
            TransformerSentenceEncoderLayer(p, i, heads, self.attn_scale_factor, not post)
            for i in range(cfg["layers"])
        )
        # The post-LN BERT of their runs has --embedding-normalize; the pre-LN one the final norm.
        self.emb_layer_norm = layer_norm(p, "emb_ln") if post else None
        self.emb_out_layer_norm = None if post else layer_norm(p, "ln_f")
        self.rel_pos = enc["type"] == "tupe_r"
        if self.rel_pos:
            self.rel_pos_bins = enc.get("buckets", 32)
            self.max_rel_pos = enc.get("max_distance", 128)
            self.relative_attention_bias = nn.Embedding.from_pretrained(
                p["posenc.relative.weight"].clone(), freeze=False
            )
            seq_len = self.max_seq_len
            context_position = torch.arange(seq_len, dtype=torch.long)[:, None]
            memory_position = torch.arange(seq_len, dtype=torch.long)[None, :]
            relative_position = memory_position - context_position
            self.rp_bucket = relative_position_bucket(
                relative_position, num_buckets=self.rel_pos_bins, max_distance=self.max_rel_pos
            )
            # others to [CLS]
            self.rp_bucket[:, 0] = self.rel_pos_bins
            # [CLS] to others
            self.rp_bucket[0, :] = self.rel_pos_bins // 2

    def get_rel_pos_bias(self, x):
        seq_len = x.size(1)
        rp_bucket = self.rp_bucket[:seq_len, :seq_len]
        values = self.relative_attention_bias(rp_bucket)
        return values.permute([2, 0, 1]).contiguous()

    def forward(self, tokens):
        rel_pos_bias = self.get_rel_pos_bias(tokens) if self.rel_pos else None
        x = self.embed_tokens(tokens)
        if self.emb_layer_norm is not None:
            x = self.emb_layer_norm(x)
        x = x.transpose(0, 1)
        seq_len = x.size(0)
        weight = self.pos_ln(self.pos.weight[: seq_len + 1, :])
        pos_q, pos_k = (
            self.pos_proj(weight).reshape(seq_len + 1, 2, self.num_attention_heads, -1).permute(1, 2, 0, 3)
        )
        pos_q = pos_q * self.pos_scaling
        abs_pos_bias = torch.bmm(pos_q, pos_k.transpose(1, 2))
        # p_0 · p_0 is [CLS] to the others, p_1 · p_1 the others to [CLS]
        cls_2_other = abs_pos_bias[:, 0, 0]
        other_2_cls = abs_pos_bias[:, 1, 1]
        abs_pos_bias = abs_pos_bias[:, 1:, 1:].clone()
        abs_pos_bias[:, :, 0] = other_2_cls.view(-1, 1)
        abs_pos_bias[:, 0, :] = cls_2_other.view(-1, 1)
        if rel_pos_bias is not None:
            abs_pos_bias = abs_pos_bias + rel_pos_bias
        for layer in self.layers:
            x = layer(x, self_attn_bias=abs_pos_bias)
        if self.emb_out_layer_norm is not None:
            x = self.emb_out_layer_norm(x)
        return x.transpose(0, 1)


class BertLMHead(nn.Module):
    def __init__(self, p, weight):
        super().__init__()
        self.dense = linear(p, "mlm_head.dense")
        self.layer_norm = layer_norm(p, "mlm_head.ln")
        self.weight = weight
        self.bias = param(p["mlm_head.bias"])

    def forward(self, features):
        x = self.dense(features)
        x = F.gelu(x)
        x = self.layer_norm(x)
        return F.linear(x, self.weight) + self.bias


def model_and_grads(cfg, p, inputs, targets):
    """(logits, loss, {posflow name: gradient}) of their masked LM built from posflow's tensors."""
    tokens, key_mask = inputs
    if cfg["kind"]["type"] != "masked_lm":
        sys.exit(f"authors_tupe.py runs the authors' masked LM, not {cfg['kind']['type']}")
    enc = cfg["posenc"]
    if enc["type"] not in ("tupe_a", "tupe_r") or enc.get("form") != "code" or not enc["untie_cls"]:
        sys.exit("authors_tupe.py runs TUPE-A or TUPE-R in the code form, with untie_cls (their only form)")
    if key_mask is not None:
        sys.exit("their padding zeroes padded embeddings, posflow's does not: give an unpadded batch")
    encoder = TransformerSentenceEncoder(cfg, p)
    head = BertLMHead(p, encoder.embed_tokens.weight)
    logits = head(encoder(tokens))
    loss = posflow_reference.loss_of(cfg, logits, targets)
    loss.backward()
    grads = {
        "tok_emb.weight": encoder.embed_tokens.weight.grad,
        "posenc.tupe.weight": encoder.pos.weight.grad,
        "mlm_head.bias": head.bias.grad,
    }
    d = cfg["d_model"]
    proj = encoder.pos_proj
    grads["posenc.tupe.query.weight"] = proj.weight.grad[:d].T
    grads["posenc.tupe.key.weight"] = proj.weight.grad[d:].T
    grads["posenc.tupe.query.bias"] = proj.bias.grad[:d]
    grads["posenc.tupe.key.bias"] = proj.bias.grad[d:]
    if encoder.rel_pos:
        grads["posenc.relative.weight"] = encoder.relative_attention_bias.weight.grad
    modules = {"posenc.tupe.ln": encoder.pos_ln, "mlm_head.dense": head.dense, "mlm_head.ln": head.layer_norm}
    if encoder.emb_layer_norm is not None:
        modules["emb_ln"] = encoder.emb_layer_norm
    if encoder.emb_out_layer_norm is not None:
        modules["ln_f"] = encoder.emb_out_layer_norm
    for i, layer in enumerate(encoder.layers):
        attn = layer.self_attn
        grads[f"blocks.{i}.attn.qkv.weight"] = attn.in_proj_weight.grad.T
        grads[f"blocks.{i}.attn.qkv.bias"] = attn.in_proj_bias.grad
        modules |= {
            f"blocks.{i}.attn.out": attn.out_proj,
            f"blocks.{i}.ln1": layer.self_attn_layer_norm,
            f"blocks.{i}.ffn.up": layer.fc1,
            f"blocks.{i}.ffn.down": layer.fc2,
            f"blocks.{i}.ln2": layer.final_layer_norm,
        }
    for prefix, module in modules.items():
        if isinstance(module, nn.LayerNorm):
            grads[f"{prefix}.gain"] = module.weight.grad
        else:
            grads[f"{prefix}.weight"] = module.weight.grad.T
        grads[f"{prefix}.bias"] = module.bias.grad
    missing, extra = set(p) - set(grads), set(grads) - set(p)
    if missing or extra:
        sys.exit(f"tensors not placed: {sorted(missing)}; placed but not in the checkpoint: {sorted(extra)}")
    return logits, loss, grads


def expect(path):
    """Writes `<name>.expected.safetensors` beside the checkpoint, as model_reference.py's."""
    path = pathlib.Path(path)
    cfg, metadata, params = posflow_reference.load(path)
    inputs, targets = posflow_reference.reference_batch(cfg, metadata)
    logits, loss, grads = model_and_grads(cfg, params, inputs, targets)
    posflow_reference.write_expected(path, logits, loss, grads, " (the TUPE authors' code)")


if __name__ == "__main__":
    if not sys.argv[1:]:
        sys.exit(__doc__)
    for checkpoint in sys.argv[1:]:
        expect(checkpoint)
