//! `posflow translate`: a seq2seq checkpoint decodes a source given on the command line, or every
//! line of a file (a progress bar on stderr, one output line per input line on stdout).

use std::path::PathBuf;
use std::rc::Rc;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use posflow::Error;
use posflow::backend::Backend;
use posflow::inference::{DecodeOptions, MAX_BEAM, SavedModel, Seq2SeqDecoder};
use posflow::train::Task as _;

use super::{at_least_one, non_negative};

#[derive(Args)]
pub struct TranslateArgs {
    /// A seq2seq checkpoint written by `posflow train`.
    #[arg(long)]
    checkpoint: PathBuf,
    /// The source to translate.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    input: Option<String>,
    /// A file of sources, one per line.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Hypotheses kept per source (1 is greedy decoding).
    #[arg(long, default_value_t = 4,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_BEAM as u64))]
    beam: usize,
    /// fairseq's length penalty: hypotheses score log-probability / length^this.
    #[arg(long, default_value_t = DecodeOptions::default().length_penalty, value_parser = non_negative)]
    length_penalty: f32,
    /// At most max_len_a · source length + max_len_b tokens are generated.
    #[arg(long, default_value_t = DecodeOptions::default().max_len_a, value_parser = non_negative)]
    max_len_a: f32,
    #[arg(long, default_value_t = DecodeOptions::default().max_len_b,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=1 << 16))]
    max_len_b: usize,
    /// Sources decoded together.
    #[arg(long, default_value_t = 32, value_parser = at_least_one)]
    batch: usize,
    /// Also print each output's score (mean log-probability per token with the default penalty).
    #[arg(long)]
    scores: bool,
}

/// The largest file of sources read.
const MAX_FILE_BYTES: u64 = 1 << 30;

pub fn translate(backend: Rc<dyn Backend>, args: TranslateArgs) -> posflow::Result<()> {
    let saved = SavedModel::load(backend, &args.checkpoint)?;
    let tokenizer = match &saved.tokenizer {
        posflow::data::TaskTokenizer::Pairs(pairs) => pairs.clone(),
        posflow::data::TaskTokenizer::Chars(_) => {
            return Err(Error::Input(format!(
                "{} holds a language model, which continues text (posflow sample); translate takes a \
                 seq2seq checkpoint",
                args.checkpoint.display()
            )));
        }
    };
    let decoder = Seq2SeqDecoder::new(&saved.model, &saved.params)?;
    let texts = match (&args.input, &args.file) {
        (Some(input), _) => vec![input.clone()],
        (None, Some(path)) => read_lines(path)?,
        (None, None) => return Err(Error::Input("give a source with --input TEXT or --file F".into())),
    };
    // Every source is encoded before anything is decoded: a bad line fails fast, naming it.
    let sources = texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let which = if args.file.is_some() {
                format!("line {}", i + 1)
            } else {
                "the input".into()
            };
            if text.trim().is_empty() {
                return Err(Error::Input(format!(
                    "{which} is empty: there is nothing to translate"
                )));
            }
            tokenizer
                .encode_source(text)
                .map_err(|e| Error::Input(format!("{which}: {e}")))
        })
        .collect::<posflow::Result<Vec<_>>>()?;
    let options = DecodeOptions {
        beam: args.beam,
        length_penalty: args.length_penalty,
        max_len_a: args.max_len_a,
        max_len_b: args.max_len_b,
    };
    let bar = if sources.len() > args.batch {
        ProgressBar::new(sources.len() as u64).with_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} sources  {per_sec}  eta {eta}")
                .expect("a valid template"),
        )
    } else {
        ProgressBar::hidden()
    };
    for chunk in sources.chunks(args.batch) {
        let found = pollster::block_on(decoder.decode(chunk, &options))?;
        for hypothesis in found {
            let decoded = tokenizer.decode_target(&hypothesis.tokens)?;
            let text = posflow::error::printable(&decoded);
            bar.suspend(|| {
                if args.scores {
                    println!("{text}\t{:.4}", hypothesis.score);
                } else {
                    println!("{text}");
                }
            });
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok(())
}

/// The lines of a UTF-8 file of sources, bounded in size.
fn read_lines(path: &std::path::Path) -> posflow::Result<Vec<String>> {
    let cannot =
        |e: &dyn std::fmt::Display| Error::Input(format!("{}: cannot be read ({e})", path.display()));
    let metadata = std::fs::metadata(path).map_err(|e| cannot(&e))?;
    if !metadata.is_file() {
        return Err(cannot(&"it is not a regular file"));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(cannot(&"it is over posflow's limit of 1 GiB"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| cannot(&e))?;
    Ok(text.lines().map(str::to_owned).collect())
}

#[derive(Args)]
pub struct BenchDecodeArgs {
    /// Seq2seq checkpoints to time (at least one; all with one vocabulary).
    #[arg(long, required = true)]
    checkpoint: Vec<PathBuf>,
    /// Sources to decode per round, from the first checkpoint's evaluation pairs.
    #[arg(long, default_value_t = 256, value_parser = at_least_one)]
    sentences: usize,
    /// Beam sizes to time (1 is greedy).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4],
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_BEAM as u64))]
    beams: Vec<usize>,
    /// Sources decoded together.
    #[arg(long, default_value_t = 32, value_parser = at_least_one)]
    batch: usize,
    /// Timed rounds (the median is reported), after one untimed round.
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    rounds: usize,
}

/// `posflow bench decode`.
pub fn bench_decode(backend: Rc<dyn Backend>, args: BenchDecodeArgs) -> posflow::Result<()> {
    let models = args
        .checkpoint
        .iter()
        .map(|path| SavedModel::load(backend.clone(), path))
        .collect::<posflow::Result<Vec<_>>>()?;
    if let Some((path, _)) = args
        .checkpoint
        .iter()
        .zip(&models)
        .find(|(_, m)| m.tokenizer != models[0].tokenizer)
    {
        return Err(Error::Input(format!(
            "{} has another vocabulary than {}: the checkpoints must decode the same sources",
            path.display(),
            args.checkpoint[0].display()
        )));
    }
    let run = posflow::train::saved_run(&models[0].metadata)?;
    let task = posflow::train::DataTask::load(&run)?;
    let data = task.pair_data().ok_or_else(|| {
        Error::Input(format!(
            "{} was not trained on a pair task: bench decode times seq2seq checkpoints",
            args.checkpoint[0].display()
        ))
    })?;
    let sources: Vec<Vec<i32>> = data
        .eval()
        .iter()
        .flat_map(|bin| bin.pairs())
        .map(|pair| pair.source.clone())
        .take(args.sentences)
        .collect();
    let decoders = models
        .iter()
        .map(|m| Seq2SeqDecoder::new(&m.model, &m.params))
        .collect::<posflow::Result<Vec<_>>>()?;
    println!(
        "{} sources of {:.1} tokens on average, batches of {}, median of {} rounds (decoders alternating)",
        sources.len(),
        sources.iter().map(Vec::len).sum::<usize>() as f64 / sources.len() as f64,
        args.batch,
        args.rounds
    );
    let rows = posflow::bench::decode(&decoders, &sources, &args.beams, args.batch, args.rounds)?;
    let names: Vec<String> = args.checkpoint.iter().map(|p| p.display().to_string()).collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max("checkpoint".len());
    println!(
        "{:<width$} {:>5} {:>12} {:>10} {:>9} {:>11}",
        "checkpoint", "beam", "sentences/s", "tokens/s", "vs first", "output len"
    );
    for (name, per_beam) in names.iter().zip(&rows) {
        for (row, first) in per_beam.iter().zip(&rows[0]) {
            println!(
                "{name:<width$} {:>5} {:>12.1} {:>10.0} {:>8.2}x {:>11.2}",
                row.beam,
                row.sentences_per_second,
                row.tokens_per_second,
                row.sentences_per_second / first.sentences_per_second,
                row.mean_output_len
            );
        }
    }
    Ok(())
}
