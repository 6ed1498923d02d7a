//! Training as a library: a task of one's own (any type implementing `Task`) trains through
//! `Trainer::with_task`, its vocabulary comes from its tokenizer, and it is evaluated per length
//! from its own evaluation sets.

use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend};
use posflow::data::{Batch, CharTokenizer, TaskTokenizer};
use posflow::train::{EvalSet, RunConfig, Task, TrainBatch, Trainer, VOCAB_FROM_DATA};

/// The alphabet over and over: every next character is predictable from the last one.
struct Alphabet {
    tokenizer: CharTokenizer,
    len: usize,
}

const LETTERS: &str = "abcdefghij";

impl Alphabet {
    /// `rows` windows of `len` + 1 characters starting at the letters `starts` gives.
    fn batch(&self, rows: usize, len: usize, starts: impl Fn(usize) -> usize) -> posflow::Result<Batch> {
        let text: String = LETTERS.repeat(len / LETTERS.len() + 2);
        let rows: Vec<(Vec<i32>, Vec<i32>)> = (0..rows)
            .map(|row| {
                let start = starts(row) % LETTERS.len();
                let ids = self.tokenizer.encode(&text[start..start + len + 1])?;
                Ok((ids[..len].to_vec(), ids[1..].to_vec()))
            })
            .collect::<posflow::Result<_>>()?;
        Batch::padded(&rows)
    }
}

impl Task for Alphabet {
    fn tokenizer(&self) -> TaskTokenizer {
        TaskTokenizer::Chars(self.tokenizer.clone())
    }

    fn train_len(&self) -> usize {
        self.len
    }

    fn train_batch(&self, seed: u64, step: usize, rows: usize) -> posflow::Result<TrainBatch> {
        let offset = (seed as usize).wrapping_mul(7) + step * 3;
        Ok(TrainBatch::Tokens(
            self.batch(rows, self.len, |row| offset + row)?,
        ))
    }

    fn eval_sets(&self, lengths: &[usize], rows: usize, max_batches: usize) -> Vec<EvalSet> {
        lengths
            .iter()
            .map(|&length| EvalSet {
                length,
                batches: (0..max_batches)
                    .map(|b| self.batch(rows, length, |row| b + row))
                    .collect(),
            })
            .collect()
    }
}

const RUN: &str = r#"
[data]
task = "moby_dick"
seq_len = 16

[model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 64
kind = { type = "causal_lm" }
posenc = { type = "none" }

[train]
steps = 60
batch = 4
lr = 1e-2
eval_lengths = [16, 64]
eval_batches = 1
"#;

#[test]
fn a_task_of_ones_own_trains_and_is_evaluated_per_length() {
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let run = RunConfig::from_toml(RUN, "own task").unwrap();
    assert_eq!(run.model.vocab, VOCAB_FROM_DATA);
    let task = Alphabet {
        tokenizer: CharTokenizer::from_text(LETTERS),
        len: 16,
    };
    let vocab = task.tokenizer.vocab_size();
    let mut trainer = Trainer::with_task(backend, run, Box::new(task)).unwrap();
    assert_eq!(trainer.run().model.vocab, vocab, "the vocabulary is the task's");
    let losses: Vec<f32> = (0..60).map(|_| trainer.step().unwrap().loss).collect();
    assert!(losses[59] < 0.25 * losses[0], "{losses:?}");
    let report = pollster::block_on(trainer.evaluate());
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let bins: Vec<_> = report
        .bins
        .bins()
        .map(|(range, totals)| (range, totals.accuracy()))
        .collect();
    // Trained on 16 characters, evaluated up to 64: the next letter needs no position.
    assert_eq!(bins.len(), 2, "lengths 16 and 64 fall in two bins: {bins:?}");
    assert!(bins.iter().all(|(_, accuracy)| *accuracy > 0.9), "{bins:?}");
}

/// A `[model] vocab` that is not the task's is refused, naming both.
#[test]
fn a_vocabulary_other_than_the_task_s_is_refused() {
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let run = RunConfig::from_toml(
        &RUN.replace("d_model = 16", "d_model = 16\nvocab = 50"),
        "own task",
    )
    .unwrap();
    let task = Alphabet {
        tokenizer: CharTokenizer::from_text(LETTERS),
        len: 16,
    };
    let vocab = task.tokenizer.vocab_size();
    let err = Trainer::with_task(backend, run, Box::new(task))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(&format!(
            "[model] vocab is 50, but the data's tokenizer has {vocab} ids"
        )),
        "{err}"
    );
}

/// A task of one's own named in `[data]` (`task = "custom"`): its checkpoint records that data
/// and not another's, and posflow, which cannot load it, says so when asked to resume it.
#[test]
fn a_custom_source_is_recorded_in_its_checkpoint_and_cannot_be_resumed_without_its_program() {
    let dir = std::env::temp_dir().join(format!("posflow-own-task-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let checkpoint = dir.join("alphabet.safetensors");
    let custom = RUN.replace(
        "[data]\ntask = \"moby_dick\"\nseq_len = 16",
        "[data]\ntask = \"custom\"\nsource = \"alphabet\"\ndescription = \"a-j over and over\"",
    );
    let mut run = RunConfig::from_toml(&custom, "own task").unwrap();
    run.train.steps = 4;
    run.train.checkpoint = Some(checkpoint.clone());
    let task = Alphabet {
        tokenizer: CharTokenizer::from_text(LETTERS),
        len: 16,
    };
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let mut trainer = Trainer::with_task(backend, run, Box::new(task)).unwrap();
    struct Quiet;
    impl posflow::train::Progress for Quiet {}
    posflow::train::fit(&mut trainer, &mut Quiet).unwrap();
    let saved = posflow::checkpoint::Checkpoint::load(&checkpoint).unwrap();
    let recorded = posflow::train::saved_run(saved.metadata()).unwrap();
    assert_eq!(
        recorded.data,
        posflow::train::DataConfig::Custom {
            source: "alphabet".into(),
            description: "a-j over and over".into()
        }
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_posflow"))
        .args(["--device", "cpu", "train", "--resume"])
        .arg(&checkpoint)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("[data] task = \"custom\" (source \"alphabet\") is data a program of its own supplies"),
        "{err}"
    );
    let empty = custom.replace("source = \"alphabet\"", "source = \" \"");
    let err = RunConfig::from_toml(&empty, "own task").unwrap_err().to_string();
    assert!(err.contains("source must name the data"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
