//! End to end: a two-layer MLP trained with AdamW reaches a stated loss on the CPU backend and on
//! the GPU backend, from the same seed, and the two loss curves agree step by step.

use std::rc::Rc;

use posflow::backend::{CpuBackend, gpu_for_tests};
use posflow::mlp::{MlpConfig, train_mlp};

/// The target x0*x1 has variance 1/9 ≈ 0.111; after 400 steps the MLP is below 1.5% of that
/// (0.00092 measured on both backends).
const FINAL_LOSS: f32 = 1.5e-3;

/// Per step, |gpu - cpu| ≤ 1e-4 of the CPU loss. The backends sum in different orders; the
/// largest difference measured over the 400 steps is 1.3e-6 relative.
const REL_TOL: f32 = 1e-4;

#[test]
fn mlp_learns_xor_on_cpu_and_gpu_with_matching_curves() {
    let config = MlpConfig::default();
    let cpu = train_mlp(Rc::new(CpuBackend::new()), &config, |_, _| {}).unwrap();
    assert_eq!(cpu.len(), config.steps);
    assert!(
        cpu[0] > 0.05,
        "the untrained loss should be near the target variance, got {}",
        cpu[0]
    );
    let last = *cpu.last().unwrap();
    assert!(
        last < FINAL_LOSS,
        "CPU: final loss {last} is not below {FINAL_LOSS}"
    );

    let Some(gpu) = gpu_for_tests() else { return };
    let on_gpu = train_mlp(gpu, &config, |_, _| {}).unwrap();
    for (step, (g, c)) in on_gpu.iter().zip(&cpu).enumerate() {
        assert!(
            (g - c).abs() <= REL_TOL * c.abs(),
            "step {step}: GPU loss {g} vs CPU loss {c}"
        );
    }
    let last = *on_gpu.last().unwrap();
    assert!(
        last < FINAL_LOSS,
        "GPU: final loss {last} is not below {FINAL_LOSS}"
    );
}

#[test]
fn same_seed_gives_the_same_curve_on_the_cpu() {
    let config = MlpConfig {
        steps: 20,
        ..MlpConfig::default()
    };
    let a = train_mlp(Rc::new(CpuBackend::new()), &config, |_, _| {}).unwrap();
    let b = train_mlp(Rc::new(CpuBackend::new()), &config, |_, _| {}).unwrap();
    assert_eq!(a, b, "the CPU backend must be deterministic");
}
