//! `posflow viz`: the visualizer in a native window, or its views rendered to PNG files.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use clap::Args;
use eframe::egui;
use posflow::backend::Backend;
use posflow::viz::{Spawner, Viewer, ViewerHandle, export::export_views};
use posflow::{Error, Result};

#[derive(Args)]
pub struct VizArgs {
    /// A checkpoint to show; repeat it to compare several side by side.
    #[arg(long = "checkpoint")]
    checkpoints: Vec<PathBuf>,
    /// A metrics log (JSON lines) to plot; repeat it to overlay runs.
    #[arg(long = "metrics")]
    metrics: Vec<PathBuf>,
    /// Render every view to DIR/<view>.png instead of opening a window.
    #[arg(long, value_name = "DIR")]
    export: Option<PathBuf>,
    /// Positions in the position-encoding view (default: the training length).
    #[arg(long, value_parser = super::sequence_length)]
    length: Option<usize>,
    /// The text of the attention and prompt views.
    #[arg(long)]
    text: Option<String>,
    /// The source the translate view decodes (a seq2seq checkpoint's).
    #[arg(long)]
    source: Option<String>,
    /// Close the window after N frames and print how many rendered (a smoke test under Xvfb).
    #[arg(long, hide = true)]
    frames: Option<u64>,
}

pub fn viz(backend: Rc<dyn Backend>, args: VizArgs) -> Result<()> {
    let viewer = Viewer::new(backend, Spawner::blocking());
    let handle = viewer.handle();
    // In a window a file that does not load is listed in the viewer; an export has no one to see
    // that, so there it fails the command.
    let strict = args.export.is_some();
    for path in &args.checkpoints {
        let loaded = read(path).and_then(|bytes| handle.load_checkpoint_bytes(&file_name(path), &bytes));
        report(loaded, strict)?;
    }
    for path in &args.metrics {
        let loaded = read(path).and_then(|bytes| {
            let text = String::from_utf8(bytes)
                .map_err(|e| Error::Input(format!("{}: not UTF-8 text: {e}", path.display())))?;
            handle.load_metrics_text(&file_name(path), &text)
        });
        report(loaded, strict)?;
    }
    if let Some(length) = args.length {
        handle.set_length(length);
    }
    if let Some(text) = &args.text {
        handle.set_attention_text(text);
        handle.set_prompt(text);
    }
    if let Some(source) = &args.source {
        let (_, beam) = handle.source();
        handle.set_source(source, beam);
    }
    match &args.export {
        Some(dir) => {
            for path in export_views(&viewer, dir)? {
                println!("wrote {}", path.display());
            }
            Ok(())
        }
        None => window(viewer, handle, args.frames),
    }
}

fn window(viewer: Viewer, handle: ViewerHandle, frames: Option<u64>) -> Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("posflow viz")
            .with_inner_size([1400.0, 900.0]),
        ..Default::default()
    };
    let rendered = Rc::new(Cell::new(0));
    let app: Box<dyn eframe::App> = match frames {
        Some(limit) => Box::new(FrameLimit {
            viewer,
            rendered: rendered.clone(),
            limit,
        }),
        None => Box::new(viewer),
    };
    eframe::run_native("posflow viz", options, Box::new(|_| Ok(app)))
        .map_err(|e| Error::Device(format!("the viewer's window: {e}")))?;
    if frames.is_some() {
        println!("rendered {} frames ({})", rendered.get(), handle.status());
    }
    Ok(())
}

/// The viewer, closed after `limit` frames.
struct FrameLimit {
    viewer: Viewer,
    rendered: Rc<Cell<u64>>,
    limit: u64,
}

impl eframe::App for FrameLimit {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.viewer.show(ui);
        // The frame that handles the close command still draws; it is not one of the N.
        if self.rendered.get() < self.limit {
            self.rendered.set(self.rendered.get() + 1);
        }
        if self.rendered.get() >= self.limit {
            ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
        } else {
            ui.ctx().request_repaint();
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>> {
    posflow::memory::read_regular_file(path).map_err(|e| Error::Input(format!("{}: {e}", path.display())))
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn report(loaded: Result<()>, strict: bool) -> Result<()> {
    match loaded {
        Err(e) if !strict => {
            eprintln!("error: {e}");
            Ok(())
        }
        other => other,
    }
}
