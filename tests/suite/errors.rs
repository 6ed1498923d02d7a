//! Bad input gets a clear error naming the problem, never a panic.

use posflow::backend::gpu_for_tests;
use posflow::exec::Executor;
use posflow::graph::Graph;
use posflow::params::ParamStore;
use posflow::{Error, TensorMeta};

#[test]
fn a_tensor_over_the_gpu_binding_limit_names_the_tensor_and_the_limit() {
    let Some(gpu) = gpu_for_tests() else { return };
    let mut g = Graph::new();
    // 1.2 G floats = 4.8 GB, past any storage binding limit wgpu offers today.
    let x = g.input("huge_activations", TensorMeta::f32(&[1200, 1_000_000]));
    let y = g.scale(x, 2.0).unwrap();
    let params = ParamStore::init(gpu, &g, 0).unwrap();
    let err = Executor::new(&g, &[y], &params)
        .err()
        .expect("the plan must not fit");
    assert!(matches!(err, Error::BindingTooLarge { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("huge_activations") && msg.contains("4800000000 bytes") && msg.contains("limit of"),
        "{msg}"
    );
}

#[test]
fn mismatched_shapes_name_the_op_and_both_shapes() {
    let mut g = Graph::new();
    let a = g.input("a", TensorMeta::f32(&[3, 4]));
    let b = g.input("b", TensorMeta::f32(&[5, 6]));
    let msg = g.matmul(a, b).unwrap_err().to_string();
    assert!(
        msg.contains("matmul") && msg.contains("[3, 4]") && msg.contains("[5, 6]"),
        "{msg}"
    );
}
