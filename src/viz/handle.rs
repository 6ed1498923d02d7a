//! [`ViewerHandle`]: the page's way into the viewer (the web demo's `window.posflow`, the
//! native `posflow viz` flags) — load checkpoints and logs, drive the views, read what they show.

use std::cell::RefCell;
use std::rc::Rc;

use eframe::egui;

use super::compare::{self, CompareSettings, CompareStatus};
use super::jobs::{Job, Spawner, run_queue};
use super::{FineTuneStatus, LoadedCheckpoint, State, View, finetune, metrics, posenc, prompt, translate};
use crate::error::Result;

/// Shared access to the viewer's state for the page around it (e.g. `window.posflow` in the web
/// demo): load checkpoints and logs, drive the prompt, read what the viewer shows.
#[derive(Clone)]
pub struct ViewerHandle {
    pub(super) state: Rc<RefCell<State>>,
    pub(super) spawner: Spawner,
}

impl ViewerHandle {
    /// "empty" before any checkpoint or log is loaded, "busy" while jobs run, else "ready".
    pub fn status(&self) -> &'static str {
        let s = self.state.borrow();
        if s.pending > 0 {
            "busy"
        } else if s.checkpoints.is_empty() && s.logs.is_empty() {
            "empty"
        } else {
            "ready"
        }
    }

    /// Loads a checkpoint (safetensors bytes from `posflow train`) under `name` and makes it the
    /// active one. A broken or unrelated file is an error (also listed in the viewer).
    pub fn load_checkpoint_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let backend = self.state.borrow().backend.clone();
        match LoadedCheckpoint::from_bytes(backend, name, bytes) {
            Ok(loaded) => {
                self.update(|s| s.add_checkpoint(loaded));
                Ok(())
            }
            Err(e) => {
                self.record_error(name, &e);
                Err(e)
            }
        }
    }

    /// Lists `e` in the side panel, naming the file it came from.
    fn record_error(&self, name: &str, e: &crate::Error) {
        let message = e.to_string();
        let message = if message.contains(name) {
            message
        } else {
            format!("{name}: {message}")
        };
        self.update(|s| s.errors.push(message));
    }

    /// Loads a metrics log (JSON lines from `posflow train`) under `name`.
    pub fn load_metrics_text(&self, name: &str, text: &str) -> Result<()> {
        match metrics::parse_metrics(text) {
            Ok(records) => {
                self.update(|s| s.logs.push((name.to_string(), records)));
                Ok(())
            }
            Err(e) => {
                self.record_error(name, &e);
                Err(e)
            }
        }
    }

    /// The names of the loaded checkpoints, in load order.
    pub fn checkpoints(&self) -> Vec<String> {
        let s = self.state.borrow();
        s.checkpoints.iter().map(|c| c.name.clone()).collect()
    }

    /// Every load or job error so far, oldest first.
    pub fn errors(&self) -> Vec<String> {
        self.state.borrow().errors.clone()
    }

    /// Selects the tab.
    pub fn select_view(&self, view: View) {
        self.update(|s| s.view = view);
    }

    /// The selected tab.
    pub fn view(&self) -> View {
        self.state.borrow().view
    }

    /// Where the prompt view's text field was in the last frame (egui points from the window's
    /// top left), or `None` when the prompt view was not shown: a page's test clicks there to type.
    pub fn prompt_field(&self) -> Option<egui::Rect> {
        self.state.borrow().prompt_field
    }

    /// The prompt view's text, as typed so far.
    pub fn prompt(&self) -> String {
        self.state.borrow().prompt.text.clone()
    }

    /// Sets the prompt and completes it with the active checkpoint (shown in the prompt view);
    /// [`ViewerHandle::last_completion`] has the text once the job is done.
    pub fn set_prompt(&self, prompt: &str) {
        let job = self.update(|s| {
            s.prompt.text = prompt.to_string();
            prompt::request(s)
        });
        self.spawn_all(job);
    }

    /// The latest finished completion (without its prompt), or `None` while none is ready.
    pub fn last_completion(&self) -> Option<String> {
        let s = self.state.borrow();
        match s.completion.result() {
            Some(Ok(c)) => Some(c.text.clone()),
            _ => None,
        }
    }

    /// The prompt that [`ViewerHandle::last_completion`] continues, or `None` while none is ready.
    pub fn completed_prompt(&self) -> Option<String> {
        let s = self.state.borrow();
        match (&s.completion.key, s.completion.result()) {
            (Some((_, prompt, _)), Some(Ok(_))) => Some(prompt.clone()),
            _ => None,
        }
    }

    /// The translate view's source and beam.
    pub fn source(&self) -> (String, usize) {
        let s = self.state.borrow();
        (s.translate.source.clone(), s.translate.beam)
    }

    /// Sets the translate view's source and beam and decodes it with the active checkpoint;
    /// [`ViewerHandle::last_translation`] has the output once the job is done.
    pub fn set_source(&self, source: &str, beam: usize) {
        let job = self.update(|s| {
            s.translate.source = source.to_string();
            s.translate.beam = beam.clamp(1, crate::inference::MAX_BEAM);
            translate::request(s, s.active)
        });
        self.spawn_all(job);
    }

    /// The translate view's latest finished decoding: (source, output), or `None` while none
    /// is ready; an error decoding it is `Err` with the message the view shows.
    pub fn last_translation(&self) -> Option<std::result::Result<(String, String), String>> {
        let s = self.state.borrow();
        let (_, source, _) = s.translation.key.as_ref()?;
        match s.translation.result()? {
            Ok(t) => Some(Ok((source.clone(), t.output.clone()))),
            Err(e) => Some(Err(e.clone())),
        }
    }

    /// Sets the number of positions of the position-encoding view.
    pub fn set_length(&self, len: usize) {
        self.update(|s| s.posenc.length = len.clamp(1, posenc::MAX_LENGTH));
    }

    /// Sets the attention view's text.
    pub fn set_attention_text(&self, text: &str) {
        self.update(|s| s.attention.text = text.to_string());
    }

    /// Fine-tunes the active checkpoint's position encoder on `text` for `steps` steps, one per
    /// frame (shown in the position-encoding view). A text with a character the model never saw or
    /// shorter than a window, a model whose position encoding has nothing trained, and no
    /// checkpoint are errors.
    pub fn start_fine_tune(&self, text: &str, steps: usize) -> Result<()> {
        self.update(|s| finetune::start(s, text, steps))
    }

    /// Stops fine-tuning after the running step.
    pub fn stop_fine_tune(&self) {
        self.update(finetune::stop);
    }

    /// Stops fine-tuning and puts every fine-tuned position encoder back as it was loaded.
    pub fn reset_fine_tune(&self) {
        self.update(finetune::reset);
    }

    pub fn fine_tune_status(&self) -> FineTuneStatus {
        self.state.borrow().fine_tune.status()
    }

    /// The Compare tab's settings as they stand.
    pub fn compare_settings(&self) -> CompareSettings {
        self.state.borrow().compare.settings.clone()
    }

    /// Sets the Compare tab's settings (a link's, say); they are checked when the comparison
    /// starts and shown refused with the reason until then.
    pub fn set_compare_settings(&self, settings: CompareSettings) {
        self.update(|s| s.compare.settings = settings);
    }

    /// Starts the Compare tab's comparison of its settings (the frames train it); a refusal
    /// names the reason, as the tab shows it.
    pub fn start_compare(&self) -> Result<()> {
        self.update(compare::start)
    }

    /// Stops the comparison after the running slice of steps; what finished stays.
    pub fn stop_compare(&self) {
        self.update(compare::stop);
    }

    pub fn compare_status(&self) -> CompareStatus {
        self.state.borrow().compare.status()
    }

    /// How closely `posflow study` of the tab's file re-runs what the tab trains (to the bit in
    /// the portable arithmetic of the CPU, to rounding on a GPU), as the tab says it.
    pub fn compare_reproduction(&self) -> &'static str {
        self.state.borrow().compare.reproduction()
    }

    /// The files the views offered to save since the last call (the Compare tab's "Download"
    /// buttons), for the page or the window to save.
    pub fn take_downloads(&self) -> Vec<super::Download> {
        std::mem::take(&mut self.state.borrow_mut().downloads)
    }

    /// Offers the comparison's study file for download, as the tab's "Download study" does.
    pub fn download_compare_study(&self) -> Result<()> {
        self.update(compare::offer_study)
    }

    /// The comparison's finished runs (kept after Stop), in the order they finished.
    pub fn compare_results(&self) -> Vec<crate::study::RunResult> {
        self.state.borrow().compare.finished()
    }

    /// The study file that reproduces the comparison with `posflow study` (the one started last,
    /// or the settings' as they stand).
    pub fn compare_study_toml(&self) -> Result<String> {
        self.state.borrow().compare.study_toml()
    }

    /// The position encodings the view last computed for the checkpoint loaded `index`-th (kept
    /// on screen while newer ones are computed), if any.
    pub fn shown_encodings(&self, index: usize) -> Option<posenc::PositionEncodings> {
        let s = self.state.borrow();
        match s.encodings.get(&index)?.result() {
            Some(Ok(encodings)) => Some(encodings.clone()),
            _ => None,
        }
    }

    /// The checkpoint loaded `index`-th; its parameters are the ones the views and fine-tuning use.
    pub fn loaded_checkpoint(&self, index: usize) -> Option<Rc<LoadedCheckpoint>> {
        self.state.borrow().checkpoints.get(index).cloned()
    }

    /// Changes the state and asks for a frame: a page's call is no input event, so the viewer
    /// (which only draws on events and requests) would otherwise not show the change.
    pub(super) fn update<R>(&self, change: impl FnOnce(&mut State) -> R) -> R {
        let mut s = self.state.borrow_mut();
        let result = change(&mut s);
        if let Some(ctx) = &s.ctx {
            ctx.request_repaint();
        }
        result
    }

    /// Queues `jobs` and, unless a runner is at work already, spawns one that runs the queue. Jobs
    /// run one at a time, in order: on the web they would otherwise interleave at their awaits,
    /// and two completions feeding one generator's executor read each other's results.
    pub(super) fn spawn_all(&self, jobs: impl IntoIterator<Item = Job>) {
        let start = {
            let mut s = self.state.borrow_mut();
            let before = s.queue.len();
            s.queue.extend(jobs);
            s.pending += s.queue.len() - before;
            let start = !s.running_queue && !s.queue.is_empty();
            s.running_queue |= start;
            start
        };
        if start {
            (self.spawner.0)(Box::pin(run_queue(self.state.clone())));
        }
    }
}

impl LoadedCheckpoint {
    /// Where the length slider starts: the training length, else the table's length.
    pub(super) fn default_length(&self) -> usize {
        self.train_len.unwrap_or(self.saved.model.config().max_len)
    }
}
