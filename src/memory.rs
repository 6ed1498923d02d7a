//! Memory a plan or a parameter store will take, checked against what the machine has before
//! it is allocated: a size that passed every config check (a long evaluation, a large batch)
//! is an error with the figures, never an aborted process.

use crate::error::{Error, Result};

/// Refuses `bytes` of host memory for `what` when the machine has less available. Where the
/// figure cannot be read (not Linux, the web) only the allocation itself can fail.
pub fn check_host_fits(what: &str, bytes: u64) -> Result<()> {
    match available_bytes() {
        Some(available) if bytes > available => Err(Error::Input(format!(
            "{what} needs {} of memory, but this machine has {} available",
            gib(bytes),
            gib(available)
        ))),
        _ => Ok(()),
    }
}

/// Reads a whole file, which must be a regular file (a device or a pipe such as /dev/zero may
/// never end) that fits in memory. Errors say why, for the caller to prefix with what it is.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_regular_file(path: &std::path::Path) -> std::result::Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot be read ({e})"))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    check_host_fits("reading it", meta.len()).map_err(|e| e.to_string())?;
    std::fs::read(path).map_err(|e| format!("cannot be read ({e})"))
}

/// `bytes` in GiB, for messages.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The kernel's estimate of memory available to a new allocation without swapping.
#[cfg(target_os = "linux")]
fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(not(target_os = "linux"))]
fn available_bytes() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_than_any_machine_has_is_refused_with_the_figure() {
        if available_bytes().is_none() {
            eprintln!("SKIPPED: this platform does not report available memory");
            return;
        }
        let err = check_host_fits("the test", u64::MAX / 2).unwrap_err().to_string();
        assert!(err.contains("the test needs") && err.contains("GiB"), "{err}");
        check_host_fits("a kilobyte", 1024).unwrap();
    }
}
