//! The studies published under `docs/studies/<name>/`: each read back from its study file and its
//! runs' results, judged again by the current rule, and its report and pictures written again —
//! what the README's results block and `docs/results/` are generated from, and what a check
//! regenerates and compares.

use std::path::{Path, PathBuf};

use super::archive::{ARCHIVE, read_archive};
use super::plan::{plan_runs, same_run};
use super::plot::write_pictures;
use super::report::write_reports;
use super::results::RunResult;
use super::spec::Study;
use super::summary::{StudySummary, summarize};
use crate::error::{Error, Result};

/// One published study, read and judged.
pub struct Published {
    pub study: Study,
    pub results: Vec<RunResult>,
    /// The replication's seeds, where the published runs hold them.
    pub fresh: Option<Vec<u64>>,
    pub summary: StudySummary,
    /// The device its runs were trained on, as its report recorded it.
    pub device: String,
}

impl Published {
    /// Reads the study of `file` whose runs are in `dir/runs.jsonl.gz`, or, without one, under
    /// `dir/runs/<variant>/seed<k>/result.json`. Every run the file plans (and, where any fresh
    /// seed was run, every run of the fresh seeds) must be there, made with the config planned
    /// now.
    pub fn read(file: &Path, dir: &Path) -> Result<Self> {
        let study = Study::load(file)?;
        let archive = dir.join(ARCHIVE);
        let archived = if archive.exists() {
            Some(read_archive(&archive)?)
        } else {
            None
        };
        let find = |variant: &str, seed: u64| -> Option<RunResult> {
            match &archived {
                Some(all) => all
                    .iter()
                    .find(|r| r.variant == variant && r.seed == seed)
                    .cloned(),
                None => RunResult::read(&result_path(dir, variant, seed)),
            }
        };
        let fresh_seeds = study.fresh_seeds()?;
        let replicated = fresh_seeds
            .iter()
            .any(|&seed| study.variants.iter().any(|v| find(&v.name, seed).is_some()));
        let fresh = replicated.then_some(fresh_seeds);
        let seeds = study.seeds_with(fresh.as_deref());
        let mut results = Vec::new();
        for plan in plan_runs(&study, &seeds, dir) {
            let where_ = || match &archived {
                Some(_) => format!("{}: run {}/seed{}", archive.display(), plan.variant, plan.seed),
                None => plan.result_path().display().to_string(),
            };
            let why = match find(&plan.variant, plan.seed) {
                Some(result) if same_run(&result.run, &plan.run) => {
                    results.push(result);
                    continue;
                }
                Some(_) => "was made with another config than the study file plans",
                None => "is missing or unreadable",
            };
            return Err(Error::Input(format!(
                "published study {}: {} {why}",
                study.name,
                where_()
            )));
        }
        let summary = summarize(&study, &results, fresh.as_deref());
        Ok(Self {
            device: recorded_device(&dir.join("study.json")),
            study,
            results,
            fresh,
            summary,
        })
    }

    /// Writes `study.md`, `study.json` and the pictures into `out`.
    pub fn write_report(&self, out: &Path) -> Result<()> {
        std::fs::create_dir_all(out).map_err(|e| Error::Input(format!("{}: {e}", out.display())))?;
        let pictures = write_pictures(out, &self.study, &self.summary, &self.results)?;
        write_reports(
            out,
            &self.study,
            &self.summary,
            &self.results,
            &self.device,
            &pictures,
        )
    }
}

fn result_path(dir: &Path, variant: &str, seed: u64) -> PathBuf {
    dir.join("runs")
        .join(variant)
        .join(format!("seed{seed}"))
        .join("result.json")
}

/// The `device` a report recorded, or a note that none was.
fn recorded_device(report: &Path) -> String {
    std::fs::read_to_string(report)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|json| json.get("device")?.as_str().map(str::to_string))
        .unwrap_or_else(|| "not recorded".into())
}

/// The names of the studies published under `dir`: every folder with a runs archive or a `runs`
/// folder, sorted.
pub fn published_names(dir: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Input(format!("{}: {e}", dir.display())))?;
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join(ARCHIVE).is_file() || entry.path().join("runs").is_dir())
        .filter_map(|entry| entry.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}
