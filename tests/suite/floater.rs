//! FLOATER in the model: its parameters, GPU = CPU through the whole model, any length, and a
//! diverging solve stopping training with the block and time named and the parameters kept.

use posflow::model::GraphOptions;

use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend, gpu_for_tests};
use posflow::data::BOS;
use posflow::exec::Executor;
use posflow::graph::Graph;
use posflow::model::posenc::{QKV_INITIAL_NAME, qkv_initial_from_static_biases};
use posflow::model::{
    Block, EmbedScale, FloaterConfig, FloaterForm, GradientMethod, Model, ModelConfig, ModelKind,
    Nonlinearity, PosEnc, SinusoidLayout, SolverMethod,
};
use posflow::params::ParamStore;
use posflow::train::Trainer;

use crate::common;
use common::moby_run;
use posflow::model::Sinusoidal;
use posflow::model::Tokens;

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

fn floater(every_block: bool, method: SolverMethod, gradient: GradientMethod) -> FloaterConfig {
    FloaterConfig {
        form: FloaterForm::Additive,
        every_block,
        delta: 0.1,
        method,
        substeps: 2,
        rtol: 1e-5,
        atol: 1e-7,
        max_steps: 10_000,
        gradient,
        activation: Nonlinearity::Tanh,
        resolve_every: 1,
        sinusoid: SinusoidLayout::Interleaved,
    }
}

fn tiny(posenc: FloaterConfig) -> ModelConfig {
    ModelConfig {
        vocab: 30,
        d_model: 16,
        heads: 2,
        layers: 3,
        ffn: 32,
        dropout: 0.0,
        max_len: 8,
        kind: ModelKind::CausalLm { tied_head: true },
        posenc: PosEnc::Floater(posenc),
        embed_scale: EmbedScale::None,
        block: Block::Residual,
        ..ModelConfig::default()
    }
}

fn tokens(len: usize) -> Vec<i32> {
    (0..len)
        .map(|i| if i == 0 { BOS } else { 3 + (i * 7 % 27) as i32 })
        .collect()
}

/// Logits, loss and every gradient of one batch of `len` tokens.
fn forward_backward(config: &ModelConfig, len: usize, backend: Rc<dyn Backend>) -> Vec<(String, Vec<f32>)> {
    let model = Model::new(config.clone()).unwrap();
    let mut g = Graph::new();
    let built = model
        .build(&mut g, Tokens { batch: 2, len }, GraphOptions::default())
        .unwrap();
    let grads = g.backward(built.loss).unwrap();
    let params = ParamStore::init(backend, &g, 3).unwrap();
    let mut wanted = vec![built.logits, built.loss];
    wanted.extend(grads.iter().map(|(_, grad)| grad));
    let exec = Executor::new(&g, &wanted, &params).unwrap();
    let a: Vec<i32> = [tokens(len), tokens(len + 1)[1..].to_vec()].concat();
    let targets: Vec<i32> = a.iter().map(|t| (t + 1) % 30).collect();
    built.feed(&exec, &a, &targets, None).unwrap();
    exec.run().unwrap();
    pollster::block_on(exec.check()).unwrap();
    let mut out = vec![
        ("logits".to_string(), exec.read_blocking(built.logits).unwrap()),
        ("loss".to_string(), exec.read_blocking(built.loss).unwrap()),
    ];
    for (param, grad) in grads.iter() {
        out.push((g.info(param).name.clone(), exec.read_blocking(grad).unwrap()));
    }
    out
}

#[test]
fn parameters_are_shared_dynamics_and_one_initial_value_per_block() {
    for (every_block, blocks) in [(true, 3), (false, 1)] {
        let config = tiny(floater(
            every_block,
            SolverMethod::Midpoint,
            GradientMethod::Backprop,
        ));
        let model = Model::new(config).unwrap();
        let mut g = Graph::new();
        model
            .build(&mut g, Tokens { batch: 1, len: 5 }, GraphOptions::default())
            .unwrap();
        let mut names: Vec<String> = g
            .tensors()
            .filter(|(_, info)| matches!(info.source, posflow::graph::Source::Param(_)))
            .filter(|(_, info)| info.name.starts_with("posenc."))
            .map(|(_, info)| format!("{} {}", info.name, info.meta))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "posenc.floater.b1 [16]".to_string(),
                "posenc.floater.b2 [16]".to_string(),
                format!("posenc.floater.initial [{blocks}, 16]"),
                "posenc.floater.w1 [16, 17]".to_string(),
                "posenc.floater.w2 [16, 17]".to_string(),
            ]
        );
    }
}

#[test]
fn the_gpu_gives_the_cpu_logits_and_gradients() {
    let Some(gpu) = gpu_for_tests() else { return };
    let cases = [
        floater(true, SolverMethod::Midpoint, GradientMethod::Backprop),
        floater(false, SolverMethod::Rk4, GradientMethod::Adjoint),
        FloaterConfig {
            form: FloaterForm::Bias,
            ..floater(true, SolverMethod::Euler, GradientMethod::Backprop)
        },
    ];
    for case in cases {
        let config = tiny(case);
        let want = forward_backward(&config, 7, cpu());
        let got = forward_backward(&config, 7, gpu.clone());
        for ((name, c), (_, g)) in want.iter().zip(&got) {
            let scale = c.iter().fold(1e-3f32, |m, x| m.max(x.abs()));
            let worst = c.iter().zip(g).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
            assert!(
                worst <= 1e-4 * scale,
                "{case:?} {name}: |gpu - cpu| = {worst} (scale {scale})"
            );
        }
    }
}

/// Every gradient reaches the dynamics and the initial values, with either gradient method, and
/// both methods agree (within the solver's error, small at Δ = 0.1 with two rk4 substeps).
#[test]
fn backprop_and_adjoint_give_the_same_gradients() {
    let grads = |gradient| {
        forward_backward(&tiny(floater(true, SolverMethod::Rk4, gradient)), 6, cpu())
            .into_iter()
            .filter(|(name, _)| name.starts_with("posenc.floater"))
            .collect::<Vec<_>>()
    };
    let (backprop, adjoint) = (grads(GradientMethod::Backprop), grads(GradientMethod::Adjoint));
    assert_eq!(backprop.len(), 5);
    for ((name, b), (_, a)) in backprop.iter().zip(&adjoint) {
        let scale = b.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(scale > 0.0, "{name} gets no gradient");
        let worst = b.iter().zip(a).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        assert!(
            worst <= 1e-3 * scale,
            "{name}: backprop vs adjoint {worst} (scale {scale})"
        );
    }
}

/// A graph of any length solves as far as it needs: 8 times max_len here.
#[test]
fn any_length_works() {
    let config = tiny(floater(true, SolverMethod::Euler, GradientMethod::Backprop));
    let out = forward_backward(&config, 64, cpu());
    assert!(out.iter().all(|(_, v)| v.iter().all(|x| x.is_finite())));
}

/// Dynamics that blow the state up stop training with the block and time named; AdamW skipped
/// the step, so the parameters are those before it.
#[test]
fn a_diverging_solve_names_the_block_and_time_and_keeps_the_parameters() {
    let run = moby_run(
        r#"{ type = "floater", method = "euler" }"#,
        "steps = 4\nbatch = 2\nlr = 1e-3",
    );
    let mut trainer = Trainer::new(cpu(), run).unwrap();
    trainer.step().unwrap();
    // Huge weights in both layers of h: its value overflows f32 at the first step.
    trainer
        .params()
        .set("posenc.floater.w1", &[1e30; 16 * 17])
        .unwrap();
    trainer
        .params()
        .set("posenc.floater.w2", &[1e30; 16 * 17])
        .unwrap();
    let before: Vec<Vec<f32>> = trainer
        .params()
        .iter()
        .map(|(name, _)| pollster::block_on(trainer.params().read(name)).unwrap())
        .collect();
    let err = trainer.step().unwrap_err().to_string();
    assert!(
        err.contains("non-finite state in block 0") && err.contains("t = ") && err.contains("step 1"),
        "{err}"
    );
    assert!(err.contains("the update was skipped"), "{err}");
    let after: Vec<Vec<f32>> = trainer
        .params()
        .iter()
        .map(|(name, _)| pollster::block_on(trainer.params().read(name)).unwrap())
        .collect();
    assert_eq!(before, after);
}

#[test]
fn bad_floater_configs_are_explained() {
    let mut config = tiny(floater(true, SolverMethod::Midpoint, GradientMethod::Backprop));
    if let PosEnc::Floater(f) = &mut config.posenc {
        f.substeps = 0;
    }
    let err = Model::new(config.clone()).unwrap_err().to_string();
    assert!(err.contains("substeps must be in 1..=1000, got 0"), "{err}");
    if let PosEnc::Floater(f) = &mut config.posenc {
        f.substeps = 1_000_000_000;
    }
    let err = Model::new(config.clone()).unwrap_err().to_string();
    assert!(err.contains("got 1000000000"), "{err}");
    let mut dopri5 = floater(true, SolverMethod::Dopri5, GradientMethod::Adjoint);
    dopri5.rtol = 1e-9;
    config.posenc = PosEnc::Floater(dopri5);
    let err = Model::new(config.clone()).unwrap_err().to_string();
    assert!(
        err.contains("rtol is 0.000000001, below what f32 can resolve"),
        "{err}"
    );
    config.d_model = 512;
    config.heads = 8;
    config.posenc = PosEnc::Floater(floater(true, SolverMethod::Midpoint, GradientMethod::Backprop));
    let err = Model::new(config).unwrap_err().to_string();
    assert!(err.contains("at most 256") && err.contains("512"), "{err}");
    let err = serde_json::from_str::<PosEnc>(r#"{"type": "floater", "solver": "rk4"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `solver`"), "{err}");
}

/// Trained on sequences of 16, evaluated on up to 128: every bin is there, none fails.
#[test]
fn a_model_trained_short_evaluates_eight_times_longer() {
    let run = moby_run(
        r#"{ type = "floater", method = "rk4" }"#,
        "steps = 8\nbatch = 4\nlr = 1e-2\neval_lengths = [16, 64, 128]\neval_batches = 1",
    );
    let mut trainer = Trainer::new(cpu(), run).unwrap();
    let summary = posflow::train::fit(&mut trainer, &mut NoProgress).unwrap();
    assert!(summary.last_loss < summary.first_loss, "{summary:?}");
    let report = summary.last_eval.unwrap();
    assert!(report.failures.is_empty(), "{report}");
    let bins: Vec<_> = report
        .bins
        .bins()
        .map(|(lengths, t)| (lengths, t.tokens))
        .collect();
    assert_eq!(
        bins,
        vec![(1..=32, 4 * 16), (33..=64, 4 * 64), (65..=128, 4 * 128)]
    );
    assert!(report.to_string().contains("> trained"));
}

struct NoProgress;

impl posflow::train::Progress for NoProgress {}

/// The compatible form with zero dynamics is exactly the sinusoidal Transformer whose q/k/v
/// biases are the form's b(0), bit for bit. With dynamics it differs, and the one shared flow and
/// b(0) get gradients.
#[test]
fn the_compatible_form_with_zero_dynamics_is_the_sinusoidal_model() {
    let bias_form = FloaterConfig {
        form: FloaterForm::Bias,
        ..floater(true, SolverMethod::Rk4, GradientMethod::Adjoint)
    };
    let floater_config = ModelConfig {
        embed_scale: EmbedScale::SqrtD,
        ..tiny(bias_form)
    };
    let sinusoidal = ModelConfig {
        posenc: PosEnc::Sinusoidal(Sinusoidal {
            every_block: false,
            ..Sinusoidal::default()
        }),
        ..floater_config.clone()
    };
    let (d, layers) = (floater_config.d_model, floater_config.layers);
    // Static q/k/v biases of every layer, far from 0 so that a wrong row would show.
    let biases: Vec<Vec<f32>> = (0..layers)
        .map(|n| {
            (0..3 * d)
                .map(|j| ((n * 31 + j * 7) % 23) as f32 * 0.05 - 0.5)
                .collect()
        })
        .collect();
    let run = |config: &ModelConfig, prepare: &dyn Fn(&ParamStore)| -> (Vec<f32>, Vec<(String, f32)>) {
        let model = Model::new(config.clone()).unwrap();
        let mut g = Graph::new();
        let built = model
            .build(&mut g, Tokens { batch: 2, len: 7 }, GraphOptions::default())
            .unwrap();
        let grads = g.backward(built.loss).unwrap();
        // The same seed gives every shared parameter the same values in both models.
        let params = ParamStore::init(cpu(), &g, 3).unwrap();
        prepare(&params);
        let mut wanted = vec![built.logits, built.loss];
        wanted.extend(grads.iter().map(|(_, grad)| grad));
        let exec = Executor::new(&g, &wanted, &params).unwrap();
        let a: Vec<i32> = [tokens(7), tokens(8)[1..].to_vec()].concat();
        let targets: Vec<i32> = a.iter().map(|t| (t + 1) % 30).collect();
        built.feed(&exec, &a, &targets, None).unwrap();
        exec.run().unwrap();
        pollster::block_on(exec.check()).unwrap();
        let norms = grads
            .iter()
            .map(|(param, grad)| {
                let v = exec.read_blocking(grad).unwrap();
                (
                    g.info(param).name.clone(),
                    v.iter().map(|x| x * x).sum::<f32>().sqrt(),
                )
            })
            .collect();
        (exec.read_blocking(built.logits).unwrap(), norms)
    };
    let static_biases = |params: &ParamStore| {
        for (n, bias) in biases.iter().enumerate() {
            params.set(&format!("blocks.{n}.attn.qkv.bias"), bias).unwrap();
        }
    };
    let initial_biases = |params: &ParamStore| {
        params
            .set(QKV_INITIAL_NAME, &qkv_initial_from_static_biases(&biases, d))
            .unwrap();
    };
    let (want, _) = run(&sinusoidal, &static_biases);
    let (got, norms) = run(&floater_config, &|params| {
        initial_biases(params);
        for (name, p) in params.iter() {
            if name != QKV_INITIAL_NAME && name.starts_with("posenc.floater.") {
                params.set(name, &vec![0.0; p.meta.numel()]).unwrap();
            }
        }
    });
    assert_eq!(
        got, want,
        "zero dynamics must give the sinusoidal model's logits exactly"
    );
    let (moved, norms_moving) = run(&floater_config, &initial_biases);
    assert_ne!(moved, want);
    // One shared flow (w1, b1, w2, b2) and b(0); no static q/k/v biases.
    let mut floater_params: Vec<_> = norms_moving
        .iter()
        .filter(|(n, _)| n.starts_with("posenc.floater.") || n.ends_with("attn.qkv.bias"))
        .collect();
    floater_params.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = floater_params.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "posenc.floater.b1",
            "posenc.floater.b2",
            "posenc.floater.qkv_initial",
            "posenc.floater.w1",
            "posenc.floater.w2"
        ]
    );
    assert!(
        floater_params.iter().all(|(_, norm)| *norm > 0.0),
        "{floater_params:?}"
    );
    // With zero dynamics only b(0)'s and h's output bias's paths are open.
    let open = |name: &str| norms.iter().any(|(n, norm)| n == name && *norm > 0.0);
    assert!(open(QKV_INITIAL_NAME) && open("posenc.floater.b2"), "{norms:?}");
}

/// Three steps.
const SHORT: &str = "steps = 3\nbatch = 2\nlr = 1e-2";

fn logits_of(model: &Model, params: &ParamStore, text: &[i32]) -> Vec<f32> {
    let mut g = Graph::new();
    let built = model
        .build(
            &mut g,
            Tokens {
                batch: 1,
                len: text.len(),
            },
            GraphOptions::default(),
        )
        .unwrap();
    let exec = Executor::new(&g, &[built.logits, built.loss], params).unwrap();
    built.feed(&exec, text, &vec![-100; text.len()], None).unwrap();
    exec.run().unwrap();
    exec.read_blocking(built.logits).unwrap()
}

/// A trained sinusoidal model warm-starts FLOATER's compatible form: every shared parameter is
/// loaded, b(0) is the sinusoidal model's q/k/v biases, only the flow is new, and with the flow at
/// zero the model is the sinusoidal one.
#[test]
fn a_sinusoidal_checkpoint_warm_starts_the_compatible_form() {
    let mut sinusoidal = Trainer::new(cpu(), moby_run(r#"{ type = "sinusoidal" }"#, SHORT)).unwrap();
    for _ in 0..3 {
        sinusoidal.step().unwrap();
    }
    let checkpoint = pollster::block_on(sinusoidal.checkpoint()).unwrap();
    let (floater, start) =
        Trainer::warm_start(cpu(), moby_run(r#"{ type = "floater" }"#, SHORT), &checkpoint).unwrap();
    let fresh = start.fresh;
    assert_eq!(start.derived.len(), 1, "{:?}", start.derived);
    assert!(start.derived[0].starts_with(QKV_INITIAL_NAME));
    assert_eq!(
        fresh,
        [
            "posenc.floater.b1",
            "posenc.floater.b2",
            "posenc.floater.w1",
            "posenc.floater.w2"
        ]
    );
    // Trained biases (three steps moved them from 0) in b(0), row [part, layer].
    let (d, layers) = (16, 2);
    let initial = pollster::block_on(floater.params().read(QKV_INITIAL_NAME)).unwrap();
    for n in 0..layers {
        let bias =
            pollster::block_on(sinusoidal.params().read(&format!("blocks.{n}.attn.qkv.bias"))).unwrap();
        assert!(bias.iter().any(|&b| b != 0.0));
        for part in 0..3 {
            let row = (part * layers + n) * d;
            assert_eq!(
                initial[row..row + d],
                bias[part * d..(part + 1) * d],
                "layer {n} part {part}"
            );
        }
    }
    for name in &fresh {
        let n = floater.params().get(name).unwrap().meta.numel();
        floater.params().set(name, &vec![0.0; n]).unwrap();
    }
    let text = floater
        .tokenizer()
        .chars()
        .unwrap()
        .encode("Call me Ishmael.")
        .unwrap();
    assert_eq!(
        logits_of(floater.model(), floater.params(), &text),
        logits_of(sinusoidal.model(), sinusoidal.params(), &text)
    );

    // A checkpoint of another width shares names but not shapes: an error naming the width.
    let mut wide = moby_run(r#"{ type = "floater" }"#, SHORT);
    wide.model.d_model = 32;
    let err = Trainer::warm_start(cpu(), wide, &checkpoint)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("cannot warm-start: the checkpoint's model has d_model 16, this run's has 32"),
        "{err}"
    );
}

/// A checkpoint of the compatible form in posflow's old layout (a flow per block and projection,
/// `posenc.floater.blocks.*`) is refused, by loading and by a warm start, with what changed.
#[test]
fn a_checkpoint_in_the_old_compatible_layout_is_refused_with_what_changed() {
    let trainer = Trainer::new(cpu(), moby_run(r#"{ type = "floater" }"#, SHORT)).unwrap();
    let bytes = pollster::block_on(trainer.checkpoint())
        .unwrap()
        .to_bytes()
        .unwrap();
    // The same file with the shared flow's w1 under an old per-block name.
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let views: Vec<(String, safetensors::tensor::TensorView)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            (
                name.replace("posenc.floater.w1", "posenc.floater.blocks.0.q.w1"),
                view,
            )
        })
        .collect();
    let old = safetensors::serialize(views, metadata.metadata().clone()).unwrap();
    let checkpoint = posflow::checkpoint::Checkpoint::from_bytes(&old, "old.safetensors").unwrap();
    let load = posflow::inference::SavedModel::from_checkpoint(cpu(), &checkpoint)
        .err()
        .unwrap()
        .to_string();
    let warm = Trainer::warm_start(cpu(), moby_run(r#"{ type = "floater" }"#, SHORT), &checkpoint)
        .err()
        .unwrap()
        .to_string();
    for err in [load, warm] {
        assert!(
            err.contains("old.safetensors")
                && err.contains("posenc.floater.blocks.0.q.w1")
                && err.contains("old layout")
                && err.contains("posenc.floater.qkv_initial"),
            "{err}"
        );
    }
}
