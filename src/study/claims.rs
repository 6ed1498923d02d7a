//! The claims a study tests and their verdicts, by the rules in the module doc of `study`.

use serde::{Deserialize, Serialize};

use super::results::RunResult;
use super::spread::Spread;

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

    /// Its value in one bin; `None` for a decoding metric of a bin that was not decoded.
    pub fn of(self, value: &super::results::BinValue) -> Option<f64> {
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
}

impl ClaimSpec {
    pub fn name(&self) -> &str {
        match self {
            Self::Order { name, .. } | Self::Reaches { name, .. } => name,
        }
    }

    pub fn text(&self) -> &str {
        match self {
            Self::Order { text, .. } | Self::Reaches { text, .. } => text,
        }
    }

    pub fn metric(&self) -> Metric {
        match self {
            Self::Order { metric, .. } | Self::Reaches { metric, .. } => *metric,
        }
    }

    pub fn bin(&self) -> &str {
        match self {
            Self::Order { bin, .. } | Self::Reaches { bin, .. } => bin,
        }
    }

    /// The variants it names.
    pub fn variants(&self) -> Vec<&str> {
        match self {
            Self::Order { order, .. } => order.iter().map(String::as_str).collect(),
            Self::Reaches {
                variant, baseline, ..
            } => vec![variant, baseline],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    #[serde(rename = "holds")]
    Holds,
    #[serde(rename = "not shown")]
    NotShown,
}

impl Verdict {
    fn from(holds: bool) -> Self {
        if holds { Self::Holds } else { Self::NotShown }
    }

    pub fn word(self) -> &'static str {
        match self {
            Self::Holds => "holds",
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
    /// The mean ± 1 sd ranges do not overlap.
    pub separated: bool,
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
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimOutcome {
    pub claim: ClaimSpec,
    pub measured: Measured,
    pub verdict: Verdict,
}

/// The final values of `variant` in `bin` over its seeds; `None` when no seed has the bin.
fn final_spread(results: &[RunResult], variant: &str, metric: Metric, bin: &str) -> Option<Spread> {
    let values: Vec<f64> = results
        .iter()
        .filter(|r| r.variant == variant)
        .filter_map(|r| r.final_bin(bin).and_then(|v| metric.of(v)))
        .collect();
    Spread::of(&values)
}

/// Judges `claim` on the finished runs.
pub fn judge(claim: &ClaimSpec, results: &[RunResult]) -> ClaimOutcome {
    let (measured, holds) = match claim {
        ClaimSpec::Order {
            metric, bin, order, ..
        } => {
            let pairs: Vec<PairOutcome> = order
                .windows(2)
                .map(|pair| judge_pair(results, *metric, bin, &pair[0], &pair[1]))
                .collect();
            let holds = pairs.iter().all(|p| p.in_order && p.separated);
            (Measured::Order { pairs }, holds)
        }
        ClaimSpec::Reaches {
            metric,
            bin,
            variant,
            baseline,
            ..
        } => judge_reach(results, *metric, bin, variant, baseline),
    };
    ClaimOutcome {
        claim: claim.clone(),
        measured,
        verdict: Verdict::from(holds),
    }
}

fn judge_pair(results: &[RunResult], metric: Metric, bin: &str, better: &str, worse: &str) -> PairOutcome {
    let a = final_spread(results, better, metric, bin);
    let b = final_spread(results, worse, metric, bin);
    let (in_order, separated) = match (&a, &b) {
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
        better_value: a,
        worse_value: b,
        in_order,
        separated,
    }
}

fn judge_reach(
    results: &[RunResult],
    metric: Metric,
    bin: &str,
    variant: &str,
    baseline: &str,
) -> (Measured, bool) {
    let target = final_spread(results, baseline, metric, bin).map(|s| s.mean);
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
    let holds = all_reach && fraction.as_ref().is_some_and(|f| f.mean + f.sd < 1.0);
    let measured = Measured::Reaches {
        target,
        baseline_steps,
        seeds,
        fraction,
    };
    (measured, holds)
}

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
