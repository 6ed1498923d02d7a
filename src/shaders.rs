//! The WGSL sources, compiled into the binary. One module per kernel family in `shaders/`: one
//! file, or a first file continued by others (`"attention" + "attention_tiles"`), concatenated.

/// A WGSL file; its entry points are named by the ops' [`crate::ops::Dispatch`]es.
#[derive(Debug)]
pub struct Shader {
    pub name: &'static str,
    pub source: &'static str,
    /// The same module built on subgroup operations, for devices with wgpu's `SUBGROUP` feature:
    /// its workgroup sums and maxima come from `group_subgroups.wgsl` instead of
    /// `group_tree.wgsl` (same functions, same entry points and bindings).
    pub with_subgroups: Option<&'static str>,
}

impl Shader {
    /// The source a device builds: the subgroup one where it has subgroups and there is one.
    pub fn source_for(&self, subgroups: bool) -> &'static str {
        match self.with_subgroups {
            Some(source) if subgroups => source,
            _ => self.source,
        }
    }
}

macro_rules! shaders {
    ($($ident:ident => $file:literal $(+ $part:literal)* $(; $groups:ident)?),* $(,)?) => {
        $(pub static $ident: Shader = shaders!(@one $file $(+ $part)* ; $($groups)?);)*
        /// Every shader, for the validation test and for warming pipeline caches.
        pub static ALL: &[&Shader] = &[$(&$ident),*];
    };
    (@one $file:literal $(+ $part:literal)* ; ) => {
        Shader {
            name: $file,
            source: concat!(
                include_str!(concat!("../shaders/", $file, ".wgsl"))
                $(, include_str!(concat!("../shaders/", $part, ".wgsl")))*
            ),
            with_subgroups: None,
        }
    };
    // A module whose kernels reduce across a workgroup: built once with each way of doing it.
    (@one $file:literal $(+ $part:literal)* ; group_reductions) => {
        Shader {
            name: $file,
            source: concat!(
                include_str!(concat!("../shaders/", $file, ".wgsl"))
                $(, include_str!(concat!("../shaders/", $part, ".wgsl")))*,
                include_str!("../shaders/group_tree.wgsl"),
                include_str!("../shaders/group.wgsl")
            ),
            with_subgroups: Some(concat!(
                include_str!(concat!("../shaders/", $file, ".wgsl"))
                $(, include_str!(concat!("../shaders/", $part, ".wgsl")))*,
                include_str!("../shaders/group_subgroups.wgsl"),
                include_str!("../shaders/group.wgsl")
            )),
        }
    };
}

shaders! {
    FILL => "fill",
    ELEMENTWISE => "elementwise",
    REDUCE => "reduce"; group_reductions,
    SCALE => "scale",
    ADAM => "adam"; group_reductions,
    UNARY => "unary" + "gelu",
    SOFTMAX => "softmax"; group_reductions,
    LAYERNORM => "layernorm"; group_reductions,
    SHAPE => "shape",
    EMBEDDING => "embedding",
    CROSS_ENTROPY => "cross_entropy"; group_reductions,
    MATMUL => "matmul" + "gelu",
    ATTENTION => "attention" + "attention_tiles" + "attention_rows" + "hash",
    DROPOUT => "dropout" + "hash",
    RK_STAGE => "rk_stage"; group_reductions,
    ODE_FLOW => "ode_flow" + "ode_flow_groups" + "ode_flow_rows"; group_reductions,
    ODE_DOPRI5 => "ode_dopri5" + "ode_dopri5_backward",
    ROPE => "rope",
}

/// Parses and validates a shader with naga, the front end wgpu uses, its `override` constants
/// unset, as wgpu sees it when it creates the shader module: the plain source without subgroup
/// capabilities (as on the web), the subgroup source with them.
#[cfg(test)]
fn validate(shader: &Shader) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    validate_source(shader.name, shader.source, false)
}

#[cfg(test)]
fn validate_source(
    name: &str,
    source: &str,
    subgroups: bool,
) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("{name}.wgsl: {}", e.emit_to_string(source)))?;
    let mut capabilities = naga::valid::Capabilities::all();
    if !subgroups {
        capabilities -= naga::valid::Capabilities::SUBGROUP
            | naga::valid::Capabilities::SUBGROUP_BARRIER
            | naga::valid::Capabilities::SUBGROUP_VERTEX_STAGE;
    }
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities)
        .validate(&module)
        .map_err(|e| format!("{name}.wgsl (subgroups {subgroups}): {e:?}"))?;
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
    use super::{ALL, validate, validate_source};

    /// Every shader parses and validates with naga, and so does every subgroup twin, with the
    /// same entry points. Shaders with `override` constants validate here as written; each op
    /// checks the variants it builds with [`super::validate_variant`].
    #[test]
    fn every_shader_parses_and_validates() {
        for shader in ALL {
            let (module, _) = validate(shader).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                !module.entry_points.is_empty(),
                "{}.wgsl has no entry point",
                shader.name
            );
            if let Some(source) = shader.with_subgroups {
                let (twin, _) = validate_source(shader.name, source, true).unwrap_or_else(|e| panic!("{e}"));
                let names =
                    |m: &naga::Module| m.entry_points.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
                assert_eq!(
                    names(&twin),
                    names(&module),
                    "{}.wgsl's subgroup twin",
                    shader.name
                );
            }
        }
    }

    /// The subgroup twins need the capability: they do use subgroup operations.
    #[test]
    fn subgroup_twins_need_subgroups() {
        let twins: Vec<_> = ALL
            .iter()
            .filter_map(|s| s.with_subgroups.map(|t| (s.name, t)))
            .collect();
        assert_eq!(twins.len(), 7);
        for (name, source) in twins {
            assert!(
                validate_source(name, source, false).is_err(),
                "{name}.wgsl's twin"
            );
        }
    }

    /// No shader spells an infinite or NaN f32 as a constant (`bitcast<f32>` of an all-ones
    /// exponent): naga accepts one, but Chrome's WGSL compiler refuses the module ("value nan
    /// cannot be represented as 'f32'"), which only the browser test would see.
    #[test]
    fn no_shader_spells_a_non_finite_constant() {
        for (shader, source) in ALL.iter().flat_map(|s| {
            std::iter::once(s.source)
                .chain(s.with_subgroups)
                .map(move |t| (s, t))
        }) {
            // Code only: attention.wgsl's comments quote the constant they avoid.
            let code: String = source
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
