//! The claims a study tests and their verdicts, by the rules in the module doc of `study`.

use serde::{Deserialize, Serialize};

use super::bootstrap::{self, Bootstrap, Scored};
use super::results::{BinValue, RunResult};
use super::rule::Rule;
use super::significance::OneSided;
use super::spread::Spread;
use crate::model::ModelKind;
use crate::train::RunConfig;

/// What a claim compares, from an evaluation: the teacher-forced loss and accuracy of every model,
/// and for a seq2seq model what greedy decoding scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Loss,
    Accuracy,
    /// Decoded sequences equal to their reference.
    ExactMatch,
    /// Decoded tokens equal to the reference's at the same position.
    TokenAccuracy,
    /// Edit distance over reference tokens (the phoneme error rate for the dictionary).
    ErrorRate,
    /// Corpus BLEU, 0–100.
    Bleu,
    /// A classifier's mean F1 over classes.
    MacroF1,
}

impl Metric {
    /// Every metric, in the order reports show them.
    pub const ALL: [Metric; 7] = [
        Self::Accuracy,
        Self::MacroF1,
        Self::Loss,
        Self::ErrorRate,
        Self::ExactMatch,
        Self::TokenAccuracy,
        Self::Bleu,
    ];

    /// Loss and error rate fall as a model gets better; the others rise.
    pub fn lower_is_better(self) -> bool {
        matches!(self, Self::Loss | Self::ErrorRate)
    }

    /// Whether only a seq2seq model's decoding measures it.
    pub fn is_decoded(self) -> bool {
        matches!(
            self,
            Self::ExactMatch | Self::TokenAccuracy | Self::ErrorRate | Self::Bleu
        )
    }

    /// Whether `a` is strictly better than `b`.
    pub fn better(self, a: f64, b: f64) -> bool {
        if self.lower_is_better() { a < b } else { a > b }
    }

    pub fn at_least_as_good(self, a: f64, target: f64) -> bool {
        a == target || self.better(a, target)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Loss => "loss",
            Self::Accuracy => "accuracy",
            Self::ExactMatch => "exact_match",
            Self::TokenAccuracy => "token_accuracy",
            Self::ErrorRate => "error_rate",
            Self::Bleu => "bleu",
            Self::MacroF1 => "macro_f1",
        }
    }

    /// As a table's heading or a picture's axis.
    pub fn title(self) -> &'static str {
        match self {
            Self::Loss => "Loss",
            Self::Accuracy => "Accuracy",
            Self::ExactMatch => "Exact match (greedy decoding)",
            Self::TokenAccuracy => "Token accuracy (greedy decoding)",
            Self::ErrorRate => "Error rate (greedy decoding)",
            Self::Bleu => "BLEU (greedy decoding)",
            Self::MacroF1 => "Macro-F1",
        }
    }

    /// Mean ± sd in the metric's units (points of a percentage, nats, BLEU).
    pub fn spread_text(self, v: &Spread) -> String {
        match self {
            Self::Loss | Self::MacroF1 => format!("{:.3} ± {:.3}", v.mean, v.sd),
            Self::Bleu => format!("{:.2} ± {:.2}", v.mean, v.sd),
            Self::Accuracy | Self::ExactMatch | Self::TokenAccuracy | Self::ErrorRate => {
                format!("{:.1} ± {:.1}%", 100.0 * v.mean, 100.0 * v.sd)
            }
        }
    }

    /// One value in the metric's units.
    pub fn value_text(self, v: f64) -> String {
        match self {
            Self::Loss | Self::MacroF1 => format!("{v:.3}"),
            Self::Bleu => format!("{v:.2}"),
            Self::Accuracy | Self::ExactMatch | Self::TokenAccuracy | Self::ErrorRate => {
                format!("{:.1}%", 100.0 * v)
            }
        }
    }

    /// Its standard error over the bin's sequences, where the run kept it.
    pub fn item_error(self, value: &BinValue) -> Option<f64> {
        let errors = value.item_errors.as_ref()?;
        match self {
            Self::Loss => errors.loss,
            Self::Accuracy => errors.accuracy,
            Self::ExactMatch => errors.exact_match,
            Self::TokenAccuracy => errors.token_accuracy,
            Self::ErrorRate => errors.error_rate,
            Self::Bleu | Self::MacroF1 => None,
        }
    }

    /// Its value in one bin; `None` for a decoding metric of a bin that was not decoded.
    pub fn of(self, value: &BinValue) -> Option<f64> {
        let decoded = value.decoded.as_ref();
        match self {
            Self::Loss => Some(value.loss),
            Self::Accuracy => Some(value.accuracy),
            Self::ExactMatch => decoded.map(|d| d.exact_match as f64),
            Self::TokenAccuracy => decoded.map(|d| d.token_accuracy as f64),
            Self::ErrorRate => decoded.map(|d| d.error_rate as f64),
            Self::Bleu => decoded.map(|d| d.bleu as f64),
            Self::MacroF1 => value.classified.as_ref().map(|c| c.macro_f1 as f64),
        }
    }
}

/// A `[[claim]]` as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClaimSpec {
    /// The variants rank in `order` (best first) by the final `metric` in `bin`.
    Order {
        name: String,
        text: String,
        metric: Metric,
        bin: String,
        order: Vec<String>,
    },
    /// `variant` reaches the baseline's final `metric` in `bin` in fewer steps than the baseline.
    Reaches {
        name: String,
        text: String,
        metric: Metric,
        bin: String,
        variant: String,
        baseline: String,
    },
    /// `variant`'s final `metric` in `bin` is better than `bound` (`beats = true`: "solves the
    /// task", accuracy above 0.9) or falls short of it (`beats = false`: "does not solve it").
    Bound {
        name: String,
        text: String,
        metric: Metric,
        bin: String,
        variant: String,
        bound: f64,
        beats: bool,
    },
    /// Each pair's first variant beats its second on average over the pairs: per seed, the mean
    /// over `pairs` of the first's `metric` in `bin` minus the second's (in the better direction),
    /// and its mean over seeds above 0 ("randomizing raises accuracy by 12% on average").
    Gain {
        name: String,
        text: String,
        metric: Metric,
        bin: String,
        pairs: Vec<[String; 2]>,
    },
}

impl ClaimSpec {
    pub fn name(&self) -> &str {
        match self {
            Self::Order { name, .. }
            | Self::Reaches { name, .. }
            | Self::Bound { name, .. }
            | Self::Gain { name, .. } => name,
        }
    }

    pub fn text(&self) -> &str {
        match self {
            Self::Order { text, .. }
            | Self::Reaches { text, .. }
            | Self::Bound { text, .. }
            | Self::Gain { text, .. } => text,
        }
    }

    pub fn metric(&self) -> Metric {
        match self {
            Self::Order { metric, .. }
            | Self::Reaches { metric, .. }
            | Self::Bound { metric, .. }
            | Self::Gain { metric, .. } => *metric,
        }
    }

    pub fn bin(&self) -> &str {
        match self {
            Self::Order { bin, .. }
            | Self::Reaches { bin, .. }
            | Self::Bound { bin, .. }
            | Self::Gain { bin, .. } => bin,
        }
    }

    /// The same claim judged on another metric (the report's "every metric" rows).
    pub fn with_metric(&self, other: Metric) -> Self {
        let mut claim = self.clone();
        match &mut claim {
            Self::Order { metric, .. }
            | Self::Reaches { metric, .. }
            | Self::Bound { metric, .. }
            | Self::Gain { metric, .. } => *metric = other,
        }
        claim
    }

    /// A bound is a sanity check (the model learned the task, or did not); the others compare.
    pub fn kind(&self) -> ClaimKind {
        match self {
            Self::Bound { .. } => ClaimKind::Sanity,
            _ => ClaimKind::Comparative,
        }
    }

    /// The variants it names.
    pub fn variants(&self) -> Vec<&str> {
        match self {
            Self::Order { order, .. } => order.iter().map(String::as_str).collect(),
            Self::Reaches {
                variant, baseline, ..
            } => vec![variant, baseline],
            Self::Bound { variant, .. } => vec![variant],
            Self::Gain { pairs, .. } => pairs.iter().flatten().map(String::as_str).collect(),
        }
    }
}

/// What a claim is for: reported apart, and adjusted for multiplicity in separate families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimKind {
    /// A comparison of variants (order, reaches, gain): a result.
    Comparative,
    /// A bound on one variant ("learns the training lengths", "does not solve it"): a check
    /// that the runs are what the comparisons assume, never counted among the results.
    Sanity,
}

impl ClaimKind {
    pub fn title(self) -> &'static str {
        match self {
            Self::Comparative => "comparative claims",
            Self::Sanity => "sanity checks",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Its test passes at the adjusted level (and, when replicated, on each half of the seeds
    /// alone).
    #[serde(rename = "holds")]
    Holds,
    /// It passes on all seeds together but not on the file's or the fresh seeds alone.
    #[serde(rename = "not replicated")]
    NotReplicated,
    /// Every variant it compares is within the study's margin of chance: a difference there is
    /// no result, whatever its test says.
    #[serde(rename = "at chance")]
    AtChance,
    #[serde(rename = "not shown")]
    NotShown,
}

impl Verdict {
    pub fn from(holds: bool) -> Self {
        if holds { Self::Holds } else { Self::NotShown }
    }

    pub fn word(self) -> &'static str {
        match self {
            Self::Holds => "holds",
            Self::NotReplicated => "not replicated",
            Self::AtChance => "at chance",
            Self::NotShown => "not shown",
        }
    }
}

/// One adjacent pair of an order claim: `better` is expected to beat `worse`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairOutcome {
    pub better: String,
    pub worse: String,
    /// `None` where the variant has no value in the bin.
    pub better_value: Option<Spread>,
    pub worse_value: Option<Spread>,
    pub in_order: bool,
    /// The mean ± 1 sd ranges do not overlap (the rule before Welch's test, kept for comparison).
    pub separated: bool,
    /// The one-sided test of `better` beating `worse`; `None` with fewer than two seeds on a
    /// side.
    pub test: Option<OneSided>,
    /// The test was paired by seed: both variants ran the same seeds on the same data stream
    /// (same data and batch), so each seed's difference is one observation. Otherwise Welch's.
    #[serde(default)]
    pub paired: bool,
    /// Over seeds and the evaluated sequences together, where every run kept its scores'
    /// errors over sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<Bootstrap>,
}

/// How one seed of a reaches claim's variant did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedReach {
    pub seed: u64,
    /// The first evaluation step at least as good as the target; `None`: never.
    pub step: Option<usize>,
}

/// What was measured for a claim, and its verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Measured {
    Order {
        pairs: Vec<PairOutcome>,
    },
    Reaches {
        /// The baseline's final value, mean over seeds (`None`: the baseline has none).
        target: Option<f64>,
        baseline_steps: usize,
        seeds: Vec<SeedReach>,
        /// The reaching seeds' steps as fractions of `baseline_steps`.
        fraction: Option<Spread>,
        /// The one-sample test of the fractions' mean being below 1; `None` with fewer than two
        /// reaching seeds.
        test: Option<OneSided>,
    },
    Gain {
        /// Each seed with a value for every variant, and its mean gain over the pairs.
        per_seed: Vec<(u64, f64)>,
        /// The gains' mean and sd over those seeds.
        gain: Option<Spread>,
        /// The one-sample test of the mean gain being above 0; `None` with fewer than two seeds.
        test: Option<OneSided>,
    },
    Bound {
        /// `None` where the variant has no value in the bin.
        value: Option<Spread>,
        /// The one-sample test of the mean being beyond the bound on the claimed side; `None`
        /// with fewer than two seeds.
        test: Option<OneSided>,
    },
}

/// A claim judged on one set of runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimOutcome {
    pub claim: ClaimSpec,
    /// The seeds judged.
    pub seeds: Vec<u64>,
    pub measured: Measured,
    /// Every comparison passes its one-sided test at the unadjusted level.
    pub verdict: Verdict,
    /// The ±1 sd rule's verdict (posflow's rule before the tests), for comparison.
    pub sd_rule: Verdict,
    /// The claim's p-value: an order claim's largest over its pairs (it needs them all), the
    /// one test's otherwise; `None` where it cannot be tested (a missing value, fewer than two
    /// seeds, a seed that never reaches its target).
    #[serde(default)]
    pub p: Option<f64>,
    /// Every variant the claim compares has a mean within the rule's margin of chance.
    #[serde(default)]
    pub at_chance: bool,
    /// An order claim's bootstrap p over seeds and sequences (its pairs' largest), where every
    /// run kept its scores' errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_p: Option<f64>,
}

/// Which evaluation of each run a claim reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The last.
    Final,
    /// The one after this many steps.
    AtStep(usize),
}

impl Reading {
    fn of<'a>(self, run: &'a RunResult, bin: &str) -> Option<&'a BinValue> {
        match self {
            Self::Final => run.final_bin(bin),
            Self::AtStep(step) => run.bin_at(step, bin),
        }
    }
}

/// The per-seed values of `variant` in `bin` at `reading`, in run order.
fn values(results: &[RunResult], variant: &str, metric: Metric, bin: &str, reading: Reading) -> Vec<f64> {
    results
        .iter()
        .filter(|r| r.variant == variant)
        .filter_map(|r| reading.of(r, bin).and_then(|v| metric.of(v)))
        .collect()
}

/// Judges `claim` on the finished runs' final evaluations by `rule`.
pub fn judge(claim: &ClaimSpec, results: &[RunResult], rule: Rule) -> ClaimOutcome {
    judge_at(claim, results, rule, Reading::Final)
}

/// Judges `claim` at `reading`; a reaches claim reads the whole run whatever `reading` says.
pub fn judge_at(claim: &ClaimSpec, results: &[RunResult], rule: Rule, reading: Reading) -> ClaimOutcome {
    let (measured, holds, sd_rule) = match claim {
        ClaimSpec::Order {
            metric, bin, order, ..
        } => {
            let pairs: Vec<PairOutcome> = order
                .windows(2)
                .map(|pair| judge_pair(results, *metric, bin, reading, rule, [&pair[0], &pair[1]]))
                .collect();
            // An intersection–union test: the claim needs every pair, so its error rate is at
            // most each pair's, 1 − level.
            let holds = pairs
                .iter()
                .all(|p| p.in_order && p.test.as_ref().is_some_and(|t| t.passes));
            let sd_rule = pairs.iter().all(|p| p.in_order && p.separated);
            (Measured::Order { pairs }, holds, sd_rule)
        }
        ClaimSpec::Reaches {
            metric,
            bin,
            variant,
            baseline,
            ..
        } => judge_reach(results, *metric, bin, variant, baseline, rule),
        ClaimSpec::Bound {
            metric,
            bin,
            variant,
            bound,
            beats,
            ..
        } => {
            let values = values(results, variant, *metric, bin, reading);
            // The claimed side: below the bound when the claim is that it is beaten and lower
            // is better, or that it is not beaten and higher is better.
            let below = *beats == metric.lower_is_better();
            let margins: Vec<f64> = values
                .iter()
                .map(|v| if below { bound - v } else { v - bound })
                .collect();
            let test = rule.above_zero(&margins);
            let value = Spread::of(&values);
            let holds = test.as_ref().is_some_and(|t| t.passes);
            let sd_rule = value.as_ref().is_some_and(|v| {
                if below {
                    v.mean + v.sd < *bound
                } else {
                    v.mean - v.sd > *bound
                }
            });
            (Measured::Bound { value, test }, holds, sd_rule)
        }
        ClaimSpec::Gain {
            metric, bin, pairs, ..
        } => judge_gain(results, *metric, bin, pairs, reading, rule),
    };
    let p = claim_p(&measured);
    let bootstrap_p = match &measured {
        Measured::Order { pairs } => pairs
            .iter()
            .map(|p| p.bootstrap.as_ref().map(|b| b.p))
            .try_fold(0.0f64, |max, p| Some(max.max(p?))),
        _ => None,
    };
    let at_chance = at_chance(claim, results, reading, rule);
    let names = claim.variants();
    let mut seeds: Vec<u64> = results
        .iter()
        .filter(|r| names.contains(&r.variant.as_str()))
        .map(|r| r.seed)
        .collect();
    seeds.sort_unstable();
    seeds.dedup();
    ClaimOutcome {
        claim: claim.clone(),
        seeds,
        measured,
        verdict: Verdict::from(holds),
        sd_rule: Verdict::from(sd_rule),
        p,
        at_chance,
        bootstrap_p,
    }
}

/// The p-value of the claim as a whole (see `ClaimOutcome::p`).
fn claim_p(measured: &Measured) -> Option<f64> {
    match measured {
        Measured::Order { pairs } => pairs
            .iter()
            .map(|p| p.test.as_ref().map(|t| t.p))
            .try_fold(0.0f64, |max, p| Some(max.max(p?))),
        Measured::Reaches { seeds, test, .. } => {
            if seeds.is_empty() || seeds.iter().any(|s| s.step.is_none()) {
                None
            } else {
                test.as_ref().map(|t| t.p)
            }
        }
        Measured::Gain { test, .. } | Measured::Bound { test, .. } => test.as_ref().map(|t| t.p),
    }
}

/// Chance's value of `metric` for a run: a token classifier's accuracy with its classes
/// equally likely (the Chomsky tasks' answers are drawn uniformly). `None` where posflow knows
/// no chance level (a language model's accuracy, loss, BLEU).
pub fn chance(run: &RunConfig, metric: Metric) -> Option<f64> {
    match (run.model.kind, metric) {
        (ModelKind::TokenClassifier { n_classes }, Metric::Accuracy) if n_classes > 0 => {
            Some(1.0 / n_classes as f64)
        }
        _ => None,
    }
}

/// Whether every variant a comparative claim names has its mean within the rule's margin of
/// the metric's chance level (a claim on a metric without one never is).
fn at_chance(claim: &ClaimSpec, results: &[RunResult], reading: Reading, rule: Rule) -> bool {
    if claim.kind() != ClaimKind::Comparative || matches!(claim, ClaimSpec::Reaches { .. }) {
        return false;
    }
    let metric = claim.metric();
    claim.variants().iter().all(|&variant| {
        let Some(run) = results.iter().find(|r| r.variant == variant) else {
            return false;
        };
        let (Some(chance), Some(mean)) = (
            chance(&run.run, metric),
            Spread::of(&values(results, variant, metric, claim.bin(), reading)).map(|s| s.mean),
        ) else {
            return false;
        };
        (mean - chance).abs() <= rule.chance_margin
    })
}

/// The verdict of an order claim at one evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepVerdict {
    pub step: usize,
    pub verdict: Verdict,
}

/// An order or bound claim's verdict at every evaluation step that every run of its variants
/// made; empty for a reaches claim, which reads the whole run already.
pub fn verdicts_over_training(claim: &ClaimSpec, results: &[RunResult], rule: Rule) -> Vec<StepVerdict> {
    if matches!(claim, ClaimSpec::Reaches { .. }) {
        return Vec::new();
    }
    let names = claim.variants();
    let runs: Vec<&RunResult> = results
        .iter()
        .filter(|r| names.contains(&r.variant.as_str()))
        .collect();
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .evals
        .iter()
        .map(|e| e.step)
        .filter(|&step| runs.iter().all(|r| r.evals.iter().any(|e| e.step == step)))
        .map(|step| StepVerdict {
            step,
            verdict: judge_at(claim, results, rule, Reading::AtStep(step)).verdict,
        })
        .collect()
}

fn judge_pair(
    results: &[RunResult],
    metric: Metric,
    bin: &str,
    reading: Reading,
    rule: Rule,
    [better, worse]: [&str; 2],
) -> PairOutcome {
    let (a, b) = (
        values(results, better, metric, bin, reading),
        values(results, worse, metric, bin, reading),
    );
    let paired = rule.pair_shared_streams && share_streams(results, better, worse, metric, bin, reading);
    let bootstrap = match (
        scored(results, better, metric, bin, reading),
        scored(results, worse, metric, bin, reading),
    ) {
        (Some(a), Some(b)) => bootstrap::compare(&a, &b, paired, metric.lower_is_better(), rule.level),
        _ => None,
    };
    let (spread_a, spread_b) = (Spread::of(&a), Spread::of(&b));
    let (in_order, separated) = match (&spread_a, &spread_b) {
        (Some(a), Some(b)) => {
            let in_order = metric.better(a.mean, b.mean);
            // The better's range edge nearest the worse must still beat the worse's nearest edge.
            let separated = if metric.lower_is_better() {
                a.mean + a.sd < b.mean - b.sd
            } else {
                a.mean - a.sd > b.mean + b.sd
            };
            (in_order, in_order && separated)
        }
        _ => (false, false),
    };
    PairOutcome {
        better: better.to_string(),
        worse: worse.to_string(),
        better_value: spread_a,
        worse_value: spread_b,
        in_order,
        separated,
        test: rule.compare(&a, &b, paired, metric.lower_is_better()),
        paired,
        bootstrap,
    }
}

/// Each run's value of `variant` with its error over the evaluated sequences, in run order;
/// `None` where a run kept no such error.
fn scored(
    results: &[RunResult],
    variant: &str,
    metric: Metric,
    bin: &str,
    reading: Reading,
) -> Option<Vec<Scored>> {
    results
        .iter()
        .filter(|r| r.variant == variant)
        .filter_map(|r| reading.of(r, bin))
        .map(|v| Some((metric.of(v)?, metric.item_error(v)?)))
        .collect()
}

/// Whether `a`'s and `b`'s values can be paired seed by seed: the same seeds, in the same
/// order, each pair of runs drawing the same batches (a batch is a function of the data, the
/// batch size, the seed and the step alone).
fn share_streams(
    results: &[RunResult],
    a: &str,
    b: &str,
    metric: Metric,
    bin: &str,
    reading: Reading,
) -> bool {
    let runs = |variant: &str| -> Vec<&RunResult> {
        results
            .iter()
            .filter(|r| r.variant == variant)
            .filter(|r| reading.of(r, bin).and_then(|v| metric.of(v)).is_some())
            .collect()
    };
    let (ra, rb) = (runs(a), runs(b));
    ra.len() >= 2
        && ra.len() == rb.len()
        && ra.iter().zip(&rb).all(|(x, y)| {
            x.seed == y.seed && x.run.data == y.run.data && x.run.train.batch == y.run.train.batch
        })
}

/// A gain claim: per seed, the mean over the pairs of the first variant's advantage over the
/// second (the same seed's runs: one data stream, so the comparison is paired); then a one-sample
/// test of its mean above 0. Returns the measurement, the test's verdict and the ±1 sd rule's.
fn judge_gain(
    results: &[RunResult],
    metric: Metric,
    bin: &str,
    pairs: &[[String; 2]],
    reading: Reading,
    rule: Rule,
) -> (Measured, bool, bool) {
    let value = |variant: &str, seed: u64| {
        results
            .iter()
            .find(|r| r.variant == variant && r.seed == seed)
            .and_then(|r| reading.of(r, bin))
            .and_then(|v| metric.of(v))
    };
    let mut seeds: Vec<u64> = results.iter().map(|r| r.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    let per_seed: Vec<(u64, f64)> = seeds
        .into_iter()
        .filter_map(|seed| {
            let gains: Option<Vec<f64>> = pairs
                .iter()
                .map(|[better, worse]| {
                    let (a, b) = (value(better, seed)?, value(worse, seed)?);
                    Some(if metric.lower_is_better() { b - a } else { a - b })
                })
                .collect();
            let gains = gains?;
            Some((seed, gains.iter().sum::<f64>() / gains.len().max(1) as f64))
        })
        .collect();
    let values: Vec<f64> = per_seed.iter().map(|(_, g)| *g).collect();
    let test = rule.above_zero(&values);
    let gain = Spread::of(&values);
    let holds = test.as_ref().is_some_and(|t| t.passes);
    let sd_rule = gain.as_ref().is_some_and(|g| g.mean - g.sd > 0.0);
    (Measured::Gain { per_seed, gain, test }, holds, sd_rule)
}

/// A reaches claim: the measurement, the tests' verdict and the ±1 sd rule's.
fn judge_reach(
    results: &[RunResult],
    metric: Metric,
    bin: &str,
    variant: &str,
    baseline: &str,
    rule: Rule,
) -> (Measured, bool, bool) {
    let target = Spread::of(&values(results, baseline, metric, bin, Reading::Final)).map(|s| s.mean);
    let baseline_steps = results
        .iter()
        .find(|r| r.variant == baseline)
        .map_or(0, |r| r.run.train.steps);
    let seeds: Vec<SeedReach> = results
        .iter()
        .filter(|r| r.variant == variant)
        .map(|r| SeedReach {
            seed: r.seed,
            step: target.and_then(|target| {
                r.evals
                    .iter()
                    .find(|e| {
                        e.bins.iter().any(|b| {
                            b.bin == bin && metric.of(b).is_some_and(|v| metric.at_least_as_good(v, target))
                        })
                    })
                    .map(|e| e.step)
            }),
        })
        .collect();
    let fractions: Vec<f64> = seeds
        .iter()
        .filter_map(|s| s.step)
        .map(|step| step as f64 / baseline_steps.max(1) as f64)
        .collect();
    let fraction = Spread::of(&fractions);
    let all_reach = !seeds.is_empty() && seeds.iter().all(|s| s.step.is_some());
    let savings: Vec<f64> = fractions.iter().map(|f| 1.0 - f).collect();
    let test = rule.above_zero(&savings);
    let holds = all_reach && test.as_ref().is_some_and(|t| t.passes);
    let sd_rule = all_reach && fraction.as_ref().is_some_and(|f| f.mean + f.sd < 1.0);
    let measured = Measured::Reaches {
        target,
        baseline_steps,
        seeds,
        fraction,
        test,
    };
    (measured, holds, sd_rule)
}

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
