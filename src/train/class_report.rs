//! What a classifier's evaluation measured, bin by bin of text length, and its table.

use std::fmt;
use std::ops::RangeInclusive;

use crate::score::Confusion;

/// What [`super::Evaluator::evaluate_classes`] measured.
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
