//! Evaluating a classifier: loss, accuracy, macro-F1 and the confusion matrix per bin of text
//! length, the training lengths' bin first.

use std::fmt;
use std::ops::RangeInclusive;

use super::eval::{EvalReport, Evaluator};
use crate::data::{ClassBatch, ClassData};
use crate::error::Result;
use crate::params::ParamStore;
use crate::score::Confusion;

/// What [`Evaluator::evaluate_classes`] measured.
#[derive(Clone, Debug)]
pub struct ClassReport {
    /// Training texts have at most this many characters: later bins measure extrapolation.
    pub train_max_len: usize,
    pub class_names: Vec<String>,
    pub bins: Vec<ClassBinScores>,
}

/// One bin's scores.
#[derive(Clone, Debug)]
pub struct ClassBinScores {
    /// Text lengths, in characters.
    pub lengths: RangeInclusive<usize>,
    /// The summed cross-entropy of its examples.
    pub loss_sum: f64,
    pub confusion: Confusion,
}

impl ClassBinScores {
    pub fn mean_loss(&self) -> f64 {
        self.loss_sum / self.confusion.examples().max(1) as f64
    }
}

impl Evaluator {
    /// Scores `params` on up to `max_batches` batches of `rows` examples of every held-out bin of
    /// `data`. A bin the model cannot take (texts longer than a learned table) is reported as a
    /// failure, the others are scored.
    pub async fn evaluate_classes(
        &mut self,
        params: &ParamStore,
        data: &ClassData,
        rows: usize,
        max_batches: usize,
    ) -> EvalReport {
        let mut report = EvalReport {
            train_len: data.train_max_len(),
            ..EvalReport::default()
        };
        let classes = data.class_names().len();
        let mut scores = ClassReport {
            train_max_len: data.train_max_len(),
            class_names: data.class_names().to_vec(),
            bins: Vec::new(),
        };
        for bin in data.bins() {
            let mut scored = ClassBinScores {
                lengths: bin.lengths.clone(),
                loss_sum: 0.0,
                confusion: Confusion::new(classes),
            };
            // [CLS] and the bin's longest text: one graph per bin.
            let len = bin.lengths.end() + 1;
            let result: Result<()> = async {
                for rows in bin.examples.chunks(rows.max(1)).take(max_batches) {
                    let batch = ClassBatch::padded_to(rows, len)?;
                    let logits = self.logits_of(params, &batch).await?;
                    for (row, &truth) in batch.classes.iter().enumerate() {
                        let logits = &logits[row * classes..(row + 1) * classes];
                        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                        let log_total = logits.iter().map(|&l| f64::from(l - max).exp()).sum::<f64>().ln();
                        scored.loss_sum += log_total - f64::from(logits[truth as usize] - max);
                        let predicted = (0..classes)
                            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                            .unwrap_or(0);
                        scored.confusion.record(truth as usize, predicted);
                    }
                }
                Ok(())
            }
            .await;
            match result {
                Ok(()) => scores.bins.push(scored),
                Err(e) => report.failures.push((*bin.lengths.start(), e.to_string())),
            }
        }
        report.classes = Some(scores);
        report
    }
}

impl fmt::Display for ClassReport {
    /// One row per bin of text lengths, marked past the training lengths, then each bin's
    /// confusion matrix.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(
            f,
            "{:>10}  {:>8}  {:>8}  {:>8}  {:>8}  {:>9}",
            "characters", "examples", "loss", "accuracy", "macro-F1", ""
        )?;
        for bin in &self.bins {
            let beyond = if *bin.lengths.start() > self.train_max_len {
                "> trained"
            } else {
                ""
            };
            writeln!(
                f,
                "{:>10}  {:>8}  {:>8.4}  {:>7.1}%  {:>8.3}  {beyond:>9}",
                format!("{}-{}", bin.lengths.start(), bin.lengths.end()),
                bin.confusion.examples(),
                bin.mean_loss(),
                100.0 * bin.confusion.accuracy(),
                bin.confusion.macro_f1(),
            )?;
        }
        let width = self.class_names.iter().map(|n| n.len()).max().unwrap_or(1).max(5);
        for bin in &self.bins {
            writeln!(
                f,
                "confusion, {}-{} characters (rows: true class, columns: predicted):",
                bin.lengths.start(),
                bin.lengths.end()
            )?;
            write!(f, "  {:>width$}", "")?;
            for name in &self.class_names {
                write!(f, "  {name:>width$}")?;
            }
            writeln!(f)?;
            for (name, row) in self.class_names.iter().zip(&bin.confusion.counts) {
                write!(f, "  {name:>width$}")?;
                for count in row {
                    write!(f, "  {count:>width$}")?;
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}
