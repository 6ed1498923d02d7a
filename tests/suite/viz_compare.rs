//! The Compare tab natively, as a visitor drives it: a tiny comparison (two encodings × two
//! seeds) trained frame by frame to its verdicts, equal to `posflow study`'s runner on the study
//! file the tab writes; bad settings refused with the reason in the tab; Stop keeps what finished.

use crate::common::binary;
use crate::common::scratch as scratch_dir;

use std::rc::Rc;

use eframe::egui;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use posflow::arithmetic::Arithmetic;
use posflow::backend::Backend;
use posflow::backend::cpu::CpuBackend;
use posflow::checkpoint::Checkpoint;
use posflow::study::{Study, StudyProgress, plan_runs, run_study};
use posflow::viz::compare::{Choice, CompareSettings, Encoding, Preset};
use posflow::viz::{ClaimStatus, Spawner, View, Viewer, ViewerHandle};
use scratch_dir::scratch;

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

fn tiny() -> CompareSettings {
    CompareSettings {
        choices: vec![
            Choice {
                encoding: Encoding::named("rope").unwrap(),
                randomized: false,
            },
            Choice {
                encoding: Encoding::named("rope").unwrap(),
                randomized: true,
            },
        ],
        seeds: 2,
        preset: Preset::Tiny,
        ..CompareSettings::default()
    }
}

fn window(viewer: &Viewer) -> Harness<'_> {
    Harness::builder()
        .with_size(egui::vec2(1280.0, 1400.0))
        .build_ui(|ui| viewer.show(ui))
}

/// Frames until the comparison stops running.
fn frames_until_done(harness: &mut Harness, handle: &ViewerHandle) {
    for _ in 0..2000 {
        harness.step();
        if !handle.compare_status().running {
            return;
        }
    }
    panic!("still comparing: {:?}", handle.compare_status());
}

struct Quiet;
impl StudyProgress for Quiet {}

#[test]
fn a_tiny_comparison_trains_to_verdicts_that_posflow_study_gives_too() {
    let viewer = Viewer::new(cpu(), Spawner::blocking());
    let handle = viewer.handle();
    handle.select_view(View::Compare);
    handle.set_compare_settings(tiny());
    let mut harness = window(&viewer);
    harness.step();
    handle.start_compare().unwrap();
    harness.step();
    let status = handle.compare_status();
    assert!(status.running);
    assert_eq!((status.runs_total, status.steps_total), (4, 96));
    frames_until_done(&mut harness, &handle);
    let status = handle.compare_status();
    assert_eq!(status.error, None);
    assert!(status.done);
    assert_eq!((status.runs_done, status.steps_done), (4, 96));
    // Both ways, in each bin past the training length (11-20, 21-40): at most one way holds.
    let names: Vec<&str> = status.verdicts.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "rope_beats_rope_rand_11_20",
            "rope_rand_beats_rope_11_20",
            "rope_beats_rope_rand_21_40",
            "rope_rand_beats_rope_21_40",
        ]
    );
    // Apart from them, the sanity checks: 24 steps teach neither model the training lengths, and
    // the tab says so before its verdicts.
    let sanity: Vec<(&str, &str)> = status
        .sanity
        .iter()
        .map(|c| (c.name.as_str(), c.verdict.as_str()))
        .collect();
    assert_eq!(
        sanity,
        [("rope_learns", "not shown"), ("rope_rand_learns", "not shown")]
    );
    // Every length of each bin, 64 sequences a length (8 batches of 8, so that the smallest bin,
    // 2-10, holds ≥ 512): 9, 10 and 20 lengths.
    let sequences =
        |claims: &[ClaimStatus]| -> Vec<Option<usize>> { claims.iter().map(|c| c.sequences).collect() };
    assert_eq!(sequences(&status.sanity), [Some(9 * 64); 2]);
    assert_eq!(
        sequences(&status.verdicts),
        [Some(10 * 64), Some(10 * 64), Some(20 * 64), Some(20 * 64)]
    );
    for pair in status.verdicts.chunks(2) {
        assert!(
            pair.iter().filter(|c| c.verdict == "holds").count() <= 1,
            "{pair:?}"
        );
        // 24 steps of even pairs leave both models near 50%: the results rule says "at chance".
        assert!(
            pair.iter()
                .all(|c| ["holds", "not shown", "at chance"].contains(&c.verdict.as_str())),
            "{pair:?}"
        );
    }
    harness.step();
    harness.get_by_label_contains("96 of 96 steps, 4 of 4 runs");
    harness.get_by_label_contains("Verdicts");
    harness.get_by_label_contains("Not learned: rope, rope_rand did not show");
    harness.get_by_label("RoPE > RoPE, randomized in accuracy at 11-20");

    // Take it home: the study file, and any run's checkpoint, which also opens in the viewer.
    harness.get_by_label("Download study").click();
    harness.step();
    let downloads = handle.take_downloads();
    assert_eq!(downloads.len(), 1);
    assert_eq!(downloads[0].name, "compare_even_pairs.toml");
    assert_eq!(
        String::from_utf8(downloads[0].bytes.clone()).unwrap(),
        handle.compare_study_toml().unwrap()
    );
    harness.get_by_label_contains("Finished runs").click();
    harness.step();
    harness
        .get_all_by_label("Download checkpoint")
        .next()
        .unwrap()
        .click();
    harness.step();
    harness
        .get_all_by_label("Show in the viewer")
        .nth(1)
        .unwrap()
        .click();
    harness.step();
    let downloads = handle.take_downloads();
    assert_eq!(downloads.len(), 1);
    assert_eq!(downloads[0].name, "rope_seed0.safetensors");
    let checkpoint = Checkpoint::from_bytes(&downloads[0].bytes, "rope_seed0").unwrap();
    assert_eq!(checkpoint.metadata().training.step, 24);
    assert_eq!(handle.compare_status().error, None);
    assert_eq!(handle.checkpoints(), ["rope_seed1"]);

    // The study file the tab writes, run natively, gives the page's numbers bit for bit: both
    // in the portable arithmetic, which the file asks for.
    let toml = handle.compare_study_toml().unwrap();
    assert!(toml.contains("arithmetic = \"portable\""), "{toml}");
    let study = Study::from_toml(&toml, "compare.toml").unwrap();
    let dir = scratch("viz_compare", "native");
    let native = run_study(&plan_runs(&study, &study.seeds, &dir), 1, &|| Ok(cpu()), &Quiet).unwrap();
    let page = handle.compare_results();
    assert_eq!(page.len(), native.len());
    for (p, n) in page.iter().zip(&native) {
        assert_eq!((&p.variant, p.seed), (&n.variant, n.seed));
        assert_eq!(n.run.train.arithmetic, Arithmetic::Portable);
        let bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&p.train_loss),
            bits(&n.train_loss),
            "{}/seed{}",
            p.variant,
            p.seed
        );
        assert_eq!(p.evals, n.evals, "{}/seed{}", p.variant, p.seed);
    }
}

/// Makes good settings bad.
type Spoil = fn(&mut CompareSettings);

#[test]
fn bad_settings_are_refused_in_the_tab_with_the_reason() {
    let viewer = Viewer::new(cpu(), Spawner::blocking());
    let handle = viewer.handle();
    handle.select_view(View::Compare);
    let mut harness = window(&viewer);
    let cases: [(&str, Spoil); 3] = [
        ("choose at least one encoding", |s| s.choices.clear()),
        ("seeds must be 1 to 5, got 0", |s| s.seeds = 0),
        ("the test lengths must be longer than the training length", |s| {
            s.test_from = 10
        }),
    ];
    for (reason, spoil) in cases {
        let mut settings = tiny();
        spoil(&mut settings);
        handle.set_compare_settings(settings);
        harness.step();
        harness.get_by_label_contains(reason);
        let err = handle.start_compare().unwrap_err().to_string();
        assert!(err.contains(reason), "{err}");
        assert!(!handle.compare_status().running);
        assert_eq!(handle.compare_status().error.as_deref(), Some(err.as_str()));
    }
    // An unknown task can only come from a link.
    let err = CompareSettings::from_query("task=sorting")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown task `sorting`"), "{err}");
}

/// Randomized FLOATER's caution (its flow solved far past its authors' t) shows in the tab
/// before Start; a comparison without it shows none.
#[test]
fn randomized_floater_s_caution_shows_in_the_tab() {
    let viewer = Viewer::new(cpu(), Spawner::blocking());
    let handle = viewer.handle();
    handle.select_view(View::Compare);
    let mut harness = window(&viewer);
    let caution = "solve the flow to t = 20.47";
    handle.set_compare_settings(tiny());
    harness.step();
    assert!(harness.query_by_label_contains(caution).is_none());
    let mut settings = tiny();
    settings.choices[1].encoding = Encoding::named("floater").unwrap();
    handle.set_compare_settings(settings);
    harness.step();
    harness.get_by_label_contains(caution);
}

#[test]
fn stop_keeps_the_runs_that_finished() {
    let viewer = Viewer::new(cpu(), Spawner::blocking());
    let handle = viewer.handle();
    handle.select_view(View::Compare);
    handle.set_compare_settings(tiny());
    let mut harness = window(&viewer);
    handle.start_compare().unwrap();
    while handle.compare_status().runs_done < 1 {
        harness.step();
    }
    handle.stop_compare();
    harness.run_steps(3);
    let status = handle.compare_status();
    assert!(!status.running && !status.done);
    // A slice ends when a run finishes, so Stop came right after the first.
    assert_eq!(status.runs_done, 1, "{status:?}");
    assert_eq!(handle.compare_results().len(), status.runs_done);
    assert!(status.verdicts.is_empty());
}

/// `posflow viz --compare QUERY` refuses a bad link with the reason before opening anything.
#[test]
fn posflow_viz_refuses_a_bad_compare_link() {
    let dir = scratch("viz_compare", "cli");
    let o = binary::posflow_in(
        &dir,
        &[
            "viz",
            "--compare",
            "task=even_pairs&enc=rope,wavelets",
            "--export",
            "out",
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown encoding `wavelets`"), "{err}");
    assert!(!dir.join("out").exists());
}
