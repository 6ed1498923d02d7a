//! `study.md` for people and `study.json` for programs: the settings, mean ± sd per variant and
//! length bin, the time per run, each claim with what was measured and its verdict.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::claims::{ClaimOutcome, ClaimSpec, Measured, Metric, StepVerdict, Verdict};
use super::results::{EvalPoint, RunResult};
use super::significance::OneSided;
use super::spec::Study;
use super::spread::Spread;
use super::summary::{StudySummary, bin_start};
use super::verdicts::ClaimReport;
use crate::error::Result;
use crate::model::ModelKind;
use crate::train::LengthUnit;

/// Everything `study.json` holds.
#[derive(Serialize)]
pub struct Report<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub device: &'a str,
    pub seeds: &'a [u64],
    pub base: &'a crate::train::RunConfig,
    pub variants: Vec<VariantEntry<'a>>,
    pub summary: &'a StudySummary,
    pub runs: Vec<RunEntry<'a>>,
    /// The pictures, relative to the report.
    pub pictures: &'a [(String, String)],
}

#[derive(Serialize)]
pub struct VariantEntry<'a> {
    pub name: &'a str,
    pub label: &'a str,
    pub set: &'a toml::Table,
    pub warm_start: Option<&'a str>,
}

#[derive(Serialize)]
pub struct RunEntry<'a> {
    pub variant: &'a str,
    pub seed: u64,
    pub seconds: f64,
    pub resumed_at_step: Option<usize>,
    pub evals: &'a [EvalPoint],
}

/// Writes `study.md` and `study.json` into `out`. `pictures` are (file, caption) pairs.
pub fn write_reports(
    out: &Path,
    study: &Study,
    summary: &StudySummary,
    results: &[RunResult],
    device: &str,
    pictures: &[(String, String)],
) -> Result<()> {
    let report = Report {
        name: &study.name,
        description: &study.description,
        device,
        seeds: &study.seeds,
        base: &study.base,
        variants: study
            .variants
            .iter()
            .map(|v| VariantEntry {
                name: &v.name,
                label: v.label(),
                set: &v.set,
                warm_start: v.warm_start.as_deref(),
            })
            .collect(),
        summary,
        runs: results
            .iter()
            .map(|r| RunEntry {
                variant: &r.variant,
                seed: r.seed,
                seconds: r.seconds,
                resumed_at_step: r.resumed_at_step,
                evals: &r.evals,
            })
            .collect(),
        pictures,
    };
    let json = serde_json::to_string_pretty(&report).expect("a report serializes");
    crate::checkpoint::write_atomically(&out.join("study.json"), json.as_bytes())?;
    crate::checkpoint::write_atomically(&out.join("study.md"), markdown(&report, study).as_bytes())
}

fn markdown(r: &Report, study: &Study) -> String {
    let mut md = String::new();
    let s = r.summary;
    let b = r.base;
    let _ = writeln!(md, "# Study: {}\n", r.name);
    if !r.description.trim().is_empty() {
        let _ = writeln!(md, "{}\n", r.description.trim());
    }
    let _ = writeln!(md, "## Settings\n");
    let _ = writeln!(md, "- Data: `{}`", compact(&b.data));
    let layers = match b.model.kind {
        ModelKind::Seq2Seq { decoder_layers, .. } => {
            format!("encoder-decoder, {} + {decoder_layers} layers", b.model.layers)
        }
        _ => plural(b.model.layers, "layer"),
    };
    let _ = writeln!(
        md,
        "- Model (base): {layers}, d_model {}, {}, ffn {}, max_len {}, position encoding `{}`",
        b.model.d_model,
        plural(b.model.heads, "head"),
        b.model.ffn,
        b.model.max_len,
        compact(&b.model.posenc)
    );
    let t = &b.train;
    let _ = writeln!(
        md,
        "- Training (base): {} steps of batch {}, lr {} ({:?} decay, {} warmup steps); evaluation every {} \
         steps in the bins {}, {} each",
        t.steps,
        t.batch,
        t.lr,
        t.decay,
        t.warmup,
        t.eval_every,
        s.bins.join(", "),
        if t.eval_batches == 1 {
            "1 batch".to_string()
        } else {
            format!("{} batches", t.eval_batches)
        }
    );
    if let Some(len) = s.train_len {
        let what = match s.length_unit {
            LengthUnit::Tokens => "sequences",
            LengthUnit::InputSymbols => "inputs",
        };
        let _ = writeln!(
            md,
            "- Training {what} are at most {len} {} long; bins marked ‡ start past that (extrapolation)",
            s.length_unit.name()
        );
    }
    let seeds: Vec<String> = r.seeds.iter().map(u64::to_string).collect();
    let _ = writeln!(md, "- Seeds: {}", seeds.join(", "));
    let _ = writeln!(md, "- Device: {}\n", r.device);
    let _ = writeln!(
        md,
        "| variant | label | overrides of the base | warm start from |\n|---|---|---|---|"
    );
    for v in &r.variants {
        let set = if v.set.is_empty() {
            "— (the base)".to_string()
        } else {
            v.set
                .iter()
                .map(|(k, v)| format!("`{k} = {}`", inline_toml(v)))
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let _ = writeln!(
            md,
            "| {} | {} | {set} | {} |",
            v.name,
            v.label,
            v.warm_start.unwrap_or("—")
        );
    }
    let _ = writeln!(
        md,
        "\n## Final evaluation\n\nMean ± sample sd over the seeds; — where a variant could not evaluate a bin.\n"
    );
    for metric in s.metrics() {
        let _ = writeln!(md, "### {}\n", metric.title());
        let header: Vec<String> = s.bins.iter().map(|bin| mark_bin(bin, s.train_len)).collect();
        let _ = writeln!(md, "| variant | {} |", header.join(" | "));
        let _ = writeln!(md, "|---|{}", "---|".repeat(s.bins.len()));
        for v in &s.variants {
            let cells: Vec<String> = v
                .bins
                .iter()
                .map(|bin| bin.get(metric).map_or("—".into(), |v| show(metric, v)))
                .collect();
            let _ = writeln!(md, "| {} | {} |", v.label, cells.join(" | "));
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "### Training time\n\n| variant | seconds per run | runs |\n|---|---|---|"
    );
    for v in &s.variants {
        let time = v.seconds.as_ref().map_or("—".into(), |t| {
            // Both to the precision the mean needs.
            let decimals = if t.mean < 10.0 { 2 } else { 0 };
            format!("{:.decimals$} ± {:.decimals$}", t.mean, t.sd)
        });
        let resumed = if v.resumed_runs > 0 {
            format!(
                " ({} resumed: their time counts the steps after resuming)",
                v.resumed_runs
            )
        } else {
            String::new()
        };
        let runs = v.seconds.as_ref().map_or(0, |t| t.n);
        let _ = writeln!(md, "| {} | {time} | {runs}{resumed} |", v.label);
    }
    let _ = writeln!(md, "\n## Claims\n");
    if s.claims.is_empty() {
        let _ = writeln!(md, "The study states no claims.");
    } else {
        let _ = writeln!(md, "{}\n", rule_text(study.level, s.fresh_seeds.as_deref()));
    }
    for c in &s.claims {
        let _ = writeln!(md, "{}\n", claim_section(c, study));
    }
    if !r.pictures.is_empty() {
        let _ = writeln!(md, "\n## Pictures\n");
        for (file, caption) in r.pictures {
            let _ = writeln!(md, "{caption}\n\n![{caption}]({file})\n");
        }
    }
    md
}

/// How the verdicts below were reached: the rule, its error rate and, when replicated, how.
fn rule_text(level: f64, fresh: Option<&[u64]>) -> String {
    let alpha = 1.0 - level;
    let mut text = format!(
        "Each comparison is a one-sided t-test on the per-seed values at a {}% level: Welch's test \
         for two variants (the difference of means with its one-sided {}% lower bound and p-value), a \
         one-sample test against 1 for a fraction of the baseline's steps. A claim **holds** when \
         every comparison it makes passes (p < {alpha:.2}), so a claim that is not true is called \
         holding at most {:.0}% of the time; otherwise it is **not shown**. The ±1 sd rule (means in \
         order and mean ± sd ranges apart), posflow's before, is given beside it.",
        100.0 * level,
        100.0 * level,
        100.0 * alpha
    );
    if let Some(fresh) = fresh {
        let seeds: Vec<String> = fresh.iter().map(u64::to_string).collect();
        let _ = write!(
            text,
            " **Replicated** on fresh seeds {}: a claim's verdict is the one on all seeds together, \
             and it holds only if the fresh seeds alone point the claimed way too.",
            seeds.join(", ")
        );
    }
    text
}

/// One claim: what was expected, what was measured on each set of seeds, the verdicts at every
/// evaluation and the verdict.
fn claim_section(c: &ClaimReport, study: &Study) -> String {
    let mut text = format!("- **{}** — {}", c.claim.name(), c.claim.text());
    let _ = write!(text, "  \n  {}", expectation(&c.claim, study));
    match &c.replication {
        None => {
            let _ = write!(text, "  \n  Measured: {}", measured(&c.original, study));
        }
        Some(r) => {
            for (name, outcome) in [
                ("the file's seeds", &c.original),
                ("the fresh seeds", &r.fresh),
                ("all seeds", &r.all),
            ] {
                let _ = write!(
                    text,
                    "  \n  On {name} ({}): {} Verdict there: {}.",
                    seeds(&outcome.seeds),
                    measured(outcome, study),
                    outcome.verdict.word()
                );
            }
            if !r.fresh_agrees {
                let _ = write!(text, "  \n  The fresh seeds point the other way.");
            }
        }
    }
    if !c.over_training.is_empty() {
        let steps: Vec<String> = c
            .over_training
            .iter()
            .map(|s| format!("{} {}", s.step, s.verdict.word()))
            .collect();
        let _ = write!(
            text,
            "  \n  At each evaluation (step: verdict): {}. {}",
            steps.join(", "),
            over_training_summary(&c.over_training)
        );
    }
    let sd_rule = c.replication.as_ref().map_or(&c.original, |r| &r.all).sd_rule;
    let _ = write!(
        text,
        "  \n  **Verdict: {}** (the ±1 sd rule: {}).",
        c.verdict.word(),
        sd_rule.word()
    );
    text
}

/// What the claim expects.
fn expectation(claim: &ClaimSpec, study: &Study) -> String {
    let label = |name: &str| study.variant(name).map_or(name, |v| v.label()).to_string();
    let metric = claim.metric();
    match claim {
        ClaimSpec::Order { order, .. } => {
            let expected: Vec<String> = order.iter().map(|n| label(n)).collect();
            format!(
                "Expected, by final {} in bin {}: {} (each better than the next).",
                metric.name(),
                claim.bin(),
                expected.join(" > ")
            )
        }
        ClaimSpec::Reaches {
            variant, baseline, ..
        } => format!(
            "Expected: {} reaches {}'s final {} in bin {} (mean over seeds) in fewer than its steps.",
            label(variant),
            label(baseline),
            metric.name(),
            claim.bin()
        ),
        ClaimSpec::Gain { pairs, .. } => {
            let pairs: Vec<String> = pairs
                .iter()
                .map(|[a, b]| format!("{} over {}", label(a), label(b)))
                .collect();
            format!(
                "Expected, by final {} in bin {}: a gain above 0, per seed averaged over {}.",
                metric.name(),
                claim.bin(),
                pairs.join(", ")
            )
        }
        ClaimSpec::Bound {
            variant,
            bound,
            beats,
            ..
        } => format!(
            "Expected: {}'s final {} in bin {} (mean over seeds) {} {}.",
            label(variant),
            metric.name(),
            claim.bin(),
            if *beats { "better than" } else { "no better than" },
            show_value(metric, *bound)
        ),
    }
}

/// What one judging measured, with its tests.
fn measured(c: &ClaimOutcome, study: &Study) -> String {
    let label = |name: &str| study.variant(name).map_or(name, |v| v.label()).to_string();
    let metric = c.claim.metric();
    match &c.measured {
        Measured::Order { pairs } => {
            let pairs: Vec<String> = pairs
                .iter()
                .map(|p| {
                    let value =
                        |v: &Option<Spread>| v.as_ref().map_or("no value".into(), |v| show(metric, v));
                    let how = match (p.in_order, p.separated) {
                        (true, true) => "in order, ranges apart",
                        (true, false) => "in order, ranges overlap",
                        (false, _) => "not in order",
                    };
                    format!(
                        "{} {} vs {} {}: {how}; {}",
                        label(&p.better),
                        value(&p.better_value),
                        label(&p.worse),
                        value(&p.worse_value),
                        test_text(p.test.as_ref(), metric, study.level)
                    )
                })
                .collect();
            format!("{}.", pairs.join("; "))
        }
        Measured::Reaches {
            target,
            baseline_steps,
            seeds,
            fraction,
            test,
        } => {
            let target = target.map_or("none (the baseline has no value)".into(), |t| format!("{t:.4}"));
            let steps: Vec<String> = seeds
                .iter()
                .map(|s| match s.step {
                    Some(step) => format!("seed {} at step {step}", s.seed),
                    None => format!("seed {} never", s.seed),
                })
                .collect();
            let fraction = fraction.as_ref().map_or("— (no seed reaches it)".into(), |f| {
                format!(
                    "{:.2} ± {:.2} of the baseline's {baseline_steps} steps",
                    f.mean, f.sd
                )
            });
            let never = if seeds.iter().any(|s| s.step.is_none()) {
                " A seed that never reaches it makes the claim not shown."
            } else {
                ""
            };
            let test = match test {
                Some(t) => format!(
                    "fraction below 1 by {:.2} (its {}% lower bound {:.2}), {}",
                    t.estimate,
                    100.0 * study.level,
                    t.lower_bound,
                    p_value(t.p)
                ),
                None => "no test (fewer than two seeds reach it)".into(),
            };
            format!(
                "target {target}; {}; {fraction}; {test}.{never}",
                steps.join(", ")
            )
        }
        Measured::Gain { per_seed, gain, test } => {
            let seeds: Vec<String> = per_seed
                .iter()
                .map(|(seed, g)| format!("seed {seed} {}", show_value(metric, *g)))
                .collect();
            let gain = gain
                .as_ref()
                .map_or("no seed has every value".into(), |g| show(metric, g));
            let test = match test {
                Some(t) => format!(
                    "above 0 by {} (its {}% lower bound {}), {}",
                    show_value(metric, t.estimate),
                    100.0 * study.level,
                    show_value(metric, t.lower_bound),
                    p_value(t.p)
                ),
                None => "no test (fewer than two seeds)".into(),
            };
            format!("mean gain {gain} ({}); {test}.", seeds.join(", "))
        }
        Measured::Bound { value, test } => {
            let value = value.as_ref().map_or("no value".into(), |v| show(metric, v));
            let test = match test {
                Some(t) => format!(
                    "beyond the bound on the claimed side by {} (its {}% lower bound {}), {}",
                    show_value(metric, t.estimate),
                    100.0 * study.level,
                    show_value(metric, t.lower_bound),
                    p_value(t.p)
                ),
                None => "no test (fewer than two seeds)".into(),
            };
            format!("{value}; {test}.")
        }
    }
}

/// A Welch test in the metric's units: the difference, its one-sided bound and p.
fn test_text(test: Option<&OneSided>, metric: Metric, level: f64) -> String {
    let Some(t) = test else {
        return "no test (fewer than two seeds on a side)".into();
    };
    let amount = |v: f64| match metric {
        Metric::Loss | Metric::MacroF1 => format!("{v:+.3}"),
        Metric::Bleu => format!("{v:+.2}"),
        _ => format!("{:+.1} points", 100.0 * v),
    };
    format!(
        "difference in the claimed direction {} (its {}% lower bound {}), {}",
        amount(t.estimate),
        100.0 * level,
        amount(t.lower_bound),
        p_value(t.p)
    )
}

fn p_value(p: f64) -> String {
    if p < 1e-4 {
        "< 0.0001".into()
    } else {
        format!("{p:.4}")
    }
}

fn seeds(seeds: &[u64]) -> String {
    let list: Vec<String> = seeds.iter().map(u64::to_string).collect();
    format!("seeds {}", list.join(", "))
}

/// "holds at every evaluation", "holds from step 400 to 600, not at the end", and the like.
fn over_training_summary(steps: &[StepVerdict]) -> String {
    let holds: Vec<usize> = steps
        .iter()
        .filter(|s| s.verdict == Verdict::Holds)
        .map(|s| s.step)
        .collect();
    let at_end = steps.last().is_some_and(|s| s.verdict == Verdict::Holds);
    match (holds.first(), holds.last()) {
        _ if holds.len() == steps.len() => "It holds at every evaluation.".into(),
        (None, _) | (_, None) => "It holds at no evaluation.".into(),
        (Some(first), Some(last)) => {
            let run = if first == last {
                format!("at step {first}")
            } else {
                format!("from step {first} to {last}")
            };
            let gaps = if holds.len()
                < steps
                    .iter()
                    .filter(|s| (*first..=*last).contains(&s.step))
                    .count()
            {
                " (with gaps)"
            } else {
                ""
            };
            let end = if at_end { "" } else { ", not at the end" };
            format!("It holds {run}{gaps}{end}.")
        }
    }
}

fn show(metric: Metric, v: &Spread) -> String {
    match metric {
        Metric::Loss => format!("{:.3} ± {:.3}", v.mean, v.sd),
        Metric::Bleu => format!("{:.2} ± {:.2}", v.mean, v.sd),
        Metric::MacroF1 => format!("{:.3} ± {:.3}", v.mean, v.sd),
        Metric::Accuracy | Metric::ExactMatch | Metric::TokenAccuracy | Metric::ErrorRate => {
            format!("{:.1} ± {:.1}%", 100.0 * v.mean, 100.0 * v.sd)
        }
    }
}

/// One value in the metric's units.
fn show_value(metric: Metric, v: f64) -> String {
    match metric {
        Metric::Loss | Metric::MacroF1 => format!("{v:.3}"),
        Metric::Bleu => format!("{v:.2}"),
        Metric::Accuracy | Metric::ExactMatch | Metric::TokenAccuracy | Metric::ErrorRate => {
            format!("{:.1}%", 100.0 * v)
        }
    }
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {one}s")
    }
}

fn mark_bin(bin: &str, train_len: Option<usize>) -> String {
    match train_len {
        Some(len) if bin_start(bin) > len => format!("{bin} ‡"),
        _ => bin.to_string(),
    }
}

/// Compact JSON of a config part, for one line of settings.
fn compact<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("a config serializes")
}

/// A TOML value as it would be written inline, for the overrides table.
pub fn inline_toml(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => format!("{f:?}"),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(items) => {
            format!(
                "[{}]",
                items.iter().map(inline_toml).collect::<Vec<_>>().join(", ")
            )
        }
        toml::Value::Table(t) => {
            let fields: Vec<String> = t
                .iter()
                .map(|(k, v)| format!("{k} = {}", inline_toml(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
    }
}
