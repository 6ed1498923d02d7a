//! A study's run trained by PyTorch under `torchrun` (`[study] trainer = "torchrun"`): the run
//! config written as TOML beside the run, `python -m posflow_torch.train` launched on it (through
//! `torch.distributed.run --standalone` for several processes, so that runs side by side do not
//! share a port), this binary given to it as POSFLOW_BIN (it draws the batches and evaluates, so
//! data and evaluation are posflow's), and the run's result read from the metrics log it wrote,
//! as for a run posflow trained. An interrupted run resumes from its checkpoint.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::plan::{RunPlan, StudyProgress};
use super::report::inline_toml;
use super::results::RunResult;
use crate::error::{Error, Result};
use crate::train::{MetricsLog, RunConfig, VOCAB_FROM_DATA};

/// The Python that runs posflow_torch: POSFLOW_PYTHON, else `python3`.
fn python() -> String {
    std::env::var("POSFLOW_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Trains `plan` with posflow_torch in `processes` processes and writes its result.
pub(super) fn run_torch(plan: &RunPlan, processes: usize, progress: &dyn StudyProgress) -> Result<RunResult> {
    let checkpoint = plan.checkpoint();
    let metrics = plan.metrics();
    let config = plan.dir.join("run.toml");
    std::fs::write(&config, run_toml(&plan.run)?)
        .map_err(|e| Error::Input(format!("writing {}: {e}", config.display())))?;
    let resumed_at = resumable_step(plan);
    match resumed_at {
        // Lines written after the checkpoint are dropped, as posflow's own resume does.
        Some(step) => drop(MetricsLog::resume(metrics, step)?),
        None => remove_if_there(metrics)?,
    }
    progress.started(plan, resumed_at.unwrap_or(0));
    let mut command = Command::new(python());
    if processes > 1 {
        command.args(["-m", "torch.distributed.run", "--standalone"]);
        command.arg(format!("--nproc_per_node={processes}"));
    }
    command
        .args(["-m", "posflow_torch.train", "--config"])
        .arg(&config);
    command.arg("--out").arg(checkpoint).arg("--metrics").arg(metrics);
    if resumed_at.is_some() {
        command.arg("--resume").arg(checkpoint);
    }
    let posflow = std::env::current_exe().map_err(|e| Error::Input(format!("this binary's path: {e}")))?;
    command.env("POSFLOW_BIN", posflow);
    let start = Instant::now();
    let done = command
        .output()
        .map_err(|e| Error::Input(format!("cannot start {} (POSFLOW_PYTHON): {e}", python())))?;
    let seconds = start.elapsed().as_secs_f64();
    let log = plan.dir.join("torchrun.log");
    let mut text = done.stdout.clone();
    text.extend_from_slice(&done.stderr);
    std::fs::write(&log, &text).map_err(|e| Error::Input(format!("writing {}: {e}", log.display())))?;
    if !done.status.success() {
        let stderr = String::from_utf8_lossy(&done.stderr);
        let last: Vec<&str> = stderr.lines().rev().take(3).collect();
        return Err(Error::Training(format!(
            "posflow_torch failed ({}; {} has its output): {}",
            done.status,
            log.display(),
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )));
    }
    plan.finish(seconds, resumed_at, progress)
}

/// A run config as a TOML document: each section a table of inline values.
fn run_toml(run: &RunConfig) -> Result<String> {
    let bad = |e: String| Error::Input(format!("the run config cannot be written as TOML: {e}"));
    let toml::Value::Table(sections) = toml::Value::try_from(run).map_err(|e| bad(e.to_string()))? else {
        return Err(bad("it is not a table".into()));
    };
    let mut text = String::new();
    for (name, section) in &sections {
        let toml::Value::Table(entries) = section else {
            return Err(bad(format!("{name} is not a table")));
        };
        text.push_str(&format!("[{name}]\n"));
        for (key, value) in entries {
            // A vocabulary the data sets is written by leaving it out.
            if (name.as_str(), key.as_str()) == ("model", "vocab") && run.model.vocab == VOCAB_FROM_DATA {
                continue;
            }
            text.push_str(&format!("{key} = {}\n", inline_toml(value)));
        }
        text.push('\n');
    }
    // The document must read back as the run it was written from.
    let back = RunConfig::from_toml(&text, "the run's TOML").map_err(|e| bad(e.to_string()))?;
    if back != *run {
        return Err(bad("it reads back as another run".into()));
    }
    Ok(text)
}

/// The step of the run's own checkpoint, when it is not yet at the run's end.
fn resumable_step(plan: &RunPlan) -> Option<usize> {
    let step = plan.resumable()?.metadata().training.step as usize;
    (step > 0 && step < plan.steps()).then_some(step)
}

fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::Input(format!("removing {}: {e}", path.display())))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::run_toml;
    use crate::study::Study;

    /// Every run of every committed study writes as a TOML document that reads back as that run
    /// (run_toml checks the read-back itself).
    #[test]
    fn every_committed_run_writes_as_toml() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("studies");
        let mut written = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let study = Study::load(&path).unwrap();
                for v in &study.variants {
                    let run = v.run_for(3, std::path::Path::new("/runs/x"));
                    run_toml(&run).unwrap_or_else(|e| panic!("{} {}: {e}", path.display(), v.name));
                    written += 1;
                }
            }
        }
        assert!(written > 100, "{written}");
    }
}
