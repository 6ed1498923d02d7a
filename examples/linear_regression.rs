//! The engine in fifty lines: fit y = 3x + 1 with AdamW.
//!
//! `cargo run --example linear_regression [-- --device cpu|gpu|auto]`
//!
//! Build a graph once, let autodiff append its backward pass, bind it to a backend through a
//! parameter store and an executor, attach the optimizer, then replay the plan every step.

use posflow::backend::{DeviceChoice, select_backend};
use posflow::exec::Executor;
use posflow::optim::{AdamW, Optimizer};
use posflow::params::ParamStore;
use posflow::{Graph, Init, TensorMeta};

fn main() -> posflow::Result<()> {
    let device = std::env::args()
        .skip_while(|a| a != "--device")
        .nth(1)
        .map(|d| d.parse())
        .transpose()?
        .unwrap_or(DeviceChoice::Auto);
    let backend = pollster::block_on(select_backend(device))?;
    println!("device: {}", backend.describe());

    // 1. The graph: loss = mean((w·x + b − y)²) over 64 points.
    let mut g = Graph::new();
    let x = g.input("x", TensorMeta::f32(&[64, 1]));
    let y = g.input("y", TensorMeta::f32(&[64, 1]));
    let w = g.param("w", &[1, 1], Init::Zeros)?;
    let b = g.param("b", &[1], Init::Zeros)?;
    let wx = g.matmul(x, w)?;
    let pred = g.add(wx, b)?;
    let err = g.sub(pred, y)?;
    let sq = g.mul(err, err)?;
    let loss = g.mean(sq, 0, false)?;

    // 2. Autodiff appends the backward pass and returns each parameter's gradient tensor.
    let grads = g.backward(loss)?;

    // 3. Parameters live in a store; the executor plans the graph and binds it to buffers.
    let params = ParamStore::init(backend, &g, 0)?;
    let mut outputs = vec![loss];
    outputs.extend(grads.iter().map(|(_, grad)| grad));
    let mut exec = Executor::new(&g, &outputs, &params)?;
    let mut adam = Optimizer::new(
        AdamW {
            lr: 0.1,
            ..AdamW::default()
        },
        &params,
    )?;
    adam.attach(&mut exec, &g, &grads, &params)?;

    // 4. Data, then the training loop: one run = forward + backward + update.
    let xs: Vec<f32> = (0..64).map(|i| i as f32 / 32.0 - 1.0).collect();
    let ys: Vec<f32> = xs.iter().map(|x| 3.0 * x + 1.0).collect();
    exec.set_f32(x, &xs)?;
    exec.set_f32(y, &ys)?;
    for step in 0..=300 {
        adam.prepare_step(0.1)?;
        exec.run()?;
        if step % 100 == 0 {
            println!("step {step:3}: loss {:.6}", exec.read_blocking(loss)?[0]);
        }
    }
    let w = pollster::block_on(params.read("w"))?[0];
    let b = pollster::block_on(params.read("b"))?[0];
    println!("learned y = {w:.3}·x + {b:.3}");
    Ok(())
}
