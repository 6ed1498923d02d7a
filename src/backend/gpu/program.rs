//! A compiled GPU program: every dispatch's pipeline, uniform and bind group made once, then
//! recorded into one compute pass per run.

use wgpu::util::DeviceExt;

use super::{GpuBackend, gpu_buffer};
use crate::backend::{Compiled, Program};
use crate::error::{Error, Result};
use crate::kernel::Arg;

struct Recorded {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    workgroups: [u32; 3],
}

pub(super) struct GpuProgram {
    device: wgpu::Device,
    queue: wgpu::Queue,
    dispatches: Vec<Recorded>,
    error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// Scratch buffers stay alive as long as the bind groups that use them.
    _scratch: Vec<wgpu::Buffer>,
}

impl GpuProgram {
    pub fn new(gpu: &GpuBackend, program: &Program) -> Result<Self> {
        let device = &gpu.device;
        let max_groups = device.limits().max_compute_workgroups_per_dimension;
        let mut dispatches = Vec::new();
        let mut scratch_all = Vec::new();
        for step in program {
            let in_metas: Vec<_> = step.inputs.iter().map(|b| &b.meta).collect();
            let out_metas: Vec<_> = step.outputs.iter().map(|b| &b.meta).collect();
            let kernels = step.op.gpu(&in_metas, &out_metas);
            let scratch: Vec<wgpu::Buffer> = kernels
                .scratch
                .iter()
                .enumerate()
                .map(|(i, &words)| {
                    let label = format!("{} scratch {i}", step.op.name());
                    super::super::Backend::alloc(gpu, words, &label).map(|b| gpu_buffer(&b).clone())
                })
                .collect::<Result<_>>()?;
            for d in &kernels.dispatches {
                if d.workgroups.contains(&0) {
                    continue;
                }
                if d.workgroups.iter().any(|&w| w > max_groups) {
                    return Err(Error::Gpu(format!(
                        "{}: {:?} workgroups exceed this GPU's limit of {max_groups} per dimension",
                        step.op.name(),
                        d.workgroups
                    )));
                }
                let pipeline = gpu.pipelines.get(device, d);
                // Uniform buffers are at least 16 bytes and a multiple of 16.
                let mut params = d.params.clone();
                params.resize(params.len().div_ceil(4).max(1) * 4, 0);
                let uniform = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some(d.entry),
                    contents: bytemuck::cast_slice(&params),
                    usage: wgpu::BufferUsages::UNIFORM,
                });
                let buffers: Vec<&wgpu::Buffer> = d
                    .args
                    .iter()
                    .map(|a| match *a {
                        Arg::In(i) => gpu_buffer(&step.inputs[i].buffer),
                        Arg::Out(i) => gpu_buffer(&step.outputs[i].buffer),
                        Arg::Scratch(i) => &scratch[i],
                    })
                    .collect();
                let mut entries = vec![wgpu::BindGroupEntry {
                    binding: 0,
                    resource: uniform.as_entire_binding(),
                }];
                for (i, b) in buffers.iter().enumerate() {
                    entries.push(wgpu::BindGroupEntry {
                        binding: i as u32 + 1,
                        resource: b.as_entire_binding(),
                    });
                }
                let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(d.entry),
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &entries,
                });
                dispatches.push(Recorded {
                    pipeline,
                    bind_group,
                    workgroups: d.workgroups,
                });
            }
            scratch_all.extend(scratch);
        }
        Ok(Self {
            device: device.clone(),
            queue: gpu.queue.clone(),
            dispatches,
            error: gpu.error.clone(),
            _scratch: scratch_all,
        })
    }
}

impl Compiled for GpuProgram {
    fn run(&self) -> Result<()> {
        let mut encoder = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for d in &self.dispatches {
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &d.bind_group, &[]);
                pass.dispatch_workgroups(d.workgroups[0], d.workgroups[1], d.workgroups[2]);
            }
        }
        self.queue.submit([encoder.finish()]);
        match self.error.lock().expect("error lock").take() {
            Some(e) => Err(Error::Gpu(e)),
            None => Ok(()),
        }
    }
}
