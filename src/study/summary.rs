//! The numbers a study reports: each variant's final values per length bin as mean ± sd over its
//! seeds, its training time, and the claims' verdicts.

use serde::{Deserialize, Serialize};

use super::claims::Metric;
use super::results::RunResult;
use super::spec::Study;
use super::spread::Spread;
use super::verdicts::{ClaimReport, judge_claims};

/// One variant's final evaluation in one length bin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BinSummary {
    pub bin: String,
    /// `None` where no seed evaluated the bin (a learned table shorter than its lengths).
    pub loss: Option<Spread>,
    pub accuracy: Option<Spread>,
    /// A seq2seq model's greedy decoding; absent for the other models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact_match: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_accuracy: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bleu: Option<Spread>,
    /// A classifier's macro-F1; absent for the other models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub macro_f1: Option<Spread>,
}

impl BinSummary {
    pub fn get(&self, metric: Metric) -> Option<&Spread> {
        match metric {
            Metric::Loss => self.loss.as_ref(),
            Metric::Accuracy => self.accuracy.as_ref(),
            Metric::ExactMatch => self.exact_match.as_ref(),
            Metric::TokenAccuracy => self.token_accuracy.as_ref(),
            Metric::ErrorRate => self.error_rate.as_ref(),
            Metric::Bleu => self.bleu.as_ref(),
            Metric::MacroF1 => self.macro_f1.as_ref(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VariantSummary {
    pub name: String,
    pub label: String,
    pub bins: Vec<BinSummary>,
    /// Seconds per run.
    pub seconds: Option<Spread>,
    /// Runs whose time covers only the steps after a resume.
    pub resumed_runs: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudySummary {
    /// Every bin any variant evaluated, shortest first.
    pub bins: Vec<String>,
    /// The base run's training length in tokens: bins starting past it measure extrapolation.
    pub train_len: Option<usize>,
    pub variants: Vec<VariantSummary>,
    pub claims: Vec<ClaimReport>,
    /// The replication's seeds, when the study was replicated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_seeds: Option<Vec<u64>>,
}

/// The first length of a bin label such as "33-64" (for ordering and the training-length mark).
pub fn bin_start(bin: &str) -> usize {
    bin.split('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX)
}

/// Aggregates the finished runs of `study` (in the study's variant order, over every seed run)
/// and judges its claims; `fresh` are a replication's seeds.
pub fn summarize(study: &Study, results: &[RunResult], fresh: Option<&[u64]>) -> StudySummary {
    let mut bins: Vec<String> = Vec::new();
    for r in results {
        for b in r.evals.last().map_or(&[][..], |e| &e.bins) {
            if !bins.contains(&b.bin) {
                bins.push(b.bin.clone());
            }
        }
    }
    bins.sort_by_key(|b| bin_start(b));
    let variants = study
        .variants
        .iter()
        .map(|v| {
            let runs: Vec<&RunResult> = results.iter().filter(|r| r.variant == v.name).collect();
            let spread = |f: &dyn Fn(&RunResult) -> Option<f64>| {
                Spread::of(&runs.iter().filter_map(|&r| f(r)).collect::<Vec<_>>())
            };
            VariantSummary {
                name: v.name.clone(),
                label: v.label().to_string(),
                bins: bins
                    .iter()
                    .map(|bin| {
                        let of = |metric: Metric| spread(&|r| r.final_bin(bin).and_then(|b| metric.of(b)));
                        BinSummary {
                            bin: bin.clone(),
                            loss: of(Metric::Loss),
                            accuracy: of(Metric::Accuracy),
                            exact_match: of(Metric::ExactMatch),
                            token_accuracy: of(Metric::TokenAccuracy),
                            error_rate: of(Metric::ErrorRate),
                            bleu: of(Metric::Bleu),
                            macro_f1: of(Metric::MacroF1),
                        }
                    })
                    .collect(),
                seconds: spread(&|r| Some(r.seconds)),
                resumed_runs: runs.iter().filter(|r| r.resumed_at_step.is_some()).count(),
            }
        })
        .collect();
    StudySummary {
        bins,
        train_len: study.base.data.train_len(),
        variants,
        claims: judge_claims(study, results, fresh),
        fresh_seeds: fresh.map(<[u64]>::to_vec),
    }
}

impl StudySummary {
    /// The metrics some variant has a value of: loss and accuracy always, decoding scores for
    /// seq2seq studies.
    pub fn metrics(&self) -> Vec<Metric> {
        Metric::ALL
            .into_iter()
            .filter(|&m| {
                self.variants
                    .iter()
                    .flat_map(|v| &v.bins)
                    .any(|b| b.get(m).is_some())
            })
            .collect()
    }
}
