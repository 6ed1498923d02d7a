//! Finding a GPU adapter and opening a device on it.

use crate::error::{Error, Result};

/// Which adapters a caller takes. Software adapters have device type `Cpu`: lavapipe and
/// SwiftShader (Vulkan), WARP (DX12), and Mesa's llvmpipe through GL/EGL, which is what wgpu finds
/// on a Linux machine with Mesa's GL but no Vulkan driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftwareAdapters {
    /// Any adapter, software GL included (`--device gpu`: the user asked for a GPU, and a slow
    /// one beats an error). Of several, the best: hardware first, and Vulkan, Metal or DX12
    /// before GL.
    Allow,
    /// Software adapters on Vulkan, Metal or DX12, but not software GL (what GPU tests take).
    /// llvmpipe compiles shaders far more slowly through GL than through Vulkan: while Mesa's
    /// shader cache is cold (a fresh machine, container or CI runner) op tests took 5-11x as
    /// long as on lavapipe, the library tests 16 minutes. And GL lacks f16 and subgroups, so
    /// that time would mostly check fallback kernels.
    AllowButGl,
    /// Only a real GPU will do (automatic selection: the CPU backend beats a software GPU).
    Refuse,
}

impl SoftwareAdapters {
    /// What GPU tests take, given the backends `WGPU_BACKEND` names: naming gl asks for software
    /// GL.
    pub fn for_tests(named: Option<wgpu::Backends>) -> Self {
        match named {
            Some(backends) if backends.contains(wgpu::Backends::GL) => Self::Allow,
            _ => Self::AllowButGl,
        }
    }

    /// Why this choice will not take `info`, or `None` if it will.
    fn refusal(self, info: &wgpu::AdapterInfo) -> Option<&'static str> {
        if info.device_type != wgpu::DeviceType::Cpu {
            return None;
        }
        match (self, info.backend) {
            (Self::Refuse, _) => Some("software, slower than the CPU backend"),
            (Self::AllowButGl, wgpu::Backend::Gl) => Some(
                "software GL, which compiles shaders several times slower than software Vulkan \
                 (lavapipe) and lacks f16 and subgroups; WGPU_BACKEND=gl takes it",
            ),
            _ => None,
        }
    }
}

/// Lower is better: hardware before software, and on the same kind of device a native API before
/// GL, where wgpu offers less (no f16, no subgroups, fewer storage buffers per stage).
fn rank(info: &wgpu::AdapterInfo) -> (u8, bool) {
    let device = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu | wgpu::DeviceType::Other => 2,
        wgpu::DeviceType::Cpu => 3,
    };
    (device, info.backend == wgpu::Backend::Gl)
}

/// The index in `seen` of the adapter to take, or an error that lists every adapter seen and why
/// each was skipped.
fn choose(seen: &[wgpu::AdapterInfo], software: SoftwareAdapters) -> Result<usize> {
    seen.iter()
        .enumerate()
        .filter(|(_, info)| software.refusal(info).is_none())
        .min_by_key(|(_, info)| rank(info))
        .map(|(i, _)| i)
        .ok_or_else(|| no_adapter(seen, software))
}

/// One line per adapter: name, API, device type.
pub(super) fn describe(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type)
}

/// The wgpu instances to look for adapters in, for the backends `WGPU_BACKEND` names (all of them
/// by default).
#[cfg(not(target_arch = "wasm32"))]
fn instances() -> Vec<wgpu::Instance> {
    let desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    #[cfg(target_os = "linux")]
    if desc.backends.contains(wgpu::Backends::VULKAN) {
        let mut found: Vec<_> = vulkan_without_wayland(&desc).into_iter().collect();
        let rest = desc.backends - wgpu::Backends::VULKAN;
        if !rest.is_empty() {
            found.push(wgpu::Instance::new(wgpu::InstanceDescriptor {
                backends: rest,
                ..desc
            }));
        }
        return found;
    }
    vec![wgpu::Instance::new(desc)]
}

/// wgpu's Vulkan instance without `VK_KHR_wayland_surface`, or `None` without a Vulkan loader.
///
/// With that extension enabled, Mesa's device-select layer (an implicit Vulkan layer that comes
/// with mesa-vulkan-drivers; Mesa 22.3 in Debian 12) connects to Wayland on every
/// `vkEnumeratePhysicalDevices` to see which GPU the compositor runs on, and where there is no
/// Wayland session (no `XDG_RUNTIME_DIR`: servers, containers, CI) libwayland prints
/// `error: XDG_RUNTIME_DIR is invalid or not set in the environment.` twice per instance. posflow
/// computes and never presents, so it has no use for Wayland surfaces; it ranks adapters itself,
/// so it loses nothing when the layer cannot ask the compositor either. Setting
/// `XDG_RUNTIME_DIR` or `NODEVICE_SELECT` instead would mean writing the environment of a process
/// whose other threads may be reading it.
#[cfg(target_os = "linux")]
fn vulkan_without_wayland(desc: &wgpu::InstanceDescriptor) -> Option<wgpu::Instance> {
    use wgpu::hal;
    let hal_desc = hal::InstanceDescriptor {
        name: "posflow",
        flags: desc.flags,
        memory_budget_thresholds: desc.memory_budget_thresholds,
        backend_options: desc.backend_options.clone(),
        telemetry: None,
        display: None,
    };
    let no_wayland: Box<hal::vulkan::CreateInstanceCallback> = Box::new(|args| {
        args.extensions.retain(|&e| e != c"VK_KHR_wayland_surface");
    });
    // SAFETY: as wgpu-core's own `Instance::new` does, with no display handle. The callback's
    // contract asks not to remove extensions because wgpu-hal may use what it asked for; in
    // wgpu-hal 30.0.1 the only use of VK_KHR_wayland_surface is `create_surface_from_wayland`,
    // which checks the instance's final extension list (the one without it) and returns an
    // error, and posflow creates no surfaces.
    let instance = unsafe { hal::vulkan::Instance::init_with_callback(&hal_desc, Some(no_wayland)) }.ok()?;
    // wgpu-core keeps its default instance flags for an instance made this way; the flags from
    // the environment (WGPU_DEBUG, WGPU_VALIDATION) still reach the Vulkan instance above.
    // SAFETY: a valid Vulkan instance, just created and handed over whole.
    Some(unsafe { wgpu::Instance::from_hal::<hal::api::Vulkan>(instance) })
}

/// Every adapter of every instance, in the order wgpu enumerates them.
#[cfg(not(target_arch = "wasm32"))]
async fn adapters() -> Vec<wgpu::Adapter> {
    instances_and_adapters()
        .await
        .into_iter()
        .map(|(_, a)| a)
        .collect()
}

/// Every adapter, each with the instance that found it.
#[cfg(not(target_arch = "wasm32"))]
async fn instances_and_adapters() -> Vec<(wgpu::Instance, wgpu::Adapter)> {
    let mut all = Vec::new();
    for instance in instances() {
        for adapter in instance.enumerate_adapters(wgpu::Backends::all()).await {
            all.push((instance.clone(), adapter));
        }
    }
    all
}

/// An instance, adapter, device and queue for egui's renderer (the viewer's PNG export), found as
/// the backend finds its own — any adapter, the best first, probed quietly — rather than by
/// egui's probing, which would print the Wayland errors `vulkan_without_wayland` avoids. The
/// device gets every limit the adapter has: a renderer's textures need more than compute does.
#[cfg(not(target_arch = "wasm32"))]
pub async fn for_rendering() -> Result<(wgpu::Instance, wgpu::Adapter, wgpu::Device, wgpu::Queue)> {
    let mut found = instances_and_adapters().await;
    let seen: Vec<wgpu::AdapterInfo> = found.iter().map(|(_, a)| a.get_info()).collect();
    let best = choose(&seen, SoftwareAdapters::Allow)?;
    let (instance, adapter) = found.swap_remove(best);
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: Some("posflow renderer"),
            required_limits: adapter.limits(),
            ..Default::default()
        })
        .await
        .map_err(|e| Error::Device(format!("could not open {}: {e}", describe(&adapter.get_info()))))?;
    Ok((instance, adapter, device, queue))
}

#[cfg(not(target_arch = "wasm32"))]
pub(super) async fn pick(software: SoftwareAdapters) -> Result<wgpu::Adapter> {
    let mut adapters = adapters().await;
    let seen: Vec<wgpu::AdapterInfo> = adapters.iter().map(wgpu::Adapter::get_info).collect();
    let best = choose(&seen, software)?;
    Ok(adapters.swap_remove(best))
}

#[cfg(target_arch = "wasm32")]
pub(super) async fn pick(software: SoftwareAdapters) -> Result<wgpu::Adapter> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::Device(format!("this browser offers no WebGPU adapter: {e}")))?;
    choose(&[adapter.get_info()], software)?;
    Ok(adapter)
}

fn no_adapter(seen: &[wgpu::AdapterInfo], software: SoftwareAdapters) -> Error {
    let seen = if seen.is_empty() {
        "none".to_string()
    } else {
        seen.iter()
            .map(|info| match software.refusal(info) {
                Some(why) => format!("{}, skipped: {why}", describe(info)),
                None => describe(info),
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let wanted = match software {
        SoftwareAdapters::Allow | SoftwareAdapters::AllowButGl => "no GPU adapter found",
        SoftwareAdapters::Refuse => "no hardware GPU adapter found",
    };
    Error::Device(format!(
        "{wanted} (adapters seen: {seen}). Install your GPU's Vulkan, Metal or DX12 driver; \
         on Linux without a GPU, `apt-get install mesa-vulkan-drivers libvulkan1` gives a software \
         Vulkan adapter (lavapipe). Or run on the CPU with --device cpu."
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
            // Timestamps let `POSFLOW_PROFILE=1` time each dispatch on the GPU itself; subgroup
            // operations make workgroup reductions shorter (see `Shader::with_subgroups`).
            required_features: adapter.features() & wanted_features(),
            required_limits: limits,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::Device(format!("could not open {}: {e}", describe(&adapter.get_info()))))
}

/// Natively, subgroups too. Not on the web: wgpu 30's WebGPU backend cannot ask a browser for its
/// `subgroups` feature (and a module would need `enable subgroups;`, which naga does not parse),
/// so the web keeps the modules without them.
fn wanted_features() -> wgpu::Features {
    if cfg!(target_arch = "wasm32") {
        wgpu::Features::TIMESTAMP_QUERY
    } else {
        wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SUBGROUP
    }
}

/// Every adapter wgpu can see, one line each; a software one says which choices skip it.
#[cfg(not(target_arch = "wasm32"))]
pub async fn list() -> Vec<String> {
    adapters()
        .await
        .iter()
        .map(|a| {
            let info = a.get_info();
            let skipped_by: Vec<&str> = [
                (SoftwareAdapters::Refuse, "--device auto"),
                (
                    SoftwareAdapters::for_tests(wgpu::Backends::from_env()),
                    "GPU tests",
                ),
            ]
            .into_iter()
            .filter(|(choice, _)| choice.refusal(&info).is_some())
            .map(|(_, who)| who)
            .collect();
            match skipped_by.as_slice() {
                [] => describe(&info),
                who => format!("{}: skipped by {}", describe(&info), who.join(" and ")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use wgpu::{AdapterInfo, Backend, DeviceType};

    use super::*;

    fn adapter(name: &str, device_type: DeviceType, backend: Backend) -> AdapterInfo {
        AdapterInfo {
            name: name.into(),
            ..AdapterInfo::new(device_type, backend)
        }
    }

    fn lavapipe() -> AdapterInfo {
        adapter(
            "llvmpipe (LLVM 15.0.6, 256 bits)",
            DeviceType::Cpu,
            Backend::Vulkan,
        )
    }

    fn gl_llvmpipe() -> AdapterInfo {
        adapter("llvmpipe (LLVM 15.0.6, 256 bits)", DeviceType::Cpu, Backend::Gl)
    }

    #[test]
    fn tests_skip_software_gl_and_say_which_adapter_and_why() {
        let err = choose(&[gl_llvmpipe()], SoftwareAdapters::AllowButGl)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no GPU adapter found")
                && err.contains("llvmpipe (LLVM 15.0.6, 256 bits) (Gl, Cpu), skipped: software GL")
                && err.contains("WGPU_BACKEND=gl"),
            "{err}"
        );
        assert!(err.contains("mesa-vulkan-drivers"), "{err}");
    }

    #[test]
    fn tests_take_software_vulkan_and_hardware_even_on_gl() {
        assert_eq!(
            choose(&[gl_llvmpipe(), lavapipe()], SoftwareAdapters::AllowButGl).unwrap(),
            1
        );
        let intel_gl = adapter(
            "Mesa Intel(R) UHD Graphics 620",
            DeviceType::IntegratedGpu,
            Backend::Gl,
        );
        assert_eq!(
            choose(&[lavapipe(), intel_gl], SoftwareAdapters::AllowButGl).unwrap(),
            1
        );
    }

    #[test]
    fn asking_for_any_gpu_takes_software_gl_but_prefers_vulkan() {
        assert_eq!(choose(&[gl_llvmpipe()], SoftwareAdapters::Allow).unwrap(), 0);
        assert_eq!(
            choose(&[gl_llvmpipe(), lavapipe()], SoftwareAdapters::Allow).unwrap(),
            1
        );
    }

    #[test]
    fn hardware_beats_software_and_discrete_beats_integrated() {
        let discrete = adapter("NVIDIA H100", DeviceType::DiscreteGpu, Backend::Vulkan);
        let integrated = adapter("AMD Radeon Graphics", DeviceType::IntegratedGpu, Backend::Vulkan);
        let seen = [lavapipe(), integrated, discrete];
        for choice in [
            SoftwareAdapters::Allow,
            SoftwareAdapters::AllowButGl,
            SoftwareAdapters::Refuse,
        ] {
            assert_eq!(choose(&seen, choice).unwrap(), 2, "{choice:?}");
        }
    }

    #[test]
    fn tests_take_software_gl_only_when_wgpu_backend_names_it() {
        let named = |list| Some(wgpu::Backends::from_comma_list(list));
        assert_eq!(SoftwareAdapters::for_tests(None), SoftwareAdapters::AllowButGl);
        assert_eq!(
            SoftwareAdapters::for_tests(named("vulkan")),
            SoftwareAdapters::AllowButGl
        );
        assert_eq!(SoftwareAdapters::for_tests(named("gl")), SoftwareAdapters::Allow);
        assert_eq!(
            SoftwareAdapters::for_tests(named("vulkan,gl")),
            SoftwareAdapters::Allow
        );
    }

    #[test]
    fn auto_skips_every_software_adapter() {
        let err = choose(&[lavapipe(), gl_llvmpipe()], SoftwareAdapters::Refuse)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no hardware GPU adapter found")
                && err.contains("(Vulkan, Cpu), skipped: software")
                && err.contains("(Gl, Cpu), skipped: software"),
            "{err}"
        );
    }
}
