//! The pipeline cache: one shader module per WGSL file (built with or without subgroup
//! operations) and one compute pipeline per entry point, set of override constants and binding
//! layout, created on first use and shared by every program compiled by one backend.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::kernel::{Arg, Dispatch};

/// (file and whether on subgroups, entry point, which storage bindings are read-only, override
/// constants as their bits).
type PipelineKey = (ModuleKey, &'static str, Vec<bool>, Vec<(&'static str, u64)>);

/// A file, and whether its module is the subgroup twin.
type ModuleKey = (&'static str, bool);

#[derive(Default)]
pub(super) struct PipelineCache {
    modules: RefCell<HashMap<ModuleKey, wgpu::ShaderModule>>,
    pipelines: RefCell<HashMap<PipelineKey, wgpu::ComputePipeline>>,
}

impl PipelineCache {
    pub fn get(&self, device: &wgpu::Device, dispatch: &Dispatch, subgroups: bool) -> wgpu::ComputePipeline {
        let read_only: Vec<bool> = dispatch.args.iter().map(|a| matches!(a, Arg::In(_))).collect();
        let constants = dispatch
            .constants
            .iter()
            .map(|&(name, v)| (name, v.to_bits()))
            .collect();
        let subgroups = subgroups && dispatch.shader.with_subgroups.is_some();
        let module_key = (dispatch.shader.name, subgroups);
        let key = (module_key, dispatch.entry, read_only, constants);
        if let Some(p) = self.pipelines.borrow().get(&key) {
            return p.clone();
        }
        let module = self
            .modules
            .borrow_mut()
            .entry(module_key)
            .or_insert_with(|| {
                device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(dispatch.shader.name),
                    source: wgpu::ShaderSource::Wgsl(dispatch.shader.source_for(subgroups).into()),
                })
            })
            .clone();
        let layout = bind_group_layout(device, &key.2);
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(dispatch.entry),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(dispatch.entry),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(dispatch.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &dispatch.constants,
                ..Default::default()
            },
            cache: None,
        });
        self.pipelines.borrow_mut().insert(key, pipeline.clone());
        pipeline
    }
}

/// Binding 0 is the uniform of parameters; bindings 1.. are the storage buffers in `Dispatch::args`
/// order. An explicit layout (not `layout: None`) keeps bindings that an entry point ignores.
fn bind_group_layout(device: &wgpu::Device, read_only: &[bool]) -> wgpu::BindGroupLayout {
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }];
    for (i, &read_only) in read_only.iter().enumerate() {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: i as u32 + 1,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &entries,
    })
}
