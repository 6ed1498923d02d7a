//! The flow op against the CPU solvers, finite differences and torchdiffeq, on both backends.

use std::rc::Rc;

use super::dopri5::Dopri5Kernel;
use super::fixed::StepKernel;
use super::*;
use crate::backend::Backend;
use crate::exec::Executor;
use crate::graph::Init;
use crate::ode::Scheme;
use crate::params::ParamStore;
use crate::testing::*;

fn config(
    (dim, hidden): (usize, usize),
    activation: Activation,
    positions: usize,
    method: Method,
    gradient: FlowGradient,
) -> OdeFlow {
    OdeFlow {
        dim,
        hidden,
        activation,
        grid: Grid {
            positions,
            delta: 0.05,
        },
        method,
        gradient,
    }
}

fn fixed(scheme: Scheme, substeps: usize) -> Method {
    Method::Fixed { scheme, substeps }
}

/// θ and p0 as parameters (θ small, as FLOATER initialises h); the trajectory is the output.
fn flow_graph(flow: OdeFlow, blocks: usize) -> impl Fn(&mut Graph) -> Built {
    move |g| {
        let scale = 1.0 / (flow.dim.max(flow.hidden) as f32).sqrt();
        let theta = g
            .param("theta", &[flow.param_len()], Init::Uniform(scale))
            .unwrap();
        let p0 = param(g, "p0", &[blocks, flow.dim]);
        let (out, _) = g.ode_flow(flow, theta, p0).unwrap();
        Built { out, feeds: vec![] }
    }
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f32::max)
}

/// The GPU's trajectory within 1e-5 and its gradients within 1e-4 of the CPU reference.
fn check_gpu(flow: OdeFlow, blocks: usize) {
    check_gpu_within(flow, blocks, 1e-5, 1e-4);
}

fn check_gpu_within(flow: OdeFlow, blocks: usize, trajectory_tol: f32, gradient_tol: f32) {
    let build = &flow_graph(flow, blocks);
    let want = run(cpu(), build, 7, &Overrides::default());
    // Fixed steps have a kernel family per adapter kind, the GPUs' on subgroups or not: every set
    // runs on whatever adapter there is.
    let sets = match flow.method {
        Method::Fixed { .. } => gpu_kernel_sets(),
        Method::Dopri5(_) => gpu_with_kernels_for(AdapterKind::Gpu)
            .map(|gpu| ("GPU kernels", gpu))
            .into_iter()
            .collect(),
    };
    for (label, gpu) in sets {
        let got = run(gpu, build, 7, &Overrides::default());
        let what = format!("{label}, {flow:?}, {blocks} blocks");
        assert_flow_matches(&what, &got, &want, trajectory_tol, gradient_tol);
    }
}

/// Prints the GPU's largest relative differences, then asserts its trajectory within
/// `trajectory_tol` and its gradients within `gradient_tol` of the CPU's.
fn assert_flow_matches(what: &str, got: &Results, want: &Results, trajectory_tol: f32, gradient_tol: f32) {
    println!(
        "{what}: trajectory {:e}, dθ {:e}, dp0 {:e}",
        max_rel_diff(&got.out, &want.out),
        max_rel_diff(&got.grads["theta"], &want.grads["theta"]),
        max_rel_diff(&got.grads["p0"], &want.grads["p0"]),
    );
    let tol = trajectory_tol;
    assert_close(&format!("{what}: trajectory"), &got.out, &want.out, tol, tol);
    for (name, g) in &got.grads {
        let tol = gradient_tol;
        assert_close(&format!("{what}: d/d{name}"), g, &want.grads[name], tol, tol);
    }
}

/// ((d, hidden), activation, positions, scheme, substeps, blocks).
type Case = ((usize, usize), Activation, usize, Scheme, usize, usize);

const CASES: [Case; 9] = [
    ((6, 6), Activation::Relu, 9, Scheme::Euler, 1, 1),
    // p0 alone: no steps.
    ((6, 6), Activation::Relu, 1, Scheme::Midpoint, 2, 2),
    ((6, 6), Activation::Tanh, 17, Scheme::Midpoint, 3, 4),
    ((6, 11), Activation::Relu, 9, Scheme::Rk4, 3, 2),
    ((37, 37), Activation::Tanh, 65, Scheme::Rk4, 1, 3),
    ((37, 37), Activation::Relu, 33, Scheme::Midpoint, 3, 2),
    // Two quads of rows, the second half full (software adapters' kernels: one octet).
    ((9, 13), Activation::Tanh, 9, Scheme::Midpoint, 2, 6),
    // Two octets, the second a quarter full (three quads of records).
    ((5, 7), Activation::Relu, 7, Scheme::Rk4, 2, 10),
    // More rows than the 64 threads of a workgroup.
    ((70, 67), Activation::Tanh, 5, Scheme::Rk4, 2, 2),
];

#[test]
fn gpu_matches_cpu_with_backprop() {
    for (dims, activation, positions, scheme, substeps, blocks) in CASES {
        let method = fixed(scheme, substeps);
        check_gpu(
            config(dims, activation, positions, method, FlowGradient::Backprop),
            blocks,
        );
    }
}

#[test]
fn gpu_matches_cpu_with_adjoint() {
    for (dims, activation, positions, scheme, substeps, blocks) in CASES {
        // The other activation than the backprop test, for each shape.
        let activation = match activation {
            Activation::Relu => Activation::Tanh,
            Activation::Tanh => Activation::Relu,
        };
        let method = fixed(scheme, substeps);
        check_gpu(
            config(dims, activation, positions, method, FlowGradient::Adjoint),
            blocks,
        );
    }
}

/// Long solves take several dispatches (lavapipe stops a shader's loops after 65535 iterations
/// in all; one dispatch for the whole solve stopped after 591 Euler steps at d = 37 and 118 at
/// d = 128, silently).
#[test]
fn long_solves_match_cpu() {
    for gradient in [FlowGradient::Backprop, FlowGradient::Adjoint] {
        let cases = [
            ((37, 37), Activation::Tanh, 500, fixed(Scheme::Rk4, 1), 2),
            ((128, 128), Activation::Relu, 40, fixed(Scheme::Midpoint, 4), 1),
            // The largest size: a few steps per dispatch (one for backprop).
            ((256, 256), Activation::Tanh, 12, fixed(Scheme::Rk4, 2), 2),
        ];
        for (dims, activation, positions, method, blocks) in cases {
            let flow = OdeFlow {
                grid: Grid {
                    positions,
                    delta: 0.01,
                },
                ..config(dims, activation, positions, method, gradient)
            };
            for kind in [AdapterKind::Gpu, AdapterKind::Software] {
                assert!(flow.chunks(StepKernel::Forward, blocks, kind).len() > 1);
            }
            check_gpu(flow, blocks);
        }
    }
}

/// A product's two halves meet by a subgroup shuffle or through workgroup memory, added in the
/// same order: the GPUs' kernels give the same bits either way, on one pass of outputs or several.
#[test]
fn gpu_kernels_give_the_same_bits_on_subgroups_and_without() {
    let (Some(on), Some(off)) = (
        gpu_with(AdapterKind::Gpu, Some(true)),
        gpu_with(AdapterKind::Gpu, Some(false)),
    ) else {
        return;
    };
    for gradient in [FlowGradient::Backprop, FlowGradient::Adjoint] {
        for (dims, positions, blocks) in [((37, 11), 9, 3), ((200, 256), 3, 2)] {
            let flow = config(dims, Activation::Tanh, positions, fixed(Scheme::Rk4, 2), gradient);
            let build = &flow_graph(flow, blocks);
            let with = run(on.clone(), build, 7, &Overrides::default());
            let without = run(off.clone(), build, 7, &Overrides::default());
            let what = format!("{dims:?}, {gradient:?}");
            assert_eq!(with.out, without.out, "trajectory, {what}");
            assert_eq!(with.grads, without.grads, "gradients, {what}");
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    // Backprop is the exact gradient of the discrete solution; the adjoint is within O(dt⁴) of it.
    for gradient in [FlowGradient::Backprop, FlowGradient::Adjoint] {
        let flow = config((3, 4), Activation::Tanh, 5, fixed(Scheme::Rk4, 2), gradient);
        check_gradients(&flow_graph(flow, 2), 1e-2, 5e-3, 12);
    }
    let flow = config(
        (3, 3),
        Activation::Tanh,
        4,
        fixed(Scheme::Midpoint, 1),
        FlowGradient::Backprop,
    );
    check_gradients(&flow_graph(flow, 1), 1e-2, 5e-3, 12);
}

fn reference(case: &str, name: &str) -> Vec<f32> {
    let path = format!("{}/tests/reference/ode.safetensors", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    bytemuck::pod_collect_to_vec(file.tensor(&format!("{case}/{name}")).unwrap().data())
}

/// The committed torchdiffeq cases on both backends, with `src/ode/tests.rs`'s tolerances: the
/// trajectory and backprop's gradients (torch autograd through odeint), then odeint_adjoint's.
#[test]
fn matches_torchdiffeq() {
    // (case, activation, method, backprop tolerance, adjoint tolerance). ReLU's kinks defeat
    // dopri5's error estimate, so f32 and torch's f64 step sequences differ there (see
    // ode::tests::dopri5_matches_torchdiffeq).
    let cases = [
        (
            "midpoint_tanh_sub3",
            Activation::Tanh,
            fixed(Scheme::Midpoint, 3),
            1e-5,
            1e-5,
        ),
        ("dopri5_tanh", Activation::Tanh, dopri5(1000), 1e-4, 1e-4),
        ("dopri5_relu", Activation::Relu, dopri5(1000), 0.2, 2e-3),
    ];
    let blocks = 2;
    for (case, activation, method, backprop_tol, adjoint_tol) in cases {
        let flow = |gradient| OdeFlow {
            grid: Grid {
                positions: 9,
                delta: 0.1,
            },
            ..config((6, 6), activation, 9, method, gradient)
        };
        check_reference(
            "ode",
            case,
            &flow_graph(flow(FlowGradient::Backprop), blocks),
            backprop_tol,
            backprop_tol,
        );
        let over = Overrides {
            params: [("theta", "theta"), ("p0", "p0")]
                .into_iter()
                .map(|(p, f)| (p.to_string(), reference(case, f)))
                .collect(),
            upstream: Some(reference(case, "upstream")),
            ..Default::default()
        };
        for backend in backends() {
            let on = backend.describe();
            let got = run(
                backend,
                &flow_graph(flow(FlowGradient::Adjoint), blocks),
                0,
                &over,
            );
            for name in ["theta", "p0"] {
                let want = reference(case, &format!("adjoint/grad/{name}"));
                println!(
                    "{case} adjoint d/d{name} on {on}: {:e}",
                    max_rel_diff(&got.grads[name], &want)
                );
                assert_close(
                    &format!("{case} adjoint d/d{name} on {on}"),
                    &got.grads[name],
                    &want,
                    adjoint_tol,
                    adjoint_tol,
                );
            }
        }
    }
}

/// The forward alone, θ and p0 fed as inputs: (trajectory, status).
fn forward(backend: Rc<dyn Backend>, flow: OdeFlow, theta: &[f32], p0: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut g = Graph::new();
    let t = g.input("theta", TensorMeta::f32(&[flow.param_len()]));
    let p = g.input("p0", TensorMeta::f32(&[p0.len() / flow.dim, flow.dim]));
    let (traj, status) = g.ode_flow(flow, t, p).unwrap();
    let params = ParamStore::init(backend, &g, 0).unwrap();
    let exec = Executor::new(&g, &[traj, status], &params).unwrap();
    exec.set_f32(t, theta).unwrap();
    exec.set_f32(p, p0).unwrap();
    exec.run().unwrap();
    (
        exec.read_blocking(traj).unwrap(),
        exec.read_blocking(status).unwrap(),
    )
}

fn backends() -> Vec<Rc<dyn Backend>> {
    std::iter::once(cpu()).chain(gpu()).collect()
}

/// The CPU, then the GPU with each set of fixed-step kernels.
fn backends_each_kind() -> Vec<Rc<dyn Backend>> {
    std::iter::once(cpu())
        .chain(gpu_kernel_sets().into_iter().map(|(_, gpu)| gpu))
        .collect()
}

#[test]
fn non_finite_state_is_reported_with_block_and_time() {
    let (d, blocks, positions) = (4, 3, 6);
    let flow = OdeFlow {
        grid: Grid {
            positions,
            delta: 0.1,
        },
        ..config(
            (d, d),
            Activation::Relu,
            positions,
            fixed(Scheme::Euler, 2),
            FlowGradient::Backprop,
        )
    };
    // A huge θ: every block grows by ~10⁵ per position; block 1 starts at 10³⁰ and overflows
    // first, the others stay finite through the last position.
    let theta = vec![30.0; flow.param_len()];
    let mut p0 = vec![0.1; blocks * d];
    p0[d..2 * d].fill(1e30);
    let mut results = Vec::new();
    for backend in backends_each_kind() {
        let on = backend.describe();
        let (traj, status) = forward(backend, flow, &theta, &p0);
        assert_eq!(status[..2], [STATUS_NON_FINITE, 1.0], "on {on}: {status:?}");
        let failed_at = (status[2] / 0.1).round() as usize;
        assert!((1..positions).contains(&failed_at), "on {on}: {status:?}");
        for i in 0..positions {
            let row = &traj[(i * blocks + 1) * d..(i * blocks + 2) * d];
            assert_eq!(
                row.iter().all(|v| v.is_finite()),
                i < failed_at,
                "on {on}: position {i}"
            );
        }
        let err = check_status(&status).unwrap_err().to_string();
        assert!(err.contains("non-finite state in block 1 by t = 0."), "{err}");
        results.push((traj, status));
    }
    let (cpu_traj, cpu_status) = &results[0];
    for (gpu_traj, gpu_status) in &results[1..] {
        assert_eq!(cpu_status, gpu_status);
        // The other blocks agree.
        for i in 0..positions {
            for b in [0, 2] {
                let at = |t: &[f32]| t[(i * blocks + b) * d..(i * blocks + b + 1) * d].to_vec();
                assert_close(
                    &format!("block {b} at {i}"),
                    &at(gpu_traj),
                    &at(cpu_traj),
                    0.0,
                    1e-4,
                );
            }
        }
    }
    // A non-finite p0 fails at t = 0.
    p0[2 * d] = f32::NAN;
    p0[d..2 * d].fill(0.1);
    for backend in backends_each_kind() {
        let (_, status) = forward(backend, flow, &theta, &p0);
        assert_eq!(status, [STATUS_NON_FINITE, 2.0, 0.0, 0.0]);
    }
}

fn dopri5(max_steps: usize) -> Method {
    Method::Dopri5(Tolerance {
        rtol: 1e-5,
        atol: 1e-7,
        max_steps,
    })
}

/// dopri5 on the GPU: one step size for all blocks, chosen by the same controller in f32.
#[test]
fn dopri5_gpu_matches_cpu() {
    // ((d, hidden), activation, positions, blocks).
    let cases = [
        ((6, 6), Activation::Tanh, 9, 1),
        ((6, 11), Activation::Relu, 9, 3),
        ((37, 37), Activation::Tanh, 17, 2),
        ((37, 37), Activation::Relu, 9, 2),
        // More rows than the 64 threads of the workgroup.
        ((70, 67), Activation::Tanh, 5, 2),
    ];
    for gradient in [FlowGradient::Backprop, FlowGradient::Adjoint] {
        for (dims, activation, positions, blocks) in cases {
            let flow = config(dims, activation, positions, dopri5(1000), gradient);
            match activation {
                Activation::Tanh => check_gpu(flow, blocks),
                // ReLU's kinks make the step sequence hinge on rounding: the GPU's f32
                // controller takes other steps than the CPU's f64 one (as torchdiffeq's f32 and
                // f64 solves differ, see ode::tests::dopri5_matches_torchdiffeq).
                Activation::Relu => check_gpu_within(flow, blocks, 5e-4, 0.2),
            }
        }
    }
}

/// A long adaptive solve takes more units of work than one dispatch runs, so the controller is
/// handed over between chunks: backprop over 200 positions (t up to 10, θ at twice FLOATER's
/// initial scale: 20 attempts; 19 units per forward dispatch, 6 per backprop one), the
/// adjoint over 40 (one start and a few attempts per interval; 5 units per dispatch). The late
/// steps of the long solve are long (h ≈ 1), and dopri5's large coefficients amplify f32
/// rounding there: the CPU's and the GPU's roundings differ (coefficients rounded from f64 or
/// f32, fused multiply-adds), both take the same 20 attempts, and their answers drift apart by
/// (measured) 9.9e-5 for the trajectory and 3.1e-2 for backprop's dθ, which differentiates
/// through those roundings. The short cases of `dopri5_gpu_matches_cpu` hold tight tolerances.
#[test]
fn dopri5_long_solve_matches_cpu() {
    let blocks = 3;
    let cases = [
        (FlowGradient::Backprop, 200, 100, 2e-4, 6e-2),
        (FlowGradient::Adjoint, 40, 200, 1e-5, 1e-4),
    ];
    for (gradient, positions, max_steps, trajectory_tol, gradient_tol) in cases {
        let tol = Tolerance {
            rtol: 1e-5,
            atol: 1e-7,
            max_steps,
        };
        let flow = config(
            (37, 37),
            Activation::Tanh,
            positions,
            Method::Dopri5(tol),
            gradient,
        );
        let units = |kernel| flow.dopri5_chunks(&tol, blocks, kernel).0;
        match gradient {
            FlowGradient::Backprop => {
                assert!(units(Dopri5Kernel::Solve) < 20 && units(Dopri5Kernel::Backprop) < 10)
            }
            FlowGradient::Adjoint => assert!(units(Dopri5Kernel::Adjoint) < 10),
        }
        let Some(gpu) = gpu() else { return };
        let gain = 2.0 / 37f32.sqrt();
        let theta: Vec<f32> = random_vec(flow.param_len(), 5).iter().map(|v| v * gain).collect();
        let over = Overrides {
            params: [("theta", theta), ("p0", random_vec(blocks * 37, 6))]
                .into_iter()
                .map(|(name, v)| (name.to_string(), v))
                .collect(),
            ..Default::default()
        };
        let build = flow_graph(flow, blocks);
        let want = run(cpu(), &build, 0, &over);
        let got = run(gpu, &build, 0, &over);
        let what = format!("long {gradient:?}");
        assert_flow_matches(&what, &got, &want, trajectory_tol, gradient_tol);
    }
}

/// A smooth dopri5 problem of 2 blocks over 9 positions (Δ 0.1, max_steps 1000): the flow, θ
/// and p0.
fn nine_positions(gradient: FlowGradient) -> (OdeFlow, Vec<f32>, Vec<f32>) {
    let flow = OdeFlow {
        grid: Grid {
            positions: 9,
            delta: 0.1,
        },
        ..config((6, 6), Activation::Tanh, 9, dopri5(1000), gradient)
    };
    let theta: Vec<f32> = random_vec(flow.param_len(), 3).iter().map(|v| v * 0.4).collect();
    (flow, theta, random_vec(2 * 6, 4))
}

#[test]
fn dopri5_failures_match_on_cpu_and_gpu() {
    let (flow, theta, p0) = nine_positions(FlowGradient::Backprop);
    let limited = |max_steps| OdeFlow {
        method: dopri5(max_steps),
        ..flow
    };
    let mut nan_p0 = p0.clone();
    nan_p0[7] = f32::NAN;
    // A huge θ and p0 with ReLU: the first step overflows.
    let huge = vec![30.0; flow.param_len()];
    let big_p0 = vec![1e30; p0.len()];
    let relu = OdeFlow {
        activation: Activation::Relu,
        ..flow
    };
    // (flow, θ, p0, the first position not reached).
    let cases = [
        (limited(2), &theta, &p0, None),
        (limited(1), &theta, &p0, Some(1)),
        (flow, &theta, &nan_p0, Some(0)),
        (relu, &huge, &big_p0, Some(1)),
    ];
    for (flow, theta, p0, reached) in cases {
        let mut results = Vec::new();
        for backend in backends() {
            let on = backend.describe();
            let (traj, status) = forward(backend, flow, theta, p0);
            assert_eq!(status[..2], [STATUS_SOLVER_FAILED, -1.0], "on {on}: {status:?}");
            let failed_at = (status[2] / 0.1).round() as usize;
            assert!(
                failed_at < 9 && reached.is_none_or(|r| r == failed_at),
                "on {on}: {status:?}"
            );
            let n = p0.len();
            assert!(traj[failed_at * n..].iter().all(|v| v.is_nan()), "on {on}");
            assert!(traj[..failed_at * n].iter().all(|v| v.is_finite()), "on {on}");
            let err = check_status(&status).unwrap_err().to_string();
            let attempts = format!("after {} step attempts", status[3]);
            assert!(
                err.contains("dopri5's forward solve failed") && err.contains(&attempts),
                "{err}"
            );
            results.push((traj, status));
        }
        if let [(cpu_traj, cpu_status), (gpu_traj, gpu_status)] = &results[..] {
            // Where the step limit strikes can differ by a position: the first step's error
            // ratio (~4e-5 here) is at f32's rounding level, and the second step's growth
            // (ratio^-1/5) follows it (measured: t = 0.3 on the CPU, 0.4 on lavapipe for
            // max_steps 2).
            let (cpu_at, gpu_at) = (cpu_status[2] / 0.1, gpu_status[2] / 0.1);
            assert!(
                (cpu_at - gpu_at).abs() < 1.5,
                "{flow:?}: {cpu_status:?} {gpu_status:?}"
            );
            if reached.is_some() {
                assert_eq!(cpu_status, gpu_status);
            }
            let common = cpu_at.min(gpu_at).round() as usize * p0.len();
            let rows = |t: &[f32]| t[..common].to_vec();
            assert_close("reached rows", &rows(gpu_traj), &rows(cpu_traj), 1e-5, 1e-5);
        }
    }
    // A failing solve has NaN gradients.
    for gradient in [FlowGradient::Backprop, FlowGradient::Adjoint] {
        let build = flow_graph(
            OdeFlow {
                gradient,
                ..limited(2)
            },
            2,
        );
        for backend in backends() {
            let got = run(backend, &build, 7, &Overrides::default());
            assert!(got.grads.values().flatten().all(|v| v.is_nan()));
        }
    }
    // Gradients through the op: the CPU reference's, against finite differences.
    check_gradients(&flow_graph(flow, 2), 1e-2, 5e-3, 8);
}

#[test]
fn bad_shapes_are_errors() {
    let flow = config(
        (6, 6),
        Activation::Relu,
        9,
        fixed(Scheme::Rk4, 1),
        FlowGradient::Backprop,
    );
    let mut g = Graph::new();
    let theta = param(&mut g, "theta", &[96]);
    let short = param(&mut g, "short", &[95]);
    let p0 = param(&mut g, "p0", &[2, 6]);
    let wrong = param(&mut g, "wrong", &[2, 5]);
    let err = g.ode_flow(flow, theta, wrong).unwrap_err().to_string();
    assert!(
        err.contains("ode_flow") && err.contains("[96]") && err.contains("[2, 5]"),
        "{err}"
    );
    let err = g.ode_flow(flow, short, p0).unwrap_err().to_string();
    assert!(err.contains("ode_flow") && err.contains("[95]"), "{err}");
    let wide = OdeFlow {
        dim: 300,
        hidden: 300,
        ..flow
    };
    let err = g.ode_flow(wide, theta, p0).unwrap_err().to_string();
    assert!(err.contains("1..=256") && err.contains("d = 300"), "{err}");
    let none = OdeFlow {
        method: fixed(Scheme::Euler, 0),
        ..flow
    };
    let err = g.ode_flow(none, theta, p0).unwrap_err().to_string();
    assert!(err.contains("ode_flow: needs at least 1 substep"), "{err}");
    let too_tight = OdeFlow {
        method: Method::Dopri5(Tolerance {
            rtol: 1e-9,
            atol: 1e-12,
            max_steps: 1000,
        }),
        ..flow
    };
    let err = g.ode_flow(too_tight, theta, p0).unwrap_err().to_string();
    assert!(
        err.contains("rtol 0.000000001 is below what its f32 state resolves"),
        "{err}"
    );
    assert!(check_status(&[0.0, -1.0, 0.0]).is_err());
}

/// The forward and backward of `flow` with the statuses of both: (forward status, backward
/// status, dθ).
fn statuses(
    backend: Rc<dyn Backend>,
    flow: OdeFlow,
    theta: &[f32],
    p0: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut g = Graph::new();
    let t = g.param("theta", &[flow.param_len()], Init::Zeros).unwrap();
    let p = g
        .param("p0", &[p0.len() / flow.dim, flow.dim], Init::Zeros)
        .unwrap();
    let (traj, status) = g.ode_flow(flow, t, p).unwrap();
    let loss = g.sum_all(traj).unwrap();
    let grads = g.backward(loss).unwrap();
    let dtheta = grads.get(t).unwrap();
    let params = ParamStore::init(backend, &g, 0).unwrap();
    params.set("theta", theta).unwrap();
    params.set("p0", p0).unwrap();
    let exec = Executor::new(&g, &[status, dtheta], &params).unwrap();
    exec.run().unwrap();
    let backward = exec
        .plan()
        .checks
        .iter()
        .map(|c| c.tensor)
        .find(|&c| c != status)
        .unwrap();
    let checked = pollster::block_on(exec.check());
    let read = |t| exec.read_blocking(t).unwrap();
    let (forward, backward, dtheta) = (read(status), read(backward), read(dtheta));
    // The executor's check fails exactly when one of the statuses says so.
    assert_eq!(
        checked.is_err(),
        check_status(&forward).is_err() || check_status(&backward).is_err()
    );
    (forward, backward, dtheta)
}

/// An adjoint that runs out of steps where the forward did not fails with an error naming the
/// pass and its attempts, on the CPU and the GPU (it used to report ok with NaN gradients).
#[test]
fn a_failed_backward_solve_is_an_error() {
    let (flow, theta, p0) = nine_positions(FlowGradient::Adjoint);
    for backend in backends() {
        let on = backend.describe();
        let (forward, backward, dtheta) = statuses(backend.clone(), flow, &theta, &p0);
        assert_eq!((forward[0], backward[0]), (STATUS_OK, STATUS_OK), "on {on}");
        assert!(dtheta.iter().all(|v| v.is_finite()), "on {on}");
        let (forward_attempts, backward_attempts) = (forward[3], backward[3]);
        // The adjoint restarts its step size at each of the 8 intervals: it needs more attempts.
        assert!(
            backward_attempts > forward_attempts,
            "on {on}: {forward:?} {backward:?}"
        );
        let limited = OdeFlow {
            method: dopri5(forward_attempts as usize),
            ..flow
        };
        let (forward, backward, dtheta) = statuses(backend.clone(), limited, &theta, &p0);
        assert_eq!(forward[0], STATUS_OK, "on {on}: the forward still fits");
        assert_eq!(
            backward[..2],
            [STATUS_ADJOINT_FAILED, -1.0],
            "on {on}: {backward:?}"
        );
        assert_eq!(backward[3], forward_attempts, "on {on}: every attempt was used");
        assert!(dtheta.iter().all(|v| v.is_nan()), "on {on}");
        let err = check_status(&backward).unwrap_err().to_string();
        let attempts = format!("after {forward_attempts} step attempts");
        assert!(
            err.contains("adjoint solve (the backward pass) failed") && err.contains(&attempts),
            "on {on}: {err}"
        );
        // Backprop replays the forward, which fits: it succeeds.
        let backprop = OdeFlow {
            gradient: FlowGradient::Backprop,
            ..limited
        };
        let (_, backward, dtheta) = statuses(backend, backprop, &theta, &p0);
        assert_eq!(backward[0], STATUS_OK, "on {on}: {backward:?}");
        assert!(dtheta.iter().all(|v| v.is_finite()), "on {on}");
    }
}

/// A GPU dopri5 solve costs the attempts it takes, not what `max_steps` allows: on an easy
/// problem, the same dispatches and scratch with max_steps 10⁶ as with 10³, and the run (forward
/// and backward, both gradients) within 2× in time (+ 50 ms). It used to be ⌈max_steps / units⌉ dispatches
/// each, and minutes at 10⁵.
#[test]
fn dopri5_gpu_cost_follows_attempts_not_max_steps() {
    let Some(gpu) = gpu() else { return };
    let blocks = 2;
    for gradient in [FlowGradient::Backprop, FlowGradient::Adjoint] {
        let flow = |max_steps| config((8, 8), Activation::Tanh, 12, dopri5(max_steps), gradient);
        let (small, large) = (flow(1_000), flow(1_000_000));
        let metas = [
            TensorMeta::f32(&[small.param_len()]),
            TensorMeta::f32(&[12, blocks, 8]),
            TensorMeta::f32(&[12, blocks, 8]),
        ];
        let metas: Vec<&TensorMeta> = metas.iter().collect();
        let kernels = |flow: OdeFlow| {
            let backward = OdeFlowBackward { flow }.gpu(AdapterKind::Gpu, &metas, &[]);
            let forward = flow.gpu(AdapterKind::Gpu, &[metas[0], &TensorMeta::f32(&[blocks, 8])], &[]);
            [forward, backward].map(|k| (k.dispatches.len(), k.scratch))
        };
        assert_eq!(kernels(small), kernels(large), "{gradient:?}");
        let builds = [flow_graph(small, blocks), flow_graph(large, blocks)];
        let mut fastest = [f64::INFINITY; 2];
        for _ in 0..3 {
            for (build, fastest) in builds.iter().zip(&mut fastest) {
                let start = std::time::Instant::now();
                let got = run(gpu.clone(), build, 0, &Overrides::default());
                *fastest = fastest.min(start.elapsed().as_secs_f64());
                assert!(
                    got.grads.values().flatten().all(|v| v.is_finite()),
                    "{gradient:?}"
                );
            }
        }
        let [small, large] = fastest;
        // 50 ms of slack: on a fast GPU both take milliseconds and other tests' work jitters
        // them (an H100 with 16 test threads: 20 vs 4 ms), where the cost fixed here was minutes.
        assert!(
            large < 2.0 * small + 0.05,
            "{gradient:?}: max_steps 10⁶ took {large:.3} s, 10³ {small:.3} s"
        );
    }
}
