//! `posflow eval`, `posflow sample` and `posflow export`: what a saved model does, and a copy of it
//! for inference.

use std::path::PathBuf;
use std::rc::Rc;

use clap::Args;
use posflow::backend::{Backend, CpuBackend};
use posflow::checkpoint::Checkpoint;
use posflow::data::BOS;
use posflow::data::CharTokenizer;
use posflow::inference::{MaskFiller, SavedModel};
use posflow::model::{Model, ModelKind};
use posflow::params::ParamStore;
use posflow::train::{
    DataTask, EvalBins, Evaluator, MetricsLog, Record, RunConfig, Task, check_eval_lengths,
    check_same_tokenizer, saved_run,
};

use super::{at_least_one, non_negative, sequence_length};
use rand::SeedableRng;

#[derive(Args)]
pub struct EvalArgs {
    #[arg(long)]
    checkpoint: PathBuf,
    /// Sequence lengths to evaluate at (a Chomsky task's: input lengths); longer than training
    /// measures extrapolation. A seq2seq model is scored on its pair data's source-length bins
    /// instead.
    #[arg(long, value_delimiter = ',', default_values_t = [64, 128, 256, 512], value_parser = sequence_length)]
    lengths: Vec<usize>,
    /// At most this many batches per length (default: the run's eval_batches).
    #[arg(long, value_parser = at_least_one)]
    batches: Option<usize>,
    /// The text file of a `text_file` run: a checkpoint never chooses what posflow reads.
    #[arg(long, conflicts_with = "config")]
    data: Option<PathBuf>,
    /// Take the data (a `text_file` run's file included) from this run config; its [data] must
    /// be the checkpoint's.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Evaluate as the run's training does: its [train] eval_lengths and eval_batches (nothing
    /// when it evaluates nothing), in place of --lengths and --batches.
    #[arg(long, conflicts_with_all = ["lengths", "batches"])]
    as_in_training: bool,
    /// Append the evaluation to this metrics log as posflow train writes it (one line per bin,
    /// at the checkpoint's step): what another trainer (python -m posflow_torch.train) calls.
    #[arg(long)]
    metrics: Option<PathBuf>,
}

#[derive(Args)]
pub struct ExportArgs {
    #[arg(long)]
    checkpoint: PathBuf,
    /// Where to write the weights-only checkpoint.
    #[arg(long)]
    output: PathBuf,
}

/// Writes the checkpoint's model without the optimizer state: a third of the size, for
/// `posflow sample`, the visualizer and the browser demo.
pub fn export(args: ExportArgs) -> posflow::Result<()> {
    let checkpoint = Checkpoint::load(&args.checkpoint)?;
    let before = std::fs::metadata(&args.checkpoint).map_or(0, |m| m.len());
    // Refuse what no model can be rebuilt from, before writing anything.
    SavedModel::from_checkpoint(Rc::new(CpuBackend::new()), &checkpoint)?;
    checkpoint.without_optimizer().write(&args.output)?;
    let after = std::fs::metadata(&args.output).map_or(0, |m| m.len());
    println!(
        "wrote {} ({} KB; the checkpoint with its optimizer state: {} KB)",
        args.output.display(),
        after / 1024,
        before / 1024
    );
    Ok(())
}

#[derive(Args)]
pub struct SampleArgs {
    #[arg(long)]
    checkpoint: PathBuf,
    /// The text to continue; every character must be in the model's vocabulary. For a masked
    /// LM, the text whose `<mask>`s to fill (e.g. "Call me <mask>shmael.").
    #[arg(long)]
    prompt: String,
    /// How many characters to generate (at most 2²⁰).
    #[arg(long, default_value_t = 200,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=1 << 20))]
    chars: usize,
    /// 0 always takes the most likely character; higher is more varied.
    #[arg(long, default_value_t = 0.8, value_parser = non_negative)]
    temperature: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Instead of continuing the prompt, print the distribution of the next character as JSON:
    /// {"a": 0.012, ...}, every token of the vocabulary (the special ones as "<eos>" etc.).
    #[arg(long)]
    probabilities: bool,
}

pub fn eval(backend: Rc<dyn Backend>, args: EvalArgs) -> posflow::Result<()> {
    check_eval_lengths(&args.lengths)?;
    let saved = SavedModel::load(backend, &args.checkpoint)?;
    let mut run = saved_run(&saved.metadata)?;
    if let Some(path) = &args.config {
        let config = RunConfig::load(path)?;
        if config.data.clone().without_file() != run.data {
            return Err(posflow::Error::Input(format!(
                "{}: its [data] is not the checkpoint's run's",
                path.display()
            )));
        }
        run.data = config.data;
    }
    if let Some(data) = args.data {
        run.data = run.data.with_file(data)?;
    }
    let task = DataTask::load(&run)?;
    check_same_tokenizer(&saved.metadata, &task.tokenizer())?;
    let batches = args.batches.unwrap_or(run.train.eval_batches);
    let lengths = match args.as_in_training {
        true => run.train.eval_lengths.clone(),
        false => args.lengths.clone(),
    };
    let scored_otherwise = task.pair_data().is_some() || task.class_data().is_some();
    if lengths.is_empty() && !scored_otherwise {
        println!(
            "{}: the run evaluates nothing ([train] eval_lengths is empty)",
            args.checkpoint.display()
        );
        return Ok(());
    }
    let mut evaluator = Evaluator::new(saved.model.clone());
    let report = match (task.pair_data(), task.class_data()) {
        // A seq2seq model is scored by decoding every source-length bin of its pair data.
        (Some(pairs), _) => {
            pollster::block_on(evaluator.evaluate_pairs(&saved.params, pairs, run.train.batch, batches))
        }
        // A classifier, on every text-length bin of its set.
        (_, Some(classes)) => {
            pollster::block_on(evaluator.evaluate_classes(&saved.params, classes, run.train.batch, batches))
        }
        (None, None) => {
            let sets = task.eval_sets(&lengths, run.train.batch, batches);
            pollster::block_on(evaluator.evaluate(&saved.params, sets, task.eval_bins(), task.train_len()))
        }
    };
    let trained = match task.eval_bins() {
        EvalBins::SetLength { train_max_len } => format!("inputs of up to {train_max_len}"),
        EvalBins::RowLength => format!("sequences of {}", task.train_len()),
    };
    let step = saved.metadata.training.step;
    println!(
        "{} at step {step} (trained on {trained}):\n{report}",
        args.checkpoint.display(),
    );
    if let Some(path) = &args.metrics {
        let mut log = MetricsLog::append(path)?;
        let step = usize::try_from(step).map_err(|_| {
            posflow::Error::Input(format!(
                "{}: step {step} is past this machine's counts",
                args.checkpoint.display()
            ))
        })?;
        for record in Record::evaluation(step, &report) {
            log.write(&record)?;
        }
    }
    Ok(())
}

pub fn sample(backend: Rc<dyn Backend>, args: SampleArgs) -> posflow::Result<()> {
    let saved = SavedModel::load(backend, &args.checkpoint)?;
    if matches!(saved.model.config().kind, ModelKind::MaskedLm {}) {
        return fill_masks(
            &saved.model,
            &saved.params,
            saved.tokenizer.chars()?,
            &args.prompt,
        );
    }
    let mut generator = saved.generator()?;
    // A checkpoint without a run config (not from `posflow train`) is taken for plain text.
    let starts_with_bos = saved_run(&saved.metadata).is_ok_and(|run| run.data.starts_with_bos());
    if starts_with_bos {
        generator = generator.starting_with_bos();
    }
    if args.probabilities {
        let mut context = if starts_with_bos { vec![BOS] } else { Vec::new() };
        context.extend(saved.tokenizer.chars()?.encode(&args.prompt)?);
        let probs = pollster::block_on(generator.next_probabilities(&context))?;
        let by_token: serde_json::Map<String, serde_json::Value> = probs
            .iter()
            .enumerate()
            .map(|(id, &p)| {
                let name = match saved.tokenizer.specials().get(id) {
                    Some(special) => Ok(special.to_string()),
                    None => saved.tokenizer.decode(&[id as i32]),
                };
                name.map(|name| (name, serde_json::Value::from(p)))
            })
            .collect::<posflow::Result<_>>()?;
        println!("{}", serde_json::Value::Object(by_token));
        return Ok(());
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let text = pollster::block_on(generator.complete(&args.prompt, args.chars, args.temperature, &mut rng))?;
    // The characters come from the checkpoint's tokenizer: shown, never interpreted.
    println!("{}{}", args.prompt, posflow::error::printable(&text));
    Ok(())
}

/// Prints `prompt` with its `<mask>`s filled by a masked LM, and each mask's three best guesses.
pub fn fill_masks(
    model: &Model,
    params: &ParamStore,
    tokenizer: &CharTokenizer,
    prompt: &str,
) -> posflow::Result<()> {
    let filler = MaskFiller::new(model, params, tokenizer)?;
    let filled = pollster::block_on(filler.fill(prompt, 3))?;
    println!("{prompt}\n{}", posflow::error::printable(&filled.text));
    for (i, guesses) in filled.guesses.iter().enumerate() {
        let ranked: Vec<String> = guesses
            .iter()
            .map(|(c, p)| format!("{:?} {:.1}%", c, 100.0 * p))
            .collect();
        println!(
            "  <mask> {}: {}",
            i + 1,
            posflow::error::printable(&ranked.join(", "))
        );
    }
    Ok(())
}
