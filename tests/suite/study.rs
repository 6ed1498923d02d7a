//! `posflow study` as a user runs it: a tiny copy-task study to the end (report, JSON, pictures),
//! a study killed after its first run and started again, and bad studies refused before training.

use crate::common::binary;
use crate::common::scratch as scratch_dir;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use binary::posflow_in;
use scratch_dir::scratch;

/// Two variants × two seeds of a 1-layer, d_model 16 copy model, `steps` steps each.
fn tiny_study(steps: usize) -> String {
    tiny_study_with(steps, "")
}

/// The tiny study with more `[[variant]]`s listed `first`.
fn tiny_study_with(steps: usize, first: &str) -> String {
    format!(
        r#"
[study]
name = "tiny"
description = "Does a relative bias copy longer strings than a learned table?"
seeds = [0, 1]

[base]
data = {{ task = "copy", min_len = 1, max_len = 4 }}
[base.model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 64
kind = {{ type = "causal_lm" }}
posenc = {{ type = "relative", buckets = 8, max_distance = 16 }}
[base.train]
steps = {steps}
batch = 8
lr = 1e-2
eval_every = 5
eval_lengths = [10, 34]
eval_batches = 1
{first}
[[variant]]
name = "relative"
label = "T5 relative"

[[variant]]
name = "learned"
label = "learned table"
set = {{ "model.posenc" = {{ type = "learned" }} }}

[[claim]]
name = "extrapolates"
text = "relative > learned in accuracy past the training length"
kind = "order"
metric = "accuracy"
bin = "33-64"
order = ["relative", "learned"]

[[claim]]
name = "sooner"
text = "relative reaches learned's final loss sooner"
kind = "reaches"
metric = "loss"
bin = "1-32"
variant = "relative"
baseline = "learned"

[[claim]]
name = "learns"
text = "relative learns the training lengths"
kind = "bound"
metric = "accuracy"
bin = "1-32"
variant = "relative"
bound = 0.1
beats = true

[[claim]]
name = "gains"
text = "relative > learned on average, seed by seed"
kind = "gain"
metric = "accuracy"
bin = "33-64"
pairs = [["relative", "learned"]]
"#
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_study_runs_every_variant_and_seed_and_reports() {
    let dir = scratch("study", "full");
    // Listed first, the warm start still runs after its source, on either of the two threads.
    let warm = "[[variant]]\nname = \"warm\"\nset = { \"train.lr\" = 1e-3 }\nwarm_start = \"learned\"\n";
    std::fs::write(dir.join("tiny.toml"), tiny_study_with(10, warm)).unwrap();
    let o = posflow_in(&dir, &["--device", "cpu", "study", "tiny.toml", "--jobs", "2"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(
        out.contains("study tiny: 3 variants × 2 seeds = 6 runs, 60 steps in all"),
        "{out}"
    );
    assert!(out.contains("0 of 6 runs already done, 6 to run"), "{out}");
    // Not a terminal: a progress line every 5% of the steps.
    assert!(out.contains("study: 50% (30/60 steps)"), "{out}");
    for seed in [0, 1] {
        let source = out.find(&format!("run learned/seed{seed}: done")).unwrap();
        let warm = out.find(&format!("run warm/seed{seed}: started, warm")).unwrap();
        assert!(source < warm, "{out}");
    }

    let root = dir.join("runs/studies/tiny");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("study.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6);
    let variants: Vec<&str> = json["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variants, ["relative", "learned", "warm"]);
    assert_eq!(json["summary"]["bins"], serde_json::json!(["1-32", "33-64"]));
    assert_eq!(json["summary"]["train_len"], 10);

    // The summary's means are the means of the runs' final values.
    for (i, variant) in ["relative", "learned"].iter().enumerate() {
        let finals: Vec<f64> = runs
            .iter()
            .filter(|r| r["variant"] == *variant)
            .map(|r| {
                let last = r["evals"].as_array().unwrap().last().unwrap();
                assert_eq!(last["step"], 10);
                let bin = last["bins"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|b| b["bin"] == "33-64")
                    .unwrap();
                bin["accuracy"].as_f64().unwrap()
            })
            .collect();
        assert_eq!(finals.len(), 2);
        assert!(finals.iter().all(|a| (0.0..=1.0).contains(a)), "{finals:?}");
        let summary = &json["summary"]["variants"][i]["bins"][1]["accuracy"];
        let mean = (finals[0] + finals[1]) / 2.0;
        assert!(
            (summary["mean"].as_f64().unwrap() - mean).abs() < 1e-9,
            "{summary} vs {finals:?}"
        );
        let sd = (finals[0] - finals[1]).abs() / 2f64.sqrt();
        assert!(
            (summary["sd"].as_f64().unwrap() - sd).abs() < 1e-9,
            "{summary} vs {finals:?}"
        );
        assert_eq!(summary["n"], 2);
    }
    let claims = json["summary"]["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 4);
    for claim in claims {
        assert!(
            ["holds", "not shown"].contains(&claim["verdict"].as_str().unwrap()),
            "{claim}"
        );
    }
    assert_eq!(
        claims[0]["original"]["measured"]["pairs"][0]["better"],
        "relative"
    );
    assert_eq!(claims[0]["original"]["seeds"], serde_json::json!([0, 1]));
    assert_eq!(claims[1]["original"]["measured"]["baseline_steps"], 10);
    // The order claim at each of the two evaluations (steps 5 and 10); none for a reaches claim.
    let steps: Vec<&serde_json::Value> = claims[0]["over_training"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["step"])
        .collect();
    assert_eq!(steps, [5, 10]);
    assert_eq!(claims[1]["over_training"], serde_json::json!([]));
    assert!(claims[0].get("replication").is_none());

    let md = std::fs::read_to_string(root.join("study.md")).unwrap();
    for part in [
        "# Study: tiny",
        "Does a relative bias copy longer strings",
        "| learned | learned table | `model.posenc = { type = \"learned\" }` | — |",
        "| warm | warm | `train.lr = 0.001` | learned |",
        "| variant | 1-32 | 33-64 ‡ |",
        "| T5 relative | ",
        "- **extrapolates** — relative > learned",
        "Expected, by final accuracy in bin 33-64: T5 relative > learned table",
        "- **sooner** — ",
        "**Verdict: ",
        "### Comparative claims",
        "### Sanity checks",
        "| claim | verdict | p | q | p, bootstrap over seeds and sequences | sequences per run | other metrics passing |",
        "### The earlier rules' verdicts",
        "one-sided t-test on the per-seed values: paired by seed",
        "Benjamini–Hochberg over the study's claims of the same kind",
        "At each evaluation, unadjusted (step: verdict): 5 ",
        "Every other metric in bin 33-64: loss: T5 relative ",
        "over seeds and the evaluated sequences (bootstrap): lower bound ",
        "Expected: T5 relative's final accuracy in bin 1-32 (mean over seeds) better than 10.0%.",
        "Expected, by final accuracy in bin 33-64: a gain above 0, per seed averaged over T5 relative over learned table.",
        "mean gain ",
        "![",
        "(training_loss.svg)",
    ] {
        assert!(md.contains(part), "{part:?} not in\n{md}");
    }
    for picture in [
        "training_loss.svg",
        "eval_loss.svg",
        "length_accuracy.svg",
        "length_loss.svg",
    ] {
        let svg = std::fs::read_to_string(root.join(picture)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("T5 relative") && svg.contains("learned table"),
            "{picture}"
        );
    }
    let accuracy = std::fs::read_to_string(root.join("length_accuracy.svg")).unwrap();
    assert!(accuracy.contains("past the training length (10 tokens)"));
    for run in [
        "relative/seed0",
        "relative/seed1",
        "learned/seed0",
        "learned/seed1",
    ] {
        for file in ["result.json", "metrics.jsonl", "model.safetensors"] {
            assert!(root.join("runs").join(run).join(file).is_file(), "{run}/{file}");
        }
    }
}

#[test]
fn a_killed_study_runs_only_what_is_missing() {
    let dir = scratch("study", "resume");
    std::fs::write(dir.join("tiny.toml"), tiny_study(150)).unwrap();
    let log = std::fs::File::create(dir.join("first.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_posflow"))
        .args(["--device", "cpu", "study", "tiny.toml"])
        .current_dir(&dir)
        .env_remove("POSFLOW_DEVICE")
        .stdout(log)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let runs = dir.join("runs/studies/tiny/runs");
    let first = runs.join("relative/seed0/result.json");
    let start = Instant::now();
    while !first.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the first run never finished"
        );
        assert!(child.try_wait().unwrap().is_none(), "the study ended early");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let results = |dir: &Path| {
        [
            "relative/seed0",
            "relative/seed1",
            "learned/seed0",
            "learned/seed1",
        ]
        .iter()
        .filter(|run| dir.join(run).join("result.json").exists())
        .count()
    };
    let done = results(&runs);
    assert!((1..4).contains(&done), "{done} runs done when killed");
    let bytes = std::fs::read(&first).unwrap();
    let modified = std::fs::metadata(&first).unwrap().modified().unwrap();

    let o = posflow_in(&dir, &["--device", "cpu", "study", "tiny.toml"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(
        out.contains(&format!("{done} of 4 runs already done, {} to run", 4 - done)),
        "{out}"
    );
    let ran = out
        .lines()
        .filter(|l| l.contains(": started") || l.contains(": resumed"))
        .count();
    assert_eq!(ran, 4 - done, "{out}");
    assert!(!out.contains("run relative/seed0:"), "{out}");
    assert_eq!(std::fs::read(&first).unwrap(), bytes);
    assert_eq!(std::fs::metadata(&first).unwrap().modified().unwrap(), modified);
    assert_eq!(results(&runs), 4);
    let md = std::fs::read_to_string(dir.join("runs/studies/tiny/study.md")).unwrap();
    assert!(md.contains("| T5 relative | "), "{md}");

    // Done: a third start runs nothing and writes the same report.
    let o = posflow_in(&dir, &["--device", "cpu", "study", "tiny.toml"]);
    assert!(
        text(&o.stdout).contains("4 of 4 runs already done, 0 to run"),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("runs/studies/tiny/study.md")).unwrap(),
        md
    );
}

#[test]
fn bad_studies_are_refused_before_anything_runs() {
    let dir = scratch("study", "refused");
    for (name, change, says) in [
        (
            "key",
            (
                "\"model.posenc\" = { type = \"learned\" }",
                "\"model.posenk\" = { type = \"learned\" }",
            ),
            "variant `learned`: set \"model.posenk\"",
        ),
        (
            "claim",
            (
                "order = [\"relative\", \"learned\"]",
                "order = [\"relative\", \"floater\"]",
            ),
            "claim `extrapolates`: names variant `floater`",
        ),
        (
            "metric",
            ("metric = \"loss\"", "metric = \"perplexity\""),
            "unknown variant `perplexity`",
        ),
        (
            "bin",
            ("bin = \"33-64\"", "bin = \"65-128\""),
            "bin \"65-128\" is not among the length bins",
        ),
        (
            "level",
            ("seeds = [0, 1]", "seeds = [0, 1]\nlevel = 95"),
            "[study] level must be above 0.5 and below 1",
        ),
    ] {
        let file = format!("{name}.toml");
        std::fs::write(dir.join(&file), tiny_study(10).replace(change.0, change.1)).unwrap();
        let o = posflow_in(&dir, &["--device", "cpu", "study", &file]);
        assert!(!o.status.success());
        let err = text(&o.stderr);
        assert!(
            err.contains(&format!("error: {file}: ")) && err.contains(says),
            "{name}: {err}"
        );
        assert!(!dir.join("runs").exists(), "{name}: something ran");
    }
    // A dry run checks and lists, and trains nothing.
    std::fs::write(dir.join("good.toml"), tiny_study(10)).unwrap();
    let o = posflow_in(&dir, &["study", "good.toml", "--dry-run", "--out", "elsewhere"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        out.contains("learned          10 steps: model.posenc = { type = \"learned\" }"),
        "{out}"
    );
    assert!(
        out.contains("into elsewhere") && !dir.join("elsewhere").exists(),
        "{out}"
    );
    // A replication of seeds at the top of the range: no fresh seed wraps round to a listed one.
    let top = tiny_study(10).replace("seeds = [0, 1]", "seeds = [0, 18446744073709551615]");
    std::fs::write(dir.join("top.toml"), top).unwrap();
    let o = posflow_in(&dir, &["study", "top.toml", "--dry-run", "--replicate"]);
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o.stdout));
    assert!(
        err.contains("[study] seeds: a replication runs 2 fresh seeds after the largest listed seed, 18446744073709551615"),
        "{err}"
    );
}

/// `--replicate`: the fresh seeds (the integers after the file's largest) run beside the file's,
/// each claim is judged on the file's, the fresh and all seeds, and a second start resumes with
/// every run done.
#[test]
fn a_replicated_study_judges_each_claim_on_the_file_s_fresh_and_all_seeds() {
    let dir = scratch("study", "replicate");
    std::fs::write(dir.join("tiny.toml"), tiny_study(10)).unwrap();
    let help = posflow_in(&dir, &["study", "--help"]);
    assert!(
        text(&help.stdout).contains("--replicate"),
        "{}",
        text(&help.stdout)
    );
    let o = posflow_in(
        &dir,
        &[
            "--device",
            "cpu",
            "study",
            "tiny.toml",
            "--replicate",
            "--jobs",
            "2",
        ],
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(out.contains("2 variants × 4 seeds = 8 runs"), "{out}");
    assert!(
        out.contains("seeds: the file's 0, 1; fresh for the replication: 2, 3; claims at a 95% level"),
        "{out}"
    );
    assert!(
        out.contains("claim extrapolates: ")
            && out.contains("; file's seeds alone ")
            && out.contains(", fresh seeds alone "),
        "{out}"
    );
    assert!(out.contains("sanity check learns: "), "{out}");
    let root = dir.join("runs/studies/tiny");
    for run in [
        "relative/seed2",
        "relative/seed3",
        "learned/seed2",
        "learned/seed3",
    ] {
        assert!(root.join("runs").join(run).join("result.json").is_file(), "{run}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("study.json")).unwrap()).unwrap();
    assert_eq!(json["summary"]["fresh_seeds"], serde_json::json!([2, 3]));
    for claim in json["summary"]["claims"].as_array().unwrap() {
        let r = &claim["replication"];
        assert_eq!(claim["original"]["seeds"], serde_json::json!([0, 1]), "{claim}");
        assert_eq!(r["fresh"]["seeds"], serde_json::json!([2, 3]), "{claim}");
        assert_eq!(r["all"]["seeds"], serde_json::json!([0, 1, 2, 3]), "{claim}");
        // The verdict is the one on all seeds, and only with the fresh ones agreeing.
        let holds = r["all"]["verdict"] == "holds" && r["fresh_agrees"] == true;
        assert_eq!(
            claim["verdict"],
            if holds { "holds" } else { "not shown" },
            "{claim}"
        );
    }
    let md = std::fs::read_to_string(root.join("study.md")).unwrap();
    for part in [
        "**Replicated** on fresh seeds 2, 3",
        "On the file's seeds (seeds 0, 1): ",
        "On the fresh seeds (seeds 2, 3): ",
        "On all seeds (seeds 0, 1, 2, 3): ",
    ] {
        assert!(md.contains(part), "{part:?} not in\n{md}");
    }
    // Resumes: everything is done.
    let o = posflow_in(&dir, &["--device", "cpu", "study", "tiny.toml", "--replicate"]);
    assert!(
        text(&o.stdout).contains("8 of 8 runs already done, 0 to run"),
        "{}",
        text(&o.stdout)
    );
    // Without --replicate the file's seeds alone are judged, from the same runs.
    let o = posflow_in(&dir, &["--device", "cpu", "study", "tiny.toml"]);
    assert!(
        text(&o.stdout).contains("4 of 4 runs already done"),
        "{}",
        text(&o.stdout)
    );
}

/// `posflow results` on a published tiny study: it writes the report, the results pages and the
/// README's block from the runs, `--check` passes on what it wrote, and a number changed by hand
/// in a report, in a run's result or in the README fails the check, naming the file.
#[test]
fn published_results_are_generated_and_checked_against_their_runs() {
    let dir = scratch("study", "published");
    std::fs::write(dir.join("tiny.toml"), tiny_study(10)).unwrap();
    let o = posflow_in(&dir, &["--device", "cpu", "study", "tiny.toml"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The repository's layout: the study file, its published runs, a README with the markers.
    let root = dir.join("repo");
    std::fs::create_dir_all(root.join("studies")).unwrap();
    std::fs::create_dir_all(root.join("docs/studies/tiny")).unwrap();
    std::fs::copy(dir.join("tiny.toml"), root.join("studies/tiny.toml")).unwrap();
    std::fs::rename(
        dir.join("runs/studies/tiny/runs"),
        root.join("docs/studies/tiny/runs"),
    )
    .unwrap();
    let readme = format!(
        "# A project\n\nIt shows that {}old{}.\n\n{}\nold numbers\n{}\n\nMore text.\n",
        posflow::study::HEADLINE_BEGIN,
        posflow::study::HEADLINE_END,
        posflow::study::README_BEGIN,
        posflow::study::README_END
    );
    std::fs::write(root.join("README.md"), readme).unwrap();
    let results = |check: bool| {
        let mut args = vec!["results", "--root", "repo"];
        if check {
            args.push("--check");
        }
        posflow_in(&dir, &args)
    };
    let check_fails_on = |file: &str| {
        let o = results(true);
        let err = text(&o.stderr);
        assert!(!o.status.success() && err.contains(file), "{file}: {err}");
    };

    let o = results(true);
    assert!(!o.status.success(), "nothing generated yet: {}", text(&o.stdout));
    let o = results(false);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        !readme.contains("old numbers") && readme.ends_with("\n\nMore text.\n"),
        "{readme}"
    );
    assert!(
        readme.contains("It shows that <!-- headline: generated by `posflow results` -->of the 3 comparative claims its 1 published studies test, **"),
        "{readme}"
    );
    assert!(
        readme.contains("**1 published studies: 3 comparative claims and 1 sanity checks.**"),
        "{readme}"
    );
    let page = std::fs::read_to_string(root.join("docs/results/tiny.md")).unwrap();
    assert!(page.contains("| extrapolates — relative > learned"), "{page}");
    let report = root.join("docs/studies/tiny/study.md");
    assert!(
        std::fs::read_to_string(&report)
            .unwrap()
            .contains("### Sanity checks")
    );
    let o = results(true);
    assert!(o.status.success(), "{}", text(&o.stderr));

    // A number in the report.
    let original = std::fs::read_to_string(&report).unwrap();
    let edited = original.replacen("| relative |", "| relative | 1", 1);
    assert_ne!(edited, original);
    std::fs::write(&report, &edited).unwrap();
    check_fails_on("docs/studies/tiny/study.md");
    std::fs::write(&report, &original).unwrap();

    // A run's final accuracy: the report, its JSON and the pages no longer follow from it.
    let result = root.join("docs/studies/tiny/runs/relative/seed0/result.json");
    let json = std::fs::read_to_string(&result).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let last = value["evals"].as_array_mut().unwrap().last_mut().unwrap();
    let bin = &mut last["bins"].as_array_mut().unwrap()[0];
    bin["accuracy"] = serde_json::json!(bin["accuracy"].as_f64().unwrap() + 0.25);
    std::fs::write(&result, serde_json::to_string(&value).unwrap()).unwrap();
    check_fails_on("docs/studies/tiny/study.json");
    std::fs::write(&result, &json).unwrap();

    // The README's block.
    let readme_path = root.join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    std::fs::write(
        &readme_path,
        readme.replacen("3 comparative claims", "4 comparative claims", 1),
    )
    .unwrap();
    check_fails_on("README.md");
    std::fs::write(&readme_path, readme).unwrap();
    assert!(results(true).status.success());

    // Published as one archive in place of the folder of results: the same reports follow.
    let published = root.join("docs/studies/tiny");
    let o = posflow_in(&dir, &["results", "--pack", "repo/docs/studies/tiny"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("packed 4 run results"),
        "{}",
        text(&o.stdout)
    );
    std::fs::remove_dir_all(published.join("runs")).unwrap();
    // The archive keeps the training loss as 10-step means: its picture alone is drawn anew.
    let o = results(true);
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("differ from what the published runs generate")
            && err
                .trim_end()
                .ends_with(": repo/docs/studies/tiny/training_loss.svg"),
        "{err}"
    );
    let report = std::fs::read_to_string(published.join("study.md")).unwrap();
    assert!(results(false).status.success());
    assert!(results(true).status.success());
    assert_eq!(
        std::fs::read_to_string(published.join("study.md")).unwrap(),
        report
    );
    // Unpacked where a study's runs go, they are found done.
    let resumed = dir.join("resumed");
    std::fs::create_dir_all(&resumed).unwrap();
    std::fs::copy(published.join("runs.jsonl.gz"), resumed.join("runs.jsonl.gz")).unwrap();
    let o = posflow_in(&dir, &["results", "--unpack", "resumed"]);
    assert!(
        text(&o.stdout).contains("unpacked 4 run results"),
        "{}",
        text(&o.stderr)
    );
    let o = posflow_in(&dir, &["study", "tiny.toml", "--out", "resumed", "--dry-run"]);
    assert!(
        text(&o.stdout).contains("4 of 4 runs already done, 0 to run"),
        "{}",
        text(&o.stdout)
    );
}
