//! The init schemes (`init = "gpt2" | "bert" | "fairseq"`) as drawn: every projection's values
//! within its scheme's range and at its spread, on a seq2seq model that has every kind of
//! projection (self- and cross-attention, FFN, an untied output table), and the schemes'
//! defaults for pre- and post-LN models.

use std::rc::Rc;

use posflow::backend::CpuBackend;
use posflow::model::{Block, InitScheme, Model, ModelConfig, ModelKind, Norm};
use posflow::params::ParamStore;

const D: usize = 64;
const FFN: usize = 128;

fn seq2seq(init: Option<InitScheme>, norm: Norm) -> ModelConfig {
    ModelConfig {
        vocab: 300,
        d_model: D,
        heads: 4,
        layers: 2,
        ffn: FFN,
        kind: ModelKind::Seq2Seq {
            tied_head: false,
            decoder_layers: 2,
            decoder_block: Block::Residual,
        },
        norm,
        init,
        ..ModelConfig::default()
    }
}

/// Every parameter's values, by name.
fn drawn(config: ModelConfig) -> Vec<(String, Vec<f32>)> {
    let g = Model::new(config).unwrap().declare_params().unwrap();
    let params = ParamStore::init(Rc::new(CpuBackend::new()), &g, 7).unwrap();
    params
        .iter()
        .map(|(name, _)| (name.to_string(), pollster::block_on(params.read(name)).unwrap()))
        .collect()
}

fn std(values: &[f32]) -> f32 {
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
    (values.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt() as f32
}

fn max_abs(values: &[f32]) -> f32 {
    values.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// What a weight of this name should be drawn from: `(uniform bound, None)` or
/// `(0, Some(std))`.
fn expected(scheme: InitScheme, name: &str, layers: usize) -> Option<(f32, Option<f32>)> {
    let xavier = |fan_in: usize, fan_out: usize| Some(((6.0 / (fan_in + fan_out) as f32).sqrt(), None));
    let normal = |std: f32| Some((0.0, Some(std)));
    let residual = name.ends_with("attn.out.weight")
        || name.ends_with("cross.out.weight")
        || name.ends_with("ffn.down.weight");
    let attention_in = ["attn.qkv.weight", "cross.q.weight", "cross.kv.weight"]
        .iter()
        .any(|suffix| name.ends_with(suffix));
    match scheme {
        InitScheme::Fairseq if attention_in => xavier(D, 3 * D),
        InitScheme::Fairseq if name.ends_with("attn.out.weight") || name.ends_with("cross.out.weight") => {
            xavier(D, D)
        }
        InitScheme::Fairseq if name.ends_with("ffn.up.weight") || name.ends_with("ffn.down.weight") => {
            xavier(D, FFN)
        }
        InitScheme::Fairseq if name == "tok_emb.weight" || name == "lm_head.weight" => {
            normal(1.0 / (D as f32).sqrt())
        }
        InitScheme::Gpt2 if residual => normal(0.02 / (2.0 * layers as f32).sqrt()),
        InitScheme::Gpt2 | InitScheme::Bert if name.ends_with(".weight") && !name.contains("ln") => {
            normal(0.02)
        }
        _ => None,
    }
}

fn check(scheme: InitScheme, config: ModelConfig) {
    let params = drawn(config);
    let mut checked = 0;
    for (name, values) in &params {
        if name.ends_with(".bias") {
            assert!(values.iter().all(|&v| v == 0.0), "{scheme:?}: {name} is not zero");
            continue;
        }
        if name.ends_with(".gain") {
            assert!(values.iter().all(|&v| v == 1.0), "{scheme:?}: {name} is not one");
            continue;
        }
        let (bound, normal_std) =
            expected(scheme, name, 2).unwrap_or_else(|| panic!("{scheme:?}: {name} unexpected"));
        let (want_std, what) = match normal_std {
            Some(s) => (s, "normal"),
            None => {
                let spread = max_abs(values);
                assert!(
                    spread <= bound && spread > 0.95 * bound,
                    "{scheme:?}: {name} max {spread} for bound {bound}"
                );
                (bound / 3f32.sqrt(), "uniform")
            }
        };
        let got = std(values);
        assert!(
            (got / want_std - 1.0).abs() < 0.1,
            "{scheme:?}: {name} ({what}) std {got}, expected {want_std}"
        );
        checked += 1;
    }
    // tok_emb, lm_head and per side and block: q|k|v, out, up, down; the decoder's cross q, kv, out.
    assert_eq!(checked, 2 + 2 * 4 + 2 * 7, "{scheme:?}: weights checked");
}

#[test]
fn each_scheme_draws_every_projection_from_its_own_distribution() {
    for scheme in [InitScheme::Gpt2, InitScheme::Bert, InitScheme::Fairseq] {
        check(scheme, seq2seq(Some(scheme), Norm::Post));
    }
}

#[test]
fn an_unset_init_is_gpt2_s_in_a_pre_ln_model_and_bert_s_in_a_post_ln_one() {
    assert_eq!(
        drawn(seq2seq(None, Norm::Pre)),
        drawn(seq2seq(Some(InitScheme::Gpt2), Norm::Pre))
    );
    assert_eq!(
        drawn(seq2seq(None, Norm::Post)),
        drawn(seq2seq(Some(InitScheme::Bert), Norm::Post))
    );
    assert_ne!(
        drawn(seq2seq(None, Norm::Pre)),
        drawn(seq2seq(Some(InitScheme::Bert), Norm::Pre))
    );
}

#[test]
fn an_unknown_scheme_is_an_error_naming_the_choices() {
    let toml = r#"
        vocab = 30
        d_model = 16
        heads = 2
        layers = 1
        ffn = 32
        max_len = 8
        kind = { type = "causal_lm", tied_head = true }
        posenc = { type = "none" }
        init = "xavier"
    "#;
    let error = toml::from_str::<ModelConfig>(toml).unwrap_err().to_string();
    assert!(error.contains("xavier") && error.contains("fairseq"), "{error}");
}
