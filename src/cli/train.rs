//! `posflow train`: a run from a TOML config (or the default Moby Dick run), with a progress bar,
//! evaluation tables as they come, a checkpoint, and a sample of what the model learned.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use posflow::backend::Backend;
use posflow::checkpoint::{Checkpoint, remove_interrupted_save};
use posflow::data::{PairTokenizer, TaskTokenizer};
use posflow::inference::{DecodeOptions, Generator, Seq2SeqDecoder};
use posflow::model::{Activation, Block, History, ModelKind, Norm, RkStage};
use posflow::train::{DEFAULT_RUN, EvalReport, Progress, RunConfig, StepStats, Trainer, fit, saved_run};
use rand::SeedableRng;

#[derive(Args)]
pub struct TrainArgs {
    /// The run's TOML config (see configs/). Defaults to configs/moby_dick.toml, built in.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Continue the run saved in this checkpoint. Without --config, the checkpoint's own run,
    /// saved back to this file (and its metrics beside it, as .jsonl) unless --out and --metrics
    /// say otherwise: a path stored in a checkpoint is never used.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// The text file of a `text_file` run: needed to resume one without --config (a checkpoint
    /// never chooses what posflow reads); with --config, replaces [data] path.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Save the checkpoint here (overrides [train] checkpoint).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Append the metrics log here (overrides [train] metrics).
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// Start a new run (needs --config) from the parameters of this checkpoint that the model
    /// shares by name, e.g. a trained sinusoidal model for FLOATER's compatible form.
    #[arg(long, conflicts_with = "resume", requires = "config")]
    warm_start: Option<PathBuf>,
    /// Override [train] steps: the total, counting the steps a resumed run already made.
    #[arg(long)]
    steps: Option<usize>,
    /// Characters to generate after training from [train] sample_prompt (0: none; at most 2²⁰).
    #[arg(long, default_value_t = 200,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=1 << 20))]
    sample_chars: usize,
}

pub fn train(backend: Rc<dyn Backend>, args: TrainArgs) -> posflow::Result<()> {
    let checkpoint = args.resume.as_deref().map(Checkpoint::load).transpose()?;
    let mut run = match (&args.config, &checkpoint) {
        (Some(path), _) => RunConfig::load(path)?,
        (None, Some(checkpoint)) => saved_run(checkpoint.metadata())?,
        (None, None) => RunConfig::from_toml(DEFAULT_RUN, "configs/moby_dick.toml (built in)")?,
    };
    if let (None, Some(resumed)) = (&args.config, &args.resume) {
        run.train.checkpoint = Some(resumed.clone());
        run.train.metrics = Some(resumed.with_extension("jsonl"));
    }
    if let Some(data) = args.data {
        run.data = run.data.with_file(data)?;
    }
    if let Some(out) = args.out {
        run.train.checkpoint = Some(out);
    }
    if let Some(metrics) = args.metrics {
        run.train.metrics = Some(metrics);
    }
    if let Some(steps) = args.steps {
        run.train.steps = steps;
        // A short run still warms up, over all of its steps at most.
        run.train.warmup = run.train.warmup.min(steps);
        run.validate()?;
    }
    if let Some(path) = &run.train.checkpoint
        && remove_interrupted_save(path)?
    {
        println!(
            "removed {}.tmp, left by a save that was interrupted ({} itself is intact)",
            path.display(),
            path.display()
        );
    }
    let mut trainer = match (&checkpoint, &args.warm_start) {
        (Some(checkpoint), _) => {
            let trainer = Trainer::resume(backend, run, checkpoint)?;
            println!("resuming at step {}", trainer.steps_done());
            trainer
        }
        (None, Some(path)) => {
            let checkpoint = Checkpoint::load(path)?;
            let (trainer, start) = Trainer::warm_start(backend, run, &checkpoint)?;
            let fresh = start.fresh;
            println!(
                "warm start from {}: {} parameters loaded, {} new ({})",
                path.display(),
                trainer.params().iter().count() - fresh.len(),
                fresh.len(),
                fresh.join(", ")
            );
            for derived in start.derived {
                println!("{derived}");
            }
            trainer
        }
        (None, None) => Trainer::new(backend, run)?,
    };
    // After the data is loaded: it says the vocabulary.
    describe(trainer.run());
    if let Some(prompt) = &trainer.run().train.sample_prompt
        && args.sample_chars > 0
    {
        // Refused now rather than after the run: the sample is the last thing it does.
        match trainer.tokenizer() {
            TaskTokenizer::Chars(chars) => chars.encode_with_masks(prompt).map(drop),
            TaskTokenizer::Pairs(pairs) => pairs.encode_source(prompt).map(drop),
        }
        .map_err(|e| posflow::Error::Input(format!("[train] sample_prompt: {e}")))?;
    }
    let mut bar = Bar::new(&trainer);
    let summary = fit(&mut trainer, &mut bar)?;
    bar.finish();
    println!(
        "trained {} steps: loss {:.4} -> {:.4}, {:.0} tokens/s",
        summary.steps, summary.first_loss, summary.last_loss, summary.tokens_per_s
    );
    // After the data is loaded: it says the vocabulary.
    describe(trainer.run());
    if let Some(prompt) = &trainer.run().train.sample_prompt
        && args.sample_chars > 0
    {
        let chars = match trainer.tokenizer() {
            TaskTokenizer::Chars(chars) => chars,
            TaskTokenizer::Pairs(pairs) => return translate_sample(&trainer, &pairs, prompt),
        };
        if matches!(trainer.model().config().kind, ModelKind::MaskedLm {}) {
            println!("sample (each <mask> filled with its most likely character):");
            return super::inspect::fill_masks(trainer.model(), trainer.params(), &chars, prompt);
        }
        let mut generator = Generator::new(
            trainer.model(),
            trainer.params(),
            chars,
            trainer.model().config().max_len,
        )?;
        if trainer.run().data.starts_with_bos() {
            generator = generator.starting_with_bos();
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(trainer.run().train.seed);
        let text = pollster::block_on(generator.complete(prompt, args.sample_chars, 0.8, &mut rng))?;
        println!(
            "sample (temperature 0.8):\n{prompt}{}",
            posflow::error::printable(&text)
        );
    }
    Ok(())
}

/// A seq2seq run's sample: its prompt translated with a beam of 4.
fn translate_sample(trainer: &Trainer, tokenizer: &PairTokenizer, prompt: &str) -> posflow::Result<()> {
    let decoder = Seq2SeqDecoder::new(trainer.model(), trainer.params())?;
    let source = tokenizer.encode_source(prompt)?;
    let options = DecodeOptions {
        beam: 4,
        ..DecodeOptions::default()
    };
    let best = pollster::block_on(decoder.decode(&[source], &options))?;
    println!(
        "sample (beam 4): {prompt} → {}",
        posflow::error::printable(&tokenizer.decode_target(&best[0].tokens)?)
    );
    Ok(())
}

fn describe(run: &RunConfig) {
    let m = &run.model;
    let t = &run.train;
    println!(
        "model: {} layers, d_model {}, {} heads, ffn {}, vocab {}, position encoding {}",
        m.layers,
        m.d_model,
        m.heads,
        m.ffn,
        m.vocab,
        serde_json::to_string(&m.posenc).expect("a posenc serializes")
    );
    if let Some(range) = m.random_positions {
        println!(
            "       randomized positions: each batch's tokens at a sorted sample of distinct positions of 0..{range}"
        );
    }
    if let Some(caution) = m.posenc.encoding().caution(&m.facts()) {
        println!("       caution: {caution}");
    }
    // The block and its form, where they are not the plain pre-norm residual chain.
    let mut blocks = Vec::new();
    if m.block != Block::Residual {
        blocks.push(format!(
            "block {}",
            serde_json::to_string(&m.block).expect("a block serializes")
        ));
    }
    if m.rk_stage != RkStage::SubBlock {
        blocks.push("each stage the whole layer y + F(y) (the authors' code)".into());
    }
    if m.history != History::None {
        let history = serde_json::to_value(m.history).expect("a history serializes");
        blocks.push(format!("layer history {}", history.as_str().unwrap_or_default()));
    }
    if m.norm == Norm::Post {
        blocks.push("post-LN (a layer norm after each residual add)".into());
    }
    if m.has_embedding_norm() {
        blocks.push("a layer norm on the embeddings".into());
    }
    if m.init.is_some() || m.norm == Norm::Post {
        let init = serde_json::to_value(m.init_scheme()).expect("an init scheme serializes");
        blocks.push(format!("{} init", init.as_str().unwrap_or_default()));
    }
    if m.activation != Activation::Gelu {
        blocks.push("ReLU FFN".into());
    }
    if let Some(scale) = m.word_scale {
        blocks.push(format!(
            "word term × {:.4} (word_scale {})",
            scale.factor(m.head_dim()),
            serde_json::to_value(scale)
                .expect("a word scale serializes")
                .as_str()
                .unwrap_or_default()
        ));
    }
    let drops = [
        ("dropout", m.dropout),
        ("attention dropout", m.attention_dropout),
        ("activation dropout", m.activation_dropout),
    ];
    blocks.extend(
        drops
            .iter()
            .filter(|(_, p)| *p > 0.0)
            .map(|(site, p)| format!("{site} {p}")),
    );
    if !blocks.is_empty() {
        println!("       {}", blocks.join(", "));
    }
    println!(
        "training: {} steps of batch {}, lr {} ({:?} decay, {} warmup), seed {}",
        t.steps, t.batch, t.lr, t.decay, t.warmup, t.seed
    );
}

/// The progress bar: smoothed loss, tokens/s and ETA; evaluation tables printed above it. When
/// stderr is not a terminal the bar is hidden, so a line is printed every 5% instead.
struct Bar {
    bar: ProgressBar,
    smoothed_loss: Option<f32>,
    line_every: usize,
}

impl Bar {
    fn new(trainer: &Trainer) -> Self {
        let steps = trainer.run().train.steps;
        let bar = ProgressBar::new(steps as u64).with_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  eta {eta}")
                .expect("a valid template"),
        );
        bar.set_position(trainer.steps_done() as u64);
        Self {
            bar,
            smoothed_loss: None,
            line_every: (steps / 20).max(1),
        }
    }

    fn finish(&self) {
        self.bar.finish();
    }
}

impl Progress for Bar {
    fn step(&mut self, stats: &StepStats, tokens_per_s: f64) {
        let smoothed = match self.smoothed_loss {
            Some(s) => 0.9 * s + 0.1 * stats.loss,
            None => stats.loss,
        };
        self.smoothed_loss = Some(smoothed);
        let msg = format!(
            "loss {smoothed:.4}  {:.1}k tok/s  lr {:.2e}",
            tokens_per_s / 1e3,
            stats.lr
        );
        if self.bar.is_hidden() && (stats.step + 1).is_multiple_of(self.line_every) {
            println!("step {}: {msg}", stats.step + 1);
        }
        self.bar.set_message(msg);
        self.bar.inc(1);
    }

    fn evaluated(&mut self, step: usize, report: &EvalReport) {
        self.bar
            .suspend(|| println!("evaluation after step {step}:\n{report}"));
    }

    fn saved(&mut self, path: &Path, step: usize) {
        self.bar
            .suspend(|| println!("saved step {step} to {}", path.display()));
    }
}
