//! The WGSL sources, compiled into the binary. One module per kernel family in `shaders/`: one
//! file, or a first file continued by others (`"attention" + "attention_tiles"`), concatenated.

/// A WGSL file; its entry points are named by the ops' [`crate::ops::Dispatch`]es.
#[derive(Debug)]
pub struct Shader {
    pub name: &'static str,
    pub source: &'static str,
}

macro_rules! shaders {
    ($($ident:ident => $file:literal $(+ $part:literal)*),* $(,)?) => {
        $(pub static $ident: Shader = Shader {
            name: $file,
            source: concat!(
                include_str!(concat!("../shaders/", $file, ".wgsl"))
                $(, include_str!(concat!("../shaders/", $part, ".wgsl")))*
            ),
        };)*
        /// Every shader, for the validation test and for warming pipeline caches.
        pub static ALL: &[&Shader] = &[$(&$ident),*];
    };
}

shaders! {
    FILL => "fill",
    ELEMENTWISE => "elementwise",
    REDUCE => "reduce",
    SCALE => "scale",
    ADAM => "adam",
    UNARY => "unary" + "gelu",
    SOFTMAX => "softmax",
    LAYERNORM => "layernorm",
    SHAPE => "shape",
    EMBEDDING => "embedding",
    CROSS_ENTROPY => "cross_entropy",
    MATMUL => "matmul" + "gelu",
    ATTENTION => "attention" + "attention_tiles" + "attention_rows" + "hash",
    DROPOUT => "dropout" + "hash",
    RK_STAGE => "rk_stage",
    ODE_FLOW => "ode_flow" + "ode_flow_groups" + "ode_flow_rows",
    ODE_DOPRI5 => "ode_dopri5",
    ROPE => "rope",
}

/// Parses and validates a shader with naga, the front end wgpu uses, its `override` constants
/// unset, as wgpu sees it when it creates the shader module.
#[cfg(test)]
fn validate(shader: &Shader) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(shader.source)
        .map_err(|e| format!("{}.wgsl: {}", shader.name, e.emit_to_string(shader.source)))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| format!("{}.wgsl: {e:?}", shader.name))?;
    Ok((module, info))
}

/// Validates one entry point as wgpu builds its pipeline: only that entry kept, its `override`
/// constants replaced by these values, the module validated again (naga's `process_overrides`,
/// which wgpu's native backends call; they enable the naga output feature that compiles it in).
/// Every override the entry reaches needs a value, and every value an override.
#[cfg(test)]
pub(crate) fn validate_variant(
    shader: &Shader,
    entry: &str,
    constants: &[(&str, f64)],
) -> Result<(), String> {
    let (module, info) = validate(shader)?;
    if !module.entry_points.iter().any(|e| e.name == entry) {
        return Err(format!("{}.wgsl has no entry point `{entry}`", shader.name));
    }
    let values: naga::back::PipelineConstants = constants
        .iter()
        .map(|&(name, value)| (name.to_string(), value))
        .collect();
    naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, entry)),
        &values,
    )
    .map(|_| ())
    .map_err(|e| format!("{}.wgsl `{entry}` with {constants:?}: {e:?}", shader.name))
}

#[cfg(test)]
mod tests {
    use super::{ALL, validate};

    /// Every shader parses and validates with naga. Shaders with `override` constants validate
    /// here as written; each op checks the variants it builds with [`super::validate_variant`].
    #[test]
    fn every_shader_parses_and_validates() {
        for shader in ALL {
            let (module, _) = validate(shader).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                !module.entry_points.is_empty(),
                "{}.wgsl has no entry point",
                shader.name
            );
        }
    }

    /// No shader spells an infinite or NaN f32 as a constant (`bitcast<f32>` of an all-ones
    /// exponent): naga accepts one, but Chrome's WGSL compiler refuses the module ("value nan
    /// cannot be represented as 'f32'"), which only the browser test would see.
    #[test]
    fn no_shader_spells_a_non_finite_constant() {
        for shader in ALL {
            // Code only: attention.wgsl's comments quote the constant they avoid.
            let code: String = shader
                .source
                .lines()
                .map(|line| line.split("//").next().unwrap_or(""))
                .collect();
            let source = code.to_ascii_lowercase().replace(' ', "");
            for (at, _) in source.match_indices("bitcast<f32>(0x") {
                let digits: String = source[at + "bitcast<f32>(0x".len()..]
                    .chars()
                    .take_while(char::is_ascii_hexdigit)
                    .collect();
                let bits = u32::from_str_radix(&digits, 16).unwrap_or(0);
                assert!(
                    bits & 0x7f80_0000 != 0x7f80_0000,
                    "{}.wgsl: bitcast<f32>(0x{digits}) is not finite",
                    shader.name
                );
            }
        }
    }
}
