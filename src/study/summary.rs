//! The numbers a study reports: each variant's final values per length bin as mean ± sd over its
//! seeds, its training time, and the claims' verdicts.

use serde::{Deserialize, Serialize};

use super::claims::Metric;
use super::results::RunResult;
use super::spec::Study;
use super::spread::Spread;
use super::verdicts::{ClaimReport, judge_claims};
use crate::train::LengthUnit;

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
    /// The base run's longest training length, in `length_unit`: bins starting past it measure
    /// extrapolation.
    pub train_len: Option<usize>,
    /// What the bins' lengths count (a report written before this field counted tokens).
    #[serde(default)]
    pub length_unit: LengthUnit,
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
    let trained = study.base.data.binned_train_len();
    StudySummary {
        bins,
        train_len: trained.map(|(len, _)| len),
        length_unit: trained.map_or(LengthUnit::Tokens, |(_, unit)| unit),
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

#[cfg(test)]
mod tests {
    use super::{StudySummary, summarize};
    use crate::study::Study;
    use crate::train::LengthUnit;

    fn study(data: &str, kind: &str) -> Study {
        let text = format!(
            r#"
[study]
name = "units"
seeds = [0, 1]

[base]
data = {data}
[base.model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 64
kind = {kind}
posenc = {{ type = "sinusoidal" }}
[base.train]
steps = 4
batch = 4
lr = 3e-3

[[variant]]
name = "sinusoidal"
"#
        );
        Study::from_toml(&text, "units.toml").unwrap()
    }

    #[test]
    fn a_chomsky_study_counts_its_training_length_in_input_symbols() {
        // Reverse string's rows of 10 symbols are 20 tokens (a placeholder per answer bit), but
        // its bins are input lengths: 11-20 is already past the training length.
        let s = study(
            r#"{ task = "chomsky", name = "reverse_string", train_max_len = 10 }"#,
            r#"{ type = "token_classifier", n_classes = 2 }"#,
        );
        assert_eq!(s.base.data.train_len(), Some(20));
        let summary = summarize(&s, &[], None);
        assert_eq!(summary.train_len, Some(10));
        assert_eq!(summary.length_unit, LengthUnit::InputSymbols);
    }

    #[test]
    fn other_studies_count_tokens_and_old_reports_read_as_tokens() {
        let s = study(
            r#"{ task = "copy", min_len = 1, max_len = 4 }"#,
            r#"{ type = "causal_lm" }"#,
        );
        let summary = summarize(&s, &[], None);
        // <bos> abcd | abcd: the copy task's rows.
        assert_eq!(summary.train_len, Some(10));
        assert_eq!(summary.length_unit, LengthUnit::Tokens);

        let mut json = serde_json::to_value(&summary).unwrap();
        assert_eq!(json["length_unit"], "tokens");
        json.as_object_mut().unwrap().remove("length_unit");
        let old: StudySummary = serde_json::from_value(json).unwrap();
        assert_eq!(old.length_unit, LengthUnit::Tokens);
    }
}
