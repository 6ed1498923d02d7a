//! FLOATER's caching: graphs that take the encodings of an earlier solve give the solving graph's
//! logits exactly; training re-solves (and trains the dynamics) every `resolve_every` steps; the
//! generator solves once per window, for any length.

use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend, gpu_for_tests};
use posflow::exec::Executor;
use posflow::graph::Graph;
use posflow::inference::{EncodingCache, Generator};
use posflow::model::Tokens;
use posflow::model::{
    Block, EmbedScale, GraphOptions, Model, ModelConfig, ModelKind, PosEnc, encodings_shape,
};
use posflow::params::ParamStore;
use posflow::train::{RunConfig, Trainer};

use crate::common;

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

fn config(posenc: &str) -> ModelConfig {
    ModelConfig {
        vocab: 30,
        d_model: 16,
        heads: 2,
        layers: 3,
        ffn: 32,
        dropout: 0.0,
        max_len: 8,
        kind: ModelKind::CausalLm { tied_head: true },
        posenc: serde_json::from_str::<PosEnc>(posenc).unwrap(),
        embed_scale: EmbedScale::SqrtD,
        block: Block::Residual,
        ..ModelConfig::default()
    }
}

/// The ways FLOATER enters the model: every block, the input only, q/k/v biases (with Euler, and
/// with the authors' defaults). The dynamics get a larger spread than their init so the encodings
/// are far from 0.
const FORMS: [&str; 4] = [
    r#"{"type": "floater", "form": "additive", "activation": "tanh"}"#,
    r#"{"type": "floater", "form": "additive", "every_block": false, "method": "rk4"}"#,
    r#"{"type": "floater", "form": "bias", "method": "euler"}"#,
    r#"{"type": "floater"}"#,
];

fn params_with_live_dynamics(model: &Model, backend: Rc<dyn Backend>) -> ParamStore {
    let g = model.declare_params().unwrap();
    let params = ParamStore::init(backend, &g, 11).unwrap();
    let names: Vec<String> = params.iter().map(|(n, _)| n.to_string()).collect();
    for name in names.iter().filter(|n| n.starts_with("posenc.floater")) {
        let values = pollster::block_on(params.read(name)).unwrap();
        let scaled: Vec<f32> = values
            .iter()
            .enumerate()
            .map(|(i, v)| v * 8.0 + 0.01 * (i % 5) as f32)
            .collect();
        params.set(name, &scaled).unwrap();
    }
    params
}

fn text(len: usize) -> Vec<i32> {
    (0..len).map(|i| 3 + (i * 7 % 27) as i32).collect()
}

fn logits(model: &Model, params: &ParamStore, len: usize, cached: Option<&[f32]>) -> Vec<f32> {
    let mut g = Graph::new();
    let built = match cached {
        Some(_) => model.build(
            &mut g,
            Tokens { batch: 1, len },
            GraphOptions::default().cached_encodings(),
        ),
        None => model.build(&mut g, Tokens { batch: 1, len }, GraphOptions::default()),
    }
    .unwrap();
    assert_eq!(built.takes_encodings(), cached.is_some());
    let exec = Executor::new(&g, &[built.logits], params).unwrap();
    built.feed(&exec, &text(len), &vec![-100; len], None).unwrap();
    if let Some(values) = cached {
        built.feed_encodings(&exec, values).unwrap();
    }
    exec.run().unwrap();
    pollster::block_on(exec.check()).unwrap();
    exec.read_blocking(built.logits).unwrap()
}

fn cached_logits_are_the_solved_ones(backend: Rc<dyn Backend>) {
    for form in FORMS {
        let model = Model::new(config(form)).unwrap();
        let params = params_with_live_dynamics(&model, backend.clone());
        // 20 positions: past the training length, as inference asks.
        let cache = EncodingCache::new(&model, &params, 20).unwrap().unwrap();
        let encodings = pollster::block_on(cache.values()).unwrap();
        let PosEnc::Floater(floater) = model.config().posenc else {
            unreachable!()
        };
        let shape = encodings_shape(&floater, 20, 16, 3);
        assert_eq!(encodings.len(), shape.iter().product::<usize>(), "{form}");
        let rms = (encodings.iter().map(|v| v * v).sum::<f32>() / encodings.len() as f32).sqrt();
        assert!(
            rms > 0.05,
            "{form}: the encodings are near 0 (RMS {rms}), the test would prove little"
        );
        assert_eq!(
            logits(&model, &params, 20, Some(&encodings)),
            logits(&model, &params, 20, None),
            "{form}"
        );
    }
}

#[test]
fn cached_encodings_give_the_solving_graph_s_logits_on_the_cpu() {
    cached_logits_are_the_solved_ones(cpu());
}

#[test]
fn cached_encodings_give_the_solving_graph_s_logits_on_the_gpu() {
    let Some(gpu) = gpu_for_tests() else { return };
    cached_logits_are_the_solved_ones(gpu);
}

/// Wrong sizes and graphs that solve their own encodings are errors, not silent garbage.
#[test]
fn encodings_of_the_wrong_size_or_for_a_solving_graph_are_errors() {
    let model = Model::new(config(FORMS[0])).unwrap();
    let params = params_with_live_dynamics(&model, cpu());
    let mut g = Graph::new();
    let cached = model
        .build(
            &mut g,
            Tokens { batch: 1, len: 6 },
            GraphOptions::default().cached_encodings(),
        )
        .unwrap();
    let exec = Executor::new(&g, &[cached.logits], &params).unwrap();
    let err = cached.feed_encodings(&exec, &[0.0; 7]).unwrap_err().to_string();
    assert!(
        err.contains("posenc.floater.encodings") && err.contains('7'),
        "{err}"
    );

    let mut g = Graph::new();
    let solving = model
        .build(&mut g, Tokens { batch: 1, len: 6 }, GraphOptions::default())
        .unwrap();
    let exec = Executor::new(&g, &[solving.logits], &params).unwrap();
    let err = solving
        .feed_encodings(&exec, &[0.0; 6 * 3 * 16])
        .unwrap_err()
        .to_string();
    assert!(err.contains("solves its own position encodings"), "{err}");

    let sinusoidal = Model::new(config(r#"{"type": "sinusoidal"}"#)).unwrap();
    assert!(EncodingCache::new(&sinusoidal, &params, 6).unwrap().is_none());
}

/// The generator solves the window's encodings once; its distribution is the solving graph's.
#[test]
fn the_generator_reuses_one_solve_and_matches_the_solving_graph() {
    let model = Model::new(config(FORMS[0])).unwrap();
    let params = params_with_live_dynamics(&model, cpu());
    let tokenizer = posflow::data::CharTokenizer::from_text("abcdefghijklmnopqrstuvwxyz ");
    let generator = Generator::new(&model, &params, tokenizer, 8).unwrap();
    let context = text(5);
    let probs = pollster::block_on(generator.next_probabilities(&context)).unwrap();
    let mut padded = context.clone();
    padded.resize(8, 0);
    let solved = {
        let mut g = Graph::new();
        let built = model
            .build(&mut g, Tokens { batch: 1, len: 8 }, GraphOptions::default())
            .unwrap();
        let exec = Executor::new(&g, &[built.logits], &params).unwrap();
        built.feed(&exec, &padded, &[-100; 8], None).unwrap();
        exec.run().unwrap();
        exec.read_blocking(built.logits).unwrap()[4 * 30..5 * 30].to_vec()
    };
    let max = solved.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let total: f32 = solved.iter().map(|l| (l - max).exp()).sum();
    for (p, l) in probs.iter().zip(&solved) {
        assert!((p - (l - max).exp() / total).abs() < 1e-6, "{p} vs {l}");
    }

    // Changed dynamics are seen only after a refresh: the cache is what the generator uses.
    let w1 = pollster::block_on(params.read("posenc.floater.w1")).unwrap();
    params
        .set(
            "posenc.floater.w1",
            &w1.iter().map(|v| v * 3.0).collect::<Vec<_>>(),
        )
        .unwrap();
    assert_eq!(
        pollster::block_on(generator.next_probabilities(&context)).unwrap(),
        probs
    );
    generator.refresh_encodings();
    assert_ne!(
        pollster::block_on(generator.next_probabilities(&context)).unwrap(),
        probs
    );
}

fn moby_run(resolve_every: usize) -> RunConfig {
    common::moby_run(
        &format!("{{ type = \"floater\", resolve_every = {resolve_every} }}"),
        "steps = 7\nbatch = 2\nlr = 1e-2",
    )
}

fn read(trainer: &Trainer, name: &str) -> Vec<f32> {
    pollster::block_on(trainer.params().read(name)).unwrap()
}

/// With resolve_every = 3 the dynamics and initial biases change only at steps 0, 3 and 6 (the
/// solving steps), everything else every step; the first step is the uncached run's. (The
/// authors' form, which their code caches.)
#[test]
fn training_re_solves_and_trains_the_dynamics_every_n_steps() {
    let mut cached = Trainer::new(cpu(), moby_run(3)).unwrap();
    let mut plain = Trainer::new(cpu(), moby_run(1)).unwrap();
    let first = cached.step().unwrap();
    assert_eq!(first, plain.step().unwrap());
    for step in 1..7 {
        let (dynamics, initial, embedding) = (
            read(&cached, "posenc.floater.w1"),
            read(&cached, "posenc.floater.qkv_initial"),
            read(&cached, "tok_emb.weight"),
        );
        let stats = cached.step().unwrap();
        assert!(stats.loss.is_finite() && stats.grad_norm > 0.0, "{stats:?}");
        let solving = step % 3 == 0;
        assert_eq!(
            read(&cached, "posenc.floater.w1") != dynamics,
            solving,
            "step {step}"
        );
        assert_eq!(
            read(&cached, "posenc.floater.qkv_initial") != initial,
            solving,
            "step {step}"
        );
        assert_ne!(read(&cached, "tok_emb.weight"), embedding, "step {step}");
    }
}

/// The config key is checked like the others.
#[test]
fn resolve_every_zero_is_explained() {
    let mut run = moby_run(1);
    let PosEnc::Floater(f) = &mut run.model.posenc else {
        unreachable!()
    };
    f.resolve_every = 0;
    let err = Model::new(run.model).unwrap_err().to_string();
    assert!(err.contains("resolve_every must be at least 1"), "{err}");
}
