//! Finding a GPU adapter and opening a device on it.

use crate::error::{Error, Result};

/// What to do about software adapters (lavapipe, SwiftShader: device type `Cpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftwareAdapters {
    /// Take one when nothing else exists (the user asked for the GPU explicitly).
    Allow,
    /// Only a real GPU will do (automatic selection: the CPU backend beats a software GPU).
    Refuse,
}

pub(super) fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env())
}

/// One line per adapter: name, API, device type.
pub(super) fn describe(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type)
}

#[cfg(not(target_arch = "wasm32"))]
pub(super) async fn pick(instance: &wgpu::Instance, software: SoftwareAdapters) -> Result<wgpu::Adapter> {
    let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
    let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu | wgpu::DeviceType::Other => 2,
        wgpu::DeviceType::Cpu => 3,
    };
    let found: Vec<String> = adapters.iter().map(|a| describe(&a.get_info())).collect();
    let best = adapters
        .into_iter()
        .filter(|a| software == SoftwareAdapters::Allow || a.get_info().device_type != wgpu::DeviceType::Cpu)
        .min_by_key(rank);
    best.ok_or_else(|| no_adapter(&found, software))
}

#[cfg(target_arch = "wasm32")]
pub(super) async fn pick(instance: &wgpu::Instance, software: SoftwareAdapters) -> Result<wgpu::Adapter> {
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::Device(format!("this browser offers no WebGPU adapter: {e}")))?;
    if software == SoftwareAdapters::Refuse && adapter.get_info().device_type == wgpu::DeviceType::Cpu {
        return Err(no_adapter(&[describe(&adapter.get_info())], software));
    }
    Ok(adapter)
}

fn no_adapter(found: &[String], software: SoftwareAdapters) -> Error {
    let found = if found.is_empty() {
        "none".to_string()
    } else {
        found.join("; ")
    };
    let wanted = match software {
        SoftwareAdapters::Allow => "no GPU adapter found",
        SoftwareAdapters::Refuse => "no hardware GPU adapter found",
    };
    Error::Device(format!(
        "{wanted} (adapters seen: {found}). Install your GPU's Vulkan, Metal or DX12 driver; \
         on Linux without a GPU, `apt-get install mesa-vulkan-drivers libvulkan1` gives a software \
         Vulkan adapter (lavapipe), and WGPU_BACKEND=vulkan makes wgpu use it. \
         Or run on the CPU with --device cpu."
    ))
}

pub(super) async fn open(adapter: &wgpu::Adapter) -> Result<(wgpu::Device, wgpu::Queue)> {
    // Ask for the adapter's own storage limits: the defaults (128 MiB bindings, 8 storage
    // buffers per stage) are lower than most GPUs offer.
    let supported = adapter.limits();
    let limits = wgpu::Limits {
        max_storage_buffer_binding_size: supported.max_storage_buffer_binding_size,
        max_buffer_size: supported.max_buffer_size,
        max_storage_buffers_per_shader_stage: supported.max_storage_buffers_per_shader_stage,
        max_compute_workgroup_storage_size: supported.max_compute_workgroup_storage_size,
        max_compute_invocations_per_workgroup: supported.max_compute_invocations_per_workgroup,
        max_compute_workgroup_size_x: supported.max_compute_workgroup_size_x,
        max_compute_workgroup_size_y: supported.max_compute_workgroup_size_y,
        ..wgpu::Limits::downlevel_defaults()
    };
    adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: Some("posflow"),
            required_limits: limits,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::Device(format!("could not open {}: {e}", describe(&adapter.get_info()))))
}

/// Every adapter wgpu can see, one line each.
#[cfg(not(target_arch = "wasm32"))]
pub async fn list() -> Vec<String> {
    instance()
        .enumerate_adapters(wgpu::Backends::all())
        .await
        .iter()
        .map(|a| describe(&a.get_info()))
        .collect()
}
