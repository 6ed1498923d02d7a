//! The model config's parsing and validation.

use super::*;
use crate::testing::{TINY_CONFIG as TINY, config_error as error_of};

#[test]
fn every_size_over_its_limit_is_refused_naming_the_field() {
    for (field, limit) in SIZE_LIMITS {
        let from = format!(r#""{field}": "#);
        let current: String = TINY[TINY.find(&from).unwrap() + from.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let err = error_of(&format!("{from}{current}"), &format!("{from}{}", limit + 1));
        assert!(
            err.contains(&format!(
                "{field} is {}, over posflow's limit of {limit}",
                limit + 1
            )),
            "{err}"
        );
    }
    // Each size within its limit, together too large to hold.
    let err = error_of(
        r#""vocab": 30, "d_model": 32"#,
        r#""vocab": 1048576, "d_model": 16384"#,
    );
    assert!(
        err.contains("parameters") && err.contains("GiB of weights"),
        "{err}"
    );
}

#[test]
fn defaults_fill_the_optional_fields() {
    let config = ModelConfig::from_json(TINY).unwrap();
    assert_eq!(config.dropout, 0.0);
    assert_eq!(config.kind, ModelKind::CausalLm { tied_head: true });
    assert_eq!(config.posenc, PosEnc::from_preset("sinusoidal", false).unwrap());
    assert_eq!(config.embed_scale, EmbedScale::None);
    assert_eq!(config.block, Block::Residual);
    assert_eq!(config.head_dim(), 16);
}

#[test]
fn a_config_survives_a_json_round_trip() {
    let config = ModelConfig::from_json(TINY).unwrap();
    let json = serde_json::to_string(&config).unwrap();
    assert_eq!(ModelConfig::from_json(&json).unwrap(), config);
}

#[test]
fn unknown_keys_are_errors_at_every_level() {
    let err = error_of(r#""ffn": 128"#, r#""ffn": 128, "ffn_size": 64"#);
    assert!(err.contains("unknown field `ffn_size`"), "{err}");
    let err = error_of(
        r#"{ "type": "causal_lm" }"#,
        r#"{ "type": "causal_lm", "tied": true }"#,
    );
    assert!(err.contains("unknown field `tied`"), "{err}");
    let err = error_of(
        r#"{ "type": "sinusoidal" }"#,
        r#"{ "type": "sinusoidal", "base": 1e4 }"#,
    );
    assert!(err.contains("unknown field `base`"), "{err}");
}

/// `TINY` with a top-level `"key": value` added.
fn tiny_with(key: &str, value: &str) -> String {
    TINY.replace(r#""max_len": 16"#, &format!(r#""max_len": 16, "{key}": {value}"#))
}

#[test]
fn embed_scale_reads_its_two_names_and_refuses_others() {
    let with = |value: &str| tiny_with("embed_scale", value);
    let config = ModelConfig::from_json(&with(r#""sqrt_d""#)).unwrap();
    assert_eq!(config.embed_scale, EmbedScale::SqrtD);
    let config = ModelConfig::from_json(&with(r#""none""#)).unwrap();
    assert_eq!(config.embed_scale, EmbedScale::None);
    let err = ModelConfig::from_json(&with(r#""sqrt""#))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown variant `sqrt`, expected `none` or `sqrt_d`"),
        "{err}"
    );
}

/// GELU unless the config says `relu`; only GELU is left out when the config is written, so
/// configs and checkpoints from before the setting read and write unchanged.
#[test]
fn activation_reads_gelu_and_relu_and_refuses_others() {
    let with = |value: &str| tiny_with("activation", value);
    assert_eq!(ModelConfig::from_json(TINY).unwrap().activation, Activation::Gelu);
    let relu = ModelConfig::from_json(&with(r#""relu""#)).unwrap();
    assert_eq!(relu.activation, Activation::Relu);
    assert!(
        serde_json::to_string(&relu)
            .unwrap()
            .contains(r#""activation":"relu""#)
    );
    let gelu = ModelConfig::from_json(&with(r#""gelu""#)).unwrap();
    assert!(!serde_json::to_string(&gelu).unwrap().contains("activation"));
    let err = ModelConfig::from_json(&with(r#""swish""#))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown variant `swish`, expected `gelu` or `relu`"),
        "{err}"
    );
}

#[test]
fn unknown_encodings_are_errors_listing_the_known_ones() {
    let err = error_of(r#""sinusoidal""#, r#""xpos""#);
    assert!(
        err.contains(
            "unknown variant `xpos`, expected one of `none`, `sinusoidal`, `learned`, `relative`, \
             `tupe_a`, `tupe_r`, `floater`, `rope`, `alibi`"
        ),
        "{err}"
    );
}

#[test]
fn invalid_sizes_are_errors_naming_the_values() {
    assert_eq!(
        error_of(r#""heads": 2"#, r#""heads": 3"#),
        "model config: d_model 32 is not divisible by heads 3"
    );
    let err = error_of(r#""d_model": 32, "heads": 2"#, r#""d_model": 512, "heads": 2"#);
    assert!(
        err.contains("512 / 2 = 256 is over attention's limit of 128"),
        "{err}"
    );
    assert_eq!(
        error_of(r#""layers": 2"#, r#""layers": 0"#),
        "model config: layers must be positive, got 0"
    );
    let err = error_of(r#""d_model": 32, "heads": 2"#, r#""d_model": 33, "heads": 3"#);
    assert!(err.contains("d_model must be even, got 33"), "{err}");
    let err = error_of(
        r#"{ "type": "causal_lm" }"#,
        r#"{ "type": "encoder", "n_classes": 0 }"#,
    );
    assert!(err.contains("n_classes ≥ 1"), "{err}");
}

#[test]
fn dropout_must_be_a_probability_below_one() {
    assert_eq!(
        error_of(r#""ffn": 128"#, r#""ffn": 128, "dropout": 1.0"#),
        "model config: dropout must be in [0, 1), got 1"
    );
}

#[test]
fn block_reads_every_kind_with_rk2_s_default_gamma() {
    let with = |block: &str| TINY.replace(r#""max_len": 16"#, &format!(r#""max_len": 16, "block": {block}"#));
    let read = |block: &str| ModelConfig::from_json(&with(block)).map(|c| c.block);
    assert_eq!(read(r#"{ "type": "residual" }"#).unwrap(), Block::Residual);
    assert_eq!(
        read(r#"{ "type": "rk2" }"#).unwrap(),
        Block::Rk2 { gamma: [0.5, 0.5] }
    );
    assert_eq!(
        read(r#"{ "type": "rk2", "gamma": [1, 1] }"#).unwrap(),
        Block::Rk2 { gamma: [1.0, 1.0] }
    );
    assert_eq!(read(r#"{ "type": "rk2_gated" }"#).unwrap(), Block::Rk2Gated);
    assert_eq!(read(r#"{ "type": "rk4" }"#).unwrap(), Block::Rk4);
    let err = |block: &str| read(block).unwrap_err().to_string();
    let e = err(r#"{ "type": "rk3" }"#);
    assert!(
        e.contains("unknown variant `rk3`, expected one of `residual`, `rk2`, `rk2_gated`, `rk4`"),
        "{e}"
    );
    let e = err(r#"{ "type": "rk4", "gamma": [1, 1] }"#);
    assert!(e.contains("block.gamma is a setting of type rk2 only"), "{e}");
    let e = err(r#"{ "type": "rk2", "gama": [1, 1] }"#);
    assert!(
        e.contains("unknown field `gama`, expected one of `type`, `gamma`, `learned`"),
        "{e}"
    );
    let e = err(r#"{ "type": "rk2", "gamma": [1, 1, 1] }"#);
    assert!(
        e.contains("block.gamma takes the 2 coefficients of F1 and F2, got [1.0, 1.0, 1.0]"),
        "{e}"
    );
    for block in [Block::Rk2 { gamma: [1.0, 1.0] }, Block::Rk4] {
        let config = ModelConfig {
            block,
            ..ModelConfig::from_json(TINY).unwrap()
        };
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(ModelConfig::from_json(&json).unwrap(), config, "{json}");
    }
    let infinite = ModelConfig {
        block: Block::Rk2 {
            gamma: [0.5, f32::INFINITY],
        },
        ..ModelConfig::from_json(TINY).unwrap()
    };
    assert_eq!(
        infinite.validate().unwrap_err().to_string(),
        "model config: block.gamma must be finite, got [0.5, inf]"
    );
}

#[test]
fn post_norm_refuses_what_is_pre_norm_only() {
    let post = TINY.replace(r#""max_len": 16,"#, r#""max_len": 16, "norm": "post","#);
    let config = ModelConfig::from_json(&post).unwrap();
    assert_eq!(config.norm, Norm::Post);
    let defaults = ModelConfig::from_json(TINY).unwrap();
    assert_eq!(defaults.norm, Norm::Pre);
    assert!(!serde_json::to_string(&defaults).unwrap().contains("norm"));
    let with = |field: &str| {
        ModelConfig::from_json(&post.replace(r#""norm": "post","#, &format!(r#""norm": "post", {field},"#)))
    };
    let err = with(r#""block": { "type": "rk2" }"#).unwrap_err().to_string();
    assert!(
        err.contains("a Runge-Kutta block (and rk_stage) steps a pre-norm sub-block"),
        "{err}"
    );
    let err = with(r#""rk_stage": "layer""#).unwrap_err().to_string();
    assert!(err.contains("use norm = \"pre\" with it"), "{err}");
    let err = with(r#""history": "dense""#).unwrap_err().to_string();
    assert!(err.contains("norm = \"post\" and a layer history"), "{err}");
    // fairseq's post-LN translation model reads; a Runge-Kutta decoder does not.
    let seq2seq = |decoder_block: &str| {
        ModelConfig::from_json(&post.replace(
            r#"{ "type": "causal_lm" }"#,
            &format!(r#"{{ "type": "seq2seq", "decoder_layers": 1, "decoder_block": {decoder_block} }}"#),
        ))
    };
    let fairseq = seq2seq(r#"{ "type": "residual" }"#).unwrap();
    assert!(
        fairseq.has_embedding_norm(),
        "BERT's post-LN has an embedding norm unless told"
    );
    let err = seq2seq(r#"{ "type": "rk4" }"#).unwrap_err().to_string();
    assert!(
        err.contains("a Runge-Kutta decoder_block steps a pre-norm sub-block"),
        "{err}"
    );
    let err = error_of(r#""max_len": 16,"#, r#""max_len": 16, "norm": "middle","#);
    assert!(
        err.contains("unknown variant `middle`, expected `pre` or `post`"),
        "{err}"
    );
}

#[test]
fn embedding_norm_and_init_default_to_the_norm_s_own_and_are_not_stored_unset() {
    let post = TINY.replace(r#""max_len": 16,"#, r#""max_len": 16, "norm": "post","#);
    let bert = ModelConfig::from_json(&post).unwrap();
    assert!(bert.has_embedding_norm());
    assert_eq!(bert.init_scheme(), InitScheme::Bert);
    let pre = ModelConfig::from_json(TINY).unwrap();
    assert!(!pre.has_embedding_norm());
    assert_eq!(pre.init_scheme(), InitScheme::Gpt2);
    let stored = serde_json::to_string(&pre).unwrap();
    assert!(
        !stored.contains("init")
            && !stored.contains("embedding_norm")
            && !stored.contains("attention_biases"),
        "{stored}"
    );
    let fairseq = ModelConfig::from_json(&post.replace(
        r#""norm": "post","#,
        r#""norm": "post", "embedding_norm": false, "init": "fairseq","#,
    ))
    .unwrap();
    assert!(!fairseq.has_embedding_norm());
    assert_eq!(fairseq.init_scheme(), InitScheme::Fairseq);
    let again = serde_json::to_string(&fairseq).unwrap();
    assert_eq!(ModelConfig::from_json(&again).unwrap(), fairseq);
    let err = error_of(r#""max_len": 16,"#, r#""max_len": 16, "embedding_norm": "yes","#);
    assert!(err.contains("embedding_norm") || err.contains("boolean"), "{err}");
}

#[test]
fn word_scale_overrides_the_encoding_s_factor() {
    // d_model 32, 2 heads: Dh = 16.
    let config = |json: &str| ModelConfig::from_json(json).unwrap();
    let sinusoidal = config(TINY);
    assert_eq!(sinusoidal.attention_scale(None), 0.25);
    let tupe_scale = Some(1.0 / 32f32.sqrt());
    // TUPE's own factor stands unless the config sets one.
    assert_eq!(sinusoidal.attention_scale(tupe_scale), 1.0 / 32f32.sqrt());
    let cooler = config(&TINY.replace(r#""max_len": 16,"#, r#""max_len": 16, "word_scale": "tupe","#));
    assert_eq!(cooler.word_scale, Some(WordScale::SqrtTwoDh));
    assert_eq!(cooler.attention_scale(None), 1.0 / 32f32.sqrt());
    let standard = config(&TINY.replace(r#""max_len": 16,"#, r#""max_len": 16, "word_scale": "standard","#));
    assert_eq!(standard.attention_scale(tupe_scale), 0.25);
    assert!(!serde_json::to_string(&sinusoidal).unwrap().contains("word_scale"));
}
