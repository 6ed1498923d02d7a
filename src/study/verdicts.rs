//! Each claim's verdict by the results rule: its test on the seeds the verdict reads (all of them
//! when replicated, else the file's), Benjamini–Hochberg-adjusted over the study's claims of its
//! kind; "holds" only when the adjusted q clears the level and, when replicated, each half of the
//! seeds (the file's, the fresh) passes alone; "at chance" where every variant it compares sits
//! within the study's margin of chance. The verdicts at every evaluation stay unadjusted
//! (a description of training, not a result), and the earlier rules' verdicts are kept for
//! comparison.

use serde::{Deserialize, Serialize};

use super::claims::{
    ClaimKind, ClaimOutcome, ClaimSpec, Measured, Metric, StepVerdict, Verdict, judge, verdicts_over_training,
};
use super::multiplicity::benjamini_hochberg;
use super::results::RunResult;
use super::rule::Rule;
use super::spec::Study;
use super::spread::Spread;

/// One claim's verdicts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimReport {
    pub claim: ClaimSpec,
    pub kind: ClaimKind,
    /// By the rule above, at the study's adjusted level.
    pub verdict: Verdict,
    /// The claim's p-value on the seeds the verdict reads.
    pub p: Option<f64>,
    /// `p` adjusted by Benjamini–Hochberg over the study's claims of the same kind.
    pub q: Option<f64>,
    /// On the file's seeds, at the final evaluation.
    pub original: ClaimOutcome,
    /// At every evaluation (an order or bound claim's), on the seeds the verdict reads, each at
    /// the unadjusted level.
    pub over_training: Vec<StepVerdict>,
    /// With `--replicate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<Replication>,
    /// Sequences (or texts) each run evaluated in the claim's bin: the fewest over its runs.
    pub items: Option<usize>,
    /// The same comparison on every other metric the claim's variants have in its bin.
    pub other_metrics: Vec<OtherMetric>,
    /// The verdicts of the rules before this one.
    pub earlier: EarlierVerdicts,
}

/// A claim on fresh seeds, and on the file's and the fresh ones together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replication {
    pub fresh: ClaimOutcome,
    pub all: ClaimOutcome,
    /// The fresh seeds' means go the claimed way (every pair of an order claim in order; every
    /// seed of a reaches claim reaching, the fractions' mean below 1), whatever their test says:
    /// the replication the earlier rule asked for.
    pub fresh_agrees: bool,
}

/// A claim's comparison read on another metric, on the verdict's seeds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OtherMetric {
    pub metric: Metric,
    /// Each named variant's mean ± sd, in the claim's order.
    pub values: Vec<(String, Spread)>,
    /// The same test's p-value on this metric (an order or gain claim's; a bound has its bound
    /// in the claimed metric's units and a reaches claim its target, so neither has one).
    pub p: Option<f64>,
    /// The means go the claimed way on this metric.
    pub agrees: bool,
    /// Its test passes on this metric at the study's unadjusted level.
    pub passes: bool,
}

/// What the earlier rules said of the claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EarlierVerdicts {
    /// Unadjusted t-tests; replicated when all seeds pass and the fresh seeds' means merely point
    /// the claimed way.
    pub unadjusted: Verdict,
    /// Means in order with mean ± 1 sd ranges apart.
    pub sd_rule: Verdict,
}

impl ClaimReport {
    /// The other metrics whose test does not pass (by name): where a claim rests on one metric.
    pub fn other_metrics_failing(&self) -> Vec<&'static str> {
        self.other_metrics
            .iter()
            .filter(|m| m.p.is_some() && !m.passes)
            .map(|m| m.metric.name())
            .collect()
    }

    /// The outcome the verdict reads: on all seeds when replicated, else on the file's.
    pub fn outcome(&self) -> &ClaimOutcome {
        self.replication.as_ref().map_or(&self.original, |r| &r.all)
    }

    /// Each half passes its test alone (the file's seeds, the fresh ones); `None` unreplicated.
    pub fn halves_pass(&self) -> Option<bool> {
        self.replication
            .as_ref()
            .map(|r| self.original.verdict == Verdict::Holds && r.fresh.verdict == Verdict::Holds)
    }

    /// The verdict at `alpha` given an adjusted q (the study's, or a wider family's).
    pub fn verdict_at(&self, q: Option<f64>, alpha: f64) -> Verdict {
        if self.outcome().at_chance {
            Verdict::AtChance
        } else if !q.is_some_and(|q| q < alpha) {
            Verdict::NotShown
        } else if self.halves_pass() == Some(false) {
            Verdict::NotReplicated
        } else {
            Verdict::Holds
        }
    }
}

/// Judges every claim of `study` on `results`; `fresh` are the replication's seeds (`None`: not
/// replicated).
pub fn judge_claims(study: &Study, results: &[RunResult], fresh: Option<&[u64]>) -> Vec<ClaimReport> {
    let rule = study.rule();
    let of_seeds = |seeds: &[u64]| -> Vec<RunResult> {
        results
            .iter()
            .filter(|r| seeds.contains(&r.seed))
            .cloned()
            .collect()
    };
    let original_runs = of_seeds(&study.seeds);
    let read_on = if fresh.is_some() {
        results
    } else {
        &original_runs[..]
    };
    let mut reports: Vec<ClaimReport> = study
        .claims
        .iter()
        .map(|claim| {
            let original = judge(claim, &original_runs, rule);
            let replication = fresh.map(|fresh| {
                let fresh = judge(claim, &of_seeds(fresh), rule);
                Replication {
                    fresh_agrees: points_the_claimed_way(&fresh),
                    fresh,
                    all: judge(claim, results, rule),
                }
            });
            let on = replication.as_ref().map_or(&original, |r| &r.all);
            let earlier = EarlierVerdicts {
                unadjusted: earlier_verdict(claim, results, &original_runs, fresh, rule.level),
                sd_rule: on.sd_rule,
            };
            ClaimReport {
                claim: claim.clone(),
                kind: claim.kind(),
                verdict: Verdict::NotShown,
                p: on.p,
                q: None,
                items: items(study, read_on, claim),
                other_metrics: other_metrics(claim, read_on, rule),
                over_training: verdicts_over_training(claim, read_on, rule),
                original,
                replication,
                earlier,
            }
        })
        .collect();
    for kind in [ClaimKind::Comparative, ClaimKind::Sanity] {
        let of_kind: Vec<usize> = (0..reports.len()).filter(|&i| reports[i].kind == kind).collect();
        let ps: Vec<Option<f64>> = of_kind.iter().map(|&i| reports[i].p).collect();
        for (&i, q) in of_kind.iter().zip(benjamini_hochberg(&ps)) {
            reports[i].q = q;
            reports[i].verdict = reports[i].verdict_at(q, rule.alpha());
        }
    }
    reports
}

/// The earlier rule's verdict: unpaired, unadjusted t-tests; replicated when all seeds pass and
/// the fresh seeds' means point the claimed way.
fn earlier_verdict(
    claim: &ClaimSpec,
    results: &[RunResult],
    original_runs: &[RunResult],
    fresh: Option<&[u64]>,
    level: f64,
) -> Verdict {
    let rule = Rule::earlier(level);
    match fresh {
        Some(fresh) => {
            let fresh_runs: Vec<RunResult> = results
                .iter()
                .filter(|r| fresh.contains(&r.seed))
                .cloned()
                .collect();
            let agrees = points_the_claimed_way(&judge(claim, &fresh_runs, rule));
            Verdict::from(judge(claim, results, rule).verdict == Verdict::Holds && agrees)
        }
        None => judge(claim, original_runs, rule).verdict,
    }
}

fn points_the_claimed_way(outcome: &ClaimOutcome) -> bool {
    match &outcome.measured {
        Measured::Order { pairs } => pairs.iter().all(|p| p.in_order),
        Measured::Reaches { seeds, fraction, .. } => {
            !seeds.is_empty()
                && seeds.iter().all(|s| s.step.is_some())
                && fraction.as_ref().is_some_and(|f| f.mean < 1.0)
        }
        Measured::Bound { test, .. } | Measured::Gain { test, .. } => {
            test.as_ref().is_some_and(|t| t.estimate > 0.0)
        }
    }
}

/// The evaluation's size behind a claim: per run, the sequences its bin held (a seq2seq run's
/// decoded ones, a classifier's texts), the fewest over the claim's runs.
fn items(study: &Study, results: &[RunResult], claim: &ClaimSpec) -> Option<usize> {
    let names = claim.variants();
    results
        .iter()
        .filter(|r| names.contains(&r.variant.as_str()))
        .map(|r| {
            let value = r.final_bin(claim.bin());
            if let Some(decoded) = value.and_then(|v| v.decoded.as_ref()) {
                return Some(decoded.sequences);
            }
            if let Some(classified) = value.and_then(|v| v.classified.as_ref()) {
                return Some(classified.confusion.iter().flatten().sum::<usize>());
            }
            study.variant(&r.variant)?.items_in(claim.bin())
        })
        .try_fold(usize::MAX, |fewest, n| Some(fewest.min(n?)))
        .filter(|&n| n != usize::MAX)
}

/// The claim's comparison on each other metric its variants all have in its bin.
fn other_metrics(claim: &ClaimSpec, results: &[RunResult], rule: Rule) -> Vec<OtherMetric> {
    Metric::ALL
        .into_iter()
        .filter(|&m| m != claim.metric())
        .filter_map(|metric| {
            let values: Option<Vec<(String, Spread)>> = claim
                .variants()
                .iter()
                .map(|&name| {
                    let finals: Vec<f64> = results
                        .iter()
                        .filter(|r| r.variant == name)
                        .filter_map(|r| r.final_bin(claim.bin()).and_then(|b| metric.of(b)))
                        .collect();
                    Some((name.to_string(), Spread::of(&finals)?))
                })
                .collect();
            let values = values?;
            let (p, agrees, passes) = match claim {
                ClaimSpec::Order { .. } | ClaimSpec::Gain { .. } => {
                    let outcome = judge(&claim.with_metric(metric), results, rule);
                    (
                        outcome.p,
                        points_the_claimed_way(&outcome),
                        outcome.verdict == Verdict::Holds,
                    )
                }
                ClaimSpec::Bound { .. } | ClaimSpec::Reaches { .. } => (None, false, false),
            };
            Some(OtherMetric {
                metric,
                values,
                p,
                agrees,
                passes,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelKind;
    use crate::study::test_runs::run;

    /// Variants `a`, `b` and `c`, the claims `a > b` and `c > b` in accuracy in the made-up runs'
    /// bin, and a sanity check that `a` stays below 95%.
    fn study(seeds: &str) -> Study {
        let text = format!(
            r#"
[study]
name = "replicated"
seeds = {seeds}

[base]
data = {{ task = "copy", min_len = 1, max_len = 4 }}
[base.model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 128
kind = {{ type = "causal_lm" }}
posenc = {{ type = "relative", buckets = 8, max_distance = 16 }}
[base.train]
steps = 4
batch = 4
lr = 3e-3
eval_lengths = [100]

[[variant]]
name = "a"

[[variant]]
name = "b"
set = {{ "model.posenc" = {{ type = "learned" }} }}

[[variant]]
name = "c"
set = {{ "model.posenc" = {{ type = "sinusoidal" }} }}

[[claim]]
name = "a_beats_b"
text = "a > b"
kind = "order"
metric = "accuracy"
bin = "65-128"
order = ["a", "b"]

[[claim]]
name = "a_below_95"
text = "a stays below 95%"
kind = "bound"
metric = "accuracy"
bin = "65-128"
variant = "a"
bound = 0.95
beats = false

[[claim]]
name = "c_beats_b"
text = "c > b"
kind = "order"
metric = "accuracy"
bin = "65-128"
order = ["c", "b"]
"#
        );
        Study::from_toml(&text, "replicated.toml").unwrap()
    }

    /// Each variant with these final accuracies, seeds numbered from `first`.
    fn runs(first: u64, variants: &[(&str, &[f64])]) -> Vec<RunResult> {
        variants
            .iter()
            .flat_map(|(name, values)| {
                (first..)
                    .zip(values.iter())
                    .map(|(seed, &v)| run(name, seed, &[v]))
            })
            .collect()
    }

    fn claim<'a>(reports: &'a [ClaimReport], name: &str) -> &'a ClaimReport {
        reports.iter().find(|c| c.claim.name() == name).unwrap()
    }

    const SEEDS: &str = "[0, 1, 2, 3, 4]";
    const A: &[f64] = &[0.90, 0.91, 0.89, 0.92, 0.90];
    const B: &[f64] = &[0.70, 0.71, 0.69, 0.72, 0.70];

    #[test]
    fn fresh_seeds_that_point_the_right_way_without_passing_do_not_replicate() {
        let study = study(SEEDS);
        let original = runs(0, &[("a", A), ("b", B), ("c", B)]);
        // The fresh seeds put a ahead on average (0.73 vs 0.72) without a test passing: all ten
        // seeds together still pass.
        let fresh = runs(
            5,
            &[("a", &[0.76, 0.70]), ("b", &[0.71, 0.73]), ("c", &[0.7, 0.7])],
        );
        let results = [original.clone(), fresh].concat();
        let reports = judge_claims(&study, &results, Some(&[5, 6]));
        let c = claim(&reports, "a_beats_b");
        let r = c.replication.as_ref().unwrap();
        assert_eq!(c.original.verdict, Verdict::Holds);
        assert_eq!(r.all.verdict, Verdict::Holds);
        assert!(r.fresh_agrees && r.fresh.verdict == Verdict::NotShown);
        assert_eq!(c.halves_pass(), Some(false));
        assert!(c.q.unwrap() < 0.05, "{:?}", c.q);
        assert_eq!(c.verdict, Verdict::NotReplicated);
        // The earlier rule called it replicated.
        assert_eq!(c.earlier.unadjusted, Verdict::Holds);

        // Fresh seeds that pass alone replicate it.
        let passing = runs(
            5,
            &[("a", &[0.88, 0.90, 0.91]), ("b", &[0.70, 0.72, 0.71]), ("c", B)],
        );
        let results = [original.clone(), passing].concat();
        let c = judge_claims(&study, &results, Some(&[5, 6, 7]))
            .into_iter()
            .find(|c| c.claim.name() == "a_beats_b")
            .unwrap();
        assert_eq!((c.halves_pass(), c.verdict), (Some(true), Verdict::Holds));

        // Not replicated: the file's seeds alone decide, read from results that hold more.
        let reports = judge_claims(&study, &results, None);
        let c = claim(&reports, "a_beats_b");
        assert!(c.replication.is_none() && c.halves_pass().is_none());
        assert_eq!(c.original.seeds, [0, 1, 2, 3, 4]);
        assert_eq!(c.verdict, Verdict::Holds);
        assert_eq!(c.over_training.len(), 1);
    }

    /// The study's comparative claims are adjusted together, its sanity checks apart: with one
    /// check and two comparisons, each comparison's q is BH over the two, the check's q its p.
    #[test]
    fn sanity_checks_are_adjusted_and_counted_apart() {
        let study = study(SEEDS);
        // a does not beat b; c beats b narrowly: p between 0.025 and 0.05, so BH over the two
        // comparisons (q = 2p) turns it down.
        let a_values: &[f64] = &[0.70, 0.72, 0.69, 0.70, 0.71];
        let c_values: &[f64] = &[0.72, 0.70, 0.71, 0.74, 0.72];
        let reports = judge_claims(
            &study,
            &runs(0, &[("a", a_values), ("b", B), ("c", c_values)]),
            None,
        );
        let (ab, check, cb) = (
            claim(&reports, "a_beats_b"),
            claim(&reports, "a_below_95"),
            claim(&reports, "c_beats_b"),
        );
        assert_eq!(
            (ab.kind, check.kind, cb.kind),
            (ClaimKind::Comparative, ClaimKind::Sanity, ClaimKind::Comparative)
        );
        assert_eq!(check.q, check.p);
        assert_eq!(check.verdict, Verdict::Holds);
        let p = cb.p.unwrap();
        assert!(p > 0.025 && p < 0.05, "{p}");
        let expected = benjamini_hochberg(&[ab.p, cb.p]);
        assert_eq!((ab.q, cb.q), (expected[0], expected[1]));
        assert!((cb.q.unwrap() - 2.0 * p).abs() < 1e-12);
        assert_eq!(cb.original.verdict, Verdict::Holds, "passes unadjusted");
        assert_eq!(cb.verdict, Verdict::NotShown, "not after adjustment");
        // The check holds and is not counted among the comparisons' holds.
        let comparative_holds = reports
            .iter()
            .filter(|c| c.kind == ClaimKind::Comparative && c.verdict == Verdict::Holds)
            .count();
        assert_eq!(comparative_holds, 0);
    }

    /// Two token classifiers of a binary task at 52% and 56%: a "win" of one at chance over
    /// another reads "at chance", whatever its test says; at 75% it is a result.
    #[test]
    fn two_variants_at_chance_read_at_chance() {
        let study = study(SEEDS);
        let binary = |mut runs: Vec<RunResult>| {
            for r in &mut runs {
                r.run.model.kind = ModelKind::TokenClassifier { n_classes: 2 };
            }
            runs
        };
        let near = binary(runs(
            0,
            &[
                ("a", &[0.56, 0.57, 0.55, 0.56, 0.57]),
                ("b", &[0.52, 0.51, 0.52, 0.53, 0.52]),
                ("c", B),
            ],
        ));
        let reports = judge_claims(&study, &near, None);
        let c = claim(&reports, "a_beats_b");
        assert_eq!(c.original.verdict, Verdict::Holds, "its test passes");
        assert!(c.original.at_chance);
        assert_eq!(c.verdict, Verdict::AtChance);

        let learned = binary(runs(
            0,
            &[
                ("a", &[0.75, 0.76, 0.74, 0.75, 0.77]),
                ("b", &[0.52, 0.51, 0.52, 0.53, 0.52]),
                ("c", B),
            ],
        ));
        let c = judge_claims(&study, &learned, None)
            .into_iter()
            .find(|c| c.claim.name() == "a_beats_b")
            .unwrap();
        assert!(!c.original.at_chance);
        assert_eq!(c.verdict, Verdict::Holds);
    }

    /// Runs on one data stream per seed are compared seed by seed; runs of another batch size
    /// (another stream) by Welch's test.
    #[test]
    fn shared_streams_are_paired_and_others_are_not() {
        let study = study(SEEDS);
        let results = runs(0, &[("a", A), ("b", B), ("c", B)]);
        let reports = judge_claims(&study, &results, None);
        let Measured::Order { pairs } = &claim(&reports, "a_beats_b").original.measured else {
            panic!()
        };
        assert!(pairs[0].paired);
        let mut other_stream = results.clone();
        for r in other_stream.iter_mut().filter(|r| r.variant == "b") {
            r.run.train.batch += 1;
        }
        let reports = judge_claims(&study, &other_stream, None);
        let Measured::Order { pairs } = &claim(&reports, "a_beats_b").original.measured else {
            panic!()
        };
        assert!(!pairs[0].paired);
        let welch = crate::study::welch(A, B, false, 0.95).unwrap();
        assert_eq!(pairs[0].test.as_ref().unwrap().p, welch.p);
    }

    /// The report carries each claim's evaluation size and the other metrics' comparison.
    #[test]
    fn a_claim_reports_its_evaluation_size_and_every_metric() {
        let study = study(SEEDS);
        let reports = judge_claims(&study, &runs(0, &[("a", A), ("b", B), ("c", B)]), None);
        let c = claim(&reports, "a_beats_b");
        // eval_lengths = [100]: the default 4 evaluation batches of 4 sequences, all in 65-128.
        assert_eq!(c.items, Some(16));
        // The made-up runs give loss = accuracy, so on loss (lower is better) a > b fails.
        let loss = c.other_metrics.iter().find(|m| m.metric == Metric::Loss).unwrap();
        assert!(!loss.agrees && loss.p.unwrap() > 0.5);
        assert_eq!(loss.values.len(), 2);
    }
}
