//! Fine-tuning the position encoder live, in the Position encodings view: the active checkpoint's
//! position-encoding parameters (FLOATER's dynamics and initial values, a learned or TUPE table,
//! T5's biases) train on a text typed into the view while everything else stays as loaded, and
//! the heatmap follows the live values.
//!
//! Each step is one job, and the next is spawned by the frame after it finished (`next_step`):
//! natively a job runs within its frame, on the web beside the frames, so the window stays alive
//! either way. A step's job owns the [`FineTune`] while it runs, so no borrow of the state is held
//! across its awaits.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use eframe::egui;
use egui_plot::{Line, Plot, PlotPoints};

use super::{Computed, Job, LoadedCheckpoint, State};
use crate::error::{Error, Result};
use crate::train::{FineTune, FineTuneSettings};

/// The parameter name prefixes of a position encoder: the `posenc.` family and the learned table
/// (named as in `model/mod.rs`).
const POSITION_PREFIXES: [&str; 2] = ["posenc.", "pos_emb."];

/// Characters per training window, at most (a model with a shorter table gets its length).
const SEQ_LEN: usize = 64;

/// Windows per step.
const BATCH: usize = 8;

/// The heatmap is computed again after this many steps, and after the last.
const REFRESH_EVERY: usize = 5;

/// The text the view starts with: Shakespeare's Sonnet 18. Its lines of about 40 characters are
/// a rhythm in position that the encoder can pick up; every character is one of Moby Dick's.
pub const DEFAULT_TEXT: &str = "Shall I compare thee to a summer’s day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer’s lease hath all too short a date;
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm’d;
And every fair from fair sometime declines,
By chance or nature’s changing course untrimm’d;
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow’st;
Nor shall Death brag thou wander’st in his shade,
When in eternal lines to time thou grow’st:
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.
";

/// Where fine-tuning stands, for the page around the viewer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FineTuneStatus {
    /// Steps taken in the current run.
    pub steps_done: usize,
    pub steps_total: usize,
    /// Started, and neither stopped, failed nor done.
    pub running: bool,
    /// Each step's training loss, in order.
    pub losses: Vec<f32>,
    /// Why the last start or step failed.
    pub error: Option<String>,
}

/// The section's controls and its run.
pub(crate) struct FineTuning {
    pub text: String,
    pub steps: usize,
    pub lr: f32,
    run: Option<Run>,
    error: Option<String>,
    /// The trained parameters' values as loaded, by checkpoint, read before its first step:
    /// what Reset writes back.
    originals: HashMap<usize, Vec<(String, Vec<f32>)>>,
    /// How often each checkpoint's parameters changed: part of its encodings' key.
    versions: HashMap<usize, u64>,
    /// Reset was asked for while a step ran: it happens when the step is back.
    reset_pending: bool,
}

impl Default for FineTuning {
    fn default() -> Self {
        Self {
            text: DEFAULT_TEXT.into(),
            steps: 100,
            lr: FineTuneSettings::default().lr,
            run: None,
            error: None,
            originals: HashMap::new(),
            versions: HashMap::new(),
            reset_pending: false,
        }
    }
}

impl FineTuning {
    /// Changes whenever fine-tuning (or a reset) changed `checkpoint`'s parameters.
    pub fn version(&self, checkpoint: usize) -> u64 {
        self.versions.get(&checkpoint).copied().unwrap_or(0)
    }

    fn running(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.running)
    }

    /// A step's job holds the run's `FineTune`.
    fn stepping(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.tune.is_none())
    }

    pub fn status(&self) -> FineTuneStatus {
        let run = self.run.as_ref();
        FineTuneStatus {
            steps_done: run.map_or(0, |r| r.losses.len()),
            steps_total: run.map_or(0, |r| r.steps_total),
            running: self.running(),
            losses: run.map_or_else(Vec::new, |r| r.losses.clone()),
            error: self.error.clone(),
        }
    }
}

struct Run {
    checkpoint: usize,
    /// `None` while a step's job holds it (boxed: it is large, and jobs move it).
    tune: Option<Box<FineTune>>,
    prefixes: Vec<String>,
    steps_total: usize,
    losses: Vec<f32>,
    running: bool,
}

/// One step of the run, as a job.
pub(crate) struct Step {
    checkpoint: usize,
    tune: Box<FineTune>,
    prefixes: Vec<String>,
}

/// The prefixes of `loaded`'s position-encoder parameters; none when its encoding has nothing
/// trained (sinusoidal, or none).
fn position_prefixes(loaded: &LoadedCheckpoint) -> Vec<String> {
    POSITION_PREFIXES
        .into_iter()
        .filter(|prefix| {
            loaded
                .saved
                .params
                .iter()
                .any(|(name, _)| name.starts_with(prefix))
        })
        .map(String::from)
        .collect()
}

/// Why `loaded`'s position encoder cannot be fine-tuned, or `None` when it can.
fn cannot_fine_tune(loaded: &LoadedCheckpoint) -> Option<String> {
    if loaded.decoder.is_some() {
        return Some(format!(
            "{} is a seq2seq model: fine-tuning trains a language model's position encoder on plain text, \
             and this model learns from pairs.",
            loaded.name
        ));
    }
    position_prefixes(loaded).is_empty().then(|| {
        format!(
            "{} cannot be fine-tuned: its position encoding ({}) has no trained parameters.",
            loaded.name,
            loaded.saved.model.config().posenc.name()
        )
    })
}

/// Starts fine-tuning the active checkpoint's position encoder on `text` for `steps` steps at the
/// section's learning rate; the frames run the steps. An error is also shown in the section.
pub(crate) fn start(s: &mut State, text: &str, steps: usize) -> Result<()> {
    let result = new_run(s, text, steps).map(|run| s.fine_tune.run = Some(run));
    s.fine_tune.error = result.as_ref().err().map(ToString::to_string);
    if let Some(ctx) = &s.ctx {
        ctx.request_repaint();
    }
    result
}

fn new_run(s: &mut State, text: &str, steps: usize) -> Result<Run> {
    if s.fine_tune.stepping() {
        return Err(Error::Input(
            "the last fine-tuning step is still running: start again when it is done".into(),
        ));
    }
    let loaded = s
        .checkpoints
        .get(s.active)
        .cloned()
        .ok_or_else(|| Error::Input("load a checkpoint to fine-tune its position encoder".into()))?;
    if let Some(reason) = cannot_fine_tune(&loaded) {
        return Err(Error::Input(reason));
    }
    let prefixes = position_prefixes(&loaded);
    s.fine_tune.text = text.to_string();
    s.fine_tune.steps = steps;
    let saved = &loaded.saved;
    let settings = FineTuneSettings {
        trainable: prefixes.clone(),
        seq_len: SEQ_LEN.min(saved.model.config().max_len),
        batch: BATCH,
        lr: s.fine_tune.lr,
        seed: 0,
    };
    let tune = FineTune::new(
        &saved.model,
        &saved.params,
        saved.tokenizer.chars()?,
        text,
        settings,
    )?;
    Ok(Run {
        checkpoint: s.active,
        tune: Some(Box::new(tune)),
        prefixes,
        steps_total: steps,
        losses: Vec::new(),
        running: steps > 0,
    })
}

/// Stops the run after the step that is running, if any.
pub(crate) fn stop(s: &mut State) {
    if let Some(run) = &mut s.fine_tune.run {
        run.running = false;
    }
}

/// Stops the run and writes every fine-tuned checkpoint's original values back (once the
/// running step, if any, is back).
pub(crate) fn reset(s: &mut State) {
    stop(s);
    if s.fine_tune.stepping() {
        s.fine_tune.reset_pending = true;
        return;
    }
    let originals = std::mem::take(&mut s.fine_tune.originals);
    let mut error = None;
    for (&checkpoint, values) in &originals {
        let params = &s.checkpoints[checkpoint].saved.params;
        for (name, values) in values {
            if let Err(e) = params.set(name, values) {
                error = Some(e.to_string());
            }
        }
        params_changed(s, checkpoint);
    }
    s.fine_tune.run = None;
    s.fine_tune.error = error;
    s.fine_tune.reset_pending = false;
}

/// The next step's job, when the run goes on and no step is running.
pub(crate) fn next_step(s: &mut State) -> Option<Job> {
    let run = s.fine_tune.run.as_mut().filter(|r| r.running)?;
    let tune = run.tune.take()?;
    Some(Job::FineTuneStep(Step {
        checkpoint: run.checkpoint,
        tune,
        prefixes: run.prefixes.clone(),
    }))
}

/// Runs one step (reading the original values first, before the checkpoint's first step) and
/// records its loss.
pub(crate) async fn run_step(state: &Rc<RefCell<State>>, mut step: Step) {
    let loaded = state.borrow().checkpoints[step.checkpoint].clone();
    let first = !state.borrow().fine_tune.originals.contains_key(&step.checkpoint);
    let result = async {
        if first {
            let originals = read_values(&loaded, &step.prefixes).await?;
            state
                .borrow_mut()
                .fine_tune
                .originals
                .insert(step.checkpoint, originals);
        }
        step.tune.step().await
    }
    .await;
    finish_step(&mut state.borrow_mut(), step, result);
}

async fn read_values(loaded: &LoadedCheckpoint, prefixes: &[String]) -> Result<Vec<(String, Vec<f32>)>> {
    let params = &loaded.saved.params;
    let mut values = Vec::new();
    for (name, _) in params.iter() {
        if prefixes.iter().any(|p| name.starts_with(p.as_str())) {
            values.push((name.to_string(), params.read(name).await?));
        }
    }
    Ok(values)
}

fn finish_step(s: &mut State, step: Step, result: Result<f32>) {
    let fine = &mut s.fine_tune;
    // Start waits for the step and Reset is deferred, so the run is still this step's.
    let Some(run) = fine.run.as_mut() else {
        return;
    };
    run.tune = Some(step.tune);
    match result {
        Ok(loss) => run.losses.push(loss),
        Err(e) => {
            run.running = false;
            fine.error = Some(e.to_string());
        }
    }
    if run.losses.len() >= run.steps_total {
        run.running = false;
    }
    let refresh = run.losses.len() % REFRESH_EVERY == 0 || !run.running;
    if fine.reset_pending {
        reset(s);
    } else if refresh {
        params_changed(s, step.checkpoint);
    }
}

/// Whatever was computed from `checkpoint`'s old values is computed again: its encodings (a new
/// version), its generator's FLOATER solution, its attention maps, TUPE correlation, completion and
/// translation.
fn params_changed(s: &mut State, checkpoint: usize) {
    *s.fine_tune.versions.entry(checkpoint).or_default() += 1;
    if let Some(generator) = &s.checkpoints[checkpoint].generator {
        generator.refresh_encodings();
    }
    if s.attention_maps
        .key
        .as_ref()
        .is_some_and(|(i, _)| *i == checkpoint)
    {
        s.attention_maps = Computed::default();
    }
    s.tupe.remove(&checkpoint);
    if s.completion.key.as_ref().is_some_and(|(i, ..)| *i == checkpoint) {
        s.completion = Computed::default();
    }
    if s.translation.key.as_ref().is_some_and(|(i, ..)| *i == checkpoint) {
        s.translation = Computed::default();
    }
}

/// About how tall [`show`] is, so that the heatmaps above leave it room on screen.
pub(crate) const SECTION_HEIGHT: f32 = 240.0;

/// The section under the heatmaps, for the active checkpoint: the text and controls on the left,
/// the loss curve on the right.
pub(crate) fn show(ui: &mut egui::Ui, s: &mut State) {
    ui.separator();
    ui.strong("Fine-tune the position encoder");
    let Some(loaded) = s.checkpoints.get(s.active).cloned() else {
        return;
    };
    if let Some(reason) = cannot_fine_tune(&loaded) {
        ui.label(reason);
        return;
    }
    ui.weak(format!(
        "Trains only {}'s position-encoding parameters on this text, the rest of the model as loaded; \
         the heatmap follows the live values.",
        loaded.name
    ));
    let fine = &mut s.fine_tune;
    let (running, stepping) = (fine.running(), fine.stepping());
    let run_name = fine
        .run
        .as_ref()
        .map(|r| s.checkpoints[r.checkpoint].name.clone());
    let (mut start_clicked, mut stop_clicked, mut reset_clicked) = (false, false, false);
    let controls_width = (ui.available_width() * 0.6).max(360.0);
    ui.horizontal_top(|ui| {
        ui.vertical(|ui| {
            ui.set_width(controls_width);
            let label = ui.label("training text");
            // A long text scrolls in its box rather than pushing the rest out of sight.
            egui::ScrollArea::vertical()
                .id_salt("posflow.finetune.text")
                .max_height(SECTION_HEIGHT - 120.0)
                .show(ui, |ui| {
                    ui.add_enabled(
                        !running,
                        egui::TextEdit::multiline(&mut fine.text)
                            .desired_rows(5)
                            .desired_width(f32::INFINITY)
                            .font(egui::TextStyle::Monospace),
                    )
                    .labelled_by(label.id);
                });
            ui.horizontal(|ui| {
                ui.add_enabled(
                    !running,
                    egui::Slider::new(&mut fine.steps, 10..=500).text("steps"),
                );
                ui.add_enabled(
                    !running,
                    egui::Slider::new(&mut fine.lr, 1e-4..=3e-2)
                        .logarithmic(true)
                        .text("learning rate"),
                );
                if running {
                    stop_clicked = ui.button("Stop").clicked();
                } else {
                    start_clicked = ui.add_enabled(!stepping, egui::Button::new("Start")).clicked();
                }
                reset_clicked = ui
                    .add_enabled(!fine.originals.is_empty(), egui::Button::new("Reset"))
                    .on_hover_text("put the position encoder back as loaded")
                    .clicked();
            });
            if let Some(e) = &fine.error {
                ui.colored_label(ui.visuals().error_fg_color, e);
            }
            if let (Some(run), Some(name)) = (&fine.run, &run_name) {
                progress_bar(ui, run, name);
            }
        });
        loss_curve(ui, fine.run.as_ref().map_or(&[], |r| &r.losses));
    });
    if start_clicked {
        let (text, steps) = (s.fine_tune.text.clone(), s.fine_tune.steps);
        // The error shows in the section from the next frame on.
        let _ = start(s, &text, steps);
    }
    if stop_clicked {
        stop(s);
    }
    if reset_clicked {
        reset(s);
    }
}

fn progress_bar(ui: &mut egui::Ui, run: &Run, name: &str) {
    let done = run.losses.len();
    let loss = run
        .losses
        .last()
        .map_or(String::new(), |l| format!(", loss {l:.3}"));
    ui.add(
        egui::ProgressBar::new(done as f32 / run.steps_total.max(1) as f32)
            .text(format!("{name}: step {done} / {}{loss}", run.steps_total))
            .animate(run.running),
    );
}

fn loss_curve(ui: &mut egui::Ui, losses: &[f32]) {
    let points: Vec<[f64; 2]> = losses
        .iter()
        .enumerate()
        .map(|(i, &l)| [(i + 1) as f64, f64::from(l)])
        .collect();
    Plot::new("posflow.finetune.loss")
        .height(SECTION_HEIGHT - 60.0)
        .x_axis_label("step")
        .y_axis_label("fine-tuning loss")
        .show(ui, |plot| plot.line(Line::new("loss", PlotPoints::from(points))));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{CharTokenizer, MOBY_DICK};

    #[test]
    fn the_default_text_fits_a_moby_dick_model() {
        let tokens = CharTokenizer::from_text(MOBY_DICK).encode(DEFAULT_TEXT).unwrap();
        assert!(tokens.len() > 4 * SEQ_LEN, "{} characters", tokens.len());
    }
}
