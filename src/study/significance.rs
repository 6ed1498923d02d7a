//! The rule a claim's verdict comes from: a one-sided t-test at the study's confidence level on
//! the per-seed values, so that a claim whose effect is not there (or goes the other way) is
//! called holding at most `1 − level` of the time. Two variants are compared by Welch's test (no
//! equal-variance assumption: one encoding may be far noisier than another); a fraction of a
//! baseline's steps by a one-sample test against 1.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The confidence level of a study that states none.
pub const DEFAULT_LEVEL: f64 = 0.95;

/// A one-sided test that an effect is positive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OneSided {
    /// The effect's estimate in the claimed direction: positive means as claimed (the better
    /// variant's mean ahead of the worse's, a fraction below 1).
    pub estimate: f64,
    /// Its one-sided lower confidence bound at the level: the effect is at least this large.
    pub lower_bound: f64,
    /// The one-sided p-value: the chance of an estimate this large were the effect 0.
    pub p: f64,
    /// The t distribution's degrees of freedom (Welch–Satterthwaite for two samples).
    pub df: f64,
    /// `p < 1 − level`: the effect clears the test.
    pub passes: bool,
}

/// Welch's test that `better` beats `worse`: lower values when `lower_is_better`, higher
/// otherwise. `None` with fewer than two values on either side, where no spread can be measured.
pub fn welch(better: &[f64], worse: &[f64], lower_is_better: bool, level: f64) -> Option<OneSided> {
    let (a, b) = (Moments::of(better)?, Moments::of(worse)?);
    let estimate = if lower_is_better {
        b.mean - a.mean
    } else {
        a.mean - b.mean
    };
    let (va, vb) = (a.variance / a.n, b.variance / b.n);
    let se = (va + vb).sqrt();
    let df = (va + vb) * (va + vb) / (va * va / (a.n - 1.0) + vb * vb / (b.n - 1.0));
    Some(one_sided(estimate, se, df, level))
}

/// The one-sample test that the mean of `values` is above 0. `None` with fewer than two values.
pub fn mean_above_zero(values: &[f64], level: f64) -> Option<OneSided> {
    let m = Moments::of(values)?;
    Some(one_sided(m.mean, (m.variance / m.n).sqrt(), m.n - 1.0, level))
}

/// The one-sample test that the mean of `values` is below `bound`. `None` with fewer than two
/// values.
pub fn mean_below(values: &[f64], bound: f64, level: f64) -> Option<OneSided> {
    let m = Moments::of(values)?;
    Some(one_sided(
        bound - m.mean,
        (m.variance / m.n).sqrt(),
        m.n - 1.0,
        level,
    ))
}

/// Mean and sample variance of at least two values.
struct Moments {
    n: f64,
    mean: f64,
    variance: f64,
}

impl Moments {
    fn of(values: &[f64]) -> Option<Self> {
        if values.len() < 2 {
            return None;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
        Some(Self { n, mean, variance })
    }
}

fn one_sided(estimate: f64, se: f64, df: f64, level: f64) -> OneSided {
    let alpha = 1.0 - level;
    // Every seed gave the same value (accuracy 100% on each, say): no spread to test against,
    // so the sign decides.
    if se == 0.0 || !df.is_finite() {
        let ahead = estimate > 0.0;
        return OneSided {
            estimate,
            lower_bound: estimate,
            p: if ahead { 0.0 } else { 1.0 },
            df,
            passes: ahead,
        };
    }
    let t = StudentsT::new(0.0, 1.0, df).expect("a positive, finite df");
    let p = t.sf(estimate / se);
    OneSided {
        estimate,
        lower_bound: estimate - t.inverse_cdf(level) * se,
        p,
        df,
        passes: p < alpha,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned to SciPy 1.x: `ttest_ind(a, b, equal_var=False, alternative='less')` gives
    /// t = −3.4125, df = 7.7111, p = 0.0048557, and its 95% interval's upper end −0.017192.
    #[test]
    fn welch_matches_scipy() {
        let a = [0.20, 0.22, 0.19, 0.21, 0.23];
        let b = [0.25, 0.24, 0.27, 0.26, 0.22];
        let test = welch(&a, &b, true, 0.95).unwrap();
        assert!((test.df - 7.711133400200602).abs() < 1e-9, "{test:?}");
        assert!((test.p - 0.0048556507574638134).abs() < 1e-9, "{test:?}");
        assert!((test.lower_bound - 0.01719193819951149).abs() < 1e-9, "{test:?}");
        assert!((test.estimate - 0.038).abs() < 1e-12);
        assert!(test.passes);
        // The same numbers as "higher is better" claim the other direction.
        let reversed = welch(&a, &b, false, 0.95).unwrap();
        assert!((reversed.p - (1.0 - 0.0048556507574638134)).abs() < 1e-9);
        assert!(!reversed.passes);
    }

    /// `ttest_1samp([0.5, 0.6, 0.55], 1.0, alternative='less')`: p = 0.0020450.
    #[test]
    fn mean_below_matches_scipy() {
        let test = mean_below(&[0.5, 0.6, 0.55], 1.0, 0.95).unwrap();
        assert!((test.p - 0.0020449983447606854).abs() < 1e-9, "{test:?}");
        assert_eq!(test.df, 2.0);
        assert!(test.passes);
    }

    #[test]
    fn overlapping_or_too_few_values_do_not_pass() {
        let overlapping = welch(&[0.20, 0.30, 0.25], &[0.22, 0.31, 0.27], true, 0.95).unwrap();
        assert!(
            overlapping.estimate > 0.0 && !overlapping.passes,
            "{overlapping:?}"
        );
        assert!(welch(&[0.1], &[0.5, 0.6], true, 0.95).is_none());
        assert!(mean_below(&[0.2], 1.0, 0.95).is_none());
    }

    /// A difference whose p lies between 0.01 and 0.05 holds at 95% and not at 99%.
    #[test]
    fn the_level_decides_at_the_boundary() {
        let a = [0.20, 0.23, 0.19, 0.22, 0.24];
        let b = [0.24, 0.22, 0.27, 0.25, 0.23];
        let at_95 = welch(&a, &b, true, 0.95).unwrap();
        let at_99 = welch(&a, &b, true, 0.99).unwrap();
        assert!(at_95.p > 0.01 && at_95.p < 0.05, "{at_95:?}");
        assert!(at_95.passes && !at_99.passes);
        assert!(at_95.lower_bound > 0.0 && at_99.lower_bound < 0.0);
    }

    #[test]
    fn identical_seeds_are_judged_by_the_sign() {
        assert!(welch(&[1.0, 1.0], &[0.5, 0.5], false, 0.95).unwrap().passes);
        assert!(!welch(&[0.5, 0.5], &[0.5, 0.5], false, 0.95).unwrap().passes);
    }
}
