//! The `posflow` command line.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use posflow::arithmetic::Arithmetic;
use posflow::backend::{Backend, DeviceChoice, gpu::list_adapters, in_arithmetic, select_backend};
use posflow::mlp::{MlpConfig, train_mlp};

use cli::forward::{ForwardArgs, forward};
use cli::inspect::{EvalArgs, ExportArgs, SampleArgs, eval, export, sample};
use cli::prepare::{PrepareArgs, prepare};
use cli::results::{ResultsArgs, results};
use cli::study::{StudyArgs, study};
use cli::train::{TrainArgs, train};
use cli::translate::{BenchDecodeArgs, TranslateArgs, bench_decode, translate};
#[cfg(feature = "viz")]
use cli::viz::{VizArgs, viz};
use cli::{arithmetic, at_least_one, positive};

#[derive(Parser)]
#[command(
    name = "posflow",
    version,
    about = "Train small Transformers on any GPU through WebGPU"
)]
struct Cli {
    /// Where to run: `auto` takes a real GPU if there is one and the CPU otherwise (a software
    /// GPU such as lavapipe is slower than the CPU backend); `gpu` takes any GPU adapter.
    /// Defaults to POSFLOW_DEVICE, then `auto`.
    #[arg(long, global = true)]
    device: Option<DeviceChoice>,

    #[command(subcommand)]
    command: Option<Command>,

    /// With no command, `posflow` trains with these options: by default a character LM on Moby
    /// Dick (configs/moby_dick.toml).
    #[command(flatten)]
    train: TrainArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Train a Transformer from a TOML config, or resume a run (the default command).
    Train(TrainArgs),
    /// Run a study: every variant × seed of a study file (resumable), then a report with the
    /// claims' verdicts and pictures.
    Study(StudyArgs),
    /// Judge every study published under docs/studies/ again from its runs and write its report,
    /// docs/results/ and the README's results block (`--check`: compare, write nothing).
    Results(ResultsArgs),
    /// Loss and accuracy of a checkpoint per sequence-length bin, on its run's validation data.
    Eval(EvalArgs),
    /// Continue a prompt with a checkpoint's language model.
    Sample(SampleArgs),
    /// Decode sources with a seq2seq checkpoint (greedy or beam search).
    Translate(TranslateArgs),
    /// Copy a checkpoint without its optimizer state (a third of the size), for inference.
    Export(ExportArgs),
    /// A checkpoint's logits, loss and gradients on one batch, to a safetensors file: what a port
    /// of the model to another framework is checked against.
    Forward(ForwardArgs),
    /// A run's initial checkpoint and its training batches, as posflow's trainer draws them: what
    /// another trainer (python -m posflow_torch.train) needs to train the run as posflow would.
    Prepare(PrepareArgs),
    /// Train a two-layer MLP on an XOR-like regression task: the engine in miniature.
    Mlp(MlpArgs),
    /// Measure the engine's speed.
    Bench {
        #[command(subcommand)]
        what: Bench,
    },
    /// List the GPU adapters wgpu can see and the backend `auto` would pick.
    Devices,
    /// Look at checkpoints and metrics logs: position encodings, attention, loss curves, prompts.
    #[cfg(feature = "viz")]
    Viz(VizArgs),
}

#[derive(Args)]
struct MlpArgs {
    /// Training steps (at least 1).
    #[arg(long, default_value_t = MlpConfig::default().steps, value_parser = at_least_one)]
    steps: usize,
    /// Hidden units (1 to 4096).
    #[arg(long, default_value_t = MlpConfig::default().hidden,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    hidden: usize,
    #[arg(long, default_value_t = MlpConfig::default().lr, value_parser = positive)]
    lr: f32,
    #[arg(long, default_value_t = MlpConfig::default().seed)]
    seed: u64,
    /// Write the loss of every step to this file as JSON lines: {"step": 0, "loss": 0.137}.
    #[arg(long)]
    log: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Bench {
    /// GFLOP/s of square matrix products.
    Matmul {
        /// Matrix sizes (1 to 8192).
        #[arg(long, value_delimiter = ',', default_values_t = [256, 512, 1024, 2048],
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=8192))]
        sizes: Vec<usize>,
        /// Timed products per size (at least 1).
        #[arg(long, default_value_t = 5, value_parser = at_least_one)]
        repeats: usize,
        /// Time every kernel the shader has on each size as well as the op's own choice: each
        /// per-thread block and tile, 8, 16 or 32 depths per K-step, k unsplit or split in 4
        /// (GPU backends; to tune the choice on a new adapter).
        #[arg(long)]
        kernels: bool,
    },
    /// ms/step and tokens/s of one training step (forward, backward, AdamW) of a 4-layer
    /// d_model-128 causal LM on batches of 16 × 128 tokens (or the large shape).
    Train {
        /// peers (the peers' step), large (8 layers, d_model 512, 8 heads, FFN 2048, batch
        /// 32 × 256: where the products dominate) or study (the studies' Chomsky model: 5 post-LN
        /// layers, d_model 64, 8 heads, FFN 256, batch 32 × 40).
        #[arg(long, default_value = "peers")]
        shape: String,
        /// The CPU backend's arithmetic: native (the fastest here) or portable (the same bits
        /// on every machine).
        #[arg(long, default_value = "native", value_parser = arithmetic)]
        arithmetic: Arithmetic,
        /// Timed steps (at least 1).
        #[arg(long, default_value_t = 10, value_parser = at_least_one)]
        steps: usize,
        /// Untimed steps first.
        #[arg(long, default_value_t = posflow::bench::TrainBench::default().warmup)]
        warmup: usize,
        /// Models to time, each the peers' step with one change: an encoding preset by its name
        /// (learned is the peers' step; floater is re-solved every 100 steps, as the studies run
        /// it), floater_every_step (the authors' compatible form solved at every step, adjoint),
        /// floater_backprop, floater_additive, rk2, rk2_gated or rk4; an unknown name lists them.
        #[arg(long, value_delimiter = ',', default_values_t = ["learned".to_string()])]
        variants: Vec<String>,
    },
    /// Sentences/s of greedy and beam decoding with seq2seq checkpoints, side by side, on their
    /// run's evaluation sources (the first checkpoint's).
    Decode(BenchDecodeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The ops this thread runs start their parallel loops here (a study's workers join pools
    // of their own).
    let _pool = posflow::backend::CpuBackend::join_thread_pool(0);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Messages quote files from anyone (tensor names, configs): escape, never interpret.
            eprintln!("error: {}", posflow::error::printable(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> posflow::Result<()> {
    let choice = match cli.device {
        Some(c) => c,
        None => DeviceChoice::from_env()?.unwrap_or_default(),
    };
    match cli.command.unwrap_or(Command::Train(cli.train)) {
        Command::Train(args) => train(backend(choice)?, args),
        Command::Study(args) => study(choice, args),
        Command::Results(args) => results(args),
        Command::Eval(args) => eval(backend(choice)?, args),
        Command::Sample(args) => sample(backend(choice)?, args),
        // Its stdout is the translations alone, one per source, for pipes.
        Command::Translate(args) => translate(backend_noted_on_stderr(choice)?, args),
        Command::Export(args) => export(args),
        Command::Forward(args) => forward(backend(choice)?, args),
        Command::Prepare(args) => prepare(args),
        Command::Devices => devices(),
        #[cfg(feature = "viz")]
        Command::Viz(args) => viz(backend(choice)?, args),
        Command::Mlp(args) => mlp(backend(choice)?, args),
        Command::Bench {
            what: Bench::Decode(args),
        } => bench_decode(backend(choice)?, args),
        Command::Bench {
            what:
                Bench::Matmul {
                    sizes,
                    repeats,
                    kernels,
                },
        } if kernels => bench_matmul_kernels(&backend(choice)?, &sizes, repeats),
        Command::Bench {
            what: Bench::Matmul { sizes, repeats, .. },
        } => bench_matmul(&backend(choice)?, &sizes, repeats),
        Command::Bench {
            what:
                Bench::Train {
                    shape,
                    arithmetic,
                    steps,
                    warmup,
                    variants,
                },
        } => {
            // A misspelt shape is named before any adapter is opened.
            let shape = posflow::bench::TrainShape::parse(&shape)?;
            let backend = in_arithmetic(pollster::block_on(select_backend(choice))?, arithmetic)?;
            println!("device: {}", backend.describe());
            bench_train(&backend, shape, steps, warmup, &variants)
        }
    }
}

fn backend(choice: DeviceChoice) -> posflow::Result<Rc<dyn Backend>> {
    let backend = pollster::block_on(select_backend(choice))?;
    println!("device: {}", backend.describe());
    Ok(backend)
}

fn backend_noted_on_stderr(choice: DeviceChoice) -> posflow::Result<Rc<dyn Backend>> {
    let backend = pollster::block_on(select_backend(choice))?;
    eprintln!("device: {}", backend.describe());
    Ok(backend)
}

fn devices() -> posflow::Result<()> {
    let adapters = pollster::block_on(list_adapters());
    if adapters.is_empty() {
        println!("no GPU adapters");
    }
    for a in adapters {
        println!("adapter: {a}");
    }
    let backend = pollster::block_on(select_backend(DeviceChoice::Auto))?;
    println!("--device auto picks: {}", backend.describe());
    Ok(())
}

fn mlp(backend: Rc<dyn Backend>, args: MlpArgs) -> posflow::Result<()> {
    let config = MlpConfig {
        hidden: args.hidden,
        steps: args.steps,
        lr: args.lr,
        seed: args.seed,
        ..MlpConfig::default()
    };
    println!(
        "training a 2-{}-1 tanh MLP on y = x0*x1 ({} points, AdamW lr {})",
        config.hidden, config.points, config.lr
    );
    let bar = ProgressBar::new(config.steps as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} steps  loss {msg}  {per_sec}  eta {eta}")
            .expect("valid template"),
    );
    let losses = train_mlp(backend, &config, |_, loss| {
        bar.set_message(format!("{loss:.5}"));
        bar.inc(1);
    })?;
    bar.finish();
    let first = losses.first().copied().unwrap_or(f32::NAN);
    let last = losses.last().copied().unwrap_or(f32::NAN);
    println!(
        "loss {first:.5} -> {last:.5} (the variance of the target is {:.5})",
        1.0 / 9.0
    );
    if let Some(path) = args.log {
        let lines: String = losses
            .iter()
            .enumerate()
            .map(|(step, loss)| format!("{{\"step\": {step}, \"loss\": {loss}}}\n"))
            .collect();
        posflow::checkpoint::write_atomically(&path, lines.as_bytes())?;
        println!("wrote the loss curve to {}", path.display());
    }
    Ok(())
}

fn bench_matmul(backend: &Rc<dyn Backend>, sizes: &[usize], repeats: usize) -> posflow::Result<()> {
    println!("{:>6}  {:>10}  {:>9}", "size", "ms", "GFLOP/s");
    for row in posflow::bench::matmul(backend, sizes, repeats)? {
        println!(
            "{:>6}  {:>10.3}  {:>9.1}",
            row.size,
            row.seconds * 1e3,
            row.gflops
        );
    }
    print_tuning(backend);
    Ok(())
}

fn bench_matmul_kernels(backend: &Rc<dyn Backend>, sizes: &[usize], repeats: usize) -> posflow::Result<()> {
    if backend.kind() != posflow::backend::BackendKind::Gpu {
        return Err(posflow::Error::Input(
            "bench matmul --kernels times the GPU kernels: use --device gpu".into(),
        ));
    }
    println!("{}", backend.describe());
    println!("{:>6}  {:>28}  {:>10}  {:>9}", "size", "kernel", "ms", "GFLOP/s");
    posflow::bench::matmul_kernels(backend, sizes, repeats, |r| {
        let kernel = match r.kernel {
            Some(k) => format!(
                "{0}x{0} / {1} / {2} / {3}{4}",
                k.block,
                k.tile,
                k.kstep,
                k.splits,
                if k.prefetch { " prefetch" } else { "" }
            ),
            None => "op's choice".to_string(),
        };
        println!(
            "{:>6}  {:>28}  {:>10.3}  {:>9.1}",
            r.row.size,
            kernel,
            r.row.seconds * 1e3,
            r.row.gflops
        );
    })?;
    println!(
        "kernel: per-thread block / tile / depths per K-step / splits of k (prefetch: the next \
         K-step's loads in flight during this one's multiply-adds, on GPUs and sizes that are \
         multiples of 4; elsewhere the same kernel as without)"
    );
    Ok(())
}

fn bench_train(
    backend: &Rc<dyn Backend>,
    shape: posflow::bench::TrainShape,
    steps: usize,
    warmup: usize,
    variants: &[String],
) -> posflow::Result<()> {
    let base = shape.bench();
    let m = &base.model;
    let kind = match m.kind {
        posflow::model::ModelKind::TokenClassifier { n_classes } => {
            format!("token classifier ({n_classes} classes), {:?}-norm", m.norm)
        }
        _ => "causal LM, tied head".to_string(),
    };
    println!(
        "model: {kind}, {} layers, d_model {}, {} heads, FFN {}, vocab {}; batch {} x {} tokens; AdamW, \
         clipping {:?}; {warmup} warmup + {steps} timed steps",
        m.layers, m.d_model, m.heads, m.ffn, m.vocab, base.batch, base.len, base.optimizer.max_grad_norm
    );
    println!(
        "{:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}  loss",
        "variant", "parameters", "mean ms", "median ms", "best ms", "tokens/s", "dispatches", "vs first"
    );
    let mut first = None;
    for name in variants {
        let bench = posflow::bench::TrainBench {
            warmup,
            ..posflow::bench::TrainBench::variant(shape, name)?
        };
        let row = pollster::block_on(posflow::bench::train(backend, &bench, steps))?;
        let reference = *first.get_or_insert(row.mean_seconds);
        println!(
            "{name:<16} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.0} {:>10} {:>8.2}x  {:.3} -> {:.3}",
            row.parameters,
            row.mean_seconds * 1e3,
            row.median_seconds * 1e3,
            row.best_seconds * 1e3,
            row.tokens_per_second,
            row.dispatches.map_or("-".to_string(), |n| n.to_string()),
            row.mean_seconds / reference,
            row.first_loss,
            row.last_loss
        );
    }
    print_tuning(backend);
    Ok(())
}

/// What timing the kernels on this adapter chose and cost (before the timed steps), where it
/// was done: each product that runs another kernel than the op's own, with both times.
fn print_tuning(backend: &Rc<dyn Backend>) {
    let Some(tuning) = backend.tuning() else {
        return;
    };
    let changed: Vec<_> = tuning.sets.iter().filter(|t| t.chosen != 0).collect();
    println!(
        "kernels tuned: {} products timed on this adapter in {:.2} s, before the timed steps \
         (POSFLOW_TUNE=0: the ops' own choices); {} run another kernel than the op's own{}",
        tuning.sets.len(),
        tuning.seconds,
        changed.len(),
        if changed.is_empty() { "" } else { ":" }
    );
    for t in changed {
        let (own, own_seconds) = &t.candidates[0];
        let (chosen, seconds) = &t.candidates[t.chosen];
        println!(
            "  {}: {chosen} {:.3} ms, where the op's own {own} took {:.3} ms",
            t.what,
            seconds * 1e3,
            own_seconds * 1e3
        );
    }
}
