//! `posflow prepare`: what another trainer needs to train a run config exactly as posflow would
//! (the PyTorch package's `python -m posflow_torch.train`): the run's initial checkpoint (its
//! parameters from the run's seed, the model config, the tokenizer and the run config) and the
//! training batches of its steps, each as posflow's trainer draws it from the seed and the step
//! (a randomized model's positions included), so that the data, tokenizers and masking are
//! posflow's own.

use std::path::PathBuf;
use std::rc::Rc;

use clap::Args;
use posflow::backend::CpuBackend;
use posflow::checkpoint::write_atomically;
use posflow::model::posenc::sample_positions;
use posflow::train::{RunConfig, Trainer, ValueBatch, i32_safetensors, positions_seed};

#[derive(Args)]
pub struct PrepareArgs {
    /// The run config (TOML).
    #[arg(long)]
    config: PathBuf,
    /// The text file of a `text_file` run (replaces [data] path).
    #[arg(long)]
    data: Option<PathBuf>,
    /// The first step whose batch to write.
    #[arg(long, default_value_t = 0)]
    from: usize,
    /// How many steps' batches (default: the rest of the run's steps).
    #[arg(long)]
    steps: Option<usize>,
    /// The directory to write `init.safetensors` and `batches.safetensors` into (tensors
    /// `<step>/tokens`, `<step>/targets`, `<step>/mask`, `<step>/positions`, or a seq2seq
    /// model's `<step>/source`, `source_mask`, `target_in`, `targets`; i32).
    #[arg(long)]
    out: PathBuf,
}

pub fn prepare(args: PrepareArgs) -> posflow::Result<()> {
    let mut run = RunConfig::load(&args.config)?;
    if let Some(path) = args.data {
        run.data = run.data.with_file(path)?;
    }
    let trainer = Trainer::new(Rc::new(CpuBackend::new()), run)?;
    let run = trainer.run().clone();
    // Any step has its batch (a function of the seed and the step); by default the run's own.
    let total = run.train.steps;
    let steps = args.steps.unwrap_or(total.saturating_sub(args.from));
    std::fs::create_dir_all(&args.out)
        .map_err(|e| posflow::Error::Input(format!("creating {}: {e}", args.out.display())))?;
    let init = pollster::block_on(trainer.checkpoint())?.without_optimizer();
    init.write(args.out.join("init.safetensors"))?;
    let (seed, rows) = (run.train.seed, run.train.batch);
    let mut tensors = Vec::new();
    for step in args.from..args.from + steps {
        let batch = trainer.task().train_batch(seed, step, rows)?;
        let mut values = ValueBatch::from_train_batch(&batch);
        if let (Some(range), ValueBatch::Tokens { len, positions, .. }) =
            (run.model.random_positions, &mut values)
        {
            *positions = Some(sample_positions(positions_seed(seed, step), *len, range));
        }
        tensors.extend(values.tensors(&format!("{step}/")));
    }
    write_atomically(&args.out.join("batches.safetensors"), &i32_safetensors(&tensors)?)?;
    println!(
        "wrote {}: init.safetensors (step 0 of {total}) and the batches of steps {}..{}",
        args.out.display(),
        args.from,
        args.from + steps
    );
    Ok(())
}
