//! The kernel vocabulary every layer shares: how a CPU reference sees its tensors ([`In`],
//! [`Out`]) and how an op describes GPU work ([`Dispatch`]: a WGSL entry point, its uniform, the
//! buffers it binds, its workgroups). A leaf: ops write it, backends read it, neither is needed
//! to read it.

use crate::shaders::Shader;
use crate::tensor::TensorMeta;

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
    /// The uniform at binding 0, as 32-bit words (floats by `to_bits`).
    pub params: Vec<u32>,
    pub args: Vec<Arg>,
    pub workgroups: [u32; 3],
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

/// Parameters for a dispatch's uniform, built word by word in the order the WGSL struct declares.
#[derive(Default)]
pub struct Params(Vec<u32>);

impl Params {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn u(mut self, value: usize) -> Self {
        self.0.push(u32::try_from(value).expect("dimension fits in u32"));
        self
    }

    pub fn f(mut self, value: f32) -> Self {
        self.0.push(value.to_bits());
        self
    }

    pub fn words(self) -> Vec<u32> {
        self.0
    }
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
