//! The seq2seq graph on every position encoding: it builds, its loss and gradients are finite
//! and equal on the CPU and the GPU, every parameter gets a gradient, and the parameter names are
//! the documented ones.

use std::rc::Rc;

use crate::backend::Backend;
use crate::data::{Pair, PairBatch};
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::math;
use crate::model::posenc::every_form;
use crate::model::{
    Activation, Block, EmbedScale, GraphOptions, InitScheme, Model, ModelConfig, ModelKind, Norm, PosEnc,
};
use crate::model::{DecoderFlow, DecodingStep, Pairs, Sources, Tokens};
use crate::params::ParamStore;
use crate::testing::{assert_close, cpu, gpu, posenc, preset};

pub(crate) fn config(posenc: PosEnc, block: Block, decoder_block: Block) -> ModelConfig {
    ModelConfig {
        vocab: 12,
        d_model: 8,
        heads: 2,
        layers: 2,
        ffn: 16,
        dropout: 0.0,
        max_len: 8,
        kind: ModelKind::Seq2Seq {
            tied_head: true,
            decoder_layers: 1,
            decoder_block,
        },
        posenc,
        embed_scale: EmbedScale::SqrtD,
        block,
        ..ModelConfig::default()
    }
}

/// `posenc` inside fairseq's backbone, the FLOATER authors' translation model: post-LN blocks,
/// no embedding layer norm, no final norms, Xavier-uniform init, ReLU.
fn fairseq_post(posenc: PosEnc) -> ModelConfig {
    ModelConfig {
        norm: Norm::Post,
        embedding_norm: Some(false),
        init: Some(InitScheme::Fairseq),
        activation: Activation::Relu,
        ..config(posenc, Block::Residual, Block::Residual)
    }
}

/// Every form of every encoding a seq2seq model can have (the others refuse it by name: RoPE
/// and ALiBi, and FLOATER's cached solve).
pub(crate) fn every_posenc() -> Vec<PosEnc> {
    every_form()
        .into_iter()
        .filter(
            |&posenc| match Model::new(config(posenc, Block::Residual, Block::Residual)) {
                Ok(_) => true,
                Err(e) => {
                    let e = e.to_string();
                    let refused = [
                        "a seq2seq model cannot have it",
                        "for the decoder-only models only",
                    ];
                    assert!(refused.iter().any(|r| e.contains(r)), "{posenc:?}: {e}");
                    false
                }
            },
        )
        .collect()
}

/// Two pairs of different lengths, padded: sources [2, 5], targets [2, 4].
pub(crate) fn batch() -> PairBatch {
    let pairs = [
        Pair {
            source: vec![3, 4, 5, 6, 7],
            target: vec![8, 9, 10],
        },
        Pair {
            source: vec![11, 3],
            target: vec![4],
        },
    ];
    PairBatch::new(&pairs, 5, 4).unwrap()
}

/// Loss and every gradient (by parameter name) on `backend`.
fn loss_and_gradients(model: &Model, backend: Rc<dyn Backend>) -> (f32, Vec<(String, Vec<f32>)>) {
    let b = batch();
    let mut g = Graph::new();
    let built = model
        .build(
            &mut g,
            Pairs {
                batch: b.rows(),
                source_len: b.source_len(),
                target_len: b.target_len(),
            },
            GraphOptions::default(),
        )
        .unwrap();
    let grads: Vec<(String, TensorId)> = g
        .backward(built.loss)
        .unwrap()
        .iter()
        .map(|(p, grad)| (g.info(p).name.clone(), grad))
        .collect();
    let params = ParamStore::init(backend, &g, 7).unwrap();
    let mut outputs = vec![built.loss];
    outputs.extend(grads.iter().map(|(_, t)| *t));
    let exec = Executor::new(&g, &outputs, &params).unwrap();
    built.feed(&exec, &b).unwrap();
    exec.run().unwrap();
    let loss = exec.read_blocking(built.loss).unwrap()[0];
    let grads = grads
        .into_iter()
        .map(|(name, t)| (name, exec.read_blocking(t).unwrap()))
        .collect();
    (loss, grads)
}

/// Every encoding in posflow's pre-LN backbone (an RK2 encoder) and in fairseq's post-LN one.
#[test]
fn every_encoding_trains_both_sides_and_the_gpu_agrees() {
    let gpu = gpu();
    let configs = every_posenc().into_iter().flat_map(|posenc| {
        [
            config(posenc, Block::Rk2 { gamma: [0.5, 0.5] }, Block::Residual),
            fairseq_post(posenc),
        ]
    });
    for config in configs {
        let posenc = (config.posenc, config.norm);
        let model = Model::new(config).unwrap();
        let (loss, grads) = loss_and_gradients(&model, cpu());
        // Near the uniform loss ln 12 at init (the tied √D-scaled table gives logits of std ~1).
        assert!((loss - math::ln(12f32)).abs() < 1.5, "{posenc:?}: loss {loss}");
        let declared = model.declare_params().unwrap();
        assert_eq!(grads.len(), declared.params().count(), "{posenc:?}");
        for (name, grad) in &grads {
            assert!(grad.iter().all(|v| v.is_finite()), "{posenc:?}: {name}");
            // The padded source position's embedding row (PAD) and a few tables may be zero;
            // every weight matrix of both sides must learn.
            if name.ends_with("weight") && !name.contains("tupe") {
                assert!(
                    grad.iter().any(|&v| v != 0.0),
                    "{posenc:?}: {name} has no gradient"
                );
            }
        }
        if let Some(gpu) = &gpu {
            let (gpu_loss, gpu_grads) = loss_and_gradients(&model, gpu.clone());
            assert_close("loss", &[gpu_loss], &[loss], 1e-5, 1e-4);
            for ((name, ours), (_, theirs)) in gpu_grads.iter().zip(&grads) {
                assert_close(name, ours, theirs, 1e-5, 1e-3);
            }
        }
    }
}

#[test]
fn each_side_has_its_own_position_parameters_and_floater_three_flows() {
    let names = |posenc: PosEnc| -> Vec<String> {
        let model = Model::new(config(posenc, Block::Residual, Block::Residual)).unwrap();
        let g = model.declare_params().unwrap();
        g.params().map(|(name, _)| name.to_string()).collect()
    };
    let learned = names(preset("learned"));
    assert!(
        learned.contains(&"encoder.pos_emb.weight".to_string()),
        "{learned:?}"
    );
    assert!(
        learned.contains(&"decoder.pos_emb.weight".to_string()),
        "{learned:?}"
    );
    assert!(learned.contains(&"tok_emb.weight".to_string()));
    assert!(learned.contains(&"decoder.blocks.0.cross.kv.bias".to_string()));
    assert!(!learned.contains(&"lm_head.weight".to_string()));
    let floater = names(posenc(r#"{ type = "floater" }"#));
    for (name, shape) in [
        ("encoder.posenc.floater.qkv_initial", [3, 2, 8]),
        ("decoder.posenc.floater.qkv_initial", [4, 1, 8]),
        ("decoder.cross.posenc.floater.qkv_initial", [2, 1, 8]),
    ] {
        let model = Model::new(config(
            posenc(r#"{ type = "floater" }"#),
            Block::Residual,
            Block::Residual,
        ))
        .unwrap();
        let g = model.declare_params().unwrap();
        let meta = g.params().find(|(n, _)| *n == name).map(|(_, m)| m.shape.clone());
        assert_eq!(meta, Some(shape.to_vec()), "{name}: {floater:?}");
    }
    // The compatible form's biases replace the static ones.
    for absent in [
        "encoder.blocks.0.attn.qkv.bias",
        "decoder.blocks.0.cross.q.bias",
        "decoder.blocks.0.cross.kv.bias",
    ] {
        assert!(!floater.contains(&absent.to_string()), "{absent}");
    }
}

#[test]
fn a_source_longer_than_a_learned_table_is_an_error_naming_both_lengths() {
    let model = Model::new(config(preset("learned"), Block::Residual, Block::Residual)).unwrap();
    let mut g = Graph::new();
    let err = model
        .build(
            &mut g,
            Pairs {
                batch: 1,
                source_len: 9,
                target_len: 3,
            },
            GraphOptions::default(),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sequence length 9 is over the learned position table's max_len 8"),
        "{err}"
    );
    let mut g = Graph::new();
    let err = model
        .build(&mut g, Tokens { batch: 1, len: 3 }, GraphOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("build it for Pairs (training) or the decoding shapes"),
        "{err}"
    );
}

/// The teacher-forced logits `[rows, T, vocab]` of `batch` on `params`' backend.
fn full_logits(model: &Model, params: &ParamStore, b: &PairBatch) -> Vec<f32> {
    let mut g = Graph::new();
    let built = model
        .build(
            &mut g,
            Pairs {
                batch: b.rows(),
                source_len: b.source_len(),
                target_len: b.target_len(),
            },
            GraphOptions::default(),
        )
        .unwrap();
    let exec = Executor::new(&g, &[built.logits], params).unwrap();
    built.feed(&exec, b).unwrap();
    exec.run().unwrap();
    exec.read_blocking(built.logits).unwrap()
}

/// The same logits, one position at a time through the step graphs, each step's keys and values
/// appended to the cache of the next.
fn incremental_logits(model: &Model, params: &ParamStore, b: &PairBatch) -> Vec<f32> {
    let (rows, source_len, target_len) = (b.rows(), b.source_len(), b.target_len());
    let c = model.config();
    let mask: Vec<i32> = b.source_mask().iter().map(|&m| i32::from(m > 0.5)).collect();
    let mut g = Graph::new();
    let source = model
        .build(
            &mut g,
            Sources {
                batch: rows,
                source_len,
            },
            GraphOptions::default(),
        )
        .unwrap();
    let outputs: Vec<TensorId> = source.keys_values.iter().flat_map(|&(k, v)| [k, v]).collect();
    let exec = Executor::new(&g, &outputs, params).unwrap();
    source.feed(&exec, b.source(), &mask).unwrap();
    exec.run().unwrap();
    let memory: Vec<(Vec<f32>, Vec<f32>)> = source
        .keys_values
        .iter()
        .map(|&(k, v)| (exec.read_blocking(k).unwrap(), exec.read_blocking(v).unwrap()))
        .collect();
    let mut g = Graph::new();
    let flow = model
        .build(&mut g, DecoderFlow { len: target_len }, GraphOptions::default())
        .unwrap()
        .map(|t| {
            let exec = Executor::new(&g, &[t], params).unwrap();
            exec.run().unwrap();
            exec.read_blocking(t).unwrap()
        });
    let mut cache: Vec<Vec<(Vec<f32>, Vec<f32>)>> = Vec::new();
    let mut logits = vec![0.0; rows * target_len * c.vocab];
    for t in 0..target_len {
        let mut g = Graph::new();
        let step = model
            .build(
                &mut g,
                DecodingStep {
                    batch: rows,
                    source_len,
                    position: t,
                },
                GraphOptions::default(),
            )
            .unwrap();
        let mut outputs = vec![step.logits];
        outputs.extend(step.keys_values.iter().flatten().flat_map(|&(k, v)| [k, v]));
        let exec = Executor::new(&g, &outputs, params).unwrap();
        let tokens: Vec<i32> = (0..rows).map(|r| b.target_in()[r * target_len + t]).collect();
        exec.set_i32(step.token, &tokens).unwrap();
        exec.set_i32(step.source_mask, &mask).unwrap();
        for (&(k, v), (keys, values)) in step.memory.iter().zip(&memory) {
            exec.set_f32(k, keys).unwrap();
            exec.set_f32(v, values).unwrap();
        }
        for (inputs, cached) in step.cache.iter().zip(&cache) {
            for (&(k, v), (keys, values)) in inputs.iter().zip(cached) {
                exec.set_f32(k, keys).unwrap();
                exec.set_f32(v, values).unwrap();
            }
        }
        if let (Some(input), Some(flow)) = (step.encodings, &flow) {
            let row = flow.len() / target_len;
            exec.set_f32(input, &flow[t * row..(t + 1) * row]).unwrap();
        }
        step.feed_constants(&exec).unwrap();
        exec.run().unwrap();
        let step_logits = exec.read_blocking(step.logits).unwrap();
        for r in 0..rows {
            logits[(r * target_len + t) * c.vocab..][..c.vocab]
                .copy_from_slice(&step_logits[r * c.vocab..(r + 1) * c.vocab]);
        }
        // Append along the position axis of [rows, H, t, Dh].
        let append = |old: Option<&Vec<f32>>, new: Vec<f32>| -> Vec<f32> {
            let chunk = new.len() / (rows * c.heads);
            let Some(old) = old else { return new };
            old.chunks(t * chunk)
                .zip(new.chunks(chunk))
                .flat_map(|(o, n)| o.iter().chain(n).copied())
                .collect()
        };
        cache = step
            .keys_values
            .iter()
            .enumerate()
            .map(|(block, stages)| {
                stages
                    .iter()
                    .enumerate()
                    .map(|(stage, &(k, v))| {
                        let old = cache.get(block).map(|b| &b[stage]);
                        (
                            append(old.map(|o| &o.0), exec.read_blocking(k).unwrap()),
                            append(old.map(|o| &o.1), exec.read_blocking(v).unwrap()),
                        )
                    })
                    .collect()
            })
            .collect();
    }
    logits
}

/// Incremental decoding with the key/value cache gives the full decoder's logits at every
/// position, for every encoding, Runge-Kutta decoder blocks included, on the CPU and the GPU.
#[test]
fn cached_incremental_decoding_gives_the_full_decoder_s_logits() {
    let mut backends = vec![cpu()];
    backends.extend(gpu());
    for backend in backends {
        let mut models = Vec::new();
        for (posenc, decoder_block) in every_posenc().into_iter().map(|p| (p, Block::Residual)).chain([
            (preset("sinusoidal"), Block::Rk4),
            (posenc(r#"{ type = "floater" }"#), Block::Rk2Gated),
        ]) {
            let model = Model::new(config(posenc, Block::Rk2 { gamma: [0.5, 0.5] }, decoder_block)).unwrap();
            models.push((format!("{posenc:?}, decoder {decoder_block:?}"), model));
        }
        // fairseq's post-LN decoder layer: its cross-attention between self-attention and FFN.
        let floater = posenc(r#"{ type = "floater", sinusoid = "fairseq" }"#);
        models.push((
            "FLOATER in fairseq's post-LN backbone".into(),
            Model::new(fairseq_post(floater)).unwrap(),
        ));
        for (what, model) in models {
            let params = ParamStore::init(backend.clone(), &model.declare_params().unwrap(), 3).unwrap();
            let b = batch();
            let full = full_logits(&model, &params, &b);
            let incremental = incremental_logits(&model, &params, &b);
            let what = format!("{what} on {:?}", backend.kind());
            assert_close(&what, &incremental, &full, 2e-5, 1e-4);
        }
    }
}
