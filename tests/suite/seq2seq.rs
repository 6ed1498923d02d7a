//! Seq2seq end to end: a pair task trains an encoder-decoder through the one trainer, resumes
//! exactly, evaluates every source-length bin by decoding, saves a checkpoint whose tokenizer is
//! the pair vocabulary; `posflow train` and `posflow translate` run it as a user does, and bad
//! input (an empty source, an unknown character, a malformed pairs file) is a clear error.

use crate::common::binary;
use crate::common::scratch as scratch_dir;

use std::rc::Rc;

use binary::posflow_in;
use posflow::backend::{Backend, CpuBackend};
use posflow::checkpoint::Checkpoint;
use posflow::data::TaskTokenizer;
use posflow::inference::SavedModel;
use posflow::train::{Progress, RunConfig, Trainer, VOCAB_FROM_DATA, fit};
use scratch_dir::scratch;

/// Reversing strings of 1 to 8 letters, trained on 1 to 4: a model small enough for a debug build.
const REVERSE: &str = r#"
[data]
task = "synthetic_pairs"
pairs = "reverse"
min_len = 1
max_len = 8
per_length = 60
train_max_len = 4

[model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 16
kind = { type = "seq2seq", decoder_layers = 1 }
posenc = { type = "sinusoidal" }

[train]
steps = 40
batch = 16
seed = 3
lr = 1e-2
warmup = 5
eval_batches = 2
"#;

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

struct Quiet;
impl Progress for Quiet {}

#[test]
fn a_pair_task_trains_resumes_exactly_and_is_scored_per_source_bin() {
    let run = RunConfig::from_toml(REVERSE, "reverse").unwrap();
    assert_eq!(
        run.model.vocab, VOCAB_FROM_DATA,
        "reading the config reads no data"
    );
    let steps = |trainer: &mut Trainer, n: usize| -> Vec<f32> {
        (0..n).map(|_| trainer.step().unwrap().loss).collect()
    };
    let mut whole = Trainer::new(cpu(), run.clone()).unwrap();
    assert_eq!(
        whole.run().model.vocab,
        3 + 26,
        "the vocabulary comes from the data"
    );
    let uninterrupted = steps(&mut whole, 40);
    assert!(
        uninterrupted[39] < uninterrupted[0] - 0.4,
        "the run should learn: {uninterrupted:?}"
    );
    let mut first = Trainer::new(cpu(), run.clone()).unwrap();
    let mut resumed = steps(&mut first, 15);
    let bytes = pollster::block_on(first.checkpoint())
        .unwrap()
        .to_bytes()
        .unwrap();
    let checkpoint = Checkpoint::from_bytes(&bytes, "seq2seq resume").unwrap();
    let mut second = Trainer::resume(cpu(), run, &checkpoint).unwrap();
    resumed.extend(steps(&mut second, 25));
    assert_eq!(resumed, uninterrupted);

    let report = pollster::block_on(whole.evaluate());
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let pairs = report
        .pairs
        .as_ref()
        .expect("a pair task's report scores decoding");
    let bins: Vec<_> = pairs.forced.iter().map(|(lengths, _)| lengths.clone()).collect();
    assert_eq!(
        bins,
        [1..=4, 5..=8],
        "held-out short strings, then the longer ones"
    );
    let data = whole.task().pair_data().unwrap();
    for ((lengths, totals), bin) in pairs.decoded.bins().zip(data.eval()) {
        // At most two batches of 16 of each bin.
        assert_eq!(totals.sequences, bin.pairs().len().min(32), "{lengths:?}");
        assert!(
            totals.error_rate() >= 0.0 && totals.token_accuracy() <= 1.0,
            "{lengths:?}"
        );
    }
    let table = report.to_string();
    assert!(
        table.contains("5-8") && table.contains("> trained") && table.contains("BLEU"),
        "{table}"
    );

    let saved = SavedModel::from_checkpoint(cpu(), &checkpoint).unwrap();
    assert!(matches!(saved.tokenizer, TaskTokenizer::Pairs(_)));
    let err = saved.generator().err().unwrap().to_string();
    assert!(err.contains("posflow translate"), "{err}");
}

#[test]
fn fit_runs_a_pair_task_and_saves_its_checkpoint() {
    let dir = scratch("seq2seq", "fit");
    let mut run = RunConfig::from_toml(REVERSE, "reverse").unwrap();
    run.train.steps = 6;
    run.train.checkpoint = Some(dir.join("reverse.safetensors"));
    run.train.metrics = Some(dir.join("reverse.jsonl"));
    let mut trainer = Trainer::new(cpu(), run).unwrap();
    let summary = fit(&mut trainer, &mut Quiet).unwrap();
    assert_eq!(summary.steps, 6);
    assert!(summary.last_eval.unwrap().pairs.is_some());
    let log = std::fs::read_to_string(dir.join("reverse.jsonl")).unwrap();
    assert!(log.contains(r#""bin":"5-8""#), "{log}");
    Checkpoint::load(dir.join("reverse.safetensors")).unwrap();
}

fn text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn train_then_translate_from_the_command_line_and_refuse_bad_sources() {
    let dir = scratch("seq2seq", "cli");
    std::fs::write(
        dir.join("reverse.toml"),
        REVERSE.replace("steps = 40", "steps = 6"),
    )
    .unwrap();
    let out = posflow_in(
        &dir,
        &[
            "train",
            "--config",
            "reverse.toml",
            "--out",
            "reverse.safetensors",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let printed = text(&out);
    assert!(
        printed.contains("BLEU") && printed.contains("> trained"),
        "{printed}"
    );

    // `posflow eval` scores every source-length bin by decoding, as training's evaluation does.
    let out = posflow_in(&dir, &["eval", "--checkpoint", "reverse.safetensors"]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let header = printed
        .lines()
        .find(|l| l.contains("BLEU"))
        .unwrap_or_else(|| panic!("{printed}"));
    assert!(header.contains("error") && header.contains("exact"), "{printed}");
    let rows: Vec<&str> = printed
        .lines()
        .filter(|l| l.trim_start().starts_with("1-4") || l.trim_start().starts_with("5-8"))
        .collect();
    assert_eq!(rows.len(), 2, "{printed}");
    assert!(rows[1].ends_with("> trained"), "{printed}");

    let translate = |args: &[&str]| {
        let mut all = vec!["translate", "--checkpoint", "reverse.safetensors"];
        all.extend_from_slice(args);
        posflow_in(&dir, &all)
    };
    let out = translate(&["--input", "abc", "--beam", "2", "--scores"]);
    assert!(out.status.success(), "{}", text(&out));
    // stdout holds the translation alone (the device goes to stderr).
    let line = String::from_utf8_lossy(&out.stdout);
    let (output, score) = line.trim().split_once('\t').unwrap();
    assert!(output.chars().all(|c| c.is_ascii_lowercase()), "{line}");
    assert!(score.parse::<f32>().unwrap() <= 0.0, "{line}");

    let out = translate(&["--input", " "]);
    assert!(!out.status.success());
    assert!(text(&out).contains("the input is empty"), "{}", text(&out));
    let out = translate(&["--input", "abC"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("unknown character 'C'"), "{}", text(&out));
    std::fs::write(dir.join("sources.txt"), "abc\n\ncab\n").unwrap();
    let out = translate(&["--file", "sources.txt"]);
    assert!(text(&out).contains("line 2 is empty"), "{}", text(&out));

    // A malformed pairs file: the error names the line.
    std::fs::write(dir.join("pairs.tsv"), "abc\tcba\nno tab here\n").unwrap();
    let config = REVERSE
        .replace(
            "task = \"synthetic_pairs\"\npairs = \"reverse\"\nmin_len = 1\nmax_len = 8\nper_length = 60\n",
            "task = \"text_pairs\"\npath = \"pairs.tsv\"\n",
        )
        .replace("max_len = 16", "max_len = 16\nvocab = 29");
    std::fs::write(dir.join("pairs.toml"), config).unwrap();
    let out = posflow_in(&dir, &["train", "--config", "pairs.toml"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("line 2"), "{}", text(&out));
}
