//! The rule every comparison of a claim is tested by: the study's level, its test (a t-test, or
//! a permutation test where the study asks for one), paired where the compared runs share each
//! seed's data stream, and what "at chance" means for the study's metric.

use serde::{Deserialize, Serialize};

use super::permutation;
use super::significance::{self, OneSided};

/// How far from chance a mean may lie and still count as at chance, on the metric's 0–1 scale,
/// when a study states no margin of its own: 10 points, so that a binary task's 40–60% are "at
/// chance".
pub const DEFAULT_CHANCE_MARGIN: f64 = 0.1;

/// A study's test of each comparison.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    /// Welch's t-test for two variants (a paired t-test on shared data streams), a one-sample
    /// t-test otherwise.
    #[default]
    T,
    /// The same comparisons by permutation: relabelling the runs (sign flips when paired), exact
    /// up to 2²⁰ relabellings. The estimate's lower bound stays the t distribution's.
    Permutation,
}

impl TestKind {
    pub fn describe(self) -> &'static str {
        match self {
            Self::T => "one-sided t-test",
            Self::Permutation => "one-sided permutation test",
        }
    }
}

/// The study-wide rule: its level, test and chance margin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    /// The confidence level, in (0.5, 1); α = 1 − level.
    pub level: f64,
    pub test: TestKind,
    pub chance_margin: f64,
    /// Pair two variants' runs by seed where they share its data stream; off only to reproduce
    /// the earlier rule, which compared every pair by Welch's test.
    pub pair_shared_streams: bool,
}

impl Rule {
    /// t-tests at `level`, the default chance margin.
    pub const fn t_tests(level: f64) -> Self {
        Self {
            level,
            test: TestKind::T,
            chance_margin: DEFAULT_CHANCE_MARGIN,
            pair_shared_streams: true,
        }
    }

    /// The rule before multiplicity control and pairing: Welch's and one-sample t-tests.
    pub const fn earlier(level: f64) -> Self {
        Self {
            pair_shared_streams: false,
            ..Self::t_tests(level)
        }
    }

    pub fn alpha(&self) -> f64 {
        1.0 - self.level
    }

    /// The test that `better` beats `worse`: per seed when `paired` (the lists in the same seed
    /// order), otherwise as two samples. `None` with fewer than two values on a side.
    pub fn compare(
        &self,
        better: &[f64],
        worse: &[f64],
        paired: bool,
        lower_is_better: bool,
    ) -> Option<OneSided> {
        if paired {
            let gains: Vec<f64> = better
                .iter()
                .zip(worse)
                .map(|(a, b)| if lower_is_better { b - a } else { a - b })
                .collect();
            return self.above_zero(&gains);
        }
        let t = significance::welch(better, worse, lower_is_better, self.level)?;
        Some(match self.test {
            TestKind::T => t,
            TestKind::Permutation => self.with_p(t, permutation::two_sample(better, worse, lower_is_better)?),
        })
    }

    /// The test that the mean of `values` (gains, or margins past a bound) is above 0.
    pub fn above_zero(&self, values: &[f64]) -> Option<OneSided> {
        let t = significance::mean_above_zero(values, self.level)?;
        Some(match self.test {
            TestKind::T => t,
            TestKind::Permutation => self.with_p(t, permutation::sign_flip(values)?),
        })
    }

    fn with_p(&self, t: OneSided, p: f64) -> OneSided {
        OneSided {
            p,
            passes: p < self.alpha(),
            ..t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [f64; 5] = [0.20, 0.22, 0.19, 0.21, 0.23];
    const B: [f64; 5] = [0.25, 0.24, 0.27, 0.26, 0.22];

    #[test]
    fn a_permutation_rule_keeps_the_estimate_and_takes_the_permutation_p() {
        let t = Rule::t_tests(0.95);
        let perm = Rule {
            test: TestKind::Permutation,
            ..t
        };
        let (tw, pw) = (
            t.compare(&A, &B, false, true).unwrap(),
            perm.compare(&A, &B, false, true).unwrap(),
        );
        assert_eq!(tw.estimate, pw.estimate);
        assert_eq!(pw.p, 3.0 / 252.0);
        assert!(pw.passes);
        // Paired: the t-test on differences (SciPy's `ttest_rel(a, b, alternative='less')`:
        // p 0.033954680901135466) passes, the 32 sign flips (p 2/32) do not.
        let (tp, pp) = (
            t.compare(&A, &B, true, true).unwrap(),
            perm.compare(&A, &B, true, true).unwrap(),
        );
        assert!(tp.passes && (tp.p - 0.033954680901135466).abs() < 1e-9);
        assert!(!pp.passes && pp.p == 2.0 / 32.0);
    }
}
