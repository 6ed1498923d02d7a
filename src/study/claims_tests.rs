use super::{ClaimSpec, Measured, Metric, Reading, Verdict, chance, judge, judge_at, verdicts_over_training};
use crate::model::ModelKind;
use crate::study::results::RunResult;
use crate::study::rule::Rule;
use crate::study::test_runs::{BIN, run};
use crate::train::{DecodedScores, RunConfig};

const LEVEL: Rule = Rule::t_tests(0.95);

/// Runs of each variant with these final values, one per seed.
fn finals(variants: &[(&str, &[f64])]) -> Vec<RunResult> {
    variants
        .iter()
        .flat_map(|(name, values)| {
            values
                .iter()
                .enumerate()
                .map(|(seed, &v)| run(name, seed as u64, &[v]))
        })
        .collect()
}

fn order(metric: Metric, names: &[&str]) -> ClaimSpec {
    ClaimSpec::Order {
        name: "c".into(),
        text: "t".into(),
        metric,
        bin: BIN.into(),
        order: names.iter().map(|n| n.to_string()).collect(),
    }
}

#[test]
fn an_order_holds_only_when_every_pair_is_in_order_and_apart() {
    let abc = ["a", "b", "c"];
    // Accuracy: a 0.9 ± 0.01 > b 0.7 ± 0.01 > c 0.5 ± 0.01.
    let apart = finals(&[
        ("a", &[0.89, 0.90, 0.91]),
        ("b", &[0.69, 0.70, 0.71]),
        ("c", &[0.49, 0.50, 0.51]),
    ]);
    let outcome = judge(&order(Metric::Accuracy, &abc), &apart, LEVEL);
    assert_eq!(outcome.verdict, Verdict::Holds);
    let Measured::Order { pairs } = &outcome.measured else {
        panic!()
    };
    assert_eq!(pairs.len(), 2);
    assert_eq!((pairs[0].better.as_str(), pairs[0].worse.as_str()), ("a", "b"));
    let a = pairs[0].better_value.as_ref().unwrap();
    assert!(
        (a.mean - 0.9).abs() < 1e-12 && (a.sd - 0.01).abs() < 1e-12,
        "{a:?}"
    );
    assert!(pairs.iter().all(|p| p.in_order && p.separated));

    // The same numbers as losses: lower is better, so the order is reversed.
    assert_eq!(
        judge(&order(Metric::Loss, &abc), &apart, LEVEL).verdict,
        Verdict::NotShown
    );
    assert_eq!(
        judge(&order(Metric::Loss, &["c", "b", "a"]), &apart, LEVEL).verdict,
        Verdict::Holds
    );

    // b's spread reaches c's: the means are in order but the ranges overlap.
    let overlapping = finals(&[
        ("a", &[0.89, 0.90, 0.91]),
        ("b", &[0.50, 0.70, 0.90]),
        ("c", &[0.49, 0.50, 0.51]),
    ]);
    let outcome = judge(&order(Metric::Accuracy, &abc), &overlapping, LEVEL);
    assert_eq!(outcome.verdict, Verdict::NotShown);
    let Measured::Order { pairs } = &outcome.measured else {
        panic!()
    };
    assert!(pairs.iter().all(|p| p.in_order));
    assert!(!pairs[0].separated && !pairs[1].separated, "{pairs:?}");

    // Out of order, apart.
    let swapped = finals(&[
        ("a", &[0.69, 0.70, 0.71]),
        ("b", &[0.89, 0.90, 0.91]),
        ("c", &[0.49, 0.50, 0.51]),
    ]);
    let outcome = judge(&order(Metric::Accuracy, &abc), &swapped, LEVEL);
    assert_eq!(outcome.verdict, Verdict::NotShown);
    let Measured::Order { pairs } = &outcome.measured else {
        panic!()
    };
    assert!(!pairs[0].in_order && !pairs[0].separated && pairs[1].in_order && pairs[1].separated);

    // A variant with no value in the bin (a learned table too short) is not shown either.
    let mut missing = apart.clone();
    missing.retain(|r| r.variant != "c");
    missing.push(run("c", 0, &[]));
    let outcome = judge(&order(Metric::Accuracy, &abc), &missing, LEVEL);
    assert_eq!(outcome.verdict, Verdict::NotShown);
    let Measured::Order { pairs } = &outcome.measured else {
        panic!()
    };
    assert!(pairs[0].separated && pairs[1].worse_value.is_none() && !pairs[1].in_order);
}

/// The runs with decoding scores in every bin: error rate, exact match and token accuracy equal to
/// the bin's value, BLEU 100× it.
fn decoded(results: &[RunResult]) -> Vec<RunResult> {
    let mut results = results.to_vec();
    for bin in results
        .iter_mut()
        .flat_map(|r| &mut r.evals)
        .flat_map(|e| &mut e.bins)
    {
        let v = bin.accuracy as f32;
        bin.decoded = Some(DecodedScores {
            sequences: 10,
            exact_match: v,
            token_accuracy: v,
            error_rate: v,
            bleu: 100.0 * v,
        });
    }
    results
}

#[test]
fn decoding_metrics_rank_in_their_direction_and_need_decoded_bins() {
    let apart = finals(&[
        ("a", &[0.89, 0.90, 0.91]),
        ("b", &[0.69, 0.70, 0.71]),
        ("c", &[0.49, 0.50, 0.51]),
    ]);
    let scored = decoded(&apart);
    // Lower error rates are better; higher BLEU, exact match and token accuracy are.
    for (metric, holds, not) in [
        (Metric::ErrorRate, ["c", "b", "a"], ["a", "b", "c"]),
        (Metric::Bleu, ["a", "b", "c"], ["c", "b", "a"]),
        (Metric::ExactMatch, ["a", "b", "c"], ["c", "b", "a"]),
        (Metric::TokenAccuracy, ["a", "b", "c"], ["c", "b", "a"]),
    ] {
        assert_eq!(
            judge(&order(metric, &holds), &scored, LEVEL).verdict,
            Verdict::Holds,
            "{metric:?}"
        );
        assert_eq!(
            judge(&order(metric, &not), &scored, LEVEL).verdict,
            Verdict::NotShown,
            "{metric:?}"
        );
    }
    let outcome = judge(&order(Metric::Bleu, &["a", "b"]), &scored, LEVEL);
    let Measured::Order { pairs } = &outcome.measured else {
        panic!()
    };
    assert!((pairs[0].better_value.as_ref().unwrap().mean - 90.0).abs() < 1e-4);

    // Bins evaluated without decoding have no value: the claim is not shown.
    let outcome = judge(&order(Metric::ErrorRate, &["c", "b", "a"]), &apart, LEVEL);
    assert_eq!(outcome.verdict, Verdict::NotShown);
    let Measured::Order { pairs } = &outcome.measured else {
        panic!()
    };
    assert!(
        pairs
            .iter()
            .all(|p| p.better_value.is_none() && p.worse_value.is_none())
    );
}

fn reaches(metric: Metric) -> ClaimSpec {
    ClaimSpec::Reaches {
        name: "r".into(),
        text: "t".into(),
        metric,
        bin: BIN.into(),
        variant: "fast".into(),
        baseline: "slow".into(),
    }
}

#[test]
fn reaching_the_baseline_counts_steps_as_a_fraction_of_the_baselines() {
    // The baseline's final losses average 1.0 after 100 steps (4 evaluations).
    let slow = [
        run("slow", 0, &[3.0, 2.0, 1.5, 0.9]),
        run("slow", 1, &[3.0, 2.0, 1.5, 1.1]),
    ];
    // Seeds reach 1.0 at steps 25 and 50: fractions 0.25 and 0.5, mean 0.375, sd 0.177.
    let fast = [run("fast", 0, &[1.0, 0.5]), run("fast", 1, &[1.2, 0.95])];
    let results: Vec<RunResult> = slow.iter().chain(&fast).cloned().collect();
    let outcome = judge(&reaches(Metric::Loss), &results, LEVEL);
    let Measured::Reaches {
        target,
        baseline_steps,
        seeds,
        fraction,
        test,
    } = &outcome.measured
    else {
        panic!()
    };
    assert!((target.unwrap() - 1.0).abs() < 1e-12);
    assert_eq!(*baseline_steps, 100);
    assert_eq!(
        seeds.iter().map(|s| s.step).collect::<Vec<_>>(),
        [Some(25), Some(50)]
    );
    let f = fraction.as_ref().unwrap();
    assert!(
        (f.mean - 0.375).abs() < 1e-12 && (f.sd - 0.125 * 2f64.sqrt()).abs() < 1e-12,
        "{f:?}"
    );
    // Two seeds: t = 0.625 / 0.125 = 5 on 1 degree of freedom, p = 1/2 − atan(5)/π = 0.063; the
    // ±1 sd rule (0.375 + 0.177 < 1) called it holding.
    #[allow(clippy::disallowed_methods)] // a test's expected value; atan is not in crate::math
    let p = 0.5 - 5f64.atan() / std::f64::consts::PI;
    assert!((test.as_ref().unwrap().p - p).abs() < 1e-9, "{test:?}");
    assert_eq!(outcome.verdict, Verdict::NotShown);
    assert_eq!(outcome.sd_rule, Verdict::Holds);
    // A third seed at step 25: fractions 0.25, 0.5, 0.25, t = 8 on 2 degrees of freedom, p = 0.008.
    let three: Vec<RunResult> = results
        .iter()
        .cloned()
        .chain([run("fast", 2, &[0.9, 0.5])])
        .collect();
    assert_eq!(
        judge(&reaches(Metric::Loss), &three, LEVEL).verdict,
        Verdict::Holds
    );

    // A seed that never gets there: reported, and the claim is not shown.
    let never = [run("fast", 0, &[1.0, 0.5]), run("fast", 1, &[1.2, 1.05])];
    let results: Vec<RunResult> = slow.iter().chain(&never).cloned().collect();
    let outcome = judge(&reaches(Metric::Loss), &results, LEVEL);
    let Measured::Reaches { seeds, fraction, .. } = &outcome.measured else {
        panic!()
    };
    assert_eq!(seeds[1].step, None);
    assert_eq!(fraction.as_ref().unwrap().n, 1);
    assert_eq!(outcome.verdict, Verdict::NotShown);

    // Reaching only at the baseline's own length (mean + sd ≥ 1) is not shown.
    let late = [
        run("fast", 0, &[1.2, 1.2, 1.2, 0.9]),
        run("fast", 1, &[1.2, 1.2, 1.2, 1.0]),
    ];
    let results: Vec<RunResult> = slow.iter().chain(&late).cloned().collect();
    assert_eq!(
        judge(&reaches(Metric::Loss), &results, LEVEL).verdict,
        Verdict::NotShown
    );

    // For accuracy, higher is better: 1.2 ≥ 1.0 at the first evaluation of both seeds.
    let results: Vec<RunResult> = slow.iter().chain(&late).cloned().collect();
    let outcome = judge(&reaches(Metric::Accuracy), &results, LEVEL);
    let Measured::Reaches { seeds, .. } = &outcome.measured else {
        panic!()
    };
    assert!(seeds.iter().all(|s| s.step == Some(25)));
    // Every seed at the same fraction: no spread, so the sign decides.
    assert_eq!(outcome.verdict, Verdict::Holds);
}

/// Welch's test at the level, beside the ±1 sd rule: apart by less than two sds but on five
/// seeds each, the test passes where the old rule did not; on two seeds, far apart, the old rule
/// passed where the test has too little to go on.
#[test]
fn the_tests_and_the_sd_rule_can_disagree_and_both_are_reported() {
    let five = finals(&[
        ("a", &[0.80, 0.84, 0.82, 0.86, 0.83]),
        ("b", &[0.79, 0.81, 0.80, 0.78, 0.82]),
    ]);
    let outcome = judge(&order(Metric::Accuracy, &["a", "b"]), &five, LEVEL);
    assert_eq!(
        (outcome.verdict, outcome.sd_rule),
        (Verdict::Holds, Verdict::NotShown)
    );
    let Measured::Order { pairs } = &outcome.measured else {
        panic!()
    };
    let test = pairs[0].test.as_ref().unwrap();
    assert!(
        (test.estimate - 0.03).abs() < 1e-12 && test.p < 0.05 && test.lower_bound > 0.0,
        "{test:?}"
    );
    // The stricter level turns it down.
    assert_eq!(
        judge(&order(Metric::Accuracy, &["a", "b"]), &five, Rule::t_tests(0.999)).verdict,
        Verdict::NotShown
    );

    let two = finals(&[("a", &[0.90, 0.80]), ("b", &[0.60, 0.50])]);
    let outcome = judge(&order(Metric::Accuracy, &["a", "b"]), &two, LEVEL);
    assert_eq!(outcome.sd_rule, Verdict::Holds);
    // 0.3 ahead with se 0.0707 on 2 degrees of freedom: p = 0.026, holds; one seed each has no test.
    assert_eq!(outcome.verdict, Verdict::Holds);
    let one = finals(&[("a", &[0.90]), ("b", &[0.50])]);
    let outcome = judge(&order(Metric::Accuracy, &["a", "b"]), &one, LEVEL);
    assert_eq!(
        (outcome.verdict, outcome.sd_rule),
        (Verdict::NotShown, Verdict::Holds)
    );
    assert_eq!(outcome.seeds, vec![0]);
}

/// An order claim read at every evaluation: here a lead that appears at step 50 and is gone by
/// the end.
#[test]
fn an_order_claim_is_judged_at_every_evaluation() {
    let mut results = Vec::new();
    for seed in 0..3 {
        let jitter = 0.01 * seed as f64;
        results.push(run("a", seed, &[0.50 + jitter, 0.80 + jitter, 0.70 + jitter]));
        results.push(run("b", seed, &[0.51 + jitter, 0.60 + jitter, 0.70 + jitter]));
    }
    let claim = order(Metric::Accuracy, &["a", "b"]);
    let steps: Vec<(usize, Verdict)> = verdicts_over_training(&claim, &results, LEVEL)
        .into_iter()
        .map(|s| (s.step, s.verdict))
        .collect();
    assert_eq!(
        steps,
        [
            (25, Verdict::NotShown),
            (50, Verdict::Holds),
            (75, Verdict::NotShown)
        ]
    );
    assert_eq!(
        judge_at(&claim, &results, LEVEL, Reading::Final),
        judge(&claim, &results, LEVEL)
    );
    // A step that one of the variants never evaluated is left out.
    results.push(run("b", 3, &[0.5]));
    let steps: Vec<usize> = verdicts_over_training(&claim, &results, LEVEL)
        .into_iter()
        .map(|s| s.step)
        .collect();
    assert_eq!(steps, [25]);
    assert!(verdicts_over_training(&reaches(Metric::Loss), &results, LEVEL).is_empty());
}

fn bound(metric: Metric, bound: f64, beats: bool) -> ClaimSpec {
    ClaimSpec::Bound {
        name: "c".into(),
        text: "t".into(),
        metric,
        bin: BIN.into(),
        variant: "a".into(),
        bound,
        beats,
    }
}

/// "Solves the task" (accuracy beyond 0.9) and "does not solve it": a one-sample test on the
/// claimed side of the bound, in the metric's direction.
#[test]
fn a_bound_holds_when_the_test_puts_the_mean_past_it_on_the_claimed_side() {
    let solved = finals(&[("a", &[0.97, 0.98, 0.99, 0.96, 0.98])]);
    let outcome = judge(&bound(Metric::Accuracy, 0.9, true), &solved, LEVEL);
    assert_eq!(
        (outcome.verdict, outcome.sd_rule),
        (Verdict::Holds, Verdict::Holds)
    );
    let Measured::Bound { value, test } = &outcome.measured else {
        panic!()
    };
    assert!((value.as_ref().unwrap().mean - 0.976).abs() < 1e-12);
    assert!((test.as_ref().unwrap().estimate - 0.076).abs() < 1e-12);
    assert_eq!(
        judge(&bound(Metric::Accuracy, 0.9, false), &solved, LEVEL).verdict,
        Verdict::NotShown
    );
    // Near the bound, with seeds on both sides: neither claim is shown.
    let close = finals(&[("a", &[0.88, 0.93, 0.86, 0.95, 0.91])]);
    for beats in [true, false] {
        assert_eq!(
            judge(&bound(Metric::Accuracy, 0.9, beats), &close, LEVEL).verdict,
            Verdict::NotShown,
            "beats {beats}"
        );
    }
    // Loss: lower is better, so beating a bound of 1.0 means staying below it.
    let low = finals(&[("a", &[0.5, 0.6, 0.55])]);
    assert_eq!(
        judge(&bound(Metric::Loss, 1.0, true), &low, LEVEL).verdict,
        Verdict::Holds
    );
    assert_eq!(
        judge(&bound(Metric::Loss, 1.0, false), &low, LEVEL).verdict,
        Verdict::NotShown
    );
    // One seed: no test, not shown.
    let one = finals(&[("a", &[0.99])]);
    assert_eq!(
        judge(&bound(Metric::Accuracy, 0.9, true), &one, LEVEL).verdict,
        Verdict::NotShown
    );
}

fn gain(pairs: &[[&str; 2]]) -> ClaimSpec {
    ClaimSpec::Gain {
        name: "c".into(),
        text: "t".into(),
        metric: Metric::Accuracy,
        bin: BIN.into(),
        pairs: pairs
            .iter()
            .map(|[a, b]| [a.to_string(), b.to_string()])
            .collect(),
    }
}

/// A gain is measured per seed (the same seed's runs compared), averaged over the pairs, then
/// tested above 0: a steady gain holds even where one pair's gain is small, and a gain that
/// changes sign from seed to seed does not.
#[test]
fn a_gain_is_the_mean_over_pairs_of_each_seeds_advantage() {
    let steady = finals(&[
        ("a_rand", &[0.70, 0.62, 0.81]),
        ("a", &[0.50, 0.40, 0.60]),
        ("b_rand", &[0.55, 0.52, 0.61]),
        ("b", &[0.54, 0.50, 0.60]),
    ]);
    let outcome = judge(&gain(&[["a_rand", "a"], ["b_rand", "b"]]), &steady, LEVEL);
    let Measured::Gain {
        per_seed, gain: g, ..
    } = &outcome.measured
    else {
        panic!()
    };
    // Seed 0: ((0.70 − 0.50) + (0.55 − 0.54)) / 2 = 0.105.
    assert_eq!(per_seed.len(), 3);
    assert!((per_seed[0].1 - 0.105).abs() < 1e-12, "{per_seed:?}");
    assert!((g.as_ref().unwrap().mean - (0.105 + 0.12 + 0.11) / 3.0).abs() < 1e-12);
    assert_eq!(outcome.verdict, Verdict::Holds);
    let mixed = finals(&[("a_rand", &[0.70, 0.40, 0.66]), ("a", &[0.50, 0.60, 0.60])]);
    assert_eq!(
        judge(&gain(&[["a_rand", "a"]]), &mixed, LEVEL).verdict,
        Verdict::NotShown
    );
    // A seed missing one variant's run is left out, not counted as no gain.
    let missing = finals(&[("a_rand", &[0.7, 0.7, 0.7]), ("a", &[0.5, 0.5])]);
    let Measured::Gain { per_seed, .. } = judge(&gain(&[["a_rand", "a"]]), &missing, LEVEL).measured else {
        panic!()
    };
    assert_eq!(per_seed.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn chance_is_known_for_a_token_classifiers_accuracy_only() {
    let mut run = RunConfig::from_toml(
        r#"
data = { task = "chomsky", name = "even_pairs", train_max_len = 10 }
[model]
d_model = 8
heads = 1
layers = 1
ffn = 8
max_len = 64
kind = { type = "token_classifier", n_classes = 2 }
posenc = { type = "none" }
[train]
steps = 1
batch = 2
lr = 1e-3
"#,
        "test",
    )
    .unwrap();
    assert_eq!(chance(&run, Metric::Accuracy), Some(0.5));
    assert_eq!(chance(&run, Metric::Loss), None);
    run.model.kind = ModelKind::TokenClassifier { n_classes: 5 };
    assert_eq!(chance(&run, Metric::Accuracy), Some(0.2));
}
