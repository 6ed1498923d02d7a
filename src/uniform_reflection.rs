//! Every kernel uniform checked against its WGSL struct through naga's reflection: the same
//! members, in the same order, at the same offsets, of the same types. wgpu checks only a
//! uniform's size, so a swapped pair of `u32`s would otherwise run and compute the wrong thing.

use std::collections::BTreeMap;

use naga::{ArraySize, Module, ScalarKind, TypeInner};

use crate::kernel::{Member, Uniform};
use crate::shaders::{ALL, Shader};
use crate::{ops, optim};

/// One Rust uniform as the test sees it.
struct Layout {
    shader: &'static Shader,
    wgsl_name: &'static str,
    rust_name: &'static str,
    size: usize,
    members: &'static [Member],
}

impl Layout {
    fn of<U: Uniform>() -> Self {
        Self {
            shader: U::SHADER,
            wgsl_name: U::WGSL_NAME,
            rust_name: std::any::type_name::<U>(),
            size: std::mem::size_of::<U>(),
            members: U::MEMBERS,
        }
    }
}

/// Every uniform posflow dispatches.
fn layouts() -> Vec<Layout> {
    vec![
        Layout::of::<ops::fill::FillUniform>(),
        Layout::of::<optim::update::SumSquaresUniform>(),
        Layout::of::<optim::update::ClipUniform>(),
        Layout::of::<optim::update::AdamUniform>(),
        Layout::of::<ops::reduce::AxisUniform>(),
        Layout::of::<ops::embedding::LookupUniform>(),
        Layout::of::<ops::embedding::ScatterUniform>(),
        Layout::of::<ops::attention::AttnUniform>(),
        Layout::of::<ops::layernorm::NormUniform>(),
        Layout::of::<ops::cross_entropy::CrossEntropyUniform>(),
        Layout::of::<ops::softmax::SoftmaxUniform>(),
        Layout::of::<ops::dropout::DropoutUniform>(),
        Layout::of::<ops::elementwise::BroadcastUniform>(),
        Layout::of::<ops::elementwise::ScaleUniform>(),
        Layout::of::<ops::rk_stage::RkStageUniform>(),
        Layout::of::<ops::shape::CopyRowsUniform>(),
        Layout::of::<ops::shape::PadUniform>(),
        Layout::of::<ops::shape::GatherUniform>(),
        Layout::of::<ops::heads::HeadsUniform>(),
        Layout::of::<ops::unary::UnaryUniform>(),
        Layout::of::<ops::matmul::MatMulUniform>(),
        Layout::of::<ops::ode_flow::FlowUniform>(),
        Layout::of::<ops::ode_flow::Dopri5Uniform>(),
        Layout::of::<ops::rope::RopeUniform>(),
    ]
}

fn parse(shader: &Shader) -> Module {
    naga::front::wgsl::parse_str(shader.source)
        .unwrap_or_else(|e| panic!("{}.wgsl: {}", shader.name, e.emit_to_string(shader.source)))
}

fn scalar_name(kind: ScalarKind) -> &'static str {
    match kind {
        ScalarKind::Uint => "u32",
        ScalarKind::Sint => "i32",
        ScalarKind::Float => "f32",
        _ => "?",
    }
}

/// A WGSL type as written: `u32`, `vec4<f32>`, `array<vec4<u32>, 2>`.
fn wgsl_type(module: &Module, ty: naga::Handle<naga::Type>) -> String {
    match &module.types[ty].inner {
        TypeInner::Scalar(s) => scalar_name(s.kind).to_string(),
        TypeInner::Vector { size, scalar } => format!("vec{}<{}>", *size as u8, scalar_name(scalar.kind)),
        TypeInner::Array {
            base,
            size: ArraySize::Constant(n),
            ..
        } => format!("array<{}, {n}>", wgsl_type(module, *base)),
        other => format!("{other:?}"),
    }
}

/// The WGSL type a Rust member type mirrors: `[T; 2..=4]` of a scalar is a vector, an array of
/// vectors is an array (uniform arrays need 16-byte strides, so arrays of scalars never occur).
fn rust_as_wgsl(rust: &str) -> String {
    let Some(inner) = rust.strip_prefix('[').and_then(|r| r.strip_suffix(']')) else {
        return rust.to_string();
    };
    let (element, count) = inner.rsplit_once(';').expect("an array type has a length");
    let (element, count) = (element.trim(), count.trim());
    if element.starts_with('[') {
        format!("array<{}, {count}>", rust_as_wgsl(element))
    } else {
        format!("vec{count}<{element}>")
    }
}

/// Compares one Rust uniform with the WGSL struct of the same name; the error names the first
/// member that differs.
fn check(layout: &Layout, module: &Module, ty: naga::Handle<naga::Type>) -> Result<(), String> {
    let TypeInner::Struct { members, span } = &module.types[ty].inner else {
        return Err(format!("{} is not a struct", layout.wgsl_name));
    };
    let where_ = format!(
        "{}.wgsl `{}` vs {}",
        layout.shader.name, layout.wgsl_name, layout.rust_name
    );
    if members.len() != layout.members.len() {
        return Err(format!(
            "{where_}: {} WGSL members, {} Rust fields",
            members.len(),
            layout.members.len()
        ));
    }
    for (i, (w, r)) in members.iter().zip(layout.members).enumerate() {
        let w_name = w.name.as_deref().unwrap_or("?");
        let w_type = wgsl_type(module, w.ty);
        let r_type = rust_as_wgsl(r.rust_type);
        if w_name != r.name || w.offset as usize != r.offset || w_type != r_type {
            return Err(format!(
                "{where_}: member {i} is `{w_name}: {w_type}` at byte {} in WGSL but `{}: {}` at byte {} in Rust",
                w.offset, r.name, r.rust_type, r.offset
            ));
        }
    }
    // The backend pads every uniform buffer to a multiple of 16 bytes.
    if layout.size.div_ceil(16) != (*span as usize).div_ceil(16) {
        return Err(format!("{where_}: {span} bytes in WGSL, {} in Rust", layout.size));
    }
    Ok(())
}

/// The uniform structs each shader binds: struct name → type.
fn uniform_structs(module: &Module) -> BTreeMap<String, naga::Handle<naga::Type>> {
    module
        .global_variables
        .iter()
        .filter(|(_, v)| v.space == naga::AddressSpace::Uniform)
        .map(|(_, v)| {
            let name = module.types[v.ty]
                .name
                .clone()
                .expect("uniform structs are named");
            (name, v.ty)
        })
        .collect()
}

#[test]
fn every_uniform_matches_its_wgsl_struct() {
    let layouts = layouts();
    let mut matched = vec![false; layouts.len()];
    for shader in ALL {
        let module = parse(shader);
        for (name, ty) in uniform_structs(&module) {
            let found: Vec<usize> = (0..layouts.len())
                .filter(|&i| std::ptr::eq(layouts[i].shader, *shader) && layouts[i].wgsl_name == name)
                .collect();
            assert!(
                !found.is_empty(),
                "{}.wgsl binds uniform `{name}`, which no Rust uniform! declares",
                shader.name
            );
            for i in found {
                check(&layouts[i], &module, ty).unwrap_or_else(|e| panic!("{e}"));
                matched[i] = true;
            }
        }
    }
    for (layout, matched) in layouts.iter().zip(matched) {
        assert!(
            matched,
            "{} names `{}` in {}.wgsl, which binds no uniform of that name",
            layout.rust_name, layout.wgsl_name, layout.shader.name
        );
    }
}

crate::kernel::uniform! {
    /// softmax.wgsl's `Rows { rows, len }` with its two members swapped.
    struct SwappedRows = SOFTMAX "Rows" { len: u32, rows: u32 }
}

crate::kernel::uniform! {
    /// attention.wgsl's `Attn` with `scale` declared as a u32.
    struct MistypedAttn = ATTENTION "Attn" {
        batch: u32, heads: u32, q_len: u32, k_len: u32, dh: u32, scale: u32,
        causal: u32, bias_kind: u32, has_mask: u32, buckets: u32, pair_buckets: u32, drop_threshold: u32,
        drop_scale: f32, drop_salt: u32,
    }
}

/// The check fails, naming the member, when two members are swapped or one changes type.
#[test]
fn a_swapped_or_mistyped_member_is_caught() {
    for (layout, shader, expected) in [
        (
            Layout::of::<SwappedRows>(),
            &crate::shaders::SOFTMAX,
            "member 0 is `rows: u32` at byte 0 in WGSL but `len: u32` at byte 0",
        ),
        (
            Layout::of::<MistypedAttn>(),
            &crate::shaders::ATTENTION,
            "member 5 is `scale: f32` at byte 20 in WGSL but `scale: u32` at byte 20",
        ),
    ] {
        let module = parse(shader);
        let ty = uniform_structs(&module)[layout.wgsl_name];
        let error = check(&layout, &module, ty).expect_err("a wrong layout must fail");
        assert!(error.contains(expected), "{error}");
    }
}
