//! The visualizer: egui views of trained checkpoints, shared by the native window (`posflow viz`)
//! and the web page (the `web/` crate mounts [`Viewer`] as an eframe app).
//!
//! Views, one module each: position encodings as heatmaps at any length ([`posenc`]), with the
//! position encoder fine-tuned live on a typed text beneath them ([`finetune`]), attention
//! patterns of a typed text ([`attention`]), TUPE's positional correlation ([`tupe`]), loss
//! curves from a metrics log ([`metrics`]), and greedy completions with next-character
//! probabilities ([`prompt`]). Several checkpoints load side by side.
//!
//! Nothing here touches files, threads or blocking calls, so it compiles for wasm32: checkpoints
//! and logs come in as bytes and strings ([`ViewerHandle`]), and everything that runs a model is
//! an async job handed to a [`Spawner`] — natively it runs to completion on the spot
//! ([`Spawner::blocking`]), on the web the page passes `wasm_bindgen_futures::spawn_local`.
//! Jobs write their results into the shared state and ask egui for a repaint.

pub mod attention;
pub mod colormap;
#[cfg(not(target_arch = "wasm32"))]
pub mod export;
pub mod finetune;
mod heatmap;
mod loaded;
pub mod metrics;
pub mod posenc;
pub mod prompt;
pub mod tupe;

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use eframe::egui;

pub use finetune::FineTuneStatus;
pub use loaded::{LoadedCheckpoint, posenc_name};

use crate::backend::Backend;
use crate::error::Result;
use crate::train::Record;

/// A job: a future that runs a model and stores what it found.
pub type Task = Pin<Box<dyn Future<Output = ()>>>;

/// How jobs run: the one place where native and web differ.
#[derive(Clone)]
pub struct Spawner(Rc<dyn Fn(Task)>);

impl Spawner {
    /// Jobs run by `spawn`, e.g. `Spawner::new(wasm_bindgen_futures::spawn_local)` in a page.
    pub fn new(spawn: impl Fn(Task) + 'static) -> Self {
        Self(Rc::new(spawn))
    }

    /// Runs each job to completion before returning (natively, where the CPU backend and a
    /// GPU's readback may block; the models the viewer shows take milliseconds).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn blocking() -> Self {
        Self::new(pollster::block_on)
    }
}

/// The views, in tab order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum View {
    PositionEncodings,
    Attention,
    Tupe,
    Metrics,
    Prompt,
}

impl View {
    pub const ALL: [View; 5] = [
        View::PositionEncodings,
        View::Attention,
        View::Tupe,
        View::Metrics,
        View::Prompt,
    ];

    /// The tab's title.
    pub fn title(self) -> &'static str {
        match self {
            View::PositionEncodings => "Position encodings",
            View::Attention => "Attention",
            View::Tupe => "TUPE correlation",
            View::Metrics => "Loss curves",
            View::Prompt => "Prompt",
        }
    }

    /// A file-name-friendly name (`posflow viz --export` writes `<slug>.png`).
    pub fn slug(self) -> &'static str {
        match self {
            View::PositionEncodings => "position_encodings",
            View::Attention => "attention",
            View::Tupe => "tupe",
            View::Metrics => "metrics",
            View::Prompt => "prompt",
        }
    }
}

/// A value computed by a job for some input `K`: requested, then ready (or failed).
pub(crate) struct Computed<K, T> {
    key: Option<K>,
    value: Option<std::result::Result<T, String>>,
}

impl<K, T> Default for Computed<K, T> {
    fn default() -> Self {
        Self {
            key: None,
            value: None,
        }
    }
}

impl<K: PartialEq, T> Computed<K, T> {
    /// Marks `key` as wanted; true when it was not already (the caller then starts a job).
    pub fn request(&mut self, key: K) -> bool {
        let new = self.refresh(key);
        if new {
            self.value = None;
        }
        new
    }

    /// A job's result, kept only if its input is still the wanted one.
    pub fn store(&mut self, key: &K, value: Result<T>) {
        if self.key.as_ref() == Some(key) {
            self.value = Some(value.map_err(|e| e.to_string()));
        }
    }

    /// Like [`Computed::request`], but the last value stays until the new one is stored: for a
    /// value that changes as it is watched (encodings while they train), so that it does not blink.
    pub fn refresh(&mut self, key: K) -> bool {
        if self.key.as_ref() == Some(&key) {
            return false;
        }
        self.key = Some(key);
        true
    }

    /// `None` while the job runs.
    pub fn result(&self) -> Option<&std::result::Result<T, String>> {
        self.value.as_ref()
    }
}

/// What the views ask to have computed; see [`run_job`].
pub(crate) enum Job {
    Encodings {
        checkpoint: usize,
        len: usize,
        /// [`finetune::FineTuning::version`]: which values of the parameters.
        version: u64,
    },
    Attention {
        checkpoint: usize,
        text: String,
    },
    Tupe {
        checkpoint: usize,
    },
    Completion {
        checkpoint: usize,
        prompt: String,
        chars: usize,
    },
    FineTuneStep(finetune::Step),
}

/// Everything the views show and the page can read (through [`ViewerHandle`]).
pub(crate) struct State {
    backend: Rc<dyn Backend>,
    pub(crate) checkpoints: Vec<Rc<LoadedCheckpoint>>,
    /// Shown side by side in the position-encoding view.
    pub(crate) compared: Vec<bool>,
    /// The one the attention, TUPE and prompt views use.
    pub(crate) active: usize,
    pub(crate) logs: Vec<(String, Vec<Record>)>,
    pub(crate) errors: Vec<String>,
    pub(crate) view: View,
    pub(crate) posenc: posenc::Settings,
    /// By checkpoint, for (length, parameter version).
    pub(crate) encodings: HashMap<usize, Computed<(usize, u64), posenc::PositionEncodings>>,
    pub(crate) attention: attention::Settings,
    pub(crate) attention_maps: Computed<(usize, String), attention::AttentionView>,
    pub(crate) tupe: HashMap<usize, Computed<(), tupe::TupeCorrelation>>,
    pub(crate) prompt: prompt::Settings,
    pub(crate) completion: Computed<(usize, String, usize), prompt::Completion>,
    pub(crate) fine_tune: finetune::FineTuning,
    /// Where the prompt view drew its text field in the last frame (egui points), if it did.
    pub(crate) prompt_field: Option<egui::Rect>,
    /// Jobs queued or running, not finished.
    pending: usize,
    /// Jobs waiting for the one running.
    queue: VecDeque<Job>,
    /// Whether a task is running the queue.
    running_queue: bool,
    /// Set by the first frame, so that jobs finishing later can ask for a repaint.
    ctx: Option<egui::Context>,
}

/// Shared access to the viewer's state for the page around it (e.g. `window.posflow` in the web
/// demo): load checkpoints and logs, drive the prompt, read what the viewer shows.
#[derive(Clone)]
pub struct ViewerHandle {
    state: Rc<RefCell<State>>,
    spawner: Spawner,
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
                self.update(|s| {
                    s.checkpoints.push(Rc::new(loaded));
                    s.compared.push(true);
                    s.active = s.checkpoints.len() - 1;
                    s.posenc.length = s.posenc.length.max(s.checkpoints[s.active].default_length());
                });
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
    fn update<R>(&self, change: impl FnOnce(&mut State) -> R) -> R {
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
    fn spawn_all(&self, jobs: impl IntoIterator<Item = Job>) {
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
    fn default_length(&self) -> usize {
        self.train_len.unwrap_or(self.saved.model.config().max_len)
    }
}

/// Runs the queued jobs until none is left.
async fn run_queue(state: Rc<RefCell<State>>) {
    loop {
        let next = state.borrow_mut().queue.pop_front();
        let Some(job) = next else {
            state.borrow_mut().running_queue = false;
            return;
        };
        run_job(state.clone(), job).await;
    }
}

/// Runs one job and stores its result.
async fn run_job(state: Rc<RefCell<State>>, job: Job) {
    let checkpoint = |i: usize| state.borrow().checkpoints[i].clone();
    match job {
        Job::Encodings {
            checkpoint: i,
            len,
            version,
        } => {
            let result = posenc::position_encodings(&checkpoint(i), len).await;
            state
                .borrow_mut()
                .encodings
                .entry(i)
                .or_default()
                .store(&(len, version), result);
        }
        Job::Attention { checkpoint: i, text } => {
            let result = attention::attention_view(&checkpoint(i), &text).await;
            state.borrow_mut().attention_maps.store(&(i, text), result);
        }
        Job::Tupe { checkpoint: i } => {
            let result = tupe::tupe_correlation(&checkpoint(i).saved).await;
            state.borrow_mut().tupe.entry(i).or_default().store(&(), result);
        }
        Job::Completion {
            checkpoint: i,
            prompt,
            chars,
        } => {
            let result = prompt::complete(&checkpoint(i), &prompt, chars).await;
            state.borrow_mut().completion.store(&(i, prompt, chars), result);
        }
        Job::FineTuneStep(step) => finetune::run_step(&state, step).await,
    }
    let mut s = state.borrow_mut();
    s.pending -= 1;
    if let Some(ctx) = &s.ctx {
        ctx.request_repaint();
    }
}

/// The visualizer as an eframe app: checkpoints and logs in a side panel, one tab per view.
pub struct Viewer {
    handle: ViewerHandle,
}

impl Viewer {
    /// A viewer that runs models on `backend` (the CPU backend is plenty for the small models it
    /// shows) and their jobs through `spawner`.
    pub fn new(backend: Rc<dyn Backend>, spawner: Spawner) -> Self {
        let state = State {
            backend,
            checkpoints: Vec::new(),
            compared: Vec::new(),
            active: 0,
            logs: Vec::new(),
            errors: Vec::new(),
            view: View::PositionEncodings,
            posenc: posenc::Settings::default(),
            encodings: HashMap::new(),
            attention: attention::Settings::default(),
            attention_maps: Computed::default(),
            tupe: HashMap::new(),
            prompt: prompt::Settings::default(),
            completion: Computed::default(),
            fine_tune: finetune::FineTuning::default(),
            prompt_field: None,
            pending: 0,
            queue: VecDeque::new(),
            running_queue: false,
            ctx: None,
        };
        Self {
            handle: ViewerHandle {
                state: Rc::new(RefCell::new(state)),
                spawner,
            },
        }
    }

    pub fn handle(&self) -> ViewerHandle {
        self.handle.clone()
    }

    /// The whole window: side panel, tabs, the selected view.
    pub fn show(&self, ui: &mut egui::Ui) {
        let jobs = {
            let mut s = self.handle.state.borrow_mut();
            s.ctx = Some(ui.ctx().clone());
            s.prompt_field = None;
            let mut jobs = Vec::new();
            egui::Panel::left("posflow.checkpoints")
                .default_size(250.0)
                .show(ui, |ui| side_panel(ui, &mut s));
            egui::Panel::top("posflow.tabs").show(ui, |ui| {
                ui.horizontal(|ui| {
                    for view in View::ALL {
                        ui.selectable_value(&mut s.view, view, view.title());
                    }
                });
            });
            let view = s.view;
            egui::CentralPanel::default().show(ui, |ui| view_contents(ui, &mut s, view, &mut jobs));
            jobs.extend(finetune::next_step(&mut s));
            jobs
        };
        self.handle.spawn_all(jobs);
    }

    /// One view alone, with a title (what `--export` renders).
    pub fn show_view(&self, ui: &mut egui::Ui, view: View) {
        let jobs = {
            let mut s = self.handle.state.borrow_mut();
            s.ctx = Some(ui.ctx().clone());
            s.prompt_field = None;
            let mut jobs = Vec::new();
            egui::CentralPanel::default().show(ui, |ui| {
                ui.heading(view.title());
                view_contents(ui, &mut s, view, &mut jobs);
            });
            jobs.extend(finetune::next_step(&mut s));
            jobs
        };
        self.handle.spawn_all(jobs);
    }
}

impl eframe::App for Viewer {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }

    /// Lets a web page reach the app through `eframe::WebRunner::app_mut`.
    #[cfg(target_arch = "wasm32")]
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

fn view_contents(ui: &mut egui::Ui, s: &mut State, view: View, jobs: &mut Vec<Job>) {
    egui::ScrollArea::both()
        .auto_shrink(false)
        .show(ui, |ui| match view {
            View::PositionEncodings => posenc::show(ui, s, jobs),
            View::Attention => attention::show(ui, s, jobs),
            View::Tupe => tupe::show(ui, s, jobs),
            View::Metrics => metrics::show(ui, s),
            View::Prompt => prompt::show(ui, s, jobs),
        });
}

fn side_panel(ui: &mut egui::Ui, s: &mut State) {
    ui.heading("posflow");
    ui.separator();
    ui.strong("Checkpoints");
    if s.checkpoints.is_empty() {
        ui.weak("none loaded (posflow viz --checkpoint FILE)");
    }
    for (i, c) in s.checkpoints.iter().enumerate() {
        ui.horizontal(|ui| {
            ui.checkbox(&mut s.compared[i], "")
                .on_hover_text("show in the side-by-side position-encoding view");
            ui.radio_value(&mut s.active, i, &c.name)
                .on_hover_text("the checkpoint the attention, TUPE and prompt views use");
        });
        ui.weak(c.describe());
    }
    ui.separator();
    ui.strong("Metrics logs");
    if s.logs.is_empty() {
        ui.weak("none loaded (--metrics FILE)");
    }
    for (name, records) in &s.logs {
        ui.label(format!("{name} ({} records)", records.len()));
    }
    if !s.errors.is_empty() {
        ui.separator();
        ui.strong("Errors");
        for e in &s.errors {
            ui.colored_label(ui.visuals().error_fg_color, e);
        }
    }
}

/// A job's result in the UI: `show` on success, the error in red, a spinner while it runs.
pub(crate) fn show_result<T>(
    ui: &mut egui::Ui,
    result: Option<&std::result::Result<T, String>>,
    show: impl FnOnce(&mut egui::Ui, &T),
) {
    match result {
        None => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("computing...");
            });
        }
        Some(Err(e)) => {
            ui.colored_label(ui.visuals().error_fg_color, e);
        }
        Some(Ok(value)) => show(ui, value),
    }
}

/// The active checkpoint, or a hint to load one.
pub(crate) fn active(ui: &mut egui::Ui, s: &State) -> Option<(usize, Rc<LoadedCheckpoint>)> {
    let found = s.checkpoints.get(s.active).cloned();
    if found.is_none() {
        ui.label("Load a checkpoint to see this view.");
    }
    found.map(|c| (s.active, c))
}
