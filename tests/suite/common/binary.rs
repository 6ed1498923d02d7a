//! Running the `posflow` binary, for the test files that drive the CLI.

use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary in `dir`, where relative output paths (`runs/`) land, with the device left to
/// the arguments (not to the caller's POSFLOW_DEVICE).
pub fn posflow_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_posflow"))
        .args(args)
        .current_dir(dir)
        .env_remove("POSFLOW_DEVICE")
        .output()
        .expect("the binary runs")
}
