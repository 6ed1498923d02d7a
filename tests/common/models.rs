//! The small models and position encodings the model test files share (included with `#[path]`
//! by tests/model.rs and tests/model_training.rs).

// Each including file uses part of this.
#![allow(dead_code)]

use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend};
use posflow::data::SyntheticTask;
use posflow::model::{
    Block, EmbedScale, FloaterConfig, FloaterForm, GradientMethod, ModelConfig, ModelKind, Nonlinearity,
    PosEnc, SolverMethod,
};

pub const T5: PosEnc = PosEnc::Relative {
    buckets: 32,
    max_distance: 128,
};

pub const TUPE_A: PosEnc = PosEnc::TupeA { untie_cls: false };

pub const TUPE_R: PosEnc = PosEnc::TupeR {
    untie_cls: false,
    buckets: 32,
    max_distance: 128,
};

/// TUPE-R of an encoder with the [CLS] reset, and small buckets.
pub const TUPE_R_UNTIED: PosEnc = PosEnc::TupeR {
    untie_cls: true,
    buckets: 8,
    max_distance: 20,
};

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
});

pub const ROPE: PosEnc = PosEnc::Rope { base: 10_000.0 };

pub const ALL_POSENCS: [PosEnc; 11] = [
    PosEnc::None,
    PosEnc::Sinusoidal { every_block: false },
    PosEnc::Sinusoidal { every_block: true },
    PosEnc::Learned,
    T5,
    TUPE_A,
    TUPE_R,
    FLOATER,
    FLOATER_COMPATIBLE,
    ROPE,
    PosEnc::Alibi,
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
