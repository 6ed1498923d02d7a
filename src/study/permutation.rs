//! Permutation tests, for a study that asks for them (`[study] test = "permutation"`): the
//! p-value of a difference of means without the t-test's assumption of normal per-seed values.
//! Exact (every relabelling) where that is at most `EXACT_LIMIT` relabellings, otherwise sampled
//! from a fixed seed, so a report's p-values repeat.

use super::splitmix::SplitMix;

/// The most relabellings enumerated; past it `SAMPLES` are drawn.
const EXACT_LIMIT: u64 = 1 << 20;
const SAMPLES: u64 = 200_000;

/// One-sided p that `better`'s mean beats `worse`'s when the labels are exchangeable (unpaired
/// runs): the share of relabellings of the pooled values whose difference is at least the
/// observed one. `None` with an empty side.
pub fn two_sample(better: &[f64], worse: &[f64], lower_is_better: bool) -> Option<f64> {
    if better.is_empty() || worse.is_empty() {
        return None;
    }
    let sign = if lower_is_better { -1.0 } else { 1.0 };
    let pooled: Vec<f64> = better.iter().chain(worse).map(|v| sign * v).collect();
    let k = better.len();
    // The pooled total is fixed, so the difference of means rises with the first group's sum.
    let observed: f64 = pooled[..k].iter().sum();
    let at_least = |sum: f64| sum >= observed - tolerance(&pooled);
    let n = pooled.len();
    if binomial(n as u64, k as u64).is_some_and(|c| c <= EXACT_LIMIT) {
        let (mut hits, mut count) = (0u64, 0u64);
        for_each_subset(n, k, &mut |subset| {
            count += 1;
            hits += u64::from(at_least(subset.iter().map(|&i| pooled[i]).sum()));
        });
        return Some(hits as f64 / count as f64);
    }
    let mut rng = SplitMix(0x5EED_7E57);
    let mut indices: Vec<usize> = (0..n).collect();
    let mut hits = 0u64;
    for _ in 0..SAMPLES {
        // A partial Fisher–Yates shuffle: the first k indices are a uniform k-subset.
        for i in 0..k {
            let j = i + (rng.next() % (n - i) as u64) as usize;
            indices.swap(i, j);
        }
        hits += u64::from(at_least(indices[..k].iter().map(|&i| pooled[i]).sum()));
    }
    // The observed labelling counts as one of the draws, so p is never 0.
    Some((hits + 1) as f64 / (SAMPLES + 1) as f64)
}

/// One-sided p that the mean of `gains` (per-seed differences in the claimed direction, or any
/// values whose sign is exchangeable under the null) is above 0: the share of sign flips whose
/// sum is at least the observed one. `None` for no values.
pub fn sign_flip(gains: &[f64]) -> Option<f64> {
    if gains.is_empty() {
        return None;
    }
    let observed: f64 = gains.iter().sum();
    let tol = tolerance(gains);
    let n = gains.len();
    let flipped_sum = |mask: u64| -> f64 {
        gains
            .iter()
            .enumerate()
            .map(|(i, g)| if mask >> i & 1 == 1 { -g } else { *g })
            .sum()
    };
    if n < 64 && (1u64 << n) <= EXACT_LIMIT {
        let count = 1u64 << n;
        let hits = (0..count).filter(|&m| flipped_sum(m) >= observed - tol).count();
        return Some(hits as f64 / count as f64);
    }
    let mut rng = SplitMix(0x5EED_F11B);
    let mut hits = 0u64;
    for _ in 0..SAMPLES {
        let sum: f64 = gains
            .iter()
            .map(|g| if rng.next() & 1 == 1 { -g } else { *g })
            .sum();
        hits += u64::from(sum >= observed - tol);
    }
    Some((hits + 1) as f64 / (SAMPLES + 1) as f64)
}

/// Sums that equal the observed one but for rounding count as ties (as large as it).
fn tolerance(values: &[f64]) -> f64 {
    1e-12 * values.iter().map(|v| v.abs()).sum::<f64>().max(1.0)
}

fn binomial(n: u64, k: u64) -> Option<u64> {
    let k = k.min(n - k);
    let mut c: u64 = 1;
    for i in 0..k {
        c = c.checked_mul(n - i)? / (i + 1);
    }
    Some(c)
}

/// Calls `f` with every k-subset of 0..n, as sorted indices.
fn for_each_subset(n: usize, k: usize, f: &mut dyn FnMut(&[usize])) {
    let mut subset: Vec<usize> = (0..k).collect();
    loop {
        f(&subset);
        // The rightmost index that can still move right.
        let Some(i) = (0..k).rev().find(|&i| subset[i] < n - k + i) else {
            return;
        };
        subset[i] += 1;
        for j in i + 1..k {
            subset[j] = subset[j - 1] + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [f64; 5] = [0.20, 0.22, 0.19, 0.21, 0.23];
    const B: [f64; 5] = [0.25, 0.24, 0.27, 0.26, 0.22];

    /// SciPy's `permutation_test((a, b), mean(x) - mean(y), permutation_type='independent',
    /// alternative='less')`: exact, 3 of the 252 relabellings as low as observed.
    #[test]
    fn two_sample_matches_scipy_exactly() {
        let p = two_sample(&A, &B, true).unwrap();
        assert_eq!(p, 3.0 / 252.0);
        // Higher is better: the other tail; the observed difference and its tie count on both.
        let other = two_sample(&A, &B, false).unwrap();
        assert_eq!(other, 251.0 / 252.0);
    }

    /// SciPy's `permutation_type='samples'` (paired sign flips): 2 of 32.
    #[test]
    fn sign_flip_matches_scipy_exactly() {
        let gains: Vec<f64> = A.iter().zip(&B).map(|(a, b)| b - a).collect();
        assert_eq!(sign_flip(&gains).unwrap(), 2.0 / 32.0);
        assert_eq!(sign_flip(&[]), None);
    }

    /// Past the exact limit the p-value is sampled, the same every time, and close to the
    /// t-test's on well-behaved values (SciPy's sampled permutation p is 0.0032, Welch's 0.0024).
    #[test]
    fn large_samples_are_drawn_reproducibly() {
        let better: Vec<f64> = (0..15).map(|i| 0.5 + 0.01 * ((i * 7 % 15) as f64)).collect();
        let worse: Vec<f64> = (0..15).map(|i| 0.45 + 0.01 * ((i * 4 % 15) as f64)).collect();
        let p = two_sample(&better, &worse, false).unwrap();
        assert_eq!(p, two_sample(&better, &worse, false).unwrap());
        let t = crate::study::welch(&better, &worse, false, 0.95).unwrap().p;
        assert!((p - t).abs() < 0.01, "permutation {p}, Welch {t}");
        let gains: Vec<f64> = (0..24).map(|i| 0.01 * (i as f64 - 8.0)).collect();
        let flips = sign_flip(&gains).unwrap();
        assert_eq!(flips, sign_flip(&gains).unwrap());
        // SciPy's sampled `permutation_test((g,), sum, permutation_type='samples')`: 0.0130.
        assert!((flips - 0.0130).abs() < 0.002, "{flips}");
    }
}
