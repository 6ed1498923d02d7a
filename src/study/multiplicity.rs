//! Many claims tested at once: Benjamini and Hochberg's adjustment, which keeps the expected
//! share of false "holds" among all a family's "holds" at the level (the false discovery rate),
//! where testing each claim at 5% alone lets a family of 20 true-null claims show one on average.

/// The BH-adjusted q-value of each p-value, in the input's order: q(i) = min over j ranked at or
/// above i of m·p(j)/rank(j), capped at 1. A claim is a discovery at rate α when q < α. `None`
/// (a claim that could not be tested) counts in m as p = 1 and stays `None`.
pub fn benjamini_hochberg(ps: &[Option<f64>]) -> Vec<Option<f64>> {
    let m = ps.len();
    let mut order: Vec<usize> = (0..m).collect();
    let p = |i: usize| ps[i].unwrap_or(1.0);
    order.sort_by(|&a, &b| p(a).total_cmp(&p(b)));
    let mut q = vec![1.0; m];
    let mut running = 1.0f64;
    for (rank, &i) in order.iter().enumerate().rev() {
        running = running.min(p(i) * m as f64 / (rank + 1) as f64);
        q[i] = running.min(1.0);
    }
    ps.iter().zip(q).map(|(p, q)| p.map(|_| q)).collect()
}

#[cfg(test)]
mod tests {
    use super::benjamini_hochberg;

    /// Benjamini and Hochberg's (1995) own example of 15 p-values, whose adjustment at 0.05
    /// rejects the first four; the q-values are SciPy's `false_discovery_control` (R's
    /// `p.adjust(p, "BH")` gives the same).
    #[test]
    fn the_papers_example() {
        let ps = [
            0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262, 0.5719,
            0.6528, 0.7590, 1.000,
        ];
        let expected = [
            0.0015,
            0.003,
            0.0095,
            0.035625,
            0.0603,
            0.06385714285714286,
            0.06385714285714286,
            0.0645,
            0.0765,
            0.486,
            0.5811818181818181,
            0.714875,
            0.7532307692307693,
            0.8132142857142857,
            1.0,
        ];
        // Shuffled, to check the order is kept.
        let shuffle = [7, 2, 14, 0, 11, 5, 9, 1, 13, 3, 6, 12, 4, 10, 8];
        let input: Vec<Option<f64>> = shuffle.iter().map(|&i| Some(ps[i])).collect();
        let q = benjamini_hochberg(&input);
        for (k, &i) in shuffle.iter().enumerate() {
            assert!(
                (q[k].unwrap() - expected[i]).abs() < 1e-12,
                "p {} -> {:?}",
                ps[i],
                q[k]
            );
        }
        let discoveries = q.iter().filter(|q| q.unwrap() < 0.05).count();
        assert_eq!(discoveries, 4);
    }

    #[test]
    fn untestable_claims_count_as_p_one() {
        let q = benjamini_hochberg(&[Some(0.01), None, Some(0.04)]);
        assert_eq!(q[1], None);
        // m = 3: 0.01·3/1 = 0.03, 0.04·3/2 = 0.06.
        assert!((q[0].unwrap() - 0.03).abs() < 1e-12 && (q[2].unwrap() - 0.06).abs() < 1e-12);
        assert_eq!(benjamini_hochberg(&[]), Vec::<Option<f64>>::new());
    }
}
