//! The commands of the `posflow` binary that work with models (the engine demos live in main.rs),
//! and the checks their flags share: every number a flag takes is range-checked by the parser, so
//! a flag at 0 (or NaN, or 10¹²) is a usage error, never a panic deep inside.

pub mod forward;
pub mod inspect;
pub mod prepare;
pub mod results;
pub mod study;
pub mod train;
pub mod translate;
#[cfg(feature = "viz")]
pub mod viz;

/// A count that must be at least 1.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The CPU backend's arithmetic, by its name in a run config.
pub fn arithmetic(s: &str) -> Result<posflow::arithmetic::Arithmetic, String> {
    use posflow::arithmetic::Arithmetic;
    match s {
        "native" => Ok(Arithmetic::Native),
        "portable" => Ok(Arithmetic::Portable),
        other => Err(format!(
            "unknown arithmetic `{other}`: expected native or portable"
        )),
    }
}

/// A sequence length posflow can build a graph for.
pub fn sequence_length(s: &str) -> Result<usize, String> {
    let max = posflow::train::MAX_SEQUENCE;
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is out of range: use 1 to {max}")),
        Err(e) => Err(e.to_string()),
    }
}

/// A finite number ≥ 0 (a temperature).
pub fn non_negative(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        Ok(x) => Err(format!("must be finite and not negative, got {x}")),
        Err(e) => Err(e.to_string()),
    }
}

/// A finite number > 0 (a learning rate).
pub fn positive(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(x) => Err(format!("must be finite and positive, got {x}")),
        Err(e) => Err(e.to_string()),
    }
}
