//! A study's run trained by PyTorch under `torchrun` (`[study] trainer = "torchrun"`): the run
//! config written as TOML beside the run, `python -m posflow_torch.train` launched on it (through
//! `torch.distributed.run` for several processes, on the loopback address and a free port), this
//! binary given to it as POSFLOW_BIN (it draws the batches and evaluates, so data and evaluation
//! are posflow's), and the run's result read from the metrics log it wrote, as for a run posflow
//! trained. An interrupted run resumes from its checkpoint.

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
        // torchrun's static rendezvous (as its README command runs it) on the loopback address,
        // so that no host name has to resolve (containers, CI sandboxes), and on a port free now,
        // so that runs side by side do not share one.
        command.args([
            "-m",
            "torch.distributed.run",
            "--nnodes=1",
            "--local_addr=127.0.0.1",
            "--master_addr=127.0.0.1",
        ]);
        command.arg(format!("--master_port={}", free_port()?));
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
        return Err(Error::Training(format!(
            "posflow_torch failed ({}; {} has its output): {}",
            done.status,
            log.display(),
            failure_summary(&String::from_utf8_lossy(&done.stderr))
        )));
    }
    plan.finish(seconds, resumed_at, progress)
}

/// A loopback port no socket holds now (the system's pick for port 0).
fn free_port() -> Result<u16> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| Error::Input(format!("no free port on 127.0.0.1 for torchrun: {e}")))
}

/// What a failed job's stderr says went wrong: the ranks' own error lines (a Python exception's
/// last line, a C++ exception's `what()` or a `terminate` without one, a fatal error's first
/// line), which torchrun's closing report ("Signal 6 received") does not repeat, then that
/// report's rank and last lines.
fn failure_summary(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('='))
        .collect();
    // A cause among the last lines (one process's exception, without torchrun) is quoted once.
    let (before, last) = lines.split_at(lines.len().saturating_sub(3));
    let is_cause = |l: &&str| {
        ["what():", "terminate called", "Fatal Python error", "rank      :"]
            .iter()
            .any(|c| l.contains(c))
            || (l.contains("Error: ") && !l.contains("ChildFailedError"))
    };
    let causes = before.iter().filter(|l| is_cause(l)).take(3);
    causes.chain(last).copied().collect::<Vec<_>>().join(" / ")
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
    use super::{failure_summary, run_toml};
    use crate::study::Study;

    /// A rank's exception reaches the error, not only torchrun's report of the signal.
    #[test]
    fn a_failed_job_is_summed_up_by_its_ranks_errors() {
        // torchrun's report, as it closes a job whose rank aborted.
        let report = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n\
                      ============================================================\n\
                      posflow_torch.train FAILED\nRoot Cause (first observed failure):\n[0]:\n  \
                      host      : ci\n  rank      : 1 (local_rank: 1)\n  exitcode  : -6 (pid: 7)\n  \
                      error_file: <N/A>\n  traceback : Signal 6 (SIGABRT) received by PID 7\n\
                      ============================================================\n";
        let last =
            "exitcode  : -6 (pid: 7) / error_file: <N/A> / traceback : Signal 6 (SIGABRT) received by PID 7";
        let thrown = "[rank1]: Traceback (most recent call last):\n\
                      [rank1]: RuntimeError: the batch does not split\n\
                      terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  \
                      what():  [enforce fail at device.cc:83] ifa != nullptr\n";
        assert_eq!(
            failure_summary(&format!("{thrown}{report}")),
            format!(
                "[rank1]: RuntimeError: the batch does not split / terminate called after throwing an \
                 instance of 'gloo::EnforceNotMet' / what():  [enforce fail at device.cc:83] ifa != nullptr / {last}"
            )
        );
        let silent = "terminate called without an active exception\n";
        assert_eq!(
            failure_summary(&format!("{silent}{report}")),
            format!("terminate called without an active exception / rank      : 1 (local_rank: 1) / {last}")
        );
        assert_eq!(failure_summary("one\ntwo\n"), "one / two");
        assert_eq!(
            failure_summary("Traceback (most recent call last):\nposflow_torch.train.RunError: no steps\n"),
            "Traceback (most recent call last): / posflow_torch.train.RunError: no steps"
        );
    }

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
