//! The numbers a study reports: each variant's final values per length bin as mean ± sd over its
//! seeds, its training time, and the claims' verdicts.

use serde::{Deserialize, Serialize};

use super::claims::{ClaimOutcome, judge};
use super::results::RunResult;
use super::spec::Study;
use super::spread::Spread;

/// One variant's final evaluation in one length bin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BinSummary {
    pub bin: String,
    /// `None` where no seed evaluated the bin (a learned table shorter than its lengths).
    pub loss: Option<Spread>,
    pub accuracy: Option<Spread>,
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
    pub claims: Vec<ClaimOutcome>,
}

/// The first length of a bin label such as "33-64" (for ordering and the training-length mark).
pub fn bin_start(bin: &str) -> usize {
    bin.split('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX)
}

/// Aggregates the finished runs of `study` (in the study's variant order) and judges its claims.
pub fn summarize(study: &Study, results: &[RunResult]) -> StudySummary {
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
                    .map(|bin| BinSummary {
                        bin: bin.clone(),
                        loss: spread(&|r| r.final_bin(bin).map(|b| b.loss)),
                        accuracy: spread(&|r| r.final_bin(bin).map(|b| b.accuracy)),
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
        claims: study.claims.iter().map(|c| judge(c, results)).collect(),
    }
}
