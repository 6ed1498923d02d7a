//! The WGSL sources, compiled into the binary. One file per kernel family in `shaders/`.

/// A WGSL file; its entry points are named by the ops' [`crate::ops::Dispatch`]es.
#[derive(Debug)]
pub struct Shader {
    pub name: &'static str,
    pub source: &'static str,
}

macro_rules! shaders {
    ($($ident:ident => $file:literal),* $(,)?) => {
        $(pub static $ident: Shader = Shader { name: $file, source: include_str!(concat!("../shaders/", $file, ".wgsl")) };)*
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
    UNARY => "unary",
    SOFTMAX => "softmax",
    LAYERNORM => "layernorm",
    SHAPE => "shape",
    EMBEDDING => "embedding",
    CROSS_ENTROPY => "cross_entropy",
    MATMUL => "matmul",
    ATTENTION => "attention",
    DROPOUT => "dropout",
    RK_STAGE => "rk_stage",
    ODE_FLOW => "ode_flow",
    ODE_DOPRI5 => "ode_dopri5",
}

#[cfg(test)]
mod tests {
    use super::ALL;

    /// Every shader parses and validates with naga, the same front end wgpu uses.
    #[test]
    fn every_shader_parses_and_validates() {
        for shader in ALL {
            let module = naga::front::wgsl::parse_str(shader.source)
                .unwrap_or_else(|e| panic!("{}.wgsl: {}", shader.name, e.emit_to_string(shader.source)));
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}.wgsl: {e:?}", shader.name));
            assert!(
                !module.entry_points.is_empty(),
                "{}.wgsl has no entry point",
                shader.name
            );
        }
    }
}
