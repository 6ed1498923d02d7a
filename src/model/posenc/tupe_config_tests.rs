//! TUPE's settings as a model config reads them.

use super::*;
use crate::model::{ModelConfig, PosEnc};
use crate::testing::{TINY_CONFIG, config_error};

#[test]
fn tupe_reads_both_variants_and_unties_cls_only_in_an_encoder() {
    let with = |posenc: &str, kind: &str| {
        TINY_CONFIG
            .replace(r#"{ "type": "sinusoidal" }"#, posenc)
            .replace(r#"{ "type": "causal_lm" }"#, kind)
    };
    let encoder = r#"{ "type": "encoder", "n_classes": 2 }"#;
    let config =
        ModelConfig::from_json(&with(r#"{ "type": "tupe_a", "untie_cls": true }"#, encoder)).unwrap();
    assert_eq!(
        config.posenc,
        PosEnc::TupeA(TupeA {
            untie_cls: true,
            form: TupeForm::Paper
        })
    );
    let config =
        ModelConfig::from_json(&with(r#"{ "type": "tupe_r", "untie_cls": true }"#, encoder)).unwrap();
    assert_eq!(
        config.posenc,
        PosEnc::TupeR(TupeR {
            untie_cls: true,
            buckets: 32,
            max_distance: 128,
            form: TupeForm::Paper
        })
    );
    let lm = r#"{ "type": "causal_lm" }"#;
    let config = ModelConfig::from_json(&with(r#"{ "type": "tupe_a", "untie_cls": false }"#, lm)).unwrap();
    assert_eq!(
        config.posenc,
        PosEnc::TupeA(TupeA {
            untie_cls: false,
            form: TupeForm::Paper
        })
    );
    let err = ModelConfig::from_json(&with(r#"{ "type": "tupe_r", "untie_cls": true }"#, lm))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "untie_cls resets the positional term of [CLS] (position 0), which only an encoder (a classifier or a masked LM) has"
        ),
        "{err}"
    );
    let err = ModelConfig::from_json(&with(r#"{ "type": "tupe_a" }"#, lm))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing field `untie_cls`"), "{err}");
    let err = ModelConfig::from_json(&with(
        r#"{ "type": "tupe_r", "untie_cls": false, "buckets": 32, "max_distance": 8 }"#,
        lm,
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("max_distance > buckets / 2 = 16, got 8"), "{err}");
    let err = ModelConfig::from_json(&with(
        r#"{ "type": "tupe_a", "untie_cls": false, "buckets": 8 }"#,
        lm,
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("unknown field `buckets`"), "{err}");
}

#[test]
fn tupe_reads_its_form_and_refuses_floater_s() {
    let encoder = |posenc: &str| {
        TINY_CONFIG
            .replace(r#"{ "type": "sinusoidal" }"#, posenc)
            .replace(r#"{ "type": "causal_lm" }"#, r#"{ "type": "masked_lm" }"#)
    };
    let config = ModelConfig::from_json(&encoder(
        r#"{ "type": "tupe_r", "untie_cls": true, "form": "code" }"#,
    ))
    .unwrap();
    assert_eq!(
        config.posenc,
        PosEnc::TupeR(TupeR {
            untie_cls: true,
            buckets: 32,
            max_distance: 128,
            form: TupeForm::Code
        })
    );
    // The paper's form is the default, and is left out of a saved config (older readers).
    let paper = ModelConfig::from_json(&encoder(
        r#"{ "type": "tupe_a", "untie_cls": true, "form": "paper" }"#,
    ))
    .unwrap();
    assert_eq!(
        paper.posenc,
        PosEnc::TupeA(TupeA {
            untie_cls: true,
            form: TupeForm::Paper
        })
    );
    assert!(!serde_json::to_string(&paper).unwrap().contains("form"));
    assert!(
        serde_json::to_string(&config)
            .unwrap()
            .contains(r#""form":"code""#)
    );
    let err = ModelConfig::from_json(&encoder(
        r#"{ "type": "tupe_a", "untie_cls": true, "form": "bias" }"#,
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("tupe_a: `form`: unknown variant `bias`, expected `paper` or `code`"),
        "{err}"
    );
    let err = config_error(
        r#"{ "type": "sinusoidal" }"#,
        r#"{ "type": "floater", "form": "code" }"#,
    );
    assert!(
        err.contains("floater: `form`: unknown variant `code`, expected `additive` or `bias`"),
        "{err}"
    );
    let err = config_error(
        r#"{ "type": "sinusoidal" }"#,
        r#"{ "type": "learned", "form": "code" }"#,
    );
    assert!(err.contains("unknown field `form`, there are no fields"), "{err}");
}
