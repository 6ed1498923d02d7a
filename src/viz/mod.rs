//! The visualizer: egui views of trained checkpoints, shared by the native window (`posflow viz`)
//! and the web page (the `web/` crate mounts [`Viewer`] as an eframe app).
//!
//! Views, one module each: position encodings as heatmaps at any length ([`posenc`]), with the
//! position encoder fine-tuned live on a typed text beneath them ([`finetune`]), attention
//! patterns of a typed text ([`attention`]), TUPE's positional correlation ([`tupe`]), loss
//! curves from a metrics log ([`metrics`]), greedy completions with next-character
//! probabilities ([`prompt`]), and a seq2seq model's decoding of a typed source with its
//! cross-attention ([`translate`]). Several checkpoints load side by side.
//!
//! Nothing here touches files, threads or blocking calls, so it compiles for wasm32: checkpoints
//! and logs come in as bytes and strings ([`ViewerHandle`]), and everything that runs a model is
//! an async job handed to a [`Spawner`] — natively it runs to completion on the spot
//! ([`Spawner::blocking`]), on the web the page passes `wasm_bindgen_futures::spawn_local`.
//! Jobs write their results into the shared state and ask egui for a repaint.

pub mod attention;
pub mod colormap;
pub mod compare;
#[cfg(not(target_arch = "wasm32"))]
pub mod export;
pub mod finetune;
mod handle;
mod heatmap;
mod jobs;
mod loaded;
pub mod metrics;
pub mod posenc;
pub mod prompt;
pub mod translate;
pub mod tupe;

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use eframe::egui;

pub use compare::{ClaimStatus, CompareStatus};
pub use finetune::FineTuneStatus;
pub use handle::ViewerHandle;
pub(crate) use jobs::{Computed, Job};
pub use jobs::{Spawner, Task};
pub use loaded::LoadedCheckpoint;

use crate::backend::Backend;
use crate::train::Record;

/// The views, in tab order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum View {
    PositionEncodings,
    Attention,
    PositionCorrelation,
    Metrics,
    Prompt,
    Translate,
    Compare,
}

impl View {
    pub const ALL: [View; 7] = [
        View::PositionEncodings,
        View::Attention,
        View::PositionCorrelation,
        View::Metrics,
        View::Prompt,
        View::Translate,
        View::Compare,
    ];

    /// The tab's title.
    pub fn title(self) -> &'static str {
        match self {
            View::PositionEncodings => "Position encodings",
            View::Attention => "Attention",
            View::PositionCorrelation => "TUPE correlation",
            View::Metrics => "Loss curves",
            View::Prompt => "Prompt",
            View::Translate => "Translate",
            View::Compare => "Compare",
        }
    }

    /// A file-name-friendly name (`posflow viz --export` writes `<slug>.png`).
    pub fn slug(self) -> &'static str {
        match self {
            View::PositionEncodings => "position_encodings",
            View::Attention => "attention",
            View::PositionCorrelation => "tupe",
            View::Metrics => "metrics",
            View::Prompt => "prompt",
            View::Translate => "translate",
            View::Compare => "compare",
        }
    }
}

/// Everything the views show and the page can read (through [`ViewerHandle`]).
pub(crate) struct State {
    backend: Rc<dyn Backend>,
    pub(crate) checkpoints: Vec<Rc<LoadedCheckpoint>>,
    /// Shown side by side in the position-encoding view.
    pub(crate) compared: Vec<bool>,
    /// The one the attention, TUPE, prompt and translate views use.
    pub(crate) active: usize,
    pub(crate) logs: Vec<(String, Vec<Record>)>,
    pub(crate) errors: Vec<String>,
    /// Files the views offer (the Compare tab's study and checkpoints), for the page or the
    /// window to save: viz itself writes no files.
    pub(crate) downloads: Vec<Download>,
    pub(crate) view: View,
    pub(crate) posenc: posenc::Settings,
    /// By checkpoint, for (length, parameter version).
    pub(crate) encodings: HashMap<usize, Computed<(usize, u64), posenc::PositionEncodings>>,
    pub(crate) attention: attention::Settings,
    pub(crate) attention_maps: Computed<(usize, String), attention::AttentionView>,
    pub(crate) tupe: HashMap<usize, Computed<(), tupe::TupeCorrelation>>,
    pub(crate) prompt: prompt::Settings,
    pub(crate) completion: Computed<(usize, String, usize), prompt::Completion>,
    pub(crate) translate: translate::Settings,
    /// By (checkpoint, source, beam).
    pub(crate) translation: Computed<(usize, String, usize), translate::Translation>,
    pub(crate) fine_tune: finetune::FineTuning,
    pub(crate) compare: compare::Comparing,
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

/// A file a view offers to save: a name of posflow's making (no path) and its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Download {
    pub name: String,
    pub bytes: Vec<u8>,
}

impl State {
    /// Adds a loaded checkpoint and makes it the active one, shown side by side with the others.
    pub(crate) fn add_checkpoint(&mut self, loaded: LoadedCheckpoint) {
        self.checkpoints.push(Rc::new(loaded));
        self.compared.push(true);
        self.active = self.checkpoints.len() - 1;
        self.posenc.length = self
            .posenc
            .length
            .max(self.checkpoints[self.active].default_length());
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
        let compare = compare::Comparing::on(backend.kind());
        let state = State {
            backend,
            checkpoints: Vec::new(),
            compared: Vec::new(),
            active: 0,
            logs: Vec::new(),
            errors: Vec::new(),
            downloads: Vec::new(),
            view: View::PositionEncodings,
            posenc: posenc::Settings::default(),
            encodings: HashMap::new(),
            attention: attention::Settings::default(),
            attention_maps: Computed::default(),
            tupe: HashMap::new(),
            prompt: prompt::Settings::default(),
            completion: Computed::default(),
            translate: translate::Settings::default(),
            translation: Computed::default(),
            fine_tune: finetune::FineTuning::default(),
            compare,
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
            jobs.extend(compare::next_step(&mut s));
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
            jobs.extend(compare::next_step(&mut s));
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
            View::PositionCorrelation => tupe::show(ui, s, jobs),
            View::Metrics => metrics::show(ui, s),
            View::Prompt => prompt::show(ui, s, jobs),
            View::Translate => translate::show(ui, s, jobs),
            View::Compare => compare::show(ui, s),
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
                .on_hover_text("the checkpoint the attention, TUPE, prompt and translate views use");
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
