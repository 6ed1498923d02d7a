//! FLOATER's settings as a model config reads them.

use crate::model::{ModelConfig, PosEnc};
use crate::testing::{TINY_CONFIG, config_error};

#[test]
fn floater_reads_its_defaults_and_refuses_bad_settings() {
    let config = ModelConfig::from_json(
        &TINY_CONFIG.replace(r#"{ "type": "sinusoidal" }"#, r#"{ "type": "floater" }"#),
    )
    .unwrap();
    let PosEnc::Floater(floater) = config.posenc else {
        panic!("{:?}", config.posenc)
    };
    // The authors' form and solver: compatible form, Δ 0.01, rk4 at Δ/5, adjoint, ReLU.
    assert_eq!(floater.form, crate::model::FloaterForm::Bias);
    assert!(floater.delta == 0.01 && floater.substeps == 5 && floater.resolve_every == 1);
    assert_eq!(floater.method, crate::model::SolverMethod::Rk4);
    assert_eq!(floater.gradient, crate::model::GradientMethod::Adjoint);
    assert_eq!(floater.activation, crate::model::Nonlinearity::Relu);
    let err = config_error(r#""sinusoidal""#, r#""floater", "delta": -1"#);
    assert_eq!(
        err,
        "model config: posenc: FLOATER's delta must be positive, got -1"
    );
    let err = config_error(r#""sinusoidal""#, r#""floater", "method": "dopri5", "rtol": 0"#);
    assert!(err.contains("dopri5 needs rtol > 0"), "{err}");
}
