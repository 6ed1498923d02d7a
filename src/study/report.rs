//! `study.md` for people and `study.json` for programs: the settings, mean ± sd per variant and
//! length bin, the time per run, each claim with what was measured and its verdict.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::report_claims::claims_markdown;
use super::results::{EvalPoint, RunResult};
use super::spec::Study;
use super::summary::{StudySummary, bin_start};
use crate::arithmetic::Arithmetic;
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
    // Compact: a program reads it, and the published reports travel with the tree.
    let json = serde_json::to_string(&report).expect("a report serializes");
    crate::checkpoint::write_atomically(&out.join("study.json"), json.as_bytes())?;
    crate::checkpoint::write_atomically(&out.join("study.md"), markdown(&report, study).as_bytes())
}

/// Which arithmetic the runs computed in, and so how closely they re-run elsewhere.
fn arithmetic(device: &str, arithmetic: Arithmetic) -> &'static str {
    match arithmetic {
        _ if !device.starts_with("cpu") => {
            "the GPU's own (re-runs on another GPU or on the CPU agree to rounding, not to the bit)"
        }
        Arithmetic::Native => {
            "native (the products by the `gemm` crate, whose kernels follow the CPU: re-runs on this \
             machine give the same bits, on another CPU agree to rounding)"
        }
        Arithmetic::Portable => "portable (the same bits on every machine and in the page)",
    }
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
    let _ = writeln!(md, "- Device: {}", r.device);
    let _ = writeln!(md, "- Arithmetic: {}\n", arithmetic(r.device, b.train.arithmetic));
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
                .map(|bin| bin.get(metric).map_or("—".into(), |v| metric.spread_text(v)))
                .collect();
            let _ = writeln!(md, "| {} | {} |", v.label, cells.join(" | "));
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "### Cost\n\nParameters of each variant's model, and its wall time per run (training and \
         evaluation) on the device above.\n\n| variant | parameters | seconds per run | runs |\n|---|---|---|---|"
    );
    for v in &s.variants {
        let parameters = study
            .variant(&v.name)
            .map_or("—".into(), |v| v.parameters.to_string());
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
        let _ = writeln!(md, "| {} | {parameters} | {time} | {runs}{resumed} |", v.label);
    }
    claims_markdown(&mut md, &s.claims, study, s.fresh_seeds.as_deref());
    if !r.pictures.is_empty() {
        let _ = writeln!(md, "\n## Pictures\n");
        for (file, caption) in r.pictures {
            let _ = writeln!(md, "{caption}\n\n![{caption}]({file})\n");
        }
    }
    md
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
