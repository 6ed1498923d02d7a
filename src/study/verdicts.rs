//! Each claim's verdicts: on the study file's seeds, at every evaluation over training, and, when
//! the study is replicated, on the fresh seeds alone and on all seeds together. A replicated claim
//! holds only where it holds on all seeds together and the fresh seeds point the claimed way.

use serde::{Deserialize, Serialize};

use super::claims::{ClaimOutcome, ClaimSpec, Measured, StepVerdict, Verdict, judge, verdicts_over_training};
use super::results::RunResult;
use super::spec::Study;

/// One claim's verdicts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimReport {
    pub claim: ClaimSpec,
    /// The claim's verdict: on all seeds with the fresh ones agreeing when replicated, on the
    /// file's seeds otherwise.
    pub verdict: Verdict,
    /// On the file's seeds, at the final evaluation.
    pub original: ClaimOutcome,
    /// At every evaluation (an order claim's), on the seeds the verdict reads: all of them when
    /// replicated.
    pub over_training: Vec<StepVerdict>,
    /// With `--replicate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<Replication>,
}

/// A claim on fresh seeds, and on the file's and the fresh ones together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replication {
    pub fresh: ClaimOutcome,
    pub all: ClaimOutcome,
    /// The fresh seeds' means go the claimed way (every pair of an order claim in order; every
    /// seed of a reaches claim reaching, the fractions' mean below 1), whatever their test says.
    pub fresh_agrees: bool,
}

/// Judges every claim of `study` on `results`; `fresh` are the replication's seeds (`None`: not
/// replicated).
pub fn judge_claims(study: &Study, results: &[RunResult], fresh: Option<&[u64]>) -> Vec<ClaimReport> {
    let of_seeds = |seeds: &[u64]| -> Vec<RunResult> {
        results
            .iter()
            .filter(|r| seeds.contains(&r.seed))
            .cloned()
            .collect()
    };
    let original_runs = of_seeds(&study.seeds);
    study
        .claims
        .iter()
        .map(|claim| {
            let original = judge(claim, &original_runs, study.level);
            let replication = fresh.map(|fresh| {
                let fresh = judge(claim, &of_seeds(fresh), study.level);
                Replication {
                    fresh_agrees: points_the_claimed_way(&fresh),
                    fresh,
                    all: judge(claim, results, study.level),
                }
            });
            let read_on = if replication.is_some() {
                results
            } else {
                &original_runs[..]
            };
            let verdict = match &replication {
                Some(r) => Verdict::from(r.all.verdict == Verdict::Holds && r.fresh_agrees),
                None => original.verdict,
            };
            ClaimReport {
                claim: claim.clone(),
                verdict,
                over_training: verdicts_over_training(claim, read_on, study.level),
                original,
                replication,
            }
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::test_runs::run;

    /// Two variants with a claim that `a` beats `b` in accuracy in the made-up runs' bin.
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

[[claim]]
name = "a_beats_b"
text = "a > b"
kind = "order"
metric = "accuracy"
bin = "65-128"
order = ["a", "b"]
"#
        );
        Study::from_toml(&text, "replicated.toml").unwrap()
    }

    /// `a` and `b` with these final accuracies, seeds numbered from `first`.
    fn runs(first: u64, a: &[f64], b: &[f64]) -> Vec<RunResult> {
        let seeds = first..;
        let of = |name: &str, values: &[f64]| -> Vec<RunResult> {
            seeds
                .clone()
                .zip(values)
                .map(|(seed, &v)| run(name, seed, &[v]))
                .collect()
        };
        [of("a", a), of("b", b)].concat()
    }

    #[test]
    fn a_replicated_claim_needs_all_seeds_and_the_fresh_ones_pointing_its_way() {
        let study = study("[0, 1, 2, 3, 4]");
        let original = runs(
            0,
            &[0.90, 0.91, 0.89, 0.92, 0.90],
            &[0.70, 0.71, 0.69, 0.72, 0.70],
        );
        // The fresh seeds put b ahead, slightly: all seeds together still hold.
        let fresh = runs(5, &[0.70, 0.71], &[0.72, 0.73]);
        let results = [original.clone(), fresh].concat();
        let [report] = &judge_claims(&study, &results, Some(&[5, 6]))[..] else {
            panic!("one claim")
        };
        let r = report.replication.as_ref().unwrap();
        assert_eq!(report.original.verdict, Verdict::Holds);
        assert_eq!(report.original.seeds, [0, 1, 2, 3, 4]);
        assert_eq!(r.fresh.seeds, [5, 6]);
        assert_eq!(r.all.seeds, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(r.all.verdict, Verdict::Holds);
        assert!(!r.fresh_agrees);
        assert_eq!(report.verdict, Verdict::NotShown);

        // Fresh seeds that agree (even without clearing the test on their own) keep it.
        let agreeing = runs(5, &[0.74, 0.70], &[0.71, 0.72]);
        let results = [original.clone(), agreeing].concat();
        let report = &judge_claims(&study, &results, Some(&[5, 6]))[0];
        let r = report.replication.as_ref().unwrap();
        assert_eq!((r.fresh.verdict, r.fresh_agrees), (Verdict::NotShown, true));
        assert_eq!(report.verdict, Verdict::Holds);

        // Not replicated: the file's seeds alone, read from results that hold more.
        let report = &judge_claims(&study, &results, None)[0];
        assert!(report.replication.is_none());
        assert_eq!(report.original.seeds, [0, 1, 2, 3, 4]);
        assert_eq!(report.verdict, report.original.verdict);
        assert_eq!(report.over_training.len(), 1);
    }
}
