//! Device selection: `auto` never picks a software GPU, `gpu` without an adapter is a clear error,
//! a wrong `POSFLOW_TUNE` is an error on either, and probing adapters is quiet. Its own test
//! binary, because one test changes WGPU_BACKEND for the whole process.

use std::process::Command;
use std::sync::Mutex;

use posflow::backend::{BackendKind, DeviceChoice, gpu::list_adapters, select_backend};

/// Tests that create a wgpu instance hold this, so none sees another's WGPU_BACKEND.
static ENV: Mutex<()> = Mutex::new(());

#[test]
fn device_names_parse_and_unknown_ones_are_explained() {
    assert_eq!("GPU".parse::<DeviceChoice>().unwrap(), DeviceChoice::Gpu);
    assert_eq!(" cpu".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cpu);
    let err = "tpu".parse::<DeviceChoice>().unwrap_err().to_string();
    assert!(err.contains("tpu") && err.contains("auto, cpu or gpu"), "{err}");
}

#[test]
fn auto_prefers_a_real_gpu_and_otherwise_the_cpu() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let adapters = pollster::block_on(list_adapters());
    let hardware = adapters.iter().any(|a| !a.contains("Cpu)"));
    let backend = pollster::block_on(select_backend(DeviceChoice::Auto)).unwrap();
    let expected = if hardware {
        BackendKind::Gpu
    } else {
        BackendKind::Cpu
    };
    assert_eq!(
        backend.kind(),
        expected,
        "adapters: {adapters:?}, picked {}",
        backend.describe()
    );
}

#[test]
fn asking_for_a_gpu_where_there_is_none_lists_what_was_seen_and_what_to_install() {
    // No Metal on Linux (and no DX12 elsewhere): wgpu finds no adapter at all.
    let absent = if cfg!(target_os = "macos") {
        "dx12"
    } else {
        "metal"
    };
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let before = std::env::var("WGPU_BACKEND").ok();
    // SAFETY: every test here that reads the environment (through wgpu) holds ENV.
    unsafe { std::env::set_var("WGPU_BACKEND", absent) };
    let err = match pollster::block_on(select_backend(DeviceChoice::Gpu)) {
        Ok(b) => panic!("expected no adapter, got {}", b.describe()),
        Err(e) => e.to_string(),
    };
    // SAFETY: as above.
    unsafe {
        match before {
            Some(v) => std::env::set_var("WGPU_BACKEND", v),
            None => std::env::remove_var("WGPU_BACKEND"),
        }
    }
    assert!(
        err.contains("no GPU adapter found") && err.contains("adapters seen: none"),
        "{err}"
    );
    assert!(
        err.contains("mesa-vulkan-drivers") && err.contains("--device cpu"),
        "{err}"
    );
}

#[test]
fn listing_adapters_prints_no_error_without_a_desktop_session() {
    // Without XDG_RUNTIME_DIR (servers, containers) Mesa's Vulkan device-select layer used to make
    // libwayland print `error: XDG_RUNTIME_DIR is invalid or not set in the environment.` twice
    // for every wgpu instance. `devices` probes every adapter twice: to list them and for `auto`.
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_posflow"))
        .arg("devices")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("POSFLOW_DEVICE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("--device auto picks:"), "{stdout}");
    assert!(
        !stderr.lines().any(|l| l.contains("error")),
        "stderr of `posflow devices`:\n{stderr}"
    );
}

#[test]
fn a_tuning_setting_that_is_not_0_or_1_is_an_error_naming_it_on_any_device() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    for device in ["auto", "gpu"] {
        let out = Command::new(env!("CARGO_BIN_EXE_posflow"))
            .args([
                "--device",
                device,
                "bench",
                "matmul",
                "--sizes",
                "8",
                "--repeats",
                "1",
            ])
            .env("POSFLOW_TUNE", "yes")
            .env_remove("POSFLOW_DEVICE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--device {device}: {stderr}");
        assert!(
            stderr.contains("POSFLOW_TUNE must be 0") && stderr.contains("\"yes\""),
            "--device {device}: {stderr}"
        );
    }
}
