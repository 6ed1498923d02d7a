//! Device selection: `auto` takes a real GPU when there is one, and the CPU backend otherwise,
//! because on a software adapter (lavapipe, SwiftShader) the CPU backend is about ten times faster.

use std::fmt;
use std::rc::Rc;
use std::str::FromStr;

use super::gpu::SoftwareAdapters;
use super::{Backend, BackendKind, CpuBackend, GpuBackend};
use crate::arithmetic::Arithmetic;
use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceChoice {
    #[default]
    Auto,
    Cpu,
    /// Any GPU adapter, software ones included.
    Gpu,
}

impl FromStr for DeviceChoice {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "gpu" => Ok(Self::Gpu),
            other => Err(Error::Device(format!(
                "unknown device `{other}`: expected auto, cpu or gpu"
            ))),
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Cpu => "cpu",
            Self::Gpu => "gpu",
        })
    }
}

impl DeviceChoice {
    /// The choice in `POSFLOW_DEVICE`, if set.
    pub fn from_env() -> Result<Option<Self>> {
        match std::env::var("POSFLOW_DEVICE") {
            Ok(v) => v
                .parse()
                .map(Some)
                .map_err(|e| Error::Device(format!("POSFLOW_DEVICE: {e}"))),
            Err(_) => Ok(None),
        }
    }
}

pub async fn select_backend(choice: DeviceChoice) -> Result<Rc<dyn Backend>> {
    match choice {
        DeviceChoice::Cpu => Ok(Rc::new(CpuBackend::new())),
        DeviceChoice::Gpu => Ok(Rc::new(GpuBackend::new(SoftwareAdapters::Allow).await?)),
        DeviceChoice::Auto => match GpuBackend::new(SoftwareAdapters::Refuse).await {
            Ok(gpu) => Ok(Rc::new(gpu)),
            // A wrong setting (POSFLOW_TUNE) is an error on any machine; no GPU means the CPU.
            Err(e @ Error::Input(_)) => Err(e),
            Err(_) => Ok(Rc::new(CpuBackend::new())),
        },
    }
}

/// `backend` computing in `arithmetic`: the CPU backend in it, a GPU as it is (its sums are its
/// own), or an error for a portable run on a GPU.
pub fn in_arithmetic(backend: Rc<dyn Backend>, arithmetic: Arithmetic) -> Result<Rc<dyn Backend>> {
    match (backend.kind(), arithmetic) {
        (BackendKind::Cpu, _) => Ok(Rc::new(CpuBackend::with_arithmetic(arithmetic))),
        (BackendKind::Gpu, Arithmetic::Native) => Ok(backend),
        (BackendKind::Gpu, Arithmetic::Portable) => Err(Error::Input(format!(
            "[train] arithmetic = \"portable\" needs the CPU backend (--device cpu): {} sums in \
             its own order",
            backend.describe()
        ))),
    }
}

/// The GPU backend for a test, or `None` with a plain message on stderr when this machine has no
/// adapter a test should take. With `POSFLOW_REQUIRE_GPU=1` (as CI sets it) a missing adapter
/// fails the test instead, so GPU tests cannot be skipped unseen.
///
/// Tests take a hardware adapter or software Vulkan (lavapipe), but software GL (llvmpipe through
/// GL/EGL, all wgpu finds where Mesa has GL and no Vulkan driver) only when `WGPU_BACKEND` names
/// gl (see [`SoftwareAdapters::AllowButGl`] for why); the skip message names what it skipped.
#[cfg(not(target_arch = "wasm32"))]
pub fn gpu_for_tests() -> Option<Rc<dyn Backend>> {
    gpu_backend_for_tests().map(|gpu| Rc::new(gpu) as Rc<dyn Backend>)
}

/// [`gpu_for_tests`], as the GPU backend itself (to set it up before use).
#[cfg(not(target_arch = "wasm32"))]
pub fn gpu_backend_for_tests() -> Option<GpuBackend> {
    let adapters = SoftwareAdapters::for_tests(wgpu::Backends::from_env());
    match pollster::block_on(GpuBackend::new(adapters)) {
        // Tests compile thousands of programs: timing each product's kernels would only slow
        // them (every candidate gives the same bits). The tuner's tests ask for it; with
        // POSFLOW_TUNE=1 the whole suite runs tuned.
        Ok(gpu) => {
            // NVIDIA's Vulkan driver leaves thread-local destructors behind: when a test
            // thread's device was the process's last, the loader unloaded the driver and that
            // thread's exit jumped into unmapped code (a segfault on an H100 with 16 test
            // threads, every run). The first device is kept for the process, and the driver
            // with it.
            static KEEP_DRIVER_LOADED: std::sync::OnceLock<wgpu::Device> = std::sync::OnceLock::new();
            KEEP_DRIVER_LOADED.get_or_init(|| gpu.device().clone());
            Some(gpu.with_tuning(std::env::var("POSFLOW_TUNE").as_deref() == Ok("1")))
        }
        Err(e) if std::env::var("POSFLOW_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("POSFLOW_REQUIRE_GPU=1 but the GPU backend is unavailable: {e}")
        }
        Err(e) => {
            let message =
                format!("SKIPPED GPU CHECK (no adapter; set POSFLOW_REQUIRE_GPU=1 to fail instead): {e}");
            eprintln!("{message}");
            // Once per test binary, past the harness's capture (which hides a passing test's
            // output), so that a plain `cargo test` says what it skipped and why.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "{message}");
            });
            None
        }
    }
}
