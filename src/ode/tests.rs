//! The solvers against torchdiffeq (`tests/reference/gen_ode.py`), backprop through the solver
//! against finite differences and against the adjoint, and the errors.

use super::*;
use crate::arithmetic::Arithmetic;
use crate::testing::{assert_close, random_vec};

const DIM: usize = 6;
const BLOCKS: usize = 2;
const GRID: Grid = Grid {
    positions: 9,
    delta: 0.1,
};

fn floater(activation: Activation) -> FloaterDynamics {
    FloaterDynamics {
        dim: DIM,
        hidden: DIM,
        activation,
        arithmetic: Arithmetic::Native,
    }
}

/// One case of `tests/reference/ode.safetensors`.
struct Reference {
    theta: Vec<f32>,
    p0: Vec<f32>,
    upstream: Vec<f32>,
    out: Vec<f32>,
    backprop: Gradients,
    adjoint: Gradients,
}

fn reference(case: &str) -> Reference {
    let path = format!("{}/tests/reference/ode.safetensors", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let floats = |name: &str| -> Vec<f32> {
        let t = file
            .tensor(&format!("{case}/{name}"))
            .unwrap_or_else(|e| panic!("{path}: {case}/{name}: {e}"));
        bytemuck::pod_collect_to_vec(t.data())
    };
    Reference {
        theta: floats("theta"),
        p0: floats("p0"),
        upstream: floats("upstream"),
        out: floats("out"),
        backprop: Gradients {
            theta: floats("grad/theta"),
            p0: floats("grad/p0"),
        },
        adjoint: Gradients {
            theta: floats("adjoint/grad/theta"),
            p0: floats("adjoint/grad/p0"),
        },
    }
}

fn fixed(scheme: Scheme, substeps: usize) -> Method {
    Method::Fixed { scheme, substeps }
}

fn dopri5(rtol: f64, atol: f64) -> Method {
    Method::Dopri5(Tolerance {
        rtol,
        atol,
        max_steps: 10_000,
    })
}

/// Tolerances as |got − want| ≤ tol·(1 + |want|).
struct Tolerances {
    trajectory: f32,
    backprop: f32,
    adjoint: f32,
}

/// What the fixed-step methods and dopri5 with a smooth h reach (measured: ≤ 5e-7 on fixed grids,
/// ≤ 7.2e-6 for dopri5 at rtol 1e-5).
const TIGHT: Tolerances = Tolerances {
    trajectory: 1e-5,
    backprop: 1e-4,
    adjoint: 1e-4,
};

/// Solves the case both ways and compares the trajectory and both gradients with torchdiffeq.
fn check_case(case: &str, activation: Activation, method: Method, tol: Tolerances) {
    let r = reference(case);
    let dynamics = floater(activation);
    let flow = Flow {
        dynamics: &dynamics,
        theta: &r.theta,
        grid: GRID,
        method,
    };
    let recording = flow.record(&r.p0).unwrap();
    let solved = flow.solve(&r.p0).unwrap();
    assert_eq!(solved, recording.trajectory, "{case}: record and solve differ");
    let traj_tol = tol.trajectory;
    assert_close(&format!("{case} trajectory"), &solved, &r.out, traj_tol, traj_tol);
    let backprop = flow.backprop(&recording, &r.upstream).unwrap();
    let adjoint = flow.adjoint(&solved, &r.upstream).unwrap();
    println!(
        "{case}: trajectory {:e}, backprop {:e} {:e}, adjoint {:e} {:e} (largest |got − want| / max(1, |want|))",
        max_rel_diff(&solved, &r.out),
        max_rel_diff(&backprop.theta, &r.backprop.theta),
        max_rel_diff(&backprop.p0, &r.backprop.p0),
        max_rel_diff(&adjoint.theta, &r.adjoint.theta),
        max_rel_diff(&adjoint.p0, &r.adjoint.p0),
    );
    let gradients = [
        ("backprop", &backprop, &r.backprop, tol.backprop),
        ("adjoint", &adjoint, &r.adjoint, tol.adjoint),
    ];
    for (how, got, want, grad_tol) in gradients {
        assert_close(
            &format!("{case} {how} d/dθ"),
            &got.theta,
            &want.theta,
            grad_tol,
            grad_tol,
        );
        assert_close(
            &format!("{case} {how} d/dp0"),
            &got.p0,
            &want.p0,
            grad_tol,
            grad_tol,
        );
    }
}

#[test]
fn euler_matches_torchdiffeq() {
    check_case("euler_relu", Activation::Relu, fixed(Scheme::Euler, 1), TIGHT);
}

#[test]
fn midpoint_matches_torchdiffeq() {
    check_case(
        "midpoint_relu",
        Activation::Relu,
        fixed(Scheme::Midpoint, 1),
        TIGHT,
    );
    check_case(
        "midpoint_tanh_sub3",
        Activation::Tanh,
        fixed(Scheme::Midpoint, 3),
        TIGHT,
    );
}

#[test]
fn rk4_matches_torchdiffeq() {
    check_case("rk4_relu", Activation::Relu, fixed(Scheme::Rk4, 1), TIGHT);
    check_case("rk4_relu_sub5", Activation::Relu, fixed(Scheme::Rk4, 5), TIGHT);
}

#[test]
fn dopri5_matches_torchdiffeq() {
    check_case("dopri5_tanh", Activation::Tanh, dopri5(1e-5, 1e-7), TIGHT);
    // ReLU's kinks defeat dopri5's error estimate: at rtol 1e-5 torchdiffeq's own f64 solution is
    // 3.5e-4 from the exact one and its f32 solution 3.4e-4 from its f64 one, so step sequences
    // (and with them the discrete map that backprop differentiates) differ between f32 and f64.
    // Measured here: trajectory 3.2e-4, backprop 9.4e-2, adjoint 7.7e-4. FLOATER with ReLU should
    // use a fixed-step method (as the paper does).
    let relu = Tolerances {
        trajectory: 5e-4,
        backprop: 0.2,
        adjoint: 2e-3,
    };
    check_case("dopri5_relu", Activation::Relu, dopri5(1e-5, 1e-7), relu);
}

fn random_problem(activation: Activation, seed: u64) -> (FloaterDynamics, Vec<f32>, Vec<f32>, Vec<f32>) {
    let dynamics = floater(activation);
    let theta: Vec<f32> = random_vec(dynamics.param_len(), seed)
        .iter()
        .map(|v| 0.5 * v)
        .collect();
    let p0 = random_vec(BLOCKS * DIM, seed + 1);
    let upstream = random_vec(GRID.positions * BLOCKS * DIM, seed + 2);
    (dynamics, theta, p0, upstream)
}

fn loss(trajectory: &[f32], upstream: &[f32]) -> f64 {
    trajectory
        .iter()
        .zip(upstream)
        .map(|(x, u)| *x as f64 * *u as f64)
        .sum()
}

/// Backprop through each method agrees with central differences of the f32 solve, for every θ and
/// p0 element. (dopri5's step sizes move with θ under finite differences; at rtol 1e-6 that is
/// far below the f32 noise of the differences.)
#[test]
fn backprop_matches_finite_differences() {
    let (dynamics, theta, p0, upstream) = random_problem(Activation::Tanh, 3);
    let methods = [
        fixed(Scheme::Euler, 2),
        fixed(Scheme::Midpoint, 2),
        fixed(Scheme::Rk4, 2),
        dopri5(1e-6, 1e-8),
    ];
    for method in methods {
        let flow = |theta: &[f32], p0: &[f32]| {
            let flow = Flow {
                dynamics: &dynamics,
                theta,
                grid: GRID,
                method,
            };
            loss(&flow.solve(p0).unwrap(), &upstream)
        };
        let grads = Flow {
            dynamics: &dynamics,
            theta: &theta,
            grid: GRID,
            method,
        };
        let grads = grads.backprop(&grads.record(&p0).unwrap(), &upstream).unwrap();
        let eps = 1e-2;
        let name = method.name();
        let worst = std::cell::Cell::new(0.0f64);
        let check = |what: &str, i: usize, analytic: f32, numeric: f64| {
            let scale = 1.0f64.max(numeric.abs());
            worst.set(worst.get().max((analytic as f64 - numeric).abs() / scale));
            assert!(
                (analytic as f64 - numeric).abs() <= 1e-3 * scale,
                "{name} d loss / d {what}[{i}]: backprop {analytic}, finite difference {numeric}"
            );
        };
        for i in 0..theta.len() {
            let mut plus = theta.clone();
            plus[i] += eps;
            let mut minus = theta.clone();
            minus[i] -= eps;
            let numeric = (flow(&plus, &p0) - flow(&minus, &p0)) / (2.0 * eps as f64);
            check("theta", i, grads.theta[i], numeric);
        }
        for i in 0..p0.len() {
            let mut plus = p0.clone();
            plus[i] += eps;
            let mut minus = p0.clone();
            minus[i] -= eps;
            let numeric = (flow(&theta, &plus) - flow(&theta, &minus)) / (2.0 * eps as f64);
            check("p0", i, grads.p0[i], numeric);
        }
        println!("{name}: largest finite-difference gap {:e}", worst.get());
    }
}

/// With one position there is nothing to solve: the output is p0 and so is its gradient.
#[test]
fn one_position_is_the_initial_value() {
    let (dynamics, theta, p0, upstream) = random_problem(Activation::Tanh, 9);
    let upstream = &upstream[..p0.len()];
    for method in [fixed(Scheme::Rk4, 3), dopri5(1e-5, 1e-7)] {
        let flow = Flow {
            dynamics: &dynamics,
            theta: &theta,
            grid: Grid {
                positions: 1,
                delta: 0.1,
            },
            method,
        };
        let recording = flow.record(&p0).unwrap();
        assert_eq!(recording.trajectory, p0);
        for grads in [
            flow.backprop(&recording, upstream).unwrap(),
            flow.adjoint(&recording.trajectory, upstream).unwrap(),
        ] {
            assert_eq!(grads.p0, upstream);
            assert!(grads.theta.iter().all(|g| *g == 0.0));
        }
    }
}

/// The largest |a − b| / max(1, |b|).
/// The adjoint's fused stage (one hidden layer for h and its vector-Jacobian product) gives h and
/// aᵀ ∂h/∂p bit for bit as `eval` and `vjp` do, and its recorded factors give Σ wᵣ aᵣᵀ ∂h/∂θ as
/// `vjp` adds it row by row. Sizes past one column block (64) and with a remainder, three rows.
#[test]
fn fused_adjoint_stage_matches_eval_and_vjp() {
    let (d, k, rows, t) = (70, 67, 3, 0.37);
    for activation in [Activation::Relu, Activation::Tanh] {
        let dynamics = FloaterDynamics {
            dim: d,
            hidden: k,
            activation,
            arithmetic: Arithmetic::Native,
        };
        let raw: Vec<f32> = random_vec(dynamics.param_len(), 7)
            .iter()
            .map(|v| 0.2 * v)
            .collect();
        let theta = dynamics.prepare(&raw);
        let (p, a) = (random_vec(rows * d, 8), random_vec(rows * d, 9));
        let (mut h, mut dp, mut factors) = (vec![0.0; rows * d], vec![0.0; rows * d], Vec::new());
        dynamics.eval_vjp(&theta, t, (&p, &a), (&mut h, &mut dp), &mut factors);
        let (mut want_h, mut want_dp) = (vec![0.0; rows * d], vec![0.0; rows * d]);
        dynamics.eval(&theta, t, &p, &mut want_h);
        let weights = [0.5f32, -1.25, 2.0];
        let mut want_theta = vec![0.0f32; dynamics.param_len()];
        for (r, weight) in weights.iter().enumerate() {
            let row = r * d..(r + 1) * d;
            let scaled: Vec<f32> = a[row.clone()].iter().map(|v| weight * v).collect();
            let mut ignored = vec![0.0; d];
            dynamics.vjp(
                &theta,
                t,
                &p[row.clone()],
                &a[row.clone()],
                &mut want_dp[row.clone()],
                &mut vec![0.0; raw.len()],
            );
            dynamics.vjp(&theta, t, &p[row], &scaled, &mut ignored, &mut want_theta);
        }
        assert_eq!(h, want_h, "{activation:?}: h");
        assert_eq!(dp, want_dp, "{activation:?}: aᵀ ∂h/∂p");
        assert_eq!(factors.len(), rows * dynamics.factor_len());
        let mut got_theta = vec![0.0f32; dynamics.param_len()];
        dynamics.add_param_vjp(&factors, &weights, &mut got_theta);
        let gap = max_rel_diff(&got_theta, &want_theta);
        assert!(gap < 1e-5, "{activation:?}: Σ wᵣ aᵣᵀ ∂h/∂θ differs by {gap}");
    }
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0.0, f32::max)
}

/// Backprop through the solver and the adjoint are two discretisations of one gradient: they
/// agree to the solver's accuracy, and closer as the solver gets more accurate.
#[test]
fn backprop_and_adjoint_agree_within_solver_tolerance() {
    for activation in [Activation::Tanh, Activation::Relu] {
        let (dynamics, theta, p0, upstream) = random_problem(activation, 5);
        let gap = |method: Method| {
            let flow = Flow {
                dynamics: &dynamics,
                theta: &theta,
                grid: GRID,
                method,
            };
            let recording = flow.record(&p0).unwrap();
            let backprop = flow.backprop(&recording, &upstream).unwrap();
            let adjoint = flow.adjoint(&recording.trajectory, &upstream).unwrap();
            max_rel_diff(&backprop.theta, &adjoint.theta).max(max_rel_diff(&backprop.p0, &adjoint.p0))
        };
        let rk4 = gap(fixed(Scheme::Rk4, 10));
        let euler = gap(fixed(Scheme::Euler, 1));
        println!("{activation:?}: rk4 ×10 {rk4:e}; euler {euler:e}");
        assert!(rk4 < 1e-5, "{activation:?} rk4 with 10 substeps: {rk4}");
        // Euler's two gradients differ by its O(Δ) error: far apart, so the check above has teeth.
        assert!(euler > 1e-2, "{activation:?} euler: {euler}");
        if activation == Activation::Tanh {
            // Measured: 3.5e-4 at rtol 1e-4, 3.7e-6 at rtol 1e-6. (With ReLU the kinks defeat
            // dopri5's error control: 6.6e-2 and 4.2e-3; torchdiffeq's own pair differs by 0.17 on
            // the dopri5_relu reference case.)
            let coarse = gap(dopri5(1e-4, 1e-6));
            let fine = gap(dopri5(1e-6, 1e-8));
            println!("{activation:?}: dopri5 rtol 1e-4 {coarse:e}, rtol 1e-6 {fine:e}");
            assert!(coarse < 1e-3, "dopri5 rtol 1e-4: {coarse}");
            assert!(fine < 2e-5, "dopri5 rtol 1e-6: {fine}");
        }
    }
}

/// dp/dt = p², which blows up at t = 1/p(0).
struct Square;

impl Dynamics for Square {
    fn dim(&self) -> usize {
        1
    }

    fn param_len(&self) -> usize {
        0
    }

    fn param_groups(&self) -> Vec<std::ops::Range<usize>> {
        Vec::new()
    }

    fn eval(&self, _: &[f32], _: f32, p: &[f32], out: &mut [f32]) {
        out.iter_mut().zip(p).for_each(|(o, p)| *o = p * p);
    }

    fn vjp(&self, _: &[f32], _: f32, p: &[f32], a: &[f32], out_dp: &mut [f32], _: &mut [f32]) {
        out_dp
            .iter_mut()
            .zip(p.iter().zip(a))
            .for_each(|(o, (p, a))| *o = 2.0 * p * a);
    }

    fn factor_len(&self) -> usize {
        0
    }

    fn eval_vjp(
        &self,
        theta: &[f32],
        t: f32,
        (p, a): (&[f32], &[f32]),
        (out, out_dp): (&mut [f32], &mut [f32]),
        _: &mut Vec<f32>,
    ) {
        self.eval(theta, t, p, out);
        self.vjp(theta, t, p, a, out_dp, &mut []);
    }

    fn add_param_vjp(&self, _: &[f32], _: &[f32], _: &mut [f32]) {}
}

fn error_text(result: Result<impl std::fmt::Debug>) -> String {
    result.expect_err("the solve should fail").to_string()
}

/// Block 1 starts at 2 and blows up at t = 0.5; block 0 (0.1) would last until t = 10.
fn blow_up(method: Method) -> String {
    let flow = Flow {
        dynamics: &Square,
        theta: &[],
        grid: Grid {
            positions: 30,
            delta: 0.1,
        },
        method,
    };
    error_text(flow.solve(&[0.1, 2.0]))
}

#[test]
fn non_finite_state_names_the_block_and_time() {
    // Explicit Euler lags behind the pole and overflows f32 at t = 1.3.
    let err = blow_up(fixed(Scheme::Euler, 1));
    assert!(err.contains("non-finite state in block 1 at t = 1.3"), "{err}");
    assert!(err.contains("euler"), "{err}");
    let err = blow_up(fixed(Scheme::Rk4, 4));
    assert!(err.contains("non-finite state in block 1 at t = "), "{err}");

    let dynamics = floater(Activation::Tanh);
    let theta = vec![0.1; dynamics.param_len()];
    let mut p0 = vec![0.0; 2 * DIM];
    p0[DIM + 2] = f32::NAN;
    let flow = Flow {
        dynamics: &dynamics,
        theta: &theta,
        grid: GRID,
        method: dopri5(1e-5, 1e-7),
    };
    let err = error_text(flow.solve(&p0));
    assert!(
        err.contains("non-finite state in block 1 at t = 0 (dopri5)"),
        "{err}"
    );
}

#[test]
fn dopri5_step_limit_names_the_time_reached_and_the_block() {
    // dopri5 follows the pole at t = 0.5 with ever smaller steps and runs out of them there.
    let err = blow_up(Method::Dopri5(Tolerance {
        rtol: 1e-5,
        atol: 1e-7,
        max_steps: 200,
    }));
    assert!(
        err.contains("dopri5 step limit of 200 steps reached at t = 0.5"),
        "{err}"
    );
    assert!(err.contains("on the way to t = 2.9"), "{err}");
    assert!(err.contains("largest error estimate was in block 1"), "{err}");
}

#[test]
fn bad_arguments_are_errors_that_say_what_is_wrong() {
    let dynamics = floater(Activation::Relu);
    let theta = vec![0.0; dynamics.param_len()];
    let flow = |theta: &[f32], method: Method| {
        let flow = Flow {
            dynamics: &dynamics,
            theta,
            grid: GRID,
            method,
        };
        error_text(flow.solve(&[0.0; 2 * DIM]))
    };
    let err = flow(&theta[1..], fixed(Scheme::Euler, 1));
    assert!(
        err.contains("theta has 95 values, the dynamics takes 96"),
        "{err}"
    );
    let err = flow(&theta, fixed(Scheme::Euler, 0));
    assert!(err.contains("substeps must be at least 1"), "{err}");
    let err = flow(&theta, dopri5(1e-5, 0.0));
    assert!(err.contains("dopri5 needs rtol >= 0 and atol > 0"), "{err}");

    let ok = Flow {
        dynamics: &dynamics,
        theta: &theta,
        grid: GRID,
        method: fixed(Scheme::Midpoint, 1),
    };
    let err = error_text(ok.solve(&[0.0; 7]));
    assert!(
        err.contains("p0 has 7 values, not a positive multiple of d = 6"),
        "{err}"
    );
    let trajectory = ok.solve(&[0.0; 2 * DIM]).unwrap();
    let err = error_text(ok.adjoint(&trajectory, &trajectory[1..]));
    assert!(
        err.contains("trajectory of 108 and upstream of 107 values"),
        "{err}"
    );
}
