//! A classifier's predictions against the truth: the confusion matrix, accuracy and macro-F1.

use serde::{Deserialize, Serialize};

/// Counts of (true class, predicted class) over some examples.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confusion {
    /// `counts[truth][predicted]`.
    pub counts: Vec<Vec<usize>>,
}

impl Confusion {
    pub fn new(classes: usize) -> Self {
        Self {
            counts: vec![vec![0; classes]; classes],
        }
    }

    pub fn classes(&self) -> usize {
        self.counts.len()
    }

    /// Counts one example; a class outside the matrix is a caller's bug.
    pub fn record(&mut self, truth: usize, predicted: usize) {
        self.counts[truth][predicted] += 1;
    }

    pub fn examples(&self) -> usize {
        self.counts.iter().flatten().sum()
    }

    /// The share of examples predicted right (0 without examples).
    pub fn accuracy(&self) -> f64 {
        let right: usize = (0..self.classes()).map(|c| self.counts[c][c]).sum();
        ratio(right, self.examples())
    }

    /// The mean over classes of each class's F1 = 2·precision·recall / (precision + recall), over
    /// the classes that occur in the truth or the predictions (scikit-learn's `f1_score(average=
    /// "macro")` without `labels`); a class never predicted right scores 0. Every class counts
    /// alike, so a model that always answers the common class scores low.
    pub fn macro_f1(&self) -> f64 {
        let n = self.classes();
        let mut sum = 0.0;
        let mut present = 0;
        for c in 0..n {
            let truth: usize = self.counts[c].iter().sum();
            let predicted: usize = (0..n).map(|t| self.counts[t][c]).sum();
            if truth + predicted == 0 {
                continue;
            }
            present += 1;
            // F1 = 2·TP / (2·TP + FP + FN) = 2·TP / (truth + predicted).
            sum += ratio(2 * self.counts[c][c], truth + predicted);
        }
        if present == 0 { 0.0 } else { sum / present as f64 }
    }

    /// Adds another matrix of the same classes.
    pub fn merge(&mut self, other: &Confusion) {
        for (row, other) in self.counts.iter_mut().zip(&other.counts) {
            for (a, b) in row.iter_mut().zip(other) {
                *a += b;
            }
        }
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against scikit-learn 1.9.1: y_true = [0,0,0,0,1,1,2,2,2,2], y_pred = [0,0,1,2,1,1,2,2,0,2]:
    /// accuracy_score 0.7, f1_score(average="macro") 0.7071428571428572.
    #[test]
    fn accuracy_and_macro_f1_match_scikit_learn() {
        let truth = [0, 0, 0, 0, 1, 1, 2, 2, 2, 2];
        let predicted = [0, 0, 1, 2, 1, 1, 2, 2, 0, 2];
        let mut m = Confusion::new(3);
        for (&t, &p) in truth.iter().zip(&predicted) {
            m.record(t, p);
        }
        assert_eq!(m.counts, [[2, 1, 1], [0, 2, 0], [1, 0, 3]]);
        assert!((m.accuracy() - 0.7).abs() < 1e-12);
        assert!(
            (m.macro_f1() - 0.7071428571428572).abs() < 1e-12,
            "{}",
            m.macro_f1()
        );
    }

    /// Always answering the majority class: high accuracy, macro-F1 about half of it (scikit-learn:
    /// 0.47368421052631576).
    #[test]
    fn the_majority_answer_scores_low_macro_f1() {
        let mut m = Confusion::new(2);
        for _ in 0..9 {
            m.record(0, 0);
        }
        m.record(1, 0);
        assert!((m.accuracy() - 0.9).abs() < 1e-12);
        // Class 0: F1 = 18/19; class 1: 0.
        assert!((m.macro_f1() - 9.0 / 19.0).abs() < 1e-12);
        let mut empty = Confusion::new(2);
        assert_eq!((empty.accuracy(), empty.macro_f1()), (0.0, 0.0));
        empty.merge(&m);
        assert_eq!(empty, m);
    }
}
