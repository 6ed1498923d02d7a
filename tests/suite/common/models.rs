//! The small models and position encodings the model test files share (model.rs,
//! model_training.rs, ode_code.rs, random_positions.rs and tupe_code.rs).

use std::rc::Rc;

use posflow::Graph;
use posflow::backend::{Backend, CpuBackend, gpu_for_tests};
use posflow::data::{BOS, IGNORE_INDEX, SyntheticTask};
use posflow::exec::Executor;
use posflow::graph::Source;
use posflow::model::Tokens;
use posflow::model::{Alibi, Learned, NoEncoding, Relative, Rope, SinusoidLayout, Sinusoidal, TupeA, TupeR};
use posflow::model::{
    Block, EmbedScale, FloaterConfig, FloaterForm, GradientMethod, GraphOptions, Model, ModelConfig,
    ModelKind, Nonlinearity, PosEnc, SolverMethod, TupeForm,
};
use posflow::params::ParamStore;

pub const T5: PosEnc = PosEnc::Relative(Relative {
    buckets: 32,
    max_distance: 128,
    learned_absolute: false,
});

pub const TUPE_A: PosEnc = PosEnc::TupeA(TupeA {
    untie_cls: false,
    form: TupeForm::Paper,
});

pub const TUPE_R: PosEnc = PosEnc::TupeR(TupeR {
    untie_cls: false,
    buckets: 32,
    max_distance: 128,
    form: TupeForm::Paper,
});

/// TUPE-R of an encoder with the [CLS] reset, and small buckets.
pub const TUPE_R_UNTIED: PosEnc = PosEnc::TupeR(TupeR {
    untie_cls: true,
    buckets: 8,
    max_distance: 20,
    form: TupeForm::Paper,
});

/// FLOATER's additive form at every block, Δ = 0.1, midpoint, backprop (the form and settings
/// posflow had first; the copy-task threshold below was measured with them).
pub const FLOATER: PosEnc = PosEnc::Floater(FloaterConfig {
    form: FloaterForm::Additive,
    every_block: true,
    delta: 0.1,
    method: SolverMethod::Midpoint,
    substeps: 1,
    rtol: 1e-5,
    atol: 1e-7,
    max_steps: 10_000,
    gradient: GradientMethod::Backprop,
    activation: Nonlinearity::Relu,
    resolve_every: 1,
    sinusoid: SinusoidLayout::Interleaved,
});

/// FLOATER as its authors ran it (configs/moby_floater.toml): the compatible form, one shared
/// flow over learned q/k/v biases, Δ = 0.01, rk4 at Δ/5, adjoint.
pub const FLOATER_COMPATIBLE: PosEnc = PosEnc::Floater(FloaterConfig {
    form: FloaterForm::Bias,
    every_block: true,
    delta: 0.01,
    method: SolverMethod::Rk4,
    substeps: 5,
    rtol: 1e-5,
    atol: 1e-7,
    max_steps: 10_000,
    gradient: GradientMethod::Adjoint,
    activation: Nonlinearity::Relu,
    resolve_every: 1,
    sinusoid: SinusoidLayout::Interleaved,
});

pub const ROPE: PosEnc = PosEnc::Rope(Rope { base: 10_000.0 });

pub const ALL_POSENCS: [PosEnc; 12] = [
    PosEnc::None(NoEncoding {}),
    PosEnc::Sinusoidal(Sinusoidal {
        every_block: false,
        layout: SinusoidLayout::Interleaved,
    }),
    PosEnc::Sinusoidal(Sinusoidal {
        every_block: true,
        layout: SinusoidLayout::Interleaved,
    }),
    PosEnc::Sinusoidal(Sinusoidal {
        every_block: false,
        layout: SinusoidLayout::Fairseq,
    }),
    PosEnc::Learned(Learned {}),
    T5,
    TUPE_A,
    TUPE_R,
    FLOATER,
    FLOATER_COMPATIBLE,
    ROPE,
    PosEnc::Alibi(Alibi { left_offset: 0.0 }),
];

pub fn tiny(kind: ModelKind, posenc: PosEnc) -> ModelConfig {
    ModelConfig {
        vocab: SyntheticTask::tokenizer().vocab_size(),
        d_model: 32,
        heads: 2,
        layers: 2,
        ffn: 128,
        dropout: 0.0,
        max_len: 16,
        kind,
        posenc,
        embed_scale: EmbedScale::None,
        block: Block::Residual,
        ..ModelConfig::default()
    }
}

pub const LM: ModelKind = ModelKind::CausalLm { tied_head: true };

pub fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

/// Rows of the copy task: strings of 2..=6 symbols, `<bos> abc|abc <eos>`, at most 14 inputs.
pub const COPY_LEN: usize = 14;

/// Tokens in `[3, vocab)` (no special tokens), BOS first.
pub fn tokens(n_rows: usize, len: usize, vocab: usize, seed: u64) -> Vec<i32> {
    (0..n_rows * len)
        .map(|i| {
            if i % len == 0 {
                BOS
            } else {
                3 + ((i as u64 * 7919 + seed * 104_729) % (vocab as u64 - 3)) as i32
            }
        })
        .collect()
}

/// Next-token targets of `tokens` rows: the row shifted left, IGNORE_INDEX at the end.
pub fn shifted(tokens: &[i32], len: usize) -> Vec<i32> {
    tokens
        .chunks(len)
        .flat_map(|row| row[1..].iter().copied().chain([IGNORE_INDEX]))
        .collect()
}

/// Dropout acts in training graphs only: a causal LM's logits and gradients on a fixed batch are
/// the same for the same seed, differ for another seed and from the evaluation graph (which
/// ignores the seed), and the GPU, where there is one, draws the CPU's masks.
pub fn assert_dropout_follows_the_seed(config: &ModelConfig) {
    let model = Model::new(config.clone()).unwrap();
    let (batch, len) = (2, 9);
    let a = tokens(batch, len, config.vocab, 5);
    let targets = shifted(&a, len);
    let logits = |backend: Rc<dyn Backend>, training: bool, seed: u32| -> Vec<f32> {
        let mut g = Graph::new();
        let built = if training {
            model.build(&mut g, Tokens { batch, len }, GraphOptions::default().training())
        } else {
            model.build(&mut g, Tokens { batch, len }, GraphOptions::default())
        }
        .unwrap();
        let grads = g.backward(built.loss).unwrap();
        let params = ParamStore::init(backend, &g, 7).unwrap();
        let mut outputs = vec![built.logits];
        outputs.extend(grads.iter().map(|(_, g)| g));
        let exec = Executor::new(&g, &outputs, &params).unwrap();
        built.feed(&exec, &a, &targets, None).unwrap();
        built.set_dropout_seed(&exec, seed).unwrap();
        exec.run().unwrap();
        let mut values = exec.read_blocking(built.logits).unwrap();
        for (_, grad) in grads.iter() {
            values.extend(exec.read_blocking(grad).unwrap());
        }
        values
    };
    let eval = logits(cpu(), false, 0);
    let (seed1, seed1_again, seed2) = (
        logits(cpu(), true, 1),
        logits(cpu(), true, 1),
        logits(cpu(), true, 2),
    );
    assert_eq!(seed1, seed1_again, "{config:?}");
    let differ = |a: &[f32], b: &[f32]| a.iter().zip(b).filter(|(x, y)| x != y).count();
    assert!(differ(&seed1, &seed2) > seed1.len() / 2, "{config:?}");
    assert!(differ(&seed1, &eval) > seed1.len() / 2, "{config:?}");
    assert_eq!(
        eval,
        logits(cpu(), false, 9),
        "the evaluation graph ignores the seed"
    );
    if let Some(gpu) = gpu_for_tests() {
        let on_gpu = logits(gpu, true, 1);
        let scale = seed1.iter().fold(1.0f32, |m, x| m.max(x.abs()));
        for (c, g) in seed1.iter().zip(&on_gpu) {
            assert!((c - g).abs() <= 1e-4 * scale, "{config:?}: {c} vs {g}");
        }
    }
}

/// Every parameter of `config`'s model as `name [shape]`, sorted.
pub fn params(config: ModelConfig) -> Vec<String> {
    let g = Model::new(config).unwrap().declare_params().unwrap();
    let mut names: Vec<String> = g
        .tensors()
        .filter(|(_, t)| matches!(t.source, Source::Param(_)))
        .map(|(_, t)| format!("{} {:?}", t.name, t.meta.shape))
        .collect();
    names.sort();
    names
}

pub fn with_prefix<'a>(names: &'a [String], prefix: &str) -> Vec<&'a str> {
    names
        .iter()
        .filter(|n| n.starts_with(prefix))
        .map(String::as_str)
        .collect()
}
