//! The uncertainty of a comparison over seeds and over the evaluated sequences at once: a
//! bootstrap that resamples the seeds (jointly where the two variants are paired by seed) and,
//! within each drawn run, redraws its score from its standard error over the evaluation's
//! sequences (a normal draw: each run's score is a mean over ≥ 64 sequences). A t-test on the
//! per-seed values treats each run's score as exact; this says what a finite evaluation set
//! adds. Reported beside the test; the verdict stays the test's.

use serde::{Deserialize, Serialize};

use super::splitmix::SplitMix;

/// Resamples per comparison.
const REPLICATES: usize = 4000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bootstrap {
    /// The one-sided lower bound at the level of the difference in the claimed direction.
    pub lower_bound: f64,
    /// The share of resamples whose difference is not in the claimed direction (at least one
    /// resample's worth, 1 / (resamples + 1)).
    pub p: f64,
}

/// Each run's score and its standard error over items.
pub type Scored = (f64, f64);

/// `better` beating `worse`, each a list of runs in seed order (the same seeds when `paired`).
/// `None` with fewer than two runs on a side.
pub fn compare(
    better: &[Scored],
    worse: &[Scored],
    paired: bool,
    lower_is_better: bool,
    level: f64,
) -> Option<Bootstrap> {
    if better.len() < 2 || worse.len() < 2 || (paired && better.len() != worse.len()) {
        return None;
    }
    let sign = if lower_is_better { -1.0 } else { 1.0 };
    let mut rng = SplitMix(0xB005_7A4B);
    let draw = |(value, error): Scored, rng: &mut SplitMix| value + error * rng.normal();
    let mut diffs: Vec<f64> = (0..REPLICATES)
        .map(|_| {
            let difference = if paired {
                let n = better.len();
                (0..n)
                    .map(|_| {
                        let i = rng.below(n);
                        draw(better[i], &mut rng) - draw(worse[i], &mut rng)
                    })
                    .sum::<f64>()
                    / n as f64
            } else {
                let mean = |runs: &[Scored], rng: &mut SplitMix| {
                    (0..runs.len())
                        .map(|_| draw(runs[rng.below(runs.len())], rng))
                        .sum::<f64>()
                        / runs.len() as f64
                };
                mean(better, &mut rng) - mean(worse, &mut rng)
            };
            sign * difference
        })
        .collect();
    diffs.sort_by(f64::total_cmp);
    let below = ((1.0 - level) * REPLICATES as f64).floor() as usize;
    let against = diffs.iter().filter(|&&d| d <= 0.0).count();
    Some(Bootstrap {
        lower_bound: diffs[below.min(REPLICATES - 1)],
        p: (against + 1) as f64 / (REPLICATES + 1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::compare;

    const BETTER: [f64; 5] = [0.90, 0.91, 0.89, 0.92, 0.90];
    const WORSE: [f64; 5] = [0.87, 0.88, 0.86, 0.89, 0.88];

    fn scored(values: &[f64], error: f64) -> Vec<(f64, f64)> {
        values.iter().map(|&v| (v, error)).collect()
    }

    /// Exact scores: the bootstrap over seeds alone puts the 2.4-point lead clearly above 0;
    /// the same lead measured on sequences with an error of 3 points each no longer is.
    #[test]
    fn an_evaluation_sets_error_widens_the_bound() {
        let exact = compare(&scored(&BETTER, 0.0), &scored(&WORSE, 0.0), false, false, 0.95).unwrap();
        assert!(exact.lower_bound > 0.01 && exact.p < 0.01, "{exact:?}");
        let noisy = compare(&scored(&BETTER, 0.03), &scored(&WORSE, 0.03), false, false, 0.95).unwrap();
        assert!(noisy.lower_bound < 0.0 && noisy.p > 0.05, "{noisy:?}");
        // The same resamples every time.
        assert_eq!(
            noisy,
            compare(&scored(&BETTER, 0.03), &scored(&WORSE, 0.03), false, false, 0.95).unwrap()
        );
    }

    /// Losses: lower is better, so the claimed direction flips; pairing needs equal lengths.
    #[test]
    fn direction_and_pairing() {
        let lower = compare(&scored(&WORSE, 0.0), &scored(&BETTER, 0.0), true, true, 0.95).unwrap();
        assert!(lower.lower_bound > 0.0, "{lower:?}");
        assert!(
            compare(
                &scored(&BETTER, 0.0),
                &scored(&WORSE[..4], 0.0),
                true,
                false,
                0.95
            )
            .is_none()
        );
        assert!(
            compare(
                &scored(&BETTER[..1], 0.0),
                &scored(&WORSE, 0.0),
                false,
                false,
                0.95
            )
            .is_none()
        );
    }
}
