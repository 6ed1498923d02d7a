use super::{ClaimSpec, Measured, Metric, Verdict, judge};
use crate::study::results::{BinValue, EvalPoint, RunResult};
use crate::train::{DecodedScores, RunConfig};

const BIN: &str = "65-128";

fn run_config(steps: usize, seed: u64) -> RunConfig {
    let mut run = RunConfig::from_toml(
        r#"
data = { task = "copy", min_len = 1, max_len = 4 }
[model]
d_model = 8
heads = 1
layers = 1
ffn = 8
max_len = 16
kind = { type = "causal_lm" }
posenc = { type = "none" }
[train]
steps = 100
batch = 2
lr = 1e-3
"#,
        "test",
    )
    .unwrap();
    run.train.steps = steps;
    run.train.seed = seed;
    run
}

/// A run of `variant` whose evaluations at steps 25, 50, ... gave `values` (accuracy and loss
/// alike) in `BIN`; the last value is the final one.
fn run(variant: &str, seed: u64, values: &[f64]) -> RunResult {
    RunResult {
        variant: variant.into(),
        seed,
        run: run_config(25 * values.len(), seed),
        seconds: 1.0,
        resumed_at_step: None,
        train_loss: vec![],
        evals: values
            .iter()
            .enumerate()
            .map(|(i, &v)| EvalPoint {
                step: 25 * (i + 1),
                bins: vec![BinValue {
                    bin: BIN.into(),
                    loss: v,
                    accuracy: v,
                    decoded: None,
                    classified: None,
                }],
            })
            .collect(),
    }
}

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
    let outcome = judge(&order(Metric::Accuracy, &abc), &apart);
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
        judge(&order(Metric::Loss, &abc), &apart).verdict,
        Verdict::NotShown
    );
    assert_eq!(
        judge(&order(Metric::Loss, &["c", "b", "a"]), &apart).verdict,
        Verdict::Holds
    );

    // b's spread reaches c's: the means are in order but the ranges overlap.
    let overlapping = finals(&[
        ("a", &[0.89, 0.90, 0.91]),
        ("b", &[0.50, 0.70, 0.90]),
        ("c", &[0.49, 0.50, 0.51]),
    ]);
    let outcome = judge(&order(Metric::Accuracy, &abc), &overlapping);
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
    let outcome = judge(&order(Metric::Accuracy, &abc), &swapped);
    assert_eq!(outcome.verdict, Verdict::NotShown);
    let Measured::Order { pairs } = &outcome.measured else {
        panic!()
    };
    assert!(!pairs[0].in_order && !pairs[0].separated && pairs[1].in_order && pairs[1].separated);

    // A variant with no value in the bin (a learned table too short) is not shown either.
    let mut missing = apart.clone();
    missing.retain(|r| r.variant != "c");
    missing.push(run("c", 0, &[]));
    let outcome = judge(&order(Metric::Accuracy, &abc), &missing);
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
            judge(&order(metric, &holds), &scored).verdict,
            Verdict::Holds,
            "{metric:?}"
        );
        assert_eq!(
            judge(&order(metric, &not), &scored).verdict,
            Verdict::NotShown,
            "{metric:?}"
        );
    }
    let outcome = judge(&order(Metric::Bleu, &["a", "b"]), &scored);
    let Measured::Order { pairs } = &outcome.measured else {
        panic!()
    };
    assert!((pairs[0].better_value.as_ref().unwrap().mean - 90.0).abs() < 1e-4);

    // Bins evaluated without decoding have no value: the claim is not shown.
    let outcome = judge(&order(Metric::ErrorRate, &["c", "b", "a"]), &apart);
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
    let outcome = judge(&reaches(Metric::Loss), &results);
    let Measured::Reaches {
        target,
        baseline_steps,
        seeds,
        fraction,
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
    assert_eq!(outcome.verdict, Verdict::Holds);

    // A seed that never gets there: reported, and the claim is not shown.
    let never = [run("fast", 0, &[1.0, 0.5]), run("fast", 1, &[1.2, 1.05])];
    let results: Vec<RunResult> = slow.iter().chain(&never).cloned().collect();
    let outcome = judge(&reaches(Metric::Loss), &results);
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
    assert_eq!(judge(&reaches(Metric::Loss), &results).verdict, Verdict::NotShown);

    // For accuracy, higher is better: 1.2 ≥ 1.0 at the first evaluation of both seeds.
    let results: Vec<RunResult> = slow.iter().chain(&late).cloned().collect();
    let outcome = judge(&reaches(Metric::Accuracy), &results);
    let Measured::Reaches { seeds, .. } = &outcome.measured else {
        panic!()
    };
    assert!(seeds.iter().all(|s| s.step == Some(25)));
    assert_eq!(outcome.verdict, Verdict::Holds);
}
