//! The metrics log: one JSON object per line, one line per training step or evaluation, so a run
//! can be plotted or compared while it is still going (`tail -f`, the visualizer, pandas).

#[cfg(not(target_arch = "wasm32"))]
use std::fs::File;
#[cfg(not(target_arch = "wasm32"))]
use std::io::{BufWriter, Write};
#[cfg(not(target_arch = "wasm32"))]
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::eval::EvalReport;
use crate::data::BinTotals;

#[cfg(not(target_arch = "wasm32"))]
use crate::error::{Error, Result};

/// One line of the log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    Train {
        step: usize,
        loss: f32,
        lr: f32,
        grad_norm: f32,
        tokens_per_s: f32,
    },
    Eval {
        step: usize,
        /// The length bin, e.g. "33-64", or "all".
        bin: String,
        loss: f32,
        accuracy: f32,
        tokens: usize,
        /// A seq2seq model's greedy decoding of the bin (absent for the other models).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decoded: Option<DecodedScores>,
        /// A classifier's scores of the bin (absent for the other models; then `tokens` counts
        /// its texts and `accuracy` is theirs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        classified: Option<ClassScores>,
        /// Each score's standard error over the bin's sequences (absent in logs written before
        /// posflow kept them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item_errors: Option<ItemErrors>,
    },
}

impl Record {
    /// The records of one evaluation after `step` steps: one per length bin, with a
    /// classifier's or a seq2seq model's scores where the report has them.
    pub fn evaluation(step: usize, report: &EvalReport) -> Vec<Record> {
        let bin =
            |lengths: &std::ops::RangeInclusive<usize>| format!("{}-{}", lengths.start(), lengths.end());
        let mut records = Vec::new();
        for (lengths, totals) in report.bins.bins() {
            records.push(Record::Eval {
                step,
                bin: bin(&lengths),
                loss: totals.mean_loss() as f32,
                accuracy: totals.accuracy() as f32,
                tokens: totals.tokens,
                decoded: None,
                classified: None,
                item_errors: Some(ItemErrors::forced(totals)),
            });
        }
        if let Some(classes) = &report.classes {
            for scores in &classes.bins {
                records.push(Record::Eval {
                    step,
                    bin: bin(&scores.lengths),
                    loss: scores.mean_loss() as f32,
                    accuracy: scores.confusion.accuracy() as f32,
                    tokens: scores.confusion.examples(),
                    decoded: None,
                    classified: Some(ClassScores {
                        macro_f1: scores.confusion.macro_f1() as f32,
                        confusion: scores.confusion.counts.clone(),
                    }),
                    item_errors: None,
                });
            }
        }
        if let Some(pairs) = &report.pairs {
            for ((lengths, forced), (_, decoded)) in pairs.forced.iter().zip(pairs.decoded.bins()) {
                records.push(Record::Eval {
                    step,
                    bin: bin(lengths),
                    loss: forced.mean_loss() as f32,
                    accuracy: forced.accuracy() as f32,
                    tokens: forced.tokens,
                    decoded: Some(DecodedScores {
                        sequences: decoded.sequences,
                        exact_match: decoded.exact_match() as f32,
                        token_accuracy: decoded.token_accuracy() as f32,
                        error_rate: decoded.error_rate() as f32,
                        bleu: decoded.bleu().score as f32,
                    }),
                    item_errors: Some(ItemErrors {
                        exact_match: decoded.exact_items.standard_error(),
                        token_accuracy: decoded.token_items.standard_error(),
                        error_rate: decoded.error_items.standard_error(),
                        ..ItemErrors::forced(forced)
                    }),
                    classified: None,
                });
            }
        }
        records
    }
}

/// What a classifier scored on one bin of text lengths.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassScores {
    pub macro_f1: f32,
    /// `confusion[true class][predicted class]`.
    pub confusion: Vec<Vec<usize>>,
}

/// What greedy decoding scored on one bin of a seq2seq evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodedScores {
    pub sequences: usize,
    pub exact_match: f32,
    pub token_accuracy: f32,
    pub error_rate: f32,
    pub bleu: f32,
}

/// Each score's standard error over the sequences of one bin (the delta method for a ratio of
/// sums, `data::RatioMoments`): how far another draw of as many sequences could move it. BLEU, a
/// corpus score, has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ItemErrors {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact_match: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_accuracy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<f64>,
}

impl ItemErrors {
    /// The teacher-forced loss's and accuracy's.
    fn forced(totals: &BinTotals) -> Self {
        Self {
            loss: totals.loss_items.standard_error(),
            accuracy: totals.accuracy_items.standard_error(),
            ..Self::default()
        }
    }
}

/// Natively only: the web reads logs as text (`viz::metrics::parse_metrics`).
#[cfg(not(target_arch = "wasm32"))]
pub struct MetricsLog {
    path: PathBuf,
    out: BufWriter<File>,
}

#[cfg(not(target_arch = "wasm32"))]
impl MetricsLog {
    /// Opens `path` for appending (a resumed run continues its log).
    pub fn append(path: &Path) -> Result<Self> {
        let file = File::options()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::Input(format!("metrics log {}: {e}", path.display())))?;
        Ok(Self {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        })
    }

    /// Opens the log of a run resumed after `step` completed steps. Lines the interrupted run wrote
    /// after its checkpoint are dropped (rewritten atomically), so the log reads as one run.
    pub fn resume(path: &Path, step: usize) -> Result<Self> {
        if path.exists() {
            let kept: String = Self::read(path)?
                .into_iter()
                .filter(|record| match *record {
                    // A train record's step is the step's index; an eval's, the steps completed.
                    Record::Train { step: s, .. } => s < step,
                    Record::Eval { step: s, .. } => s <= step,
                })
                .map(|record| serde_json::to_string(&record).expect("records serialize") + "\n")
                .collect();
            crate::checkpoint::write_atomically(path, kept.as_bytes())?;
        }
        Self::append(path)
    }

    /// Writes one line and flushes it, so readers see every finished step.
    pub fn write(&mut self, record: &Record) -> Result<()> {
        let line = serde_json::to_string(record).expect("records serialize");
        writeln!(self.out, "{line}")
            .and_then(|()| self.out.flush())
            .map_err(|e| Error::Input(format!("metrics log {}: {e}", self.path.display())))
    }

    /// Every record of a log file, for plots and tests.
    pub fn read(path: &Path) -> Result<Vec<Record>> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Input(format!("metrics log {}: {e}", path.display())))?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .map_err(|e| Error::Input(format!("metrics log {} line {}: {e}", path.display(), i + 1)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{ClassScores, ItemErrors, MetricsLog, Record};

    #[test]
    fn records_round_trip_and_appending_continues_the_log() {
        let dir = std::env::temp_dir().join(format!("posflow-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.jsonl");
        let _ = std::fs::remove_file(&path);
        let train = Record::Train {
            step: 3,
            loss: 2.5,
            lr: 1e-3,
            grad_norm: 0.75,
            tokens_per_s: 12000.0,
        };
        let eval = Record::Eval {
            step: 3,
            bin: "33-64".into(),
            loss: 2.25,
            accuracy: 0.5,
            tokens: 640,
            decoded: None,
            classified: None,
            item_errors: Some(ItemErrors {
                loss: Some(0.125),
                accuracy: Some(0.03125),
                ..ItemErrors::default()
            }),
        };
        let classified = Record::Eval {
            step: 3,
            bin: "1-7".into(),
            loss: 0.5,
            accuracy: 0.75,
            tokens: 4,
            decoded: None,
            classified: Some(ClassScores {
                macro_f1: 0.7,
                confusion: vec![vec![2, 1], vec![0, 1]],
            }),
            item_errors: None,
        };
        MetricsLog::append(&path).unwrap().write(&train).unwrap();
        MetricsLog::append(&path).unwrap().write(&eval).unwrap();
        MetricsLog::append(&path).unwrap().write(&classified).unwrap();
        assert_eq!(
            MetricsLog::read(&path).unwrap(),
            vec![train.clone(), eval.clone(), classified.clone()]
        );
        let first = std::fs::read_to_string(&path).unwrap();
        assert!(
            first.starts_with(r#"{"kind":"train","step":3,"loss":2.5"#),
            "{first}"
        );

        // A run resumed after 4 steps keeps steps 0..=3 and the eval after step 3, drops step 5.
        let later = Record::Train {
            step: 5,
            loss: 1.0,
            lr: 1e-3,
            grad_norm: 0.5,
            tokens_per_s: 1.0,
        };
        MetricsLog::append(&path).unwrap().write(&later).unwrap();
        let mut resumed = MetricsLog::resume(&path, 4).unwrap();
        assert_eq!(
            MetricsLog::read(&path).unwrap(),
            vec![train.clone(), eval.clone(), classified.clone()]
        );
        resumed.write(&later).unwrap();
        assert_eq!(
            MetricsLog::read(&path).unwrap(),
            vec![train, eval, classified, later]
        );

        std::fs::write(&path, "{\"kind\":\"train\"}\n").unwrap();
        let err = MetricsLog::read(&path).unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("missing field"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
