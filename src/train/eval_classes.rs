//! Evaluating a classifier: loss, accuracy, macro-F1 and the confusion matrix per bin of text
//! length, the training lengths' bin first.

use super::class_report::{ClassBinScores, ClassReport};
use super::eval::{EvalReport, Evaluator};
use crate::data::{ClassBatch, ClassData, argmax, cross_entropy};
use crate::error::Result;
use crate::params::ParamStore;
use crate::score::Confusion;

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
                for (index, rows) in bin.examples.chunks(rows.max(1)).take(max_batches).enumerate() {
                    let batch = ClassBatch::padded_to(rows, len)?;
                    let logits = self.logits_of(params, &batch, index).await?;
                    for (row, &truth) in batch.classes.iter().enumerate() {
                        let logits = &logits[row * classes..(row + 1) * classes];
                        scored.loss_sum += cross_entropy(logits, truth as usize);
                        scored.confusion.record(truth as usize, argmax(logits));
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
