//! The sampling error of a score over an evaluation set: a ratio of sums over its sequences
//! (correct tokens over tokens, loss over tokens, edits over reference tokens), kept as the sums
//! and cross-products its standard error needs, so that a study can say how much of a
//! difference between two runs the finite evaluation set alone could make.

/// Sums over items of (c, t) for the ratio Σc / Σt.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RatioMoments {
    n: usize,
    c: f64,
    t: f64,
    cc: f64,
    ct: f64,
    tt: f64,
}

impl RatioMoments {
    /// Adds one item (a sequence) with numerator `c` and denominator `t`.
    pub fn record(&mut self, c: f64, t: f64) {
        self.n += 1;
        self.c += c;
        self.t += t;
        self.cc += c * c;
        self.ct += c * t;
        self.tt += t * t;
    }

    pub fn add(&mut self, other: &Self) {
        self.n += other.n;
        self.c += other.c;
        self.t += other.t;
        self.cc += other.cc;
        self.ct += other.ct;
        self.tt += other.tt;
    }

    /// The ratio's standard error over items (the delta method for a ratio of means:
    /// √(Σ(cᵢ − R·tᵢ)² / (n(n − 1))) / t̄, the items a sample of the task's sequences);
    /// `None` with fewer than two items or nothing in the denominator.
    pub fn standard_error(&self) -> Option<f64> {
        if self.n < 2 || self.t <= 0.0 {
            return None;
        }
        let n = self.n as f64;
        let r = self.c / self.t;
        let squares = (self.cc - 2.0 * r * self.ct + r * r * self.tt).max(0.0);
        Some((squares / (n * (n - 1.0))).sqrt() / (self.t / n))
    }
}

#[cfg(test)]
mod tests {
    use super::RatioMoments;

    /// With every denominator 1 the ratio is a mean, and its error the sample sd over √n.
    #[test]
    fn a_mean_of_items_has_the_sample_sd_over_root_n() {
        let mut m = RatioMoments::default();
        for x in [1.0, 0.0, 1.0, 1.0, 0.0] {
            m.record(x, 1.0);
        }
        // Mean 0.6, sample variance 0.3, n 5.
        assert!((m.standard_error().unwrap() - (0.3f64 / 5.0).sqrt()).abs() < 1e-12);
    }

    /// Accuracy pooled over sequences of unequal length, against the formula worked by hand:
    /// items (3 of 4), (1 of 2), (2 of 2): R = 6/8, residuals 0, −0.5, 0.5, Σ² = 0.5,
    /// √(0.5 / 6) / (8/3) = 0.10825.
    #[test]
    fn a_pooled_ratio_follows_the_delta_method() {
        let mut m = RatioMoments::default();
        for (c, t) in [(3.0, 4.0), (1.0, 2.0), (2.0, 2.0)] {
            m.record(c, t);
        }
        assert!((m.standard_error().unwrap() - (0.5f64 / 6.0).sqrt() / (8.0 / 3.0)).abs() < 1e-12);
        let mut halves = RatioMoments::default();
        halves.record(3.0, 4.0);
        let mut rest = RatioMoments::default();
        rest.record(1.0, 2.0);
        rest.record(2.0, 2.0);
        halves.add(&rest);
        assert_eq!(halves, m);
        let mut one = RatioMoments::default();
        one.record(1.0, 1.0);
        assert_eq!(one.standard_error(), None);
    }
}
