//! The wgpu backend: buffers on the device, a pipeline cache, and programs recorded into one
//! command encoder per run, so a whole training step is a single submission.

use std::sync::{Arc, Mutex};

use super::{Backend, BackendKind, Buffer, Compiled, Program, ReadFuture};
use crate::error::{Error, Result};
use crate::kernel::AdapterKind;

mod adapter;
mod pipelines;
mod program;
#[cfg(not(target_arch = "wasm32"))]
mod timestamps;
mod tuner;

pub use adapter::SoftwareAdapters;
#[cfg(not(target_arch = "wasm32"))]
pub use adapter::{for_rendering, list as list_adapters};
pub use tuner::{Tuned, Tuning};

pub struct GpuBackend {
    info: wgpu::AdapterInfo,
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipelines: pipelines::PipelineCache,
    /// The first error wgpu reported outside an error scope; checked after each call.
    error: Arc<Mutex<Option<String>>>,
    /// Programs compiled now time their dispatches per op kind (`POSFLOW_PROFILE=1`; native).
    profile: bool,
    /// Which kernels the ops choose: the adapter's kind, unless a test asks for the other's.
    kernels_for: AdapterKind,
    /// Whether modules are built on subgroup operations (`Shader::with_subgroups`): where the
    /// device has them, unless `POSFLOW_SUBGROUPS=0` or a test says otherwise.
    subgroups: bool,
    /// Times an op's same-bits kernels on this adapter and keeps the fastest (`tuner.rs`).
    tuner: tuner::Tuner,
}

impl GpuBackend {
    pub async fn new(software: SoftwareAdapters) -> Result<Self> {
        let tuning = tuner::requested()?;
        let adapter = adapter::pick(software).await?;
        let (device, queue) = adapter::open(&adapter).await?;
        let error = Arc::new(Mutex::new(None));
        let sink = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.lock()
                .expect("error lock")
                .get_or_insert_with(|| e.to_string());
        }));
        let info = adapter.get_info();
        let subgroups = device.features().contains(wgpu::Features::SUBGROUP) && subgroups_allowed();
        let kernels_for = AdapterKind::of(info.device_type);
        let tuner = tuner::Tuner::with(tuning.unwrap_or(kernels_for == AdapterKind::Gpu));
        Ok(Self {
            kernels_for,
            tuner,
            subgroups,
            info,
            device,
            queue,
            pipelines: Default::default(),
            error,
            profile: cfg!(not(target_arch = "wasm32")) && super::profile::requested(),
        })
    }

    /// Profiling on or off for the programs compiled from now on, whatever `POSFLOW_PROFILE`
    /// says (natively; the web has no blocking readback to read timestamps with).
    pub fn with_profiling(mut self, on: bool) -> Self {
        self.profile = cfg!(not(target_arch = "wasm32")) && on;
        self
    }

    /// Another backend on the same device and queue, with pipelines and a tuner of its own: for
    /// threads that each need a backend of one process's single device (a device per test thread
    /// exhausted an H100's driver after a few hundred). Errors wgpu reports outside a call's
    /// checks go to one slot that every backend of the device reads.
    pub fn share(&self) -> Self {
        Self {
            info: self.info.clone(),
            device: self.device.clone(),
            queue: self.queue.clone(),
            pipelines: Default::default(),
            error: self.error.clone(),
            profile: self.profile,
            kernels_for: self.kernels_for,
            subgroups: self.subgroups,
            tuner: tuner::Tuner::with(self.tuner.is_on()),
        }
    }

    /// Programs compiled from now on time each op's same-bits kernels and run the fastest, or
    /// run the op's own choice, whatever `POSFLOW_TUNE` says (natively; never on the web).
    pub fn with_tuning(mut self, on: bool) -> Self {
        self.tuner = tuner::Tuner::with(on);
        self
    }

    /// Programs compiled from now on use the kernels chosen for adapters of this kind, whatever
    /// this adapter is: so that a software adapter (CI's) tests the GPUs' kernels too.
    pub fn with_kernels_for(mut self, kind: AdapterKind) -> Self {
        self.kernels_for = kind;
        self
    }

    /// Programs compiled from now on build their modules on subgroup operations, or not, where the
    /// device has them (it never pretends to have them): so that tests run both ways.
    pub fn with_subgroups(mut self, on: bool) -> Self {
        self.subgroups = on && self.device.features().contains(wgpu::Features::SUBGROUP);
        self
    }

    /// Whether modules are built on subgroup operations.
    pub fn uses_subgroups(&self) -> bool {
        self.subgroups
    }

    /// Whether the device can time dispatches with timestamp queries.
    pub fn has_timestamps(&self) -> bool {
        self.device.features().contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Turns an error wgpu reported since the last check into an [`Error::Gpu`].
    fn check_errors(&self) -> Result<()> {
        match self.error.lock().expect("error lock").take() {
            Some(e) => Err(Error::Gpu(e)),
            None => Ok(()),
        }
    }
}

/// `POSFLOW_SUBGROUPS=0` keeps subgroup operations out of the kernels, to measure what they gain.
fn subgroups_allowed() -> bool {
    cfg!(not(target_arch = "wasm32")) && std::env::var("POSFLOW_SUBGROUPS").as_deref() != Ok("0")
}

/// A GPU buffer or a part of one: `size` bytes from byte `offset`.
#[derive(Clone, Debug)]
pub struct GpuView {
    pub buffer: wgpu::Buffer,
    pub offset: u64,
    pub size: u64,
}

impl GpuView {
    pub(super) fn entire(buffer: wgpu::Buffer) -> Self {
        let size = buffer.size();
        Self {
            buffer,
            offset: 0,
            size,
        }
    }

    /// The whole allocation this view is part of.
    pub fn whole(&self) -> Self {
        Self::entire(self.buffer.clone())
    }

    pub(super) fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: wgpu::BufferSize::new(self.size),
        })
    }
}

/// Where [`pack`] puts a part: which arena, and the byte it starts at there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    arena: usize,
    offset: u64,
}

/// Parts of these byte lengths (each at most `limit`) laid out in order, each at a multiple of
/// `align` (a view's offset must be: 256 bytes on most adapters), a new arena begun whenever
/// the next part would pass `limit`: each part's place, and each arena's length in bytes.
fn pack(bytes: &[u64], align: u64, limit: u64) -> (Vec<Place>, Vec<u64>) {
    let mut places = Vec::with_capacity(bytes.len());
    let mut sizes: Vec<u64> = Vec::new();
    for &b in bytes {
        let next = sizes.last().map(|used| used.next_multiple_of(align));
        let place = match next {
            Some(offset) if offset + b <= limit => Place {
                arena: sizes.len() - 1,
                offset,
            },
            _ => {
                sizes.push(0);
                Place {
                    arena: sizes.len() - 1,
                    offset: 0,
                }
            }
        };
        sizes[place.arena] = place.offset + b;
        places.push(place);
    }
    (places, sizes)
}

pub(super) fn gpu_view(buffer: &Buffer) -> &GpuView {
    match buffer {
        Buffer::Gpu(view) => view,
        Buffer::Cpu(_) => panic!("a CPU buffer was given to the GPU backend"),
    }
}

impl Backend for GpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Gpu
    }

    fn describe(&self) -> String {
        let reductions = if self.subgroups { ", subgroups" } else { "" };
        let tuning = if self.tuner.is_on() { ", kernels tuned" } else { "" };
        format!("{}{reductions}{tuning}", adapter::describe(&self.info))
    }

    fn tuning(&self) -> Option<Tuning> {
        self.tuner.is_on().then(|| self.tuner.done())
    }

    fn alloc(&self, words: usize, label: &str) -> Result<Buffer> {
        let bytes = (words.max(1) * 4) as u64;
        let limit = self.device.limits().max_storage_buffer_binding_size;
        if bytes > limit {
            return Err(Error::BindingTooLarge {
                tensor: label.to_string(),
                bytes,
                limit,
            });
        }
        Ok(Buffer::Gpu(GpuView::entire(self.create(bytes, label)?)))
    }

    fn alloc_packed(&self, parts: &[(usize, String)]) -> Result<Vec<Buffer>> {
        let limits = self.device.limits();
        // A kernel binds a whole arena, so an arena stays within one binding.
        let limit = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        let bytes: Vec<u64> = parts
            .iter()
            .map(|(words, _)| (*words.max(&1) * 4) as u64)
            .collect();
        if let Some(p) = bytes.iter().position(|&b| b > limit) {
            return Err(Error::BindingTooLarge {
                tensor: parts[p].1.clone(),
                bytes: bytes[p],
                limit,
            });
        }
        let (places, sizes) = pack(
            &bytes,
            u64::from(limits.min_storage_buffer_offset_alignment),
            limit,
        );
        let arenas = sizes
            .iter()
            .enumerate()
            .map(|(arena, &size)| {
                let mut members = places.iter().enumerate().filter(|(_, q)| q.arena == arena);
                let (first, _) = members.next().expect("every arena holds a part");
                let label = format!("{} and {} more, packed", parts[first].1, members.count());
                self.create(size, &label)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(places
            .iter()
            .zip(bytes)
            .map(|(place, size)| {
                Buffer::Gpu(GpuView {
                    buffer: arenas[place.arena].clone(),
                    offset: place.offset,
                    size,
                })
            })
            .collect())
    }

    fn write(&self, buffer: &Buffer, words: &[u32]) -> Result<()> {
        let view = gpu_view(buffer);
        if (words.len() * 4) as u64 > view.size {
            return Err(Error::Input(format!(
                "writing {} words into a buffer of {}",
                words.len(),
                view.size / 4
            )));
        }
        self.queue
            .write_buffer(&view.buffer, view.offset, bytemuck::cast_slice(words));
        self.check_errors()
    }

    fn read<'a>(&'a self, buffer: &'a Buffer) -> ReadFuture<'a> {
        Box::pin(self.read_view(gpu_view(buffer)))
    }

    fn compile(&self, program: &Program) -> Result<Box<dyn Compiled>> {
        let compiled = program::GpuProgram::new(self, program)?;
        self.check_errors()?;
        Ok(Box::new(compiled))
    }
}

impl GpuBackend {
    /// A zeroed storage buffer of `bytes` (at most the binding limit: callers check).
    fn create(&self, bytes: u64, label: &str) -> Result<wgpu::Buffer> {
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.check_errors()?;
        Ok(buffer)
    }

    async fn read_view(&self, view: &GpuView) -> Result<Vec<u32>> {
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: view.size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&view.buffer, view.offset, &staging, 0, view.size);
        self.queue.submit([encoder.finish()]);
        let words = mapped_words(&self.device, &staging).await?;
        self.check_errors()?;
        Ok(words)
    }
}

/// The words of `staging` (a MAP_READ buffer whose copy has been submitted), mapped and unmapped
/// again: every readback, whole tensors and a repeated kernel's flag alike.
async fn mapped_words(
    #[cfg_attr(
        target_arch = "wasm32",
        expect(unused_variables, reason = "the web polls by itself")
    )]
    device: &wgpu::Device,
    staging: &wgpu::Buffer,
) -> Result<Vec<u32>> {
    let (tx, rx) = futures_channel::oneshot::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    // Natively the map completes only when the device is polled; the web polls by itself.
    #[cfg(not(target_arch = "wasm32"))]
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| Error::Gpu(e.to_string()))?;
    rx.await
        .map_err(|_| Error::Gpu("readback was cancelled".into()))?
        .map_err(|e| Error::Gpu(format!("readback failed: {e}")))?;
    let words = {
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| Error::Gpu(e.to_string()))?;
        bytemuck::cast_slice(&view).to_vec()
    };
    staging.unmap();
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::{Place, pack};

    #[test]
    fn parts_are_packed_aligned_and_split_at_the_limit() {
        let place = |arena, offset| Place { arena, offset };
        // 4 bytes, then 300 (at 256), then 256 (at 768: 556 rounded up), then 400, which would
        // end at 1,424 past a 1,200-byte limit, so a second arena begins; then one that fills it.
        let (places, sizes) = pack(&[4, 300, 256, 400, 800], 256, 1200);
        assert_eq!(
            places,
            [
                place(0, 0),
                place(0, 256),
                place(0, 768),
                place(1, 0),
                place(2, 0)
            ]
        );
        assert_eq!(sizes, [1024, 400, 800]);
        assert_eq!(pack(&[], 256, 1200), (vec![], vec![]));
    }
}
