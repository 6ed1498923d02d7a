//! The Compare tab's face: the settings (refused with the reason while they cannot run), Start
//! and Stop, a progress bar with the time left, the training losses, the metric by test length
//! (mean ± 1 sd over the finished seeds, redrawn at every evaluation) and, at the end, each
//! claim's verdict with its one-sided interval.

use eframe::egui;
use egui_plot::{
    ColorConflictHandling, FilledArea, Legend, Line, LineStyle, Plot, PlotPoints, Points, VLine,
};

use super::run::{self, Run, Snapshot};
use super::settings::{Choice, CompareSettings, Encoding, MAX_SEEDS, Preset};
use super::task::CompareTask;
use crate::study::{ClaimKind, ClaimReport, Measured, Verdict, bin_start};
use crate::viz::{Download, LoadedCheckpoint, State};

/// One colour per variant, in the settings' order.
const COLOURS: [egui::Color32; 8] = [
    egui::Color32::from_rgb(31, 119, 180),
    egui::Color32::from_rgb(255, 127, 14),
    egui::Color32::from_rgb(44, 160, 44),
    egui::Color32::from_rgb(214, 39, 40),
    egui::Color32::from_rgb(148, 103, 189),
    egui::Color32::from_rgb(140, 86, 75),
    egui::Color32::from_rgb(227, 119, 194),
    egui::Color32::from_rgb(127, 127, 127),
];

fn colour(i: usize) -> egui::Color32 {
    COLOURS[i % COLOURS.len()]
}

pub(crate) fn show(ui: &mut egui::Ui, s: &mut State) {
    ui.label(
        "Train small models on a task from scratch, here, with the encodings you choose, and see \
         which holds up on inputs longer than any seen in training. Each verdict is the one \
         `posflow study` gives: a one-sided Welch test at 95% over the seeds.",
    );
    let running = s.compare.run.as_ref().is_some_and(|r| r.running);
    let refusal = s.compare.settings.check().err().map(|e| e.to_string());
    ui.horizontal(|ui| {
        if running {
            if ui
                .button("Stop")
                .on_hover_text("stop after this step; what finished stays")
                .clicked()
            {
                run::stop(s);
            }
        } else if ui
            .add_enabled(refusal.is_none(), egui::Button::new("Start"))
            .on_hover_text("train every encoding × seed from scratch")
            .clicked()
        {
            let _ = run::start(s);
        }
    });
    if let Some(why) = refusal.filter(|_| !running) {
        ui.colored_label(ui.visuals().error_fg_color, why);
    }
    // Before Start only: the settings are fixed while the comparison runs, and working out the
    // cautions parses the study, which every frame of a run need not do.
    if !running {
        for caution in s.compare.settings.cautions() {
            ui.colored_label(ui.visuals().warn_fg_color, caution);
        }
        if let Ok(plan) = s.compare.settings.evaluation() {
            ui.weak(plan.describe());
        }
    }
    if let Some(e) = &s.compare.error {
        ui.colored_label(ui.visuals().error_fg_color, e);
    }
    take_home(ui, s);
    // The answer first: the verdicts and their pictures above the settings, so that they are in
    // view without scrolling when a comparison ends.
    if let Some(run) = &s.compare.run {
        ui.separator();
        results(ui, run);
        ui.separator();
    }
    ui.add_enabled_ui(!running, |ui| controls(ui, &mut s.compare.settings));
    runs(ui, s);
}

/// "Download study" (the file `posflow study` runs to reproduce the comparison natively) and the
/// settings as a link's query.
fn take_home(ui: &mut egui::Ui, s: &mut State) {
    ui.horizontal(|ui| {
        let download = ui
            .add_enabled(
                s.compare.study_toml().is_ok(),
                egui::Button::new("Download study"),
            )
            .on_hover_text("the study file: `posflow study FILE` trains the same runs natively");
        if download.clicked() {
            let _ = run::offer_study(s);
        }
        ui.weak("link:");
        ui.monospace(format!("?{}", s.compare.settings.to_query()));
    });
    ui.weak(s.compare.reproduction());
}

/// Every finished run, with its checkpoint: shown in the viewer's other tabs (position
/// encodings, attention) or downloaded.
fn runs(ui: &mut egui::Ui, s: &mut State) {
    let Some(run) = &s.compare.run else {
        return;
    };
    if run.snapshot.finished.is_empty() {
        return;
    }
    let mut show = None;
    let mut download = None;
    egui::CollapsingHeader::new("Finished runs: look inside, or take the checkpoint home").show(ui, |ui| {
        egui::Grid::new("posflow.compare.runs")
            .striped(true)
            .show(ui, |ui| {
                for (i, r) in run.snapshot.finished.iter().enumerate() {
                    let label = run
                        .snapshot
                        .variants
                        .iter()
                        .find(|(name, _)| *name == r.variant)
                        .map_or(r.variant.as_str(), |(_, label)| label.as_str());
                    ui.label(format!("{label}, seed {}", r.seed));
                    ui.weak(format!("{:.1} s", r.seconds));
                    if ui
                        .button("Show in the viewer")
                        .on_hover_text("load it, then open the position-encoding or attention tab")
                        .clicked()
                    {
                        show = Some(i);
                    }
                    if ui.button("Download checkpoint").clicked() {
                        download = Some(i);
                    }
                    ui.end_row();
                }
            });
    });
    if let Some((name, bytes)) = download.and_then(|i| s.compare.checkpoint(i)) {
        s.downloads.push(Download {
            name: format!("{name}.safetensors"),
            bytes: bytes.to_vec(),
        });
    }
    if let Some((name, bytes)) = show.and_then(|i| s.compare.checkpoint(i)) {
        match LoadedCheckpoint::from_bytes(s.backend.clone(), &name, &bytes) {
            Ok(loaded) => s.add_checkpoint(loaded),
            Err(e) => s.compare.error = Some(format!("{name}: {e}")),
        }
    }
}

/// A widget's accessible name (what a screen reader says, and what tests find it by).
fn named(typ: egui::Role, name: &str) -> egui::WidgetInfo {
    egui::WidgetInfo::labeled(typ, true, name)
}

/// Values set from outside (a link) are left as they are, out of range or not, so that the tab
/// refuses them with the reason rather than silently changing them.
fn controls(ui: &mut egui::Ui, settings: &mut CompareSettings) {
    egui::Grid::new("posflow.compare.settings")
        .num_columns(2)
        .spacing([12.0, 6.0])
        .show(ui, |ui| {
            ui.label("task");
            egui::ComboBox::from_id_salt("posflow.compare.task")
                .selected_text(settings.task.name())
                .show_ui(ui, |ui| {
                    for task in CompareTask::all() {
                        ui.selectable_value(&mut settings.task, task, task.name());
                    }
                })
                .response
                .widget_info(|| named(egui::Role::ComboBox, "task"));
            ui.end_row();

            ui.label("encodings");
            encodings(ui, settings);
            ui.end_row();

            ui.label("seeds");
            ui.add(
                egui::Slider::new(&mut settings.seeds, 1..=MAX_SEEDS).clamping(egui::SliderClamping::Edits),
            )
            .widget_info(|| named(egui::Role::Slider, "seeds"));
            ui.end_row();

            let unit = settings.task.unit();
            ui.label("training lengths");
            ui.horizontal(|ui| {
                ui.label("1 to");
                ui.add(
                    egui::DragValue::new(&mut settings.train_len)
                        .range(1..=settings.task.max_length())
                        .clamp_existing_to_range(false),
                )
                .widget_info(|| named(egui::Role::SpinButton, "training length"));
                ui.label(unit);
            });
            ui.end_row();

            ui.label("test lengths");
            ui.horizontal(|ui| {
                ui.add(
                    egui::DragValue::new(&mut settings.test_from)
                        .range(1..=settings.task.max_length())
                        .clamp_existing_to_range(false),
                )
                .widget_info(|| named(egui::Role::SpinButton, "shortest test length"));
                ui.label("to");
                ui.add(
                    egui::DragValue::new(&mut settings.test_to)
                        .range(1..=settings.task.max_length())
                        .clamp_existing_to_range(false),
                )
                .widget_info(|| named(egui::Role::SpinButton, "longest test length"));
                ui.label(unit);
            });
            ui.end_row();

            ui.label("size");
            egui::ComboBox::from_id_salt("posflow.compare.preset")
                .selected_text(settings.preset.label())
                .show_ui(ui, |ui| {
                    for preset in Preset::ALL {
                        ui.selectable_value(&mut settings.preset, preset, preset.label());
                    }
                })
                .response
                .widget_info(|| named(egui::Role::ComboBox, "size"));
            ui.end_row();
        });
}

/// A row per encoding: standard and randomized, each a check box; the order checked is the
/// order compared.
fn encodings(ui: &mut egui::Ui, settings: &mut CompareSettings) {
    egui::Grid::new("posflow.compare.encodings").show(ui, |ui| {
        ui.weak("");
        ui.weak("standard");
        ui.weak("randomized");
        ui.end_row();
        for encoding in Encoding::all() {
            ui.label(encoding.label());
            for randomized in [false, true] {
                let choice = Choice { encoding, randomized };
                let mut on = settings.choices.contains(&choice);
                let offered = !randomized || encoding.reads_positions();
                let response = ui.add_enabled(offered || on, egui::Checkbox::without_text(&mut on));
                response.widget_info(|| {
                    egui::WidgetInfo::selected(egui::Role::CheckBox, offered || on, on, choice.label())
                });
                if response.changed() {
                    if on {
                        settings.choices.push(choice);
                    } else {
                        settings.choices.retain(|c| *c != choice);
                    }
                }
            }
            ui.end_row();
        }
    });
}

fn results(ui: &mut egui::Ui, run: &Run) {
    let snap = &run.snapshot;
    let fraction = snap.steps_done as f32 / snap.steps_total.max(1) as f32;
    let left = if snap.steps_done > 0 {
        let per_step = run.wall_seconds / snap.steps_done as f64;
        let seconds = per_step * (snap.steps_total - snap.steps_done) as f64;
        format!(
            ", about {}:{:02} left",
            (seconds / 60.0) as u64,
            seconds as u64 % 60
        )
    } else {
        String::new()
    };
    ui.add(egui::ProgressBar::new(fraction).show_percentage().text(format!(
        "{} of {} steps, {} of {} runs{}",
        snap.steps_done,
        snap.steps_total,
        snap.finished.len(),
        snap.runs_total,
        if run.running { left } else { String::new() }
    )));
    verdicts(ui, snap);
    let height = ((ui.available_height() - 120.0) / 2.0).clamp(180.0, 360.0);
    ui.columns(2, |columns| {
        columns[0].strong("Training loss, every run (moving average of 10 steps)");
        training_losses(&mut columns[0], snap, height);
        columns[1].strong(format!(
            "{} by length at the last evaluation: mean ± 1 sd over the finished seeds",
            snap.metric.name()
        ));
        by_length(&mut columns[1], snap, height);
    });
}

fn training_losses(ui: &mut egui::Ui, snap: &Snapshot, height: f32) {
    Plot::new("posflow.compare.loss")
        .height(height)
        .legend(Legend::default())
        .x_axis_label("step")
        .y_axis_label("loss")
        .show(ui, |plot| {
            for r in snap.finished.iter().chain(&snap.partial) {
                let Some(i) = snap.variants.iter().position(|(name, _)| *name == r.variant) else {
                    continue;
                };
                plot.line(
                    Line::new(
                        snap.variants[i].1.clone(),
                        PlotPoints::from(moving_average(&r.train_loss, 10)),
                    )
                    .color(colour(i))
                    .width(1.0),
                );
            }
        });
}

/// `[step, mean of the last `window` losses]` for every step taken (NaN losses are steps not
/// yet taken).
fn moving_average(losses: &[f32], window: usize) -> Vec<[f64; 2]> {
    let taken: Vec<f64> = losses
        .iter()
        .take_while(|l| !l.is_nan())
        .map(|&l| f64::from(l))
        .collect();
    (0..taken.len())
        .map(|i| {
            let from = (i + 1).saturating_sub(window);
            let slice = &taken[from..=i];
            [i as f64, slice.iter().sum::<f64>() / slice.len() as f64]
        })
        .collect()
}

fn by_length(ui: &mut egui::Ui, snap: &Snapshot, height: f32) {
    let metric = snap.metric;
    // A bin is drawn at its longest length.
    let bin_end = |bin: &str| -> f64 {
        bin.split_once('-')
            .and_then(|(_, end)| end.parse::<f64>().ok())
            .unwrap_or_else(|| bin_start(bin) as f64)
    };
    Plot::new("posflow.compare.length")
        .height(height)
        // A variant's band and line share its legend entry: the mark takes the line's colour
        // (the default greys out a name whose items differ in colour).
        .legend(Legend::default().color_conflict_handling(ColorConflictHandling::PickLast))
        .x_axis_label("length (a bin's longest)")
        .y_axis_label(metric.name())
        .show(ui, |plot| {
            if let Some(train) = snap.summary.train_len {
                plot.vline(VLine::new("training length", train as f64).style(LineStyle::dashed_dense()));
            }
            for (i, v) in snap.summary.variants.iter().enumerate() {
                let spreads: Vec<(f64, crate::study::Spread)> = v
                    .bins
                    .iter()
                    .filter_map(|b| b.get(metric).map(|s| (bin_end(&b.bin), s.clone())))
                    .collect();
                if spreads.is_empty() {
                    continue;
                }
                let xs: Vec<f64> = spreads.iter().map(|(x, _)| *x).collect();
                let lows: Vec<f64> = spreads.iter().map(|(_, s)| s.mean - s.sd).collect();
                let highs: Vec<f64> = spreads.iter().map(|(_, s)| s.mean + s.sd).collect();
                plot.add(
                    FilledArea::new(v.label.clone(), &xs, &lows, &highs)
                        .fill_color(colour(i).gamma_multiply(0.25)),
                );
                let means: Vec<[f64; 2]> = spreads.iter().map(|(x, s)| [*x, s.mean]).collect();
                plot.line(
                    Line::new(v.label.clone(), PlotPoints::from(means))
                        .color(colour(i))
                        .width(2.0),
                );
            }
            // The run in training, at its latest evaluation.
            if let Some(partial) = &snap.partial
                && let Some(eval) = partial.evals.last()
                && let Some(i) = snap
                    .variants
                    .iter()
                    .position(|(name, _)| *name == partial.variant)
            {
                let points: Vec<[f64; 2]> = eval
                    .bins
                    .iter()
                    .filter_map(|b| metric.of(b).map(|value| [bin_end(&b.bin), value]))
                    .collect();
                plot.points(
                    Points::new(
                        format!("{} (training)", snap.variants[i].1),
                        PlotPoints::from(points),
                    )
                    .color(colour(i))
                    .radius(3.0),
                );
            }
        });
}

/// The results rule's sanity checks, before the verdicts: whether each encoding's models learned
/// the training lengths, and, where one did not, what that means for the comparisons.
fn sanity_checks(ui: &mut egui::Ui, claims: &[ClaimReport]) {
    let checks: Vec<&ClaimReport> = claims.iter().filter(|c| c.kind == ClaimKind::Sanity).collect();
    if checks.is_empty() {
        return;
    }
    let unlearned: Vec<&str> = checks
        .iter()
        .filter(|c| c.verdict != Verdict::Holds)
        .filter_map(|c| c.claim.variants().first().copied())
        .collect();
    if !unlearned.is_empty() {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!(
                "Not learned: {} did not show that it learned the training lengths, so a verdict past \
                 them compares models that never learned the task and says little about length \
                 generalization (train longer: a larger size).",
                unlearned.join(", ")
            ),
        );
    }
    ui.strong("Sanity checks: did each learn the training lengths? (one-sided test at 95% over the seeds)");
    egui::Grid::new("posflow.compare.sanity")
        .striped(true)
        .num_columns(3)
        .show(ui, |ui| {
            for c in checks {
                ui.label(c.claim.text());
                match c.items {
                    Some(n) => ui.weak(format!("{n} sequences a run")),
                    None => ui.weak("—"),
                };
                let learned = c.verdict == Verdict::Holds;
                let word = egui::RichText::new(if learned { "yes" } else { "no" }).strong();
                if learned {
                    ui.colored_label(egui::Color32::from_rgb(44, 160, 44), word);
                } else {
                    ui.colored_label(ui.visuals().warn_fg_color, word);
                }
                ui.end_row();
            }
        });
}

fn verdicts(ui: &mut egui::Ui, snap: &Snapshot) {
    let Some(claims) = &snap.verdicts else {
        ui.weak("The verdicts come when every run has finished.");
        return;
    };
    sanity_checks(ui, claims);
    ui.strong(
        "Verdicts (each claim fixed before training; one-sided Welch test at 95%, its p adjusted over \
         the comparisons by Benjamini–Hochberg: q; \"at chance\" where both sides are)",
    );
    let claims: Vec<&ClaimReport> = claims
        .iter()
        .filter(|c| c.kind == ClaimKind::Comparative)
        .collect();
    egui::Grid::new("posflow.compare.verdicts")
        .striped(true)
        .num_columns(6)
        .show(ui, |ui| {
            ui.strong("claim");
            ui.strong("sequences a run").on_hover_text(
                "sequences each run was evaluated on in the claim's bin (the fewest over its runs)",
            );
            ui.strong("verdict");
            ui.strong("difference (95% lower bound)");
            ui.strong("p");
            ui.strong("q");
            ui.end_row();
            for c in claims {
                ui.label(c.claim.text());
                evaluated(ui, c);
                let holds = c.verdict == crate::study::Verdict::Holds;
                let word = egui::RichText::new(c.verdict.word()).strong();
                if holds {
                    ui.colored_label(egui::Color32::from_rgb(44, 160, 44), word);
                } else {
                    ui.label(word);
                }
                let test = match &c.original.measured {
                    Measured::Order { pairs } => pairs.first().and_then(|p| p.test.clone()),
                    _ => None,
                };
                match test {
                    Some(t) => {
                        ui.label(format!("{:+.4} ({:+.4})", t.estimate, t.lower_bound));
                        ui.label(format!("{:.4}", t.p));
                    }
                    None => {
                        ui.weak("— (fewer than two seeds, or no value)");
                        ui.weak("—");
                    }
                }
                match c.q {
                    Some(q) => ui.label(format!("{q:.4}")),
                    None => ui.weak("—"),
                };
                ui.end_row();
            }
        });
}

/// The evaluation's size behind a claim: the sequences each run scored in its bin.
fn evaluated(ui: &mut egui::Ui, c: &ClaimReport) {
    match c.items {
        Some(n) => ui.label(n.to_string()),
        None => ui.weak("—"),
    };
}
