//! The `posflow` binary as a user runs it: commands, the global --device flag, errors.

use std::process::{Command, Output};

fn posflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_posflow"))
        .args(args)
        .env_remove("POSFLOW_DEVICE")
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_device_flag_goes_before_or_after_the_command() {
    for args in [
        &[
            "--device",
            "cpu",
            "bench",
            "matmul",
            "--sizes",
            "64",
            "--repeats",
            "1",
        ][..],
        &[
            "bench",
            "matmul",
            "--device",
            "cpu",
            "--sizes",
            "64",
            "--repeats",
            "1",
        ],
    ] {
        let o = posflow(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("device: cpu") && out.contains("GFLOP/s"), "{out}");
        assert!(out.lines().any(|l| l.trim_start().starts_with("64 ")), "{out}");
    }
}

#[test]
fn the_mlp_demo_runs_with_and_without_its_command_name() {
    for args in [
        &["--device", "cpu", "--steps", "3"][..],
        &["--device", "cpu", "mlp", "--steps", "3"],
    ] {
        let o = posflow(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).contains("loss 0.13788 ->"), "{}", stdout(&o));
    }
}

#[test]
fn bad_arguments_are_explained() {
    let o = posflow(&["--device", "tpu"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("unknown device `tpu`: expected auto, cpu or gpu"),
        "{}",
        stderr(&o)
    );
    let o = posflow(&["mlp", "--steps", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("must be at least 1"), "{}", stderr(&o));
}
