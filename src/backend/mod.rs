//! Backends execute what ops describe. A [`Program`] is a list of [`Step`]s with concrete
//! buffers; a backend compiles it once (pipelines, bind groups) and runs it many times.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, RwLock};

use crate::error::Result;
use crate::graph::Op;
use crate::tensor::TensorMeta;

pub mod cpu;
pub mod gpu;
pub mod profile;
mod select;

pub use cpu::CpuBackend;
pub use gpu::{GpuBackend, GpuView, Tuned, Tuning};
pub use select::{DeviceChoice, in_arithmetic, select_backend};
#[cfg(not(target_arch = "wasm32"))]
pub use select::{gpu_backend_for_tests, gpu_for_tests};

/// A device buffer of 32-bit words. Cloning shares the same memory.
#[derive(Clone, Debug)]
pub enum Buffer {
    Cpu(Arc<RwLock<Vec<f32>>>),
    /// A GPU buffer, or a part of one ([`Backend::alloc_packed`]).
    Gpu(GpuView),
}

impl Buffer {
    pub fn same(&self, other: &Buffer) -> bool {
        match (self, other) {
            (Buffer::Cpu(a), Buffer::Cpu(b)) => Arc::ptr_eq(a, b),
            (Buffer::Gpu(a), Buffer::Gpu(b)) => a.buffer == b.buffer && a.offset == b.offset,
            _ => false,
        }
    }

    /// Its length in 32-bit words.
    pub fn words(&self) -> usize {
        match self {
            Buffer::Cpu(data) => data.read().expect("buffer lock").len(),
            Buffer::Gpu(view) => (view.size / 4) as usize,
        }
    }

    /// The allocation this buffer is part of, and the word at which it starts there: a
    /// kernel that binds the allocation once reaches every buffer packed into it. A buffer
    /// allocated alone is its own allocation, at word 0.
    pub fn arena(&self) -> (Buffer, usize) {
        match self {
            Buffer::Cpu(_) => (self.clone(), 0),
            Buffer::Gpu(view) => (Buffer::Gpu(view.whole()), (view.offset / 4) as usize),
        }
    }
}

/// A tensor bound to a buffer for one step.
#[derive(Clone, Debug)]
pub struct Bound {
    pub name: String,
    pub meta: TensorMeta,
    pub buffer: Buffer,
}

/// One op with its buffers.
#[derive(Clone, Debug)]
pub struct Step {
    pub op: Rc<dyn Op>,
    pub inputs: Vec<Bound>,
    pub outputs: Vec<Bound>,
}

impl Step {
    /// What one execution of the step does, for the profile.
    pub fn work(&self) -> profile::Work {
        let inputs: Vec<&TensorMeta> = self.inputs.iter().map(|b| &b.meta).collect();
        let outputs: Vec<&TensorMeta> = self.outputs.iter().map(|b| &b.meta).collect();
        profile::Work::of(self.op.as_ref(), &inputs, &outputs)
    }
}

/// Steps run in order, as one submission on the GPU.
pub type Program = Vec<Step>;

/// A program ready to run again and again.
pub trait Compiled {
    fn run(&self) -> Result<()>;

    /// Kernel dispatches recorded per run on a GPU (a repeated kernel counts once); `None` on
    /// the CPU, which dispatches nothing.
    fn dispatches(&self) -> Option<usize>;

    /// The time per op kind so far, when the program was compiled with profiling on.
    fn profile(&self) -> Option<profile::Profile>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Cpu,
    Gpu,
}

/// A boxed future: readback is async because the web has no blocking poll.
pub type ReadFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<u32>>> + 'a>>;

pub trait Backend {
    fn kind(&self) -> BackendKind;

    /// What runs the work, e.g. "cpu (2 threads)" or the GPU adapter's name and API.
    fn describe(&self) -> String;

    /// What timing kernels on this adapter chose and cost so far, where the backend does
    /// (`Op::gpu_alternatives`; a GPU backend natively, unless `POSFLOW_TUNE=0`).
    fn tuning(&self) -> Option<Tuning> {
        None
    }

    /// A zeroed buffer of `words` 32-bit words. `label` names the tensor in errors.
    fn alloc(&self, words: usize, label: &str) -> Result<Buffer>;

    /// Zeroed buffers of these lengths (in words, each with its label), packed where the
    /// backend can bind part of an allocation: on a GPU they are views into as few allocations
    /// as its binding limit allows ([`Buffer::arena`]), so that one dispatch can update every
    /// parameter. Elsewhere each is allocated alone.
    fn alloc_packed(&self, parts: &[(usize, String)]) -> Result<Vec<Buffer>> {
        parts
            .iter()
            .map(|(words, label)| self.alloc(*words, label))
            .collect()
    }

    fn write(&self, buffer: &Buffer, words: &[u32]) -> Result<()>;

    fn read<'a>(&'a self, buffer: &'a Buffer) -> ReadFuture<'a>;

    fn compile(&self, program: &Program) -> Result<Box<dyn Compiled>>;
}

/// Blocks on a readback. Native only: the web awaits [`Backend::read`] instead.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_blocking(backend: &dyn Backend, buffer: &Buffer) -> Result<Vec<u32>> {
    pollster::block_on(backend.read(buffer))
}

pub fn f32_words(data: &[f32]) -> &[u32] {
    bytemuck::cast_slice(data)
}

pub fn words_f32(words: Vec<u32>) -> Vec<f32> {
    bytemuck::allocation::cast_vec(words)
}
