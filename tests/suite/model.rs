//! The Transformer of `posflow::model`: shapes, parameter names, causality, key masking, length
//! limits, GPU-vs-CPU agreement and dropout. Training on small tasks is tests/suite/model_training.rs.

use crate::common::models;

use std::rc::Rc;

use models::*;
use posflow::backend::{Backend, gpu_for_tests};
use posflow::data::IGNORE_INDEX;
use posflow::exec::Executor;
use posflow::graph::Source;
use posflow::model::Tokens;
use posflow::model::{Alibi, Learned, NoEncoding, Relative, Sinusoidal, TupeA};
use posflow::model::{
    Block, EmbedScale, GraphOptions, Model, ModelConfig, ModelGraph, ModelKind, PosEnc, TupeForm,
};
use posflow::params::ParamStore;
use posflow::{Graph, TensorId};

/// A forward-and-backward graph of `config`, ready to run on `backend`.
struct Harness {
    graph: Graph,
    model: ModelGraph,
    grads: Vec<(String, TensorId)>,
    exec: Executor,
}

fn harness(config: ModelConfig, batch: usize, len: usize, padded: bool, backend: Rc<dyn Backend>) -> Harness {
    let model = Model::new(config).unwrap();
    let mut graph = Graph::new();
    let built = if padded {
        model.build(
            &mut graph,
            Tokens { batch, len },
            GraphOptions::default().padded(),
        )
    } else {
        model.build(&mut graph, Tokens { batch, len }, GraphOptions::default())
    }
    .unwrap();
    let grads = graph.backward(built.loss).unwrap();
    let grads: Vec<(String, TensorId)> = grads
        .iter()
        .map(|(p, g)| (graph.info(p).name.clone(), g))
        .collect();
    let params = ParamStore::init(backend, &graph, 7).unwrap();
    let mut outputs = vec![built.logits, built.loss];
    outputs.extend(grads.iter().map(|(_, g)| *g));
    let exec = Executor::new(&graph, &outputs, &params).unwrap();
    Harness {
        graph,
        model: built,
        grads,
        exec,
    }
}

impl Harness {
    fn run(&self, tokens: &[i32], targets: &[i32], mask: Option<&[f32]>) -> (Vec<f32>, f32) {
        self.model.feed(&self.exec, tokens, targets, mask).unwrap();
        self.exec.run().unwrap();
        let logits = self.exec.read_blocking(self.model.logits).unwrap();
        let loss = self.exec.read_blocking(self.model.loss).unwrap()[0];
        (logits, loss)
    }
}

/// A masked LM's targets: every third token (after [CLS]) is predicted, the rest ignored.
fn hidden_every_third(tokens: &[i32], len: usize) -> Vec<i32> {
    (0..tokens.len())
        .map(|i| if i % len % 3 == 1 { tokens[i] } else { IGNORE_INDEX })
        .collect()
}

/// Valid targets of two rows for each kind of model.
fn targets_for(kind: ModelKind, tokens: &[i32], len: usize) -> Vec<i32> {
    match kind {
        ModelKind::Encoder { .. } => vec![2, 0],
        ModelKind::MaskedLm {} => hidden_every_third(tokens, len),
        ModelKind::CausalLm { .. } | ModelKind::Seq2Seq { .. } => shifted(tokens, len),
        // Classes (of at least 3) at every other position, as placeholders after an input.
        ModelKind::TokenClassifier { .. } => (0..tokens.len())
            .map(|i| {
                if i % len % 2 == 1 {
                    (i % 3) as i32
                } else {
                    IGNORE_INDEX
                }
            })
            .collect(),
    }
}

#[test]
fn logits_have_the_head_shape() {
    for posenc in ALL_POSENCS {
        let h = harness(tiny(LM, posenc), 3, 9, false, cpu());
        assert_eq!(h.graph.shape(h.model.logits), [3, 9, 30], "{posenc:?}");
        assert_eq!(h.graph.shape(h.model.loss), [1]);
    }
    let untied = ModelKind::CausalLm { tied_head: false };
    let h = harness(tiny(untied, PosEnc::Learned(Learned {})), 2, 16, false, cpu());
    assert_eq!(h.graph.shape(h.model.logits), [2, 16, 30]);
    let encoder = ModelKind::Encoder { n_classes: 5 };
    let h = harness(tiny(encoder, PosEnc::Learned(Learned {})), 4, 7, true, cpu());
    assert_eq!(h.graph.shape(h.model.logits), [4, 5]);
    assert_eq!(h.graph.shape(h.model.targets), [4]);
    let tagger = ModelKind::TokenClassifier { n_classes: 3 };
    let h = harness(tiny(tagger, PosEnc::Learned(Learned {})), 4, 7, true, cpu());
    assert_eq!(h.graph.shape(h.model.logits), [4, 7, 3]);
    assert_eq!(h.graph.shape(h.model.targets), [4, 7]);
}

#[test]
fn attention_biases_false_leaves_out_the_attention_projections_biases() {
    let learned = PosEnc::Learned(Learned {});
    let without = param_names(ModelConfig {
        attention_biases: Some(false),
        ..tiny(LM, learned)
    });
    assert!(
        !without
            .iter()
            .any(|n| n.contains(".attn.") && n.contains(".bias ")),
        "{without:?}"
    );
    assert!(without.iter().any(|n| n.starts_with("blocks.1.ffn.up.bias ")));
    let with = param_names(tiny(LM, learned));
    for name in ["blocks.0.attn.qkv.bias [96]", "blocks.0.attn.out.bias [32]"] {
        assert!(with.iter().any(|n| n == name), "{name}: {with:?}");
    }
    assert_eq!(with.len(), without.len() + 2 * 2);
}

fn param_names(config: ModelConfig) -> Vec<String> {
    let mut g = Graph::new();
    Model::new(config)
        .unwrap()
        .build(&mut g, Tokens { batch: 1, len: 4 }, GraphOptions::default())
        .unwrap();
    g.tensors()
        .filter(|(_, t)| matches!(t.source, Source::Param(_)))
        .map(|(_, t)| format!("{} {:?}", t.name, t.meta.shape))
        .collect()
}

/// The names and shapes of the table in `src/model/mod.rs`.
#[test]
fn parameter_names_and_shapes_are_the_documented_ones() {
    let block = [
        "ln1.gain [32]",
        "ln1.bias [32]",
        "attn.qkv.weight [32, 96]",
        "attn.qkv.bias [96]",
        "attn.out.weight [32, 32]",
        "attn.out.bias [32]",
        "ln2.gain [32]",
        "ln2.bias [32]",
        "ffn.up.weight [32, 128]",
        "ffn.up.bias [128]",
        "ffn.down.weight [128, 32]",
        "ffn.down.bias [32]",
    ];
    let blocks: Vec<String> = (0..2)
        .flat_map(|i| block.map(|p| format!("blocks.{i}.{p}")))
        .collect();
    let expect = |head: &[&str], pos: &[&str]| -> Vec<String> {
        let mut names = vec!["tok_emb.weight [30, 32]".to_string()];
        names.extend(pos.iter().map(|s| s.to_string()));
        names.extend(blocks.iter().cloned());
        names.extend(["ln_f.gain [32]".into(), "ln_f.bias [32]".into()]);
        names.extend(head.iter().map(|s| s.to_string()));
        let mut sorted = names;
        sorted.sort();
        sorted
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let untied = ModelKind::CausalLm { tied_head: false };
    assert_eq!(
        sorted(param_names(tiny(untied, PosEnc::Learned(Learned {})))),
        expect(&["lm_head.weight [32, 30]"], &["pos_emb.weight [16, 32]"])
    );
    assert_eq!(
        sorted(param_names(tiny(
            LM,
            PosEnc::Sinusoidal(Sinusoidal {
                every_block: true,
                ..Sinusoidal::default()
            })
        ))),
        expect(&[], &[])
    );
    assert_eq!(
        sorted(param_names(tiny(LM, T5))),
        expect(&[], &["posenc.relative.weight [32, 2]"])
    );
    let encoder = ModelKind::Encoder { n_classes: 3 };
    assert_eq!(
        sorted(param_names(tiny(encoder, PosEnc::None(NoEncoding {})))),
        expect(&["cls_head.weight [32, 3]", "cls_head.bias [3]"], &[])
    );
    let tupe_a = [
        "posenc.tupe.weight [16, 32]",
        "posenc.tupe.ln.gain [32]",
        "posenc.tupe.ln.bias [32]",
        "posenc.tupe.query.weight [32, 32]",
        "posenc.tupe.key.weight [32, 32]",
    ];
    assert_eq!(sorted(param_names(tiny(LM, TUPE_A))), expect(&[], &tupe_a));
    let mut tupe_r_untied = tupe_a.to_vec();
    tupe_r_untied.extend([
        "posenc.relative.weight [8, 2]",
        "posenc.tupe.cls_to_others [2]",
        "posenc.tupe.others_to_cls [2]",
    ]);
    assert_eq!(
        sorted(param_names(tiny(encoder, TUPE_R_UNTIED))),
        expect(&["cls_head.weight [32, 3]", "cls_head.bias [3]"], &tupe_r_untied)
    );
    // Runge-Kutta blocks reuse the block's parameters in every stage; the gated one adds its gate.
    for block in [Block::Rk2 { gamma: [1.0, 1.0] }, Block::Rk4] {
        let config = ModelConfig {
            block,
            ..tiny(LM, PosEnc::None(NoEncoding {}))
        };
        assert_eq!(sorted(param_names(config)), expect(&[], &[]), "{block:?}");
    }
    let gated = ModelConfig {
        block: Block::Rk2Gated,
        ..tiny(LM, PosEnc::None(NoEncoding {}))
    };
    let gates = [
        "blocks.0.gate.weight [64, 1]",
        "blocks.0.gate.bias [1]",
        "blocks.1.gate.weight [64, 1]",
        "blocks.1.gate.bias [1]",
    ];
    assert_eq!(sorted(param_names(gated)), expect(&[], &gates));
}

#[test]
fn a_causal_lm_s_earlier_logits_ignore_later_tokens() {
    let (batch, len, vocab) = (2, 12, 30);
    let changed_at = 7;
    for posenc in ALL_POSENCS {
        let h = harness(tiny(LM, posenc), batch, len, false, cpu());
        let a = tokens(batch, len, vocab, 1);
        let mut b = a.clone();
        for row in 0..batch {
            b[row * len + changed_at] = 3 + (a[row * len + changed_at] - 3 + 5) % (vocab as i32 - 3);
        }
        let (la, _) = h.run(&a, &shifted(&a, len), None);
        let (lb, _) = h.run(&b, &shifted(&b, len), None);
        let mut later_differs = false;
        for (i, (x, y)) in la.chunks(vocab).zip(lb.chunks(vocab)).enumerate() {
            let position = i % len;
            let diff = x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
            if position < changed_at {
                assert_eq!(diff, 0.0, "{posenc:?}: logits at position {position} changed");
            } else {
                later_differs |= diff > 1e-6;
            }
        }
        assert!(later_differs, "{posenc:?}: the changed token changed nothing");
    }
}

#[test]
fn an_encoder_sees_every_token_except_padding() {
    let (batch, len, vocab) = (2, 10, 30);
    let encoder = ModelKind::Encoder { n_classes: 4 };
    let h = harness(
        tiny(encoder, PosEnc::Learned(Learned {})),
        batch,
        len,
        true,
        cpu(),
    );
    let mask: Vec<f32> = (0..batch * len)
        .map(|i| if i % len < 6 { 1.0 } else { 0.0 })
        .collect();
    let a = tokens(batch, len, vocab, 2);
    let targets = [1, 3];
    let (la, loss) = h.run(&a, &targets, Some(&mask));
    assert!(loss.is_finite() && loss > 0.0);
    let changed = |pos: usize| {
        let mut b = a.clone();
        for row in 0..batch {
            b[row * len + pos] = 3 + (a[row * len + pos] - 3 + 1) % (vocab as i32 - 3);
        }
        b
    };
    // A real token after [CLS] changes the [CLS] logits: attention is bidirectional.
    let (lb, _) = h.run(&changed(4), &targets, Some(&mask));
    assert!(la.iter().zip(&lb).any(|(x, y)| (x - y).abs() > 1e-6));
    // A padded token changes nothing.
    let (lc, _) = h.run(&changed(8), &targets, Some(&mask));
    assert_eq!(la, lc);
}

#[test]
fn a_length_over_the_learned_table_is_an_error_naming_both_lengths() {
    let model = Model::new(tiny(LM, PosEnc::Learned(Learned {}))).unwrap();
    let err = model
        .build(
            &mut Graph::new(),
            Tokens { batch: 2, len: 17 },
            GraphOptions::default(),
        )
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "sequence length 17 is over the learned position table's max_len 16"
    );
    let model = Model::new(tiny(LM, TUPE_R)).unwrap();
    let err = model
        .build(
            &mut Graph::new(),
            Tokens { batch: 2, len: 17 },
            GraphOptions::default(),
        )
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "sequence length 17 is over the TUPE position table's max_len 16"
    );
    // Sinusoidal tables extend to any length.
    let model = Model::new(tiny(
        LM,
        PosEnc::Sinusoidal(Sinusoidal {
            every_block: false,
            ..Sinusoidal::default()
        }),
    ))
    .unwrap();
    model
        .build(
            &mut Graph::new(),
            Tokens { batch: 2, len: 40 },
            GraphOptions::default(),
        )
        .unwrap();
}

/// Relative buckets are computed per graph, so a model trained at one length runs at twice it
/// (and past max_len): the copy task's length 14 doubled, for both bucket layouts.
#[test]
fn relative_bias_runs_at_twice_the_training_length() {
    for kind in [LM, ModelKind::Encoder { n_classes: 3 }] {
        let h = run_past_max_len(kind, T5, 2 * COPY_LEN);
        let bias_grad = h
            .grads
            .iter()
            .find(|(name, _)| name == "posenc.relative.weight")
            .map(|(_, g)| h.exec.read_blocking(*g).unwrap())
            .unwrap();
        assert!(
            bias_grad.iter().any(|g| *g != 0.0),
            "{kind:?}: the bias table gets no gradient"
        );
    }
}

/// RoPE and ALiBi have no table to run out of: a model of `max_len` 14 (the copy task's length)
/// runs at 56 positions, both kinds.
#[test]
fn rope_and_alibi_run_at_four_times_the_training_length() {
    for kind in [LM, ModelKind::Encoder { n_classes: 3 }, ModelKind::MaskedLm {}] {
        for posenc in [ROPE, PosEnc::Alibi(Alibi::default())] {
            run_past_max_len(kind, posenc, 4 * COPY_LEN);
        }
    }
}

/// A model of `max_len` `COPY_LEN` run at `len` on the CPU: its loss and logits are finite.
fn run_past_max_len(kind: ModelKind, posenc: PosEnc, len: usize) -> Harness {
    let config = ModelConfig {
        max_len: COPY_LEN,
        ..tiny(kind, posenc)
    };
    let h = harness(config, 2, len, false, cpu());
    let a = tokens(2, len, 30, 4);
    let targets = targets_for(kind, &a, len);
    let (logits, loss) = h.run(&a, &targets, None);
    assert!(
        loss.is_finite() && logits.iter().all(|x| x.is_finite()),
        "{kind:?} {posenc:?}: loss {loss}"
    );
    h
}

#[test]
fn tupe_untie_cls_in_a_causal_lm_is_a_config_error() {
    let untied = PosEnc::TupeA(TupeA {
        untie_cls: true,
        form: TupeForm::Paper,
    });
    let err = Model::new(tiny(LM, untied)).unwrap_err().to_string();
    assert_eq!(
        err,
        "model config: posenc: untie_cls resets the positional term of [CLS] (position 0), which only an \
         encoder (a classifier or a masked LM) has; set untie_cls = false for a causal LM or a \
         seq2seq model"
    );
}

/// With the [CLS] reset, θ1 and θ2 (one per head) get gradients in an encoder.
#[test]
fn tupe_untied_cls_values_get_gradients() {
    let (batch, len, vocab) = (2, 9, 30);
    let encoder = ModelKind::Encoder { n_classes: 3 };
    let h = harness(tiny(encoder, TUPE_R_UNTIED), batch, len, false, cpu());
    let a = tokens(batch, len, vocab, 5);
    h.run(&a, &[2, 0], None);
    let grad_of = |name: &str| {
        h.grads
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, g)| h.exec.read_blocking(*g).unwrap())
            .unwrap()
    };
    // θ2 (the others attending to [CLS]) trains; θ1 moves [CLS]'s whole row of logits by one
    // value, which softmax ignores, so its gradient is zero up to rounding.
    let others_to_cls = grad_of("posenc.tupe.others_to_cls");
    let cls_to_others = grad_of("posenc.tupe.cls_to_others");
    assert_eq!((others_to_cls.len(), cls_to_others.len()), (2, 2));
    assert!(
        others_to_cls.iter().all(|g| g.abs() > 1e-5),
        "θ2 gradient {others_to_cls:?}"
    );
    assert!(
        cls_to_others.iter().all(|g| g.abs() < 1e-8),
        "θ1 gradient {cls_to_others:?}"
    );
}

#[test]
fn bad_inputs_are_errors() {
    let h = harness(tiny(LM, PosEnc::None(NoEncoding {})), 1, 4, false, cpu());
    let err = h
        .model
        .feed(&h.exec, &[1, 5, 30, 6], &[5, 30, 6, -100], None)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "token id 30 at row 0, position 2 is outside the vocabulary [0, 30)"
    );
    let err = h
        .model
        .feed(&h.exec, &[1, 5, 7, 6], &[5, 7, 6, -1], None)
        .unwrap_err();
    assert!(err.to_string().contains("target -1 at index 3"), "{err}");
    let encoder = ModelKind::Encoder { n_classes: 2 };
    let h = harness(tiny(encoder, PosEnc::None(NoEncoding {})), 1, 4, false, cpu());
    let err = h.model.feed(&h.exec, &[5, 5, 7, 6], &[1], None).unwrap_err();
    assert!(
        err.to_string()
            .contains("must be the BOS token 1; row 0 starts with 5"),
        "{err}"
    );
    let err = h
        .model
        .feed(&h.exec, &[1, 5, 7, 6], &[1], Some(&[1.0, 1.0, 0.0, 0.0]))
        .unwrap_err();
    assert!(
        err.to_string().contains("build it with GraphOptions::padded"),
        "{err}"
    );
}

/// Both backends from the same seed: logits, loss and every gradient agree to 1e-4 (relative to
/// the largest magnitude of each tensor, at least 1).
#[test]
fn gpu_gives_the_cpu_logits_loss_and_gradients() {
    let Some(gpu) = gpu_for_tests() else { return };
    let (batch, len, vocab) = (2, 9, 30);
    let residual = Block::Residual;
    let cases = [
        (
            LM,
            PosEnc::Sinusoidal(Sinusoidal {
                every_block: true,
                ..Sinusoidal::default()
            }),
            residual,
        ),
        (
            ModelKind::CausalLm { tied_head: false },
            PosEnc::Learned(Learned {}),
            residual,
        ),
        (
            ModelKind::Encoder { n_classes: 3 },
            PosEnc::Sinusoidal(Sinusoidal {
                every_block: false,
                ..Sinusoidal::default()
            }),
            residual,
        ),
        (LM, T5, residual),
        (
            ModelKind::Encoder { n_classes: 3 },
            PosEnc::Relative(Relative {
                buckets: 8,
                max_distance: 20,
                learned_absolute: false,
            }),
            residual,
        ),
        (LM, TUPE_A, residual),
        (ModelKind::Encoder { n_classes: 3 }, TUPE_R_UNTIED, residual),
        (LM, PosEnc::Learned(Learned {}), Block::Rk4),
        (ModelKind::Encoder { n_classes: 3 }, T5, Block::Rk2Gated),
        (LM, ROPE, residual),
        (ModelKind::Encoder { n_classes: 3 }, ROPE, residual),
        (LM, PosEnc::Alibi(Alibi::default()), residual),
        (
            ModelKind::Encoder { n_classes: 3 },
            PosEnc::Alibi(Alibi::default()),
            residual,
        ),
        (ModelKind::MaskedLm {}, PosEnc::Learned(Learned {}), residual),
        (ModelKind::MaskedLm {}, TUPE_R_UNTIED, residual),
        (ModelKind::MaskedLm {}, ROPE, residual),
        (
            ModelKind::MaskedLm {},
            PosEnc::Alibi(Alibi::default()),
            Block::Rk2Gated,
        ),
        (
            ModelKind::TokenClassifier { n_classes: 3 },
            PosEnc::Sinusoidal(Sinusoidal::default()),
            residual,
        ),
        (
            ModelKind::TokenClassifier { n_classes: 3 },
            PosEnc::Alibi(Alibi::default()),
            Block::Rk2Gated,
        ),
    ];
    for (kind, posenc, block) in cases {
        // The sinusoidal cases also cover the scaled token embeddings.
        let embed_scale = match posenc {
            PosEnc::Sinusoidal(Sinusoidal { .. }) => EmbedScale::SqrtD,
            _ => EmbedScale::None,
        };
        let config = ModelConfig {
            embed_scale,
            block,
            ..tiny(kind, posenc)
        };
        let a = tokens(batch, len, vocab, 3);
        let mask: Vec<f32> = (0..batch * len)
            .map(|i| if i >= len + 6 { 0.0 } else { 1.0 })
            .collect();
        let targets = targets_for(kind, &a, len);
        let on = |backend| {
            let h = harness(config.clone(), batch, len, true, backend);
            let (logits, loss) = h.run(&a, &targets, Some(&mask));
            let grads: Vec<(String, Vec<f32>)> = h
                .grads
                .iter()
                .map(|(name, g)| (name.clone(), h.exec.read_blocking(*g).unwrap()))
                .collect();
            (logits, loss, grads)
        };
        let (cl, closs, cgrads) = on(cpu());
        let (gl, gloss, ggrads) = on(gpu.clone());
        let close = |what: &str, c: &[f32], g: &[f32]| {
            let scale = c.iter().fold(1.0f32, |m, x| m.max(x.abs()));
            let worst = c.iter().zip(g).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
            assert!(
                worst <= 1e-4 * scale,
                "{kind:?} {posenc:?} {block:?} {what}: |gpu - cpu| = {worst}"
            );
        };
        close("logits", &cl, &gl);
        close("loss", &[closs], &[gloss]);
        assert_eq!(cgrads.len(), ggrads.len());
        for ((name, c), (_, g)) in cgrads.iter().zip(&ggrads) {
            close(name, c, g);
        }
    }
}

/// Dropout acts in training graphs only: the same seed gives the same logits on the CPU and the
/// GPU, another seed other logits, and the evaluation graph has no dropout at all; in residual
/// and Runge-Kutta blocks alike.
#[test]
fn dropout_follows_the_seed_in_training_graphs_only() {
    for block in [Block::Residual, Block::Rk2Gated] {
        dropout_follows_the_seed(block);
    }
}

fn dropout_follows_the_seed(block: Block) {
    assert_dropout_follows_the_seed(&ModelConfig {
        dropout: 0.3,
        block,
        ..tiny(LM, PosEnc::Learned(Learned {}))
    });
}
