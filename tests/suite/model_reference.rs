//! posflow's Transformer against the same model in PyTorch, without Python: each checkpoint under
//! `tests/reference/models/` (from `tests/tools/reference_checkpoints.rs`) is built from its own
//! config (`Model::build` for `Tokens`, or for `Pairs` with its stored pairs), restored, and run
//! forward and backward on its stored batch; logits, loss and every
//! gradient must match `<name>.expected.safetensors`, which `tests/reference/model_reference.py`
//! computed in float64 from the checkpoint's tensors by their documented names (the `*_code_*`
//! cases: `tests/reference/authors_ode.py`, the ODE Transformer authors' layer, Runge-Kutta loop
//! and layer history, and `tests/reference/authors_tupe.py`, the TUPE authors' encoder, post- or
//! pre-LN layer and masked-LM head, transcribed from their code). Regenerate both:
//!
//! ```text
//! cd tests/reference && python3 model_reference.py generate
//! ```
//!
//! Also: a checkpoint restored into a model of another config is refused, naming the tensor and
//! the shapes, with the model's parameters untouched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use posflow::Graph;
use posflow::backend::{Backend, CpuBackend, gpu_for_tests};
use posflow::checkpoint::Checkpoint;
use posflow::data::IGNORE_INDEX;
use posflow::model::{GraphOptions, Model, ModelConfig, ModelKind, Tokens};
use posflow::params::ParamStore;
use posflow::train::{ValueBatch, checkpoint_values};
use safetensors::SafeTensors;

/// The committed checkpoints, one per model variant.
const CASES: [&str; 42] = [
    "lm_tied_sinusoidal_sqrt_d",
    "lm_untied_learned_4_heads",
    "lm_sinusoidal_every_block",
    "lm_relative_padded",
    "encoder_relative_padded",
    "lm_no_posenc",
    "lm_tupe_a_4_heads",
    "encoder_tupe_r_untie_cls_padded",
    "lm_floater_every_block_midpoint",
    "lm_floater_input_rk4_tanh",
    "lm_floater_compatible",
    "lm_floater_compatible_midpoint_delta_0_1",
    "seq2seq_sinusoidal_tied_sqrt_d",
    "seq2seq_relative_untied_rk2_encoder",
    "seq2seq_floater_compatible",
    "seq2seq_tupe_r_rk4_decoder_4_heads",
    "lm_code_residual_dense",
    "lm_code_rk2_dense",
    "lm_code_rk2_scalar_learnable_dense",
    "lm_code_rk2_channel_dense",
    "lm_code_rk2_gated_dense",
    "lm_code_rk4_learnable_dense_sinusoidal",
    "encoder_code_rk2_gated_dense_padded",
    "mlm_code_tupe_a_post",
    "mlm_code_tupe_r_post_4_heads",
    "mlm_code_tupe_a_pre",
    "lm_bert_r_word_scale_tupe_padded",
    "seq2seq_floater_fairseq_post",
    "lm_rope",
    "lm_alibi_6_heads",
    "encoder_alibi_left_offset_padded",
    "tagger_rk2_gated_no_attention_biases_padded",
    "lm_rk2_learned_channel",
    "mlm_tupe_a_untie_cls",
    "tagger_random_sinusoidal",
    "tagger_random_learned",
    "tagger_random_relative",
    "tagger_random_rope",
    "tagger_random_alibi",
    "tagger_random_tupe_r",
    "tagger_random_floater_compatible",
    "lm_random_floater_additive",
];

/// The largest |posflow − PyTorch| allowed for any logit, the loss or any gradient element.
/// Reached, worst tensor of each case (CPU / lavapipe GPU, its software kernels):
///
/// | case                                     | CPU     | GPU     |
/// |------------------------------------------|---------|---------|
/// | lm_tied_sinusoidal_sqrt_d                | 9.5e-7  | 4.8e-7  |
/// | lm_untied_learned_4_heads                | 1.5e-7  | 1.7e-7  |
/// | lm_sinusoidal_every_block                | 1.2e-7  | 2.4e-7  |
/// | lm_relative_padded                       | 1.8e-7  | 2.1e-7  |
/// | encoder_relative_padded                  | 4.3e-7  | 4.2e-7  |
/// | lm_no_posenc                             | 1.2e-7  | 2.4e-7  |
/// | lm_tupe_a_4_heads                        | 2.4e-7  | 1.2e-7  |
/// | encoder_tupe_r_untie_cls_padded          | 1.2e-7  | 1.6e-7  |
/// | lm_floater_every_block_midpoint          | 1.4e-6  | 1.4e-6  |
/// | lm_floater_input_rk4_tanh                | 1.8e-7  | 2.4e-7  |
/// | lm_floater_compatible                    | 4.8e-7  | 7.2e-7  |
/// | lm_floater_compatible_midpoint_delta_0_1 | 9.5e-7  | 7.2e-7  |
/// | seq2seq_sinusoidal_tied_sqrt_d           | 4.8e-7  | 4.8e-7  |
/// | seq2seq_relative_untied_rk2_encoder      | 1.2e-7  | 2.4e-7  |
/// | seq2seq_floater_compatible               | 4.8e-7  | 4.8e-7  |
/// | seq2seq_tupe_r_rk4_decoder_4_heads       | 2.4e-7  | 1.2e-7  |
/// | lm_code_residual_dense                   | 2.4e-7  | 2.4e-7  |
/// | lm_code_rk2_dense                        | 8.2e-8  | 9.7e-8  |
/// | lm_code_rk2_scalar_learnable_dense       | 7.5e-8  | 1.2e-7  |
/// | lm_code_rk2_channel_dense                | 1.2e-7  | 1.2e-7  |
/// | lm_code_rk2_gated_dense                  | 1.2e-7  | 2.4e-7  |
/// | lm_code_rk4_learnable_dense_sinusoidal   | 9.5e-7  | 4.8e-7  |
/// | encoder_code_rk2_gated_dense_padded      | 8.9e-8  | 8.9e-8  |
/// | mlm_code_tupe_a_post                     | 2.4e-7  | 3.3e-7  |
/// | mlm_code_tupe_r_post_4_heads             | 2.4e-7  | 2.4e-7  |
/// | mlm_code_tupe_a_pre                      | 2.4e-7  | 3.6e-7  |
/// | lm_bert_r_word_scale_tupe_padded         | 1.5e-7  | 2.4e-7  |
/// | seq2seq_floater_fairseq_post             | 7.8e-7  | 7.2e-7  |
/// | lm_rope                                  | 1.3e-7  | 4.8e-7  |
/// | lm_alibi_6_heads                         | 2.4e-7  | 3.0e-7  |
/// | encoder_alibi_left_offset_padded         | 1.5e-7  | 2.1e-7  |
/// | tagger_rk2_gated_no_attention_biases_... | 8.9e-8  | 1.2e-7  |
/// | lm_rk2_learned_channel                   | 1.8e-7  | 4.8e-7  |
/// | mlm_tupe_a_untie_cls                     | 2.2e-7  | 2.4e-7  |
/// | tagger_random_sinusoidal                 | 8.9e-8  | 8.9e-8  |
/// | tagger_random_learned                    | 8.9e-8  | 1.2e-7  |
/// | tagger_random_relative                   | 8.9e-8  | 1.2e-7  |
/// | tagger_random_rope                       | 8.9e-8  | 7.5e-8  |
/// | tagger_random_alibi                      | 1.2e-7  | 1.3e-7  |
/// | tagger_random_tupe_r                     | 1.8e-7  | 1.2e-7  |
/// | tagger_random_floater_compatible         | 1.2e-7  | 1.2e-7  |
/// | lm_random_floater_additive               | 9.7e-8  | 2.4e-7  |
///
/// The FLOATER cases' reference solves the ODE with torchdiffeq (`odeint` differentiated through
/// for backprop, `odeint_adjoint` for the adjoint), so they pin the whole model, dynamics and
/// initial values included. `lm_floater_compatible` is the authors' form with every default, and
/// `seq2seq_floater_compatible` their translation model: three flows (the encoder's, the
/// decoder's over target positions, the cross-attention's over source positions) and two decoder
/// layers; `seq2seq_floater_fairseq_post` the same inside fairseq's backbone (post-LN with the
/// decoder's cross-attention between self-attention and FFN, no embedding layer norm, no final
/// norms, ReLU, fairseq's sinusoid). Every seq2seq batch pads both sources (the key mask of the encoder and of the
/// cross-attention) and targets (`IGNORE_INDEX`).
/// The last fourteen are the forms `python/posflow_torch` is checked on beyond these (its
/// tests compare it with `posflow forward` on every case here): RoPE, ALiBi, the token
/// classifier, gated and learned RK2, projections without biases, and randomized positions
/// (drawn from 0..40, stored with the batch) for every encoding that reads them.
const TOLERANCE: f32 = 1e-4;

/// And each tensor's worst error at most this fraction of its largest value (at least
/// [`RELATIVE_FLOOR`]), so that small gradients are pinned too. The floor is for gradients that
/// are 0 in exact arithmetic: TUPE's untied [CLS] bias θ1 adds one constant to a whole softmax row,
/// so PyTorch's gradient is ~5e-18 and posflow's is f32 rounding of a cancelling sum: ~1e-9 on the
/// CPU and the GPUs' tiles kernels, 1.2e-8 on the software adapters' rows kernels (whose online
/// softmax rescales per key rather than per block of 8 keys).
const RELATIVE_TOLERANCE: f32 = 1e-3;
const RELATIVE_FLOOR: f32 = 5e-5;

fn checkpoint_path(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference/models")
        .join(format!("{case}.safetensors"))
}

/// Logits, loss and the gradient of every parameter by name.
struct Values {
    logits: Vec<f32>,
    loss: f32,
    grads: BTreeMap<String, Vec<f32>>,
}

/// posflow's values for the checkpoint of `case`, on `backend`, on the batch it stores (what
/// `posflow forward` writes).
fn posflow_values(case: &str, backend: Rc<dyn Backend>) -> Values {
    let checkpoint = Checkpoint::load(checkpoint_path(case)).unwrap();
    let batch = ValueBatch::from_reference(checkpoint.metadata()).unwrap();
    if let ValueBatch::Pairs(pairs) = &batch {
        let padded = pairs.target_out().contains(&IGNORE_INDEX) && pairs.source_mask().contains(&0.0);
        assert!(padded, "{case}: the batch should pad both sources and targets");
    }
    let values = pollster::block_on(checkpoint_values(backend, &checkpoint, &batch)).unwrap();
    Values {
        logits: values.logits.values,
        loss: values.loss,
        grads: values
            .grads
            .into_iter()
            .map(|(name, grad)| (name, grad.values))
            .collect(),
    }
}

/// PyTorch's values for `case`, from `<case>.expected.safetensors`.
fn pytorch_values(case: &str) -> Values {
    let path = checkpoint_path(case).with_extension("expected.safetensors");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let floats = |name: &str| -> Vec<f32> {
        let view = file
            .tensor(name)
            .unwrap_or_else(|e| panic!("{case}: {name}: {e}"));
        bytemuck::pod_collect_to_vec(view.data())
    };
    Values {
        logits: floats("logits"),
        loss: floats("loss")[0],
        grads: file
            .names()
            .into_iter()
            .filter_map(|name| name.strip_prefix("grad/"))
            .map(|param| (param.to_string(), floats(&format!("grad/{param}"))))
            .collect(),
    }
}

fn max_abs_diff(what: &str, ours: &[f32], theirs: &[f32]) -> f32 {
    assert_eq!(ours.len(), theirs.len(), "{what}: lengths differ");
    ours.iter()
        .zip(theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

/// Compares every case on `backend`, printing the worst error of each (`--nocapture`).
fn matches_pytorch(backend: Rc<dyn Backend>) {
    for case in CASES {
        let ours = posflow_values(case, backend.clone());
        let theirs = pytorch_values(case);
        assert_eq!(
            ours.grads.keys().collect::<Vec<_>>(),
            theirs.grads.keys().collect::<Vec<_>>(),
            "{case}: posflow's parameters and PyTorch's gradients differ"
        );
        let scale = |values: &[f32]| values.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        // (what, worst |posflow − PyTorch|, largest |PyTorch|)
        let mut errors = vec![
            (
                "logits".to_string(),
                max_abs_diff("logits", &ours.logits, &theirs.logits),
                scale(&theirs.logits),
            ),
            (
                "loss".to_string(),
                (ours.loss - theirs.loss).abs(),
                theirs.loss.abs(),
            ),
        ];
        for (name, grad) in &ours.grads {
            errors.push((
                format!("grad {name}"),
                max_abs_diff(name, grad, &theirs.grads[name]),
                scale(&theirs.grads[name]),
            ));
        }
        let (worst, error, _) = errors
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("logits and loss are there");
        eprintln!(
            "{} {case}: worst |posflow - pytorch| = {error:.2e} ({worst})",
            backend.describe()
        );
        let (relative_worst, relative) = errors
            .iter()
            .map(|(name, x, scale)| (name, x / scale.max(RELATIVE_FLOOR)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("logits and loss are there");
        eprintln!("    worst relative to the tensor's largest value: {relative:.2e} ({relative_worst})");
        for (name, x, scale) in &errors {
            assert!(
                x.is_finite() && *x <= TOLERANCE,
                "{case}: {name}: |posflow - pytorch| = {x}"
            );
            // Small gradients (FLOATER's flow at Δ = 0.01: ~4e-4) are pinned relative to their size.
            assert!(
                *x <= RELATIVE_TOLERANCE * scale.max(RELATIVE_FLOOR),
                "{case}: {name}: |posflow - pytorch| = {x}, over {RELATIVE_TOLERANCE} of its largest value {scale}"
            );
        }
    }
}

#[test]
fn cpu_logits_loss_and_gradients_match_pytorch() {
    matches_pytorch(Rc::new(CpuBackend::new()));
}

#[test]
fn gpu_logits_loss_and_gradients_match_pytorch() {
    let Some(gpu) = gpu_for_tests() else { return };
    matches_pytorch(gpu);
}

/// Restores the checkpoint of `case` into a model of `config` on the CPU: the error, after
/// checking that every parameter kept its value.
fn restore_error(case: &str, config: ModelConfig) -> String {
    let mut g = Graph::new();
    Model::new(config)
        .unwrap()
        .build(&mut g, Tokens { batch: 1, len: 4 }, GraphOptions::default())
        .unwrap();
    let params = ParamStore::init(Rc::new(CpuBackend::new()), &g, 5).unwrap();
    let snapshot = |params: &ParamStore| -> BTreeMap<String, Vec<f32>> {
        params
            .iter()
            .map(|(name, _)| (name.to_string(), pollster::block_on(params.read(name)).unwrap()))
            .collect()
    };
    let before = snapshot(&params);
    let err = Checkpoint::load(checkpoint_path(case))
        .and_then(|c| c.restore(&params, None))
        .unwrap_err()
        .to_string();
    assert_eq!(
        snapshot(&params),
        before,
        "{case}: a refused restore changed the model"
    );
    err
}

fn config_of(case: &str) -> ModelConfig {
    let metadata = Checkpoint::read_metadata(checkpoint_path(case)).unwrap();
    ModelConfig::from_json(&metadata.config).unwrap()
}

#[test]
fn a_checkpoint_of_another_config_is_refused_naming_the_tensor_and_shapes() {
    let tied = "lm_tied_sinusoidal_sqrt_d";
    let expect = |case: &str, config: ModelConfig, detail: &str| {
        let err = restore_error(case, config);
        assert_eq!(
            err,
            format!("checkpoint {}: {detail}", checkpoint_path(case).display())
        );
    };
    // A missing tensor: the model has an untied head, the checkpoint was tied.
    expect(
        tied,
        ModelConfig {
            kind: ModelKind::CausalLm { tied_head: false },
            ..config_of(tied)
        },
        "has no tensor lm_head.weight, the model expects shape [16, 20]",
    );
    // An extra tensor: the checkpoint's untied head, in a tied model.
    let untied = "lm_untied_learned_4_heads";
    expect(
        untied,
        ModelConfig {
            kind: ModelKind::CausalLm { tied_head: true },
            ..config_of(untied)
        },
        "tensor lm_head.weight is not a parameter of the model (its shape in the checkpoint is [16, 20])",
    );
    // Shape mismatches: the first tensor by name that differs, with both shapes.
    expect(
        tied,
        ModelConfig {
            d_model: 32,
            ..config_of(tied)
        },
        "tensor blocks.0.attn.out.bias has shape [16], the model expects [32]",
    );
    expect(
        tied,
        ModelConfig {
            vocab: 21,
            ..config_of(tied)
        },
        "tensor tok_emb.weight has shape [20, 16], the model expects [21, 16]",
    );
    let relative = "lm_relative_padded";
    expect(
        relative,
        ModelConfig {
            heads: 4,
            ..config_of(relative)
        },
        "tensor posenc.relative.weight has shape [8, 2], the model expects [8, 4]",
    );
}
