//! The claims part of `study.md`: the rule, a table per kind of claim (comparative claims, then
//! sanity checks) with p, the adjusted q, each half of the seeds and the evaluation's size, each
//! claim in full with every metric beside the claimed one, and the earlier rules' verdicts.

use std::fmt::Write as _;

use super::claims::{
    ClaimKind, ClaimOutcome, ClaimSpec, Measured, Metric, PairOutcome, StepVerdict, Verdict,
};
use super::rule::TestKind;
use super::spec::Study;
use super::spread::Spread;
use super::verdicts::ClaimReport;

/// The claims section and the appendix of earlier verdicts, in markdown.
pub fn claims_markdown(md: &mut String, claims: &[ClaimReport], study: &Study, fresh: Option<&[u64]>) {
    let _ = writeln!(md, "\n## Claims\n");
    if claims.is_empty() {
        let _ = writeln!(md, "The study states no claims.");
        return;
    }
    let _ = writeln!(md, "{}\n", rule_text(study, fresh));
    for kind in [ClaimKind::Comparative, ClaimKind::Sanity] {
        let of_kind: Vec<&ClaimReport> = claims.iter().filter(|c| c.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let title = kind.title();
        let _ = writeln!(md, "### {}{}\n", title[..1].to_uppercase(), &title[1..]);
        let _ = writeln!(md, "{}\n", verdict_table(&of_kind));
        for c in of_kind {
            let _ = writeln!(md, "{}\n", claim_section(c, study));
        }
    }
    let _ = writeln!(md, "### The earlier rules' verdicts\n");
    let _ = writeln!(
        md,
        "For comparison: the verdict by unadjusted t-tests (replicated when all seeds passed and \
         the fresh seeds' means merely pointed the claimed way), and by the ±1 sd rule before it.\n"
    );
    let _ = writeln!(
        md,
        "| claim | ±1 sd rule | unadjusted t-tests | now |\n|---|---|---|---|"
    );
    for c in claims {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            c.claim.name(),
            c.earlier.sd_rule.word(),
            c.earlier.unadjusted.word(),
            c.verdict.word()
        );
    }
}

/// How the verdicts below were reached: the tests, the adjustment, replication, chance.
fn rule_text(study: &Study, fresh: Option<&[u64]>) -> String {
    let level = study.level;
    let alpha = 1.0 - level;
    let test = match study.test {
        TestKind::T => {
            "a one-sided t-test on the per-seed values: paired by seed where both variants ran \
                        the same seeds on the same data stream (same data and batch: each seed's \
                        difference is one observation), Welch's otherwise; one-sample for a bound, a gain \
                        or a fraction of a baseline's steps"
        }
        TestKind::Permutation => {
            "a one-sided permutation test on the per-seed values: sign flips of each \
                                  seed's difference where both variants ran the same seeds on the same \
                                  data stream, relabellings of the runs otherwise, exact up to 2^20; its \
                                  lower bound is the t distribution's"
        }
    };
    let mut text = format!(
        "Each comparison is {test}. A claim's p is its test's (an order claim's largest over its \
         pairs, all of which it needs); q is p adjusted by Benjamini–Hochberg over the study's claims \
         of the same kind (comparative claims and sanity checks apart). A claim **holds** when q < \
         {alpha:.2}, which keeps the expected share of false holds among the study's holds at most \
         {:.0}%; otherwise it is **not shown**. A comparison whose every variant is within {:.0} \
         points of chance (a token classifier's accuracy: 1 over its classes) reads **at chance**, \
         whatever its test. Sanity checks (a bound: \"learns the training lengths\", \"does not solve \
         it\") say whether the runs are what the comparisons assume, and are not results. Verdicts at \
         each evaluation are unadjusted, a description of training.",
        100.0 * alpha,
        100.0 * study.chance_margin,
    );
    if let Some(fresh) = fresh {
        let _ = write!(
            text,
            " **Replicated** on fresh seeds {}: a verdict reads all seeds together, and a claim \
             holds only where the file's seeds and the fresh ones each pass the test alone at the \
             {:.0}% level; passing together only, it is **not replicated**.",
            list(fresh),
            100.0 * level
        );
    }
    text
}

/// The kind's claims in one table.
fn verdict_table(claims: &[&ClaimReport]) -> String {
    let replicated = claims.iter().any(|c| c.replication.is_some());
    let bootstrapped = claims.iter().any(|c| c.outcome().bootstrap_p.is_some());
    let mut t = String::from("| claim | verdict | p | q | ");
    if bootstrapped {
        t.push_str("p, bootstrap over seeds and sequences | ");
    }
    if replicated {
        t.push_str("p, file's seeds | p, fresh seeds | ");
    }
    t.push_str("sequences per run | other metrics passing |\n|---|---|---|---|");
    t.push_str(if bootstrapped { "---|" } else { "" });
    t.push_str(if replicated { "---|---|" } else { "" });
    t.push_str("---|---|\n");
    for c in claims {
        let _ = write!(
            t,
            "| {} | **{}** | {} | {} | ",
            c.claim.name(),
            c.verdict.word(),
            optional_p(c.p),
            optional_p(c.q)
        );
        if bootstrapped {
            let _ = write!(t, "{} | ", optional_p(c.outcome().bootstrap_p));
        }
        if let Some(r) = &c.replication {
            let _ = write!(t, "{} | {} | ", half(&c.original), half(&r.fresh));
        } else if replicated {
            t.push_str("— | — | ");
        }
        let _ = writeln!(
            t,
            "{} | {} |",
            c.items.map_or("—".into(), |n| n.to_string()),
            agreeing(c)
        );
    }
    t
}

/// A half's p, marked when it passes alone.
fn half(outcome: &ClaimOutcome) -> String {
    let mark = if outcome.verdict == Verdict::Holds {
        " ✓"
    } else {
        ""
    };
    format!("{}{mark}", optional_p(outcome.p))
}

pub(super) fn optional_p(p: Option<f64>) -> String {
    p.map_or("—".into(), p_value)
}

/// "1 of 3 (not: bleu, loss)": of the other metrics with a test, how many pass it alone.
fn agreeing(c: &ClaimReport) -> String {
    let tested = c.other_metrics.iter().filter(|m| m.p.is_some()).count();
    if tested == 0 {
        return "—".into();
    }
    let failing = c.other_metrics_failing();
    let n = tested - failing.len();
    if failing.is_empty() {
        format!("{n} of {tested}")
    } else {
        format!("{n} of {tested} (not: {})", failing.join(", "))
    }
}

/// One claim: what was expected, what was measured on each set of seeds, every other metric, the
/// verdicts at every evaluation and the verdict.
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
                    "  \n  On {name} ({}): {} {}.",
                    seeds(&outcome.seeds),
                    measured(outcome, study),
                    if outcome.verdict == Verdict::Holds {
                        "Passes alone at the unadjusted level"
                    } else {
                        "Does not pass alone"
                    }
                );
            }
            if !r.fresh_agrees {
                let _ = write!(text, "  \n  The fresh seeds point the other way.");
            }
        }
    }
    if c.outcome().at_chance {
        let _ = write!(
            text,
            "  \n  Every variant it compares is within {:.0} points of chance.",
            100.0 * study.chance_margin
        );
    }
    let others = other_metrics_text(c, study);
    if !others.is_empty() {
        let _ = write!(
            text,
            "  \n  Every other metric in bin {}: {others}.",
            c.claim.bin()
        );
    }
    if !c.over_training.is_empty() {
        let steps: Vec<String> = c
            .over_training
            .iter()
            .map(|s| format!("{} {}", s.step, s.verdict.word()))
            .collect();
        let _ = write!(
            text,
            "  \n  At each evaluation, unadjusted (step: verdict): {}. {}",
            steps.join(", "),
            over_training_summary(&c.over_training)
        );
    }
    let size = c
        .items
        .map_or(String::new(), |n| format!("; {n} sequences per run in the bin"));
    let _ = write!(
        text,
        "  \n  **Verdict: {}** (p {}, q {}{size}).",
        c.verdict.word(),
        optional_p(c.p),
        optional_p(c.q)
    );
    text
}

/// "BLEU: FLOATER 30.18 ± 1.40, sinusoidal 30.50 ± 1.87, p 0.67 (not the claimed way)".
fn other_metrics_text(c: &ClaimReport, study: &Study) -> String {
    let label = |name: &str| study.variant(name).map_or(name, |v| v.label()).to_string();
    c.other_metrics
        .iter()
        .map(|m| {
            let values: Vec<String> = m
                .values
                .iter()
                .map(|(name, v)| format!("{} {}", label(name), m.metric.spread_text(v)))
                .collect();
            let test = match m.p {
                Some(p) => format!(
                    ", p {}{}",
                    p_value(p),
                    match (m.agrees, m.passes) {
                        (_, true) => " (passes)",
                        (true, false) => " (the claimed way, not passing)",
                        (false, _) => " (not the claimed way)",
                    }
                ),
                None => String::new(),
            };
            format!("{}: {}{test}", m.metric.name(), values.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn list(seeds: &[u64]) -> String {
    seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
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
            metric.value_text(*bound)
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
                        |v: &Option<Spread>| v.as_ref().map_or("no value".into(), |v| metric.spread_text(v));
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
                        test_text(p, metric, study.level)
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
                .map(|(seed, g)| format!("seed {seed} {}", metric.value_text(*g)))
                .collect();
            let gain = gain
                .as_ref()
                .map_or("no seed has every value".into(), |g| metric.spread_text(g));
            let test = match test {
                Some(t) => format!(
                    "above 0 by {} (its {}% lower bound {}), {}",
                    metric.value_text(t.estimate),
                    100.0 * study.level,
                    metric.value_text(t.lower_bound),
                    p_value(t.p)
                ),
                None => "no test (fewer than two seeds)".into(),
            };
            format!("mean gain {gain} ({}); {test}.", seeds.join(", "))
        }
        Measured::Bound { value, test } => {
            let value = value
                .as_ref()
                .map_or("no value".into(), |v| metric.spread_text(v));
            let test = match test {
                Some(t) => format!(
                    "beyond the bound on the claimed side by {} (its {}% lower bound {}), {}",
                    metric.value_text(t.estimate),
                    100.0 * study.level,
                    metric.value_text(t.lower_bound),
                    p_value(t.p)
                ),
                None => "no test (fewer than two seeds)".into(),
            };
            format!("{value}; {test}.")
        }
    }
}

/// A pair's test in the metric's units: the difference, its one-sided bound and p.
fn test_text(pair: &PairOutcome, metric: Metric, level: f64) -> String {
    let Some(t) = pair.test.as_ref() else {
        return "no test (fewer than two seeds on a side)".into();
    };
    let amount = |v: f64| match metric {
        Metric::Loss | Metric::MacroF1 => format!("{v:+.3}"),
        Metric::Bleu => format!("{v:+.2}"),
        _ => format!("{:+.1} points", 100.0 * v),
    };
    let paired = if pair.paired { "paired by seed, " } else { "" };
    let bootstrap = pair.bootstrap.as_ref().map_or(String::new(), |b| {
        format!(
            "; over seeds and the evaluated sequences (bootstrap): lower bound {}, p {}",
            amount(b.lower_bound),
            p_value(b.p)
        )
    });
    format!(
        "{paired}difference in the claimed direction {} (its {}% lower bound {}), {}{bootstrap}",
        amount(t.estimate),
        100.0 * level,
        amount(t.lower_bound),
        p_value(t.p)
    )
}

pub(super) fn p_value(p: f64) -> String {
    if p < 1e-4 {
        "< 0.0001".into()
    } else {
        format!("{p:.4}")
    }
}

fn seeds(seeds: &[u64]) -> String {
    format!("seeds {}", list(seeds))
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
