//! What an adaptive FLOATER solve costs per step attempt: the `ode_flow` op with dopri5 (FLOATER's
//! compatible form at d 32: one flow over 3·layers rows of biases, Δ = 0.01, rtol 1e-5, atol 1e-7)
//! forward, and forward + backward with each gradient, on the CPU backend and the GPU backend
//! (any adapter, software ones included), at max_steps 10³ and 10⁶: a solve costs the attempts it
//! takes, so the two columns should agree. `cargo bench --bench dopri5 [-- POSITIONS...]`;
//! positions default to 64 256.

use std::rc::Rc;
use std::time::Instant;

use posflow::Result;
use posflow::backend::gpu::SoftwareAdapters;
use posflow::backend::{Backend, CpuBackend, GpuBackend};
use posflow::exec::Executor;
use posflow::graph::{Graph, Init};
use posflow::ode::{Activation, Grid, Method, Tolerance};
use posflow::ops::ode_flow::{FlowGradient, OdeFlow};
use posflow::params::ParamStore;

const D: usize = 32;
/// The compatible form's rows for 4 layers: q, k and v biases of each.
const ROWS: usize = 12;

/// (ms per run, step attempts of the forward, of the backward) over `runs` runs.
fn time(backend: &Rc<dyn Backend>, flow: OdeFlow, backward: bool, runs: usize) -> Result<(f64, f32, f32)> {
    let mut g = Graph::new();
    // θ and p0 as the config's initialisation draws them: small, so the flow is smooth.
    let theta = g.param("theta", &[flow.param_len()], Init::Normal(0.1))?;
    let p0 = g.param("p0", &[ROWS, D], Init::Uniform(0.5))?;
    let (traj, status) = g.ode_flow(flow, theta, p0)?;
    let mut outputs = vec![traj, status];
    if backward {
        let loss = g.sum_all(traj)?;
        let grads = g.backward(loss)?;
        outputs.push(grads.get(theta).expect("θ has a gradient"));
    }
    let params = ParamStore::init(backend.clone(), &g, 0)?;
    let exec = Executor::new(&g, &outputs, &params)?;
    // The first run compiles the pipelines.
    exec.run()?;
    let start = Instant::now();
    for _ in 0..runs {
        exec.run()?;
        pollster::block_on(exec.check())?;
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / runs as f64;
    let forward = exec.read_blocking(status)?[3];
    let backward_attempts = exec
        .plan()
        .checks
        .iter()
        .find(|c| c.tensor != status)
        .map(|c| exec.read_blocking(c.tensor).map(|s| s[3]))
        .transpose()?
        .unwrap_or(0.0);
    Ok((ms, forward, backward_attempts))
}

fn table(backend: &Rc<dyn Backend>, positions: &[usize]) {
    println!("\n{}", backend.describe());
    println!(
        "{:>9}  {:>9}  {:>8}  {:>8}  {:>10}  {:>10}  {:>12}",
        "positions", "pass", "attempts", "backward", "ms (10³)", "ms (10⁶)", "ms/attempt"
    );
    let runs = if backend.describe().contains("cpu") { 5 } else { 3 };
    for &n in positions {
        for (pass, gradient, backward) in [
            ("forward", FlowGradient::Adjoint, false),
            ("backprop", FlowGradient::Backprop, true),
            ("adjoint", FlowGradient::Adjoint, true),
        ] {
            let flow = |max_steps| OdeFlow {
                dim: D,
                hidden: D,
                activation: Activation::Tanh,
                grid: Grid {
                    positions: n,
                    delta: 0.01,
                },
                method: Method::Dopri5(Tolerance {
                    rtol: 1e-5,
                    atol: 1e-7,
                    max_steps,
                }),
                gradient,
            };
            // Alternating, so that load swings hit both.
            let measured = (|| {
                let small = time(backend, flow(1_000), backward, runs)?;
                let large = time(backend, flow(1_000_000), backward, runs)?;
                Ok::<_, posflow::Error>((small, large))
            })();
            match measured {
                Ok(((small, forward, back), (large, ..))) => {
                    // backprop's backward replays the forward: its attempts count twice.
                    let attempts = forward + back;
                    println!(
                        "{n:>9}  {pass:>9}  {forward:>8}  {back:>8}  {small:>10.1}  {large:>10.1}  {:>12.2}",
                        small / f64::from(attempts)
                    );
                }
                Err(e) => println!("{n:>9}  {pass:>9}  failed: {e}"),
            }
        }
    }
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let positions = if args.is_empty() { vec![64, 256] } else { args };
    table(&(Rc::new(CpuBackend::new()) as Rc<dyn Backend>), &positions);
    match pollster::block_on(GpuBackend::new(SoftwareAdapters::Allow)) {
        Ok(gpu) => table(&(Rc::new(gpu) as Rc<dyn Backend>), &positions),
        Err(e) => println!("\nno GPU backend: {e}"),
    }
}
