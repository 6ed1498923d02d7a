//! A fresh directory per test, for the test files that write files.

use std::path::{Path, PathBuf};

/// A fresh directory `group/test` under Cargo's scratch space for integration tests, left in
/// place afterwards so that what a test wrote can be looked at (or read by the Python checks).
pub fn scratch(group: &str, test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(group).join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
