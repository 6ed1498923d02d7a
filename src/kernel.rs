//! The kernel vocabulary every layer shares: how a CPU reference sees its tensors ([`In`],
//! [`Out`]) and how an op describes GPU work ([`Dispatch`]: a WGSL entry point, its uniform, the
//! buffers it binds, its workgroups). A leaf: ops write it, backends read it, neither is needed
//! to read it.

use crate::shaders::Shader;
use crate::tensor::TensorMeta;

/// What runs the kernels, for the ops whose fastest kernel differs between the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdapterKind {
    /// A GPU (or an adapter that does not say): thousands of threads in flight, so many small
    /// workgroups that share tiles staged in workgroup memory.
    Gpu,
    /// A CPU running the shaders (lavapipe, SwiftShader, WARP): a few cores, each running eight
    /// invocations in the lanes of one SIMD register, where every lane's load from memory costs
    /// about as much as the whole register's arithmetic. Kernels there keep more of the data in
    /// each invocation's registers, and need far fewer invocations.
    Software,
}

impl AdapterKind {
    pub fn of(device_type: wgpu::DeviceType) -> Self {
        match device_type {
            wgpu::DeviceType::Cpu => Self::Software,
            _ => Self::Gpu,
        }
    }
}

/// How a row-wise op (layer norm, cross-entropy) spreads its rows: on GPUs a 64-thread workgroup
/// per row, its threads striding over the row and adding up through workgroup memory; on software
/// adapters one invocation per row (the entry point named with `_rows`), which loads each value
/// once and needs no barriers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKernels {
    WorkgroupPerRow,
    InvocationPerRow,
}

impl RowKernels {
    pub fn for_adapter(adapter: AdapterKind) -> Self {
        match adapter {
            AdapterKind::Gpu => Self::WorkgroupPerRow,
            AdapterKind::Software => Self::InvocationPerRow,
        }
    }

    /// The entry point: the workgroup-per-row one, or the invocation-per-row one.
    pub fn entry(self, per_workgroup: &'static str, per_invocation: &'static str) -> &'static str {
        match self {
            Self::WorkgroupPerRow => per_workgroup,
            Self::InvocationPerRow => per_invocation,
        }
    }

    /// The workgroups for `rows` rows (of 64-thread workgroups in both cases).
    pub fn grid(self, rows: usize) -> [u32; 3] {
        match self {
            Self::WorkgroupPerRow => grid(rows, 1),
            Self::InvocationPerRow => grid(rows, 64),
        }
    }
}

/// An input tensor as the CPU reference sees it.
pub struct In<'a> {
    pub meta: &'a TensorMeta,
    pub data: &'a [f32],
}

impl In<'_> {
    pub fn shape(&self) -> &[usize] {
        &self.meta.shape
    }

    /// Integer tensors (token ids, targets) share the 32-bit buffers of float tensors.
    pub fn ints(&self) -> &[i32] {
        bytemuck::cast_slice(self.data)
    }
}

/// An output tensor as the CPU reference sees it. Graph ops must write every element: buffers
/// are reused between tensors, so their previous contents are garbage.
pub struct Out<'a> {
    pub meta: &'a TensorMeta,
    pub data: &'a mut [f32],
}

impl Out<'_> {
    pub fn shape(&self) -> &[usize] {
        &self.meta.shape
    }
}

/// A buffer that a dispatch binds, in binding order after the parameter uniform (binding 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    /// The op's i-th input, bound `var<storage, read>`.
    In(usize),
    /// The op's i-th output, bound `var<storage, read_write>`.
    Out(usize),
    /// The op's i-th scratch buffer (see [`GpuKernels::scratch`]), bound `read_write`.
    Scratch(usize),
}

/// One compute dispatch: the GPU backend creates its pipeline, uniform and bind group once.
#[derive(Clone, Debug)]
pub struct Dispatch {
    pub shader: &'static Shader,
    pub entry: &'static str,
    /// Values for the entry's WGSL `override` constants, by name: one body written once, its
    /// variants (a tile size) chosen per pipeline. Each set is its own pipeline.
    pub constants: Vec<(&'static str, f64)>,
    /// The uniform at binding 0, as 32-bit words: the bytes of the entry's [`Uniform`].
    pub params: Vec<u32>,
    pub args: Vec<Arg>,
    pub workgroups: [u32; 3],
    /// Run again and again until the kernel says it is done; `None`: once.
    pub repeat: Option<Repeat>,
}

/// A dispatch repeated until its kernel writes a nonzero flag: for work whose length only the GPU
/// knows (an adaptive solve's attempts), so that time and memory follow the work done, not its
/// bound. A backend that can read the GPU between submissions (native) runs it in rounds of
/// growing size and stops at the flag; one that cannot (the web) runs all `max_runs`, each run
/// after the flag returning at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repeat {
    /// The most runs the work can need.
    pub max_runs: usize,
    /// The scratch buffer and word of the flag, written by the kernel after every run:
    /// [`REPEAT_GOING`], [`REPEAT_DONE`] or [`REPEAT_FULL`].
    pub flag: (usize, usize),
    /// The scratch buffer that [`REPEAT_FULL`] asks to double (contents kept) before the next run.
    pub grows: Option<usize>,
}

/// Flag values of a [`Repeat`]ed kernel.
pub const REPEAT_GOING: u32 = 0;
pub const REPEAT_DONE: u32 = 1;
pub const REPEAT_FULL: u32 = 2;

impl Dispatch {
    /// A dispatch of `entry` in the shader that declares `uniform`'s WGSL struct.
    pub fn new<U: Uniform>(entry: &'static str, uniform: &U, args: Vec<Arg>, workgroups: [u32; 3]) -> Self {
        Self {
            shader: U::SHADER,
            entry,
            constants: Vec::new(),
            params: bytemuck::cast_slice(std::slice::from_ref(uniform)).to_vec(),
            args,
            workgroups,
            repeat: None,
        }
    }

    /// This dispatch, run until its kernel's flag says done (see [`Repeat`]).
    pub fn repeated(self, repeat: Repeat) -> Self {
        Self {
            repeat: Some(repeat),
            ..self
        }
    }

    /// This dispatch with its entry's `override` constants set.
    pub fn with_constants(self, constants: Vec<(&'static str, f64)>) -> Self {
        Self { constants, ..self }
    }
}

/// What an op asks of the GPU: scratch buffers (lengths in 32-bit words) and its dispatches, run
/// in order.
#[derive(Clone, Debug, Default)]
pub struct GpuKernels {
    pub scratch: Vec<usize>,
    pub dispatches: Vec<Dispatch>,
}

impl GpuKernels {
    pub fn single(dispatch: Dispatch) -> Self {
        Self {
            scratch: Vec::new(),
            dispatches: vec![dispatch],
        }
    }
}

/// A kernel's uniform (binding 0): a `#[repr(C)]` struct that mirrors one WGSL struct member for
/// member. wgpu checks only a uniform's size, so `uniform!` records each member's name, Rust
/// type and offset, and a test reads every WGSL uniform through naga's reflection and compares.
pub trait Uniform: bytemuck::Pod {
    /// The shader that declares the struct.
    const SHADER: &'static Shader;
    /// The struct's name in that shader.
    const WGSL_NAME: &'static str;
    const MEMBERS: &'static [Member];
}

/// One member of a [`Uniform`], as the reflection test compares it with the WGSL struct's.
#[derive(Debug)]
pub struct Member {
    pub name: &'static str,
    pub offset: usize,
    /// The Rust type as written (`u32`, `f32`, `i32`, `[f32; 4]`, `[[u32; 4]; 2]`).
    pub rust_type: &'static str,
}

/// Declares a [`Uniform`]: `uniform! { struct Name = SHADER "WgslName" { field: u32, .. } }`.
macro_rules! uniform {
    ($(#[$meta:meta])* $vis:vis struct $name:ident = $shader:ident $wgsl:literal {
        $($field:ident : $ty:ty),* $(,)?
    }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
        $vis struct $name {
            $(pub $field: $ty),*
        }

        impl $crate::kernel::Uniform for $name {
            const SHADER: &'static $crate::shaders::Shader = &$crate::shaders::$shader;
            const WGSL_NAME: &'static str = $wgsl;
            const MEMBERS: &'static [$crate::kernel::Member] = &[$($crate::kernel::Member {
                name: stringify!($field),
                offset: ::core::mem::offset_of!($name, $field),
                rust_type: stringify!($ty),
            }),*];
        }
    };
}
pub(crate) use uniform;

/// Up to eight dimensions as the two vec4 words a uniform holds them in (`array<vec4<u32>, 2>`):
/// `values` from word `at` on, `fill` in the other words.
pub fn eight_words(values: &[usize], at: usize, fill: u32) -> [[u32; 4]; 2] {
    let mut words = [[fill; 4]; 2];
    for (i, &v) in (at..).zip(values) {
        words[i / 4][i % 4] = word(v);
    }
    words
}

/// A dimension as a uniform word. Graphs check sizes when they are built, so one that does not
/// fit is a bug in a shape rule.
pub fn word(value: usize) -> u32 {
    u32::try_from(value).expect("dimension fits in u32")
}

/// Workgroups to cover `threads` invocations in groups of `size`, spread over x and y because
/// one dimension holds at most 65535 groups. Kernels rebuild the linear index from
/// `@builtin(num_workgroups)`.
pub fn grid(threads: usize, size: usize) -> [u32; 3] {
    let groups = threads.div_ceil(size).max(1);
    let x = groups.min(65535);
    let y = groups.div_ceil(x);
    [x as u32, y as u32, 1]
}
