//! The Transformer built from a [`ModelConfig`]: token embedding, position encoding, pre-norm
//! blocks, and a language-model or classifier head, as graph ops for one (batch, length).
//!
//! ```text
//! x = Drop(tok_emb[tokens] (· √D if embed_scale sqrt_d) (+ position term))   see `posenc`
//! for each block:  (+ position term, if every_block)
//!     F(y) = a + Drop(FFN(LN2(y + a)))            a = Drop(Attn(LN1(y))); causal for the LM, key
//!                                                 mask for padding; logits q·k/√Dh (TUPE:
//!                                                 /√(2·Dh)) + position bias; FFN = down(act(up)),
//!                                                 act the config's activation (GELU or ReLU)
//!     x = x + F(x)                                residual (the default): the pre-norm block
//!     x = x + γ1·F1 + γ2·F2                       rk2: F1 = F(x), F2 = F(x + F1)
//!     x = x + g·F1 + (1 − g)·F2                   rk2_gated: g = sigmoid([F1, F2]·gate.W + gate.b)
//!     x = x + (F1 + 2F2 + 2F3 + F4)/6             rk4: F2 = F(x + ½F1), F3 = F(x + ½F2), F4 = F(x + F3)
//!     x = x + α1⊙F1 + α2⊙F2                       rk2 learned: α from gamma, scalars or per channel
//!     (rk_stage "layer": every Fi above is the whole layer Gi = yi + F(yi), as the authors' code)
//! history "dense": block i reads mean(x0, LN_0(o_0), …, LN_{i-1}(o_{i-1})), the stack outputs the
//!     mean over all blocks (x0 the embeddings, o_j block j's output; "learnable_dense": learned mix)
//! norm "post" (BERT, fairseq): x = emb_LN(x) first (BERT's; not with embedding_norm = false);
//!     each block m = LN1(x + Drop(Attn(x))), a decoder's m = LN_cross(m + Drop(Cross(m))),
//!     x = LN2(m + Drop(FFN(m))); no LN_f below (word_scale sets the q·k factor for any encoding)
//! LM:      logits = LN_f(x) · tok_emb^T  (tied, never scaled)  or  LN_f(x) · lm_head.weight
//! encoder: logits = cls_head(LN_f(x[:, 0]))       position 0 holds BOS as [CLS]
//! loss = cross_entropy(logits, targets, IGNORE_INDEX)
//! ```
//!
//! `Drop` is dropout with the config's probability (and, with `activation_dropout`, on the FFN's
//! activations too) in training graphs ([`GraphOptions::training`]) and
//! the identity everywhere else; each stage of a Runge-Kutta block draws its own masks.
//!
//! The block kinds are the ODE Transformer's ([`Block`], the config's `block`): every stage `Fi`
//! of a block uses the block's one set of parameters, so `rk2` and `rk4` have the residual
//! model's parameters (and 2 or 4 times its block compute); `rk2_gated` adds the gate.
//!
//! # Parameter names
//!
//! Checkpoints and the PyTorch loader rely on these names; do not rename them. Linear weights are
//! `[in, out]` (`y = x·W + b`, as GPT-2's `Conv1D`), the transpose of PyTorch's `nn.Linear`.
//! D = d_model, F = ffn, V = vocab, C = n_classes, `i` = block index from 0.
//!
//! | name                         | shape          | init                       | present when            |
//! |------------------------------|----------------|----------------------------|-------------------------|
//! | `tok_emb.weight`             | [V, D]         | N(0, 0.02) or N(0, D^-½)   | always                  |
//! | `pos_emb.weight`             | [max_len, D]   | N(0, 0.02)                 | posenc `learned`        |
//! | `pos_emb.weight`             | [max_len, D]   | N(0, 0.02)                 | `relative` with `learned_absolute` |
//! | `posenc.relative.weight`     | [buckets, H]   | N(0, 0.02)                 | `relative`, `tupe_r` (code form with `untie_cls`: buckets + 1 rows) |
//! | `posenc.tupe.weight`         | [max_len, D]   | N(0, 0.02)                 | `tupe_a`, `tupe_r` (code form: max_len + 1 rows) |
//! | `posenc.tupe.ln.gain`        | `[D]`            | 1                          | `tupe_a`, `tupe_r`      |
//! | `posenc.tupe.ln.bias`        | `[D]`            | 0                          | `tupe_a`, `tupe_r`      |
//! | `posenc.tupe.query.weight`   | [D, D]         | N(0, 0.02)                 | `tupe_a`, `tupe_r`      |
//! | `posenc.tupe.key.weight`     | [D, D]         | N(0, 0.02)                 | `tupe_a`, `tupe_r`      |
//! | `posenc.tupe.query.bias`, `.key.bias` | `[D]`   | 0                          | TUPE, `form = "code"`   |
//! | `posenc.tupe.cls_to_others`  | `[H]`            | 0                          | TUPE with `untie_cls` (paper form) |
//! | `posenc.tupe.others_to_cls`  | `[H]`            | 0                          | TUPE with `untie_cls` (paper form) |
//! | `emb_ln.gain`, `emb_ln.bias` | `[D]`            | 1, 0                       | `norm = "post"` unless `embedding_norm = false`; `embedding_norm = true` |
//! | `posenc.floater.w1`, `.w2`   | [D, D + 1]     | Xavier-normal (additive: N(0, 0.02)) | posenc `floater` |
//! | `posenc.floater.b1`, `.b2`   | `[D]`            | 0                          | posenc `floater`        |
//! | `posenc.floater.qkv_initial` | [3, layers, D] | Xavier-uniform             | `floater` (compatible)  |
//! | `posenc.floater.initial`     | [blocks, D]    | N(0, 0.02)                 | `floater`, `form = "additive"` |
//! | `blocks.i.ln1.gain`          | `[D]`            | 1                          | always                  |
//! | `blocks.i.ln1.bias`          | `[D]`            | 0                          | always                  |
//! | `blocks.i.attn.qkv.weight`   | [D, 3D]        | N(0, 0.02)                 | always                  |
//! | `blocks.i.attn.qkv.bias`     | `[3D]`           | 0                          | not FLOATER compatible; not `attention_biases = false` |
//! | `blocks.i.attn.out.weight`   | [D, D]         | N(0, 0.02/√(2·layers))     | always                  |
//! | `blocks.i.attn.out.bias`     | `[D]`            | 0                          | not `attention_biases = false` |
//! | `blocks.i.ln2.gain`          | `[D]`            | 1                          | always                  |
//! | `blocks.i.ln2.bias`          | `[D]`            | 0                          | always                  |
//! | `blocks.i.ffn.up.weight`     | [D, F]         | N(0, 0.02)                 | always                  |
//! | `blocks.i.ffn.up.bias`       | `[F]`            | 0                          | always                  |
//! | `blocks.i.ffn.down.weight`   | [F, D]         | N(0, 0.02/√(2·layers))     | always                  |
//! | `blocks.i.ffn.down.bias`     | `[D]`            | 0                          | always                  |
//! | `blocks.i.gate.weight`       | [2D, 1]        | 0 (`rk.gate`: Xavier-uniform) | block `rk2_gated`    |
//! | `blocks.i.gate.bias`         | `[1]`            | 0                          | block `rk2_gated`       |
//! | `blocks.i.alpha1`, `alpha2`  | `[1]` or `[D]`     | gamma                      | rk2 with `learned`      |
//! | `rk.alpha1`, `rk.alpha2`, `rk.gate.weight`, `rk.gate.bias` | as above | as above | the same with `rk_stage = "layer"`: one for the stack |
//! | `history.ln.i.gain`, `.bias` | `[D]`            | 1, 0                       | a `history`             |
//! | `history.mix.i`              | [i + 1]        | 1/(i + 1)                  | `learnable_dense`       |
//! | `ln_f.gain`                  | `[D]`            | 1                          | `norm = "pre"`, not a causal LM with a `history` |
//! | `ln_f.bias`                  | `[D]`            | 0                          | `norm = "pre"`, not a causal LM with a `history` |
//! | `lm_head.weight`             | [D, V]         | N(0, 0.02)                 | causal LM, untied head  |
//! | `cls_head.weight`            | [D, C]         | N(0, 0.02)                 | encoder                 |
//! | `cls_head.bias`              | `[C]`            | 0                          | encoder                 |
//!
//! FLOATER's `blocks` is `layers` with `every_block`, 1 otherwise; its layout, inits and solver
//! settings are in `posenc/floater.rs`. In its compatible form (the default) the q/k/v biases are
//! the flow's solution, so `attn.qkv` has no static bias.
//!
//! The inits in the table are `init = "gpt2"`'s (the default of `norm = "pre"`); `"bert"` (the
//! default of `norm = "post"`) draws `attn.out` and `ffn.down` at N(0, 0.02) too, and `"fairseq"`
//! draws every block projection Xavier-uniform and `tok_emb` and `lm_head` at N(0, D^-½)
//! ([`InitScheme`]). `tok_emb.weight` is N(0, D^-½) when `embed_scale` is `sqrt_d`
//! ([`EmbedScale`]): the lookup is then multiplied by √D, so the embeddings start with std 1; a
//! tied head reads the table unscaled, as fairseq does.
//!
//! The gate's rows are `[F1 | F2]`: rows `0..D` weigh F1, rows `D..2D` weigh F2. It starts at 0,
//! so g = ½ everywhere and the block starts as `rk2` with γ = ½, ½ (the paper gives no init); with
//! `rk_stage = "layer"` it is Xavier-uniform (bound √(6/(2D + 1))), as the authors' code.
//!
//! The columns of `attn.qkv` are `[q | k | v]`, each D wide; head `h` uses columns
//! `h·Dh .. (h+1)·Dh` of each part (Dh = D / heads), as `qkv.split(D, -1)` then
//! `.view(B, L, heads, Dh)` in PyTorch. The TUPE projections `posenc.tupe.query/key.weight` split
//! into heads the same way (`posenc::tupe` has the formula; its table gets its own name, not
//! `pos_emb.weight`, because it is never added to the input: a `learned` checkpoint must not load
//! into it silently). TUPE's θ's start at 0 and its table and projections at BERT's N(0, 0.02), as
//! the paper follows BERT. The graph's inputs are `tokens`, `targets`, `key_mask` (padded graphs),
//! `posenc.sinusoidal` (a constant table), `posenc.relative.buckets` (i32 `[L, L]` bucket
//! indices) and TUPE's `[CLS]` masks `posenc.tupe.keep`, `posenc.tupe.cls_row`,
//! `posenc.tupe.cls_column` (f32 `[L, L]`); [`ModelGraph::feed`] writes the constants.

mod block;
mod config;
mod history;
mod init;
pub mod posenc;
pub mod probe;
mod seq2seq;
mod stack;
mod transformer;

pub use block::LN_EPS;
pub use config::{
    Activation, Block, Coefficients, EmbedScale, History, InitScheme, ModelConfig, ModelKind, Norm, RkStage,
    WordScale,
};
pub use posenc::{
    Alibi, Encoding, EncodingSource, FloaterConfig, FloaterForm, GradientMethod, Learned, NoEncoding,
    Nonlinearity, PosEnc, Relative, Rope, SinusoidLayout, Sinusoidal, SolverMethod, TupeA, TupeForm, TupeR,
    encodings_shape,
};
pub use seq2seq::{DecoderFlow, DecoderStep, DecodingStep, Pairs, Seq2SeqGraph, SourceMemory, Sources};
pub use transformer::{GraphOptions, GraphShape, Model, ModelGraph, Tokens};
