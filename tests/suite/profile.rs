//! `POSFLOW_PROFILE`'s GPU table: every dispatch of every run but the first is timed and
//! counted under its op kind, with timestamp queries where the adapter has them (lavapipe has)
//! and on the host otherwise, with each op kind's work; a program compiled without profiling keeps
//! no table.

use std::rc::Rc;

use posflow::backend::profile::Clock;
use posflow::backend::{Backend, gpu_backend_for_tests};
use posflow::exec::Executor;
use posflow::graph::{Graph, TensorId};
use posflow::params::ParamStore;
use posflow::tensor::TensorMeta;

const RUNS: usize = 3;

/// softmax(a · b) summed: three op kinds at odd shapes.
fn program(backend: &Rc<dyn Backend>) -> (Executor, [TensorId; 3]) {
    let mut g = Graph::new();
    let a = g.input("a", TensorMeta::f32(&[37, 29]));
    let b = g.input("b", TensorMeta::f32(&[29, 53]));
    let c = g.matmul(a, b).unwrap();
    let p = g.softmax(c).unwrap();
    let total = g.sum_all(p).unwrap();
    let params = ParamStore::init(backend.clone(), &g, 0).unwrap();
    let exec = Executor::new(&g, &[total], &params).unwrap();
    let values = |n: usize| {
        (0..n)
            .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
            .collect::<Vec<_>>()
    };
    exec.set_f32(a, &values(37 * 29)).unwrap();
    exec.set_f32(b, &values(29 * 53)).unwrap();
    (exec, [a, b, total])
}

#[test]
fn gpu_profile_times_every_dispatch_under_its_op_kind() {
    let Some(gpu) = gpu_backend_for_tests() else {
        return;
    };
    let gpu = gpu.with_profiling(true);
    let clock = if gpu.has_timestamps() {
        Clock::GpuTimestamps
    } else {
        Clock::GpuWaited
    };
    let backend: Rc<dyn Backend> = Rc::new(gpu);
    let (exec, [.., total]) = program(&backend);
    for _ in 0..RUNS {
        exec.run().unwrap();
    }
    // softmax of each row sums to 1: 37 rows.
    let sum = exec.read_blocking(total).unwrap()[0];
    assert!(
        (sum - 37.0).abs() < 1e-3,
        "the profiled program computes wrongly: {sum}"
    );

    let dispatches = exec.dispatches().expect("a GPU program counts its dispatches");
    let profile = exec.profile().expect("compiled with profiling on");
    assert_eq!(profile.clock, clock);
    assert_eq!(profile.runs, RUNS - 1, "the first run is left out");
    let counted: usize = profile.ops.iter().map(|op| op.calls).sum();
    assert_eq!(
        counted,
        (RUNS - 1) * dispatches,
        "every dispatch of every counted run is counted once"
    );
    let names: Vec<&str> = profile.ops.iter().map(|op| op.name).collect();
    for kind in ["matmul", "softmax", "sum"] {
        assert!(names.contains(&kind), "{kind} missing from {names:?}");
    }
    for op in &profile.ops {
        assert!(
            op.seconds.is_finite() && op.seconds > 0.0 && op.seconds < 60.0,
            "{}: {} s over {} runs",
            op.name,
            op.seconds,
            RUNS - 1
        );
    }
    // Each op kind's work, counted once a step however many dispatches it takes: the product's
    // 2·m·n·k flops and its operands' bytes; the softmax's cost is its memory alone.
    let counted = (RUNS - 1) as u64;
    let matmul = profile.ops.iter().find(|op| op.name == "matmul").unwrap();
    assert_eq!(matmul.work.flops, Some(counted * 2 * 37 * 29 * 53));
    assert_eq!(matmul.work.bytes, counted * 4 * (37 * 29 + 29 * 53 + 37 * 53));
    let softmax = profile.ops.iter().find(|op| op.name == "softmax").unwrap();
    assert_eq!(softmax.work.flops, None);
    assert_eq!(softmax.work.bytes, counted * 4 * 2 * 37 * 53);
    let table = profile.to_string();
    assert!(
        table.contains("dispatches/run") && table.contains("matmul"),
        "{table}"
    );
    assert!(profile.seconds_per_run() > 0.0);
}

#[test]
fn an_unprofiled_gpu_program_counts_dispatches_and_keeps_no_table() {
    let Some(gpu) = gpu_backend_for_tests() else {
        return;
    };
    let backend: Rc<dyn Backend> = Rc::new(gpu.with_profiling(false));
    let (exec, _) = program(&backend);
    assert_eq!(
        exec.dispatches(),
        None,
        "nothing is compiled before the first run"
    );
    exec.run().unwrap();
    assert!(
        exec.dispatches().is_some_and(|n| n >= 3),
        "{:?}",
        exec.dispatches()
    );
    assert!(exec.profile().is_none());
}
