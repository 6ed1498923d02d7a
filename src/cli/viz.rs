//! `posflow viz`: the visualizer in a native window, or its views rendered to PNG files.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use clap::Args;
use eframe::egui;
use posflow::backend::Backend;
use posflow::viz::compare::CompareSettings;
use posflow::viz::{Download, Spawner, View, Viewer, ViewerHandle, export::export_views};
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
    /// Open the Compare tab with these settings (a page link's query, e.g.
    /// "task=reverse_string&enc=rope,rope_rand&seeds=3&train=10&test=11-40&preset=fast").
    #[arg(long, value_name = "QUERY")]
    compare: Option<String>,
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
    if let Some(query) = &args.compare {
        handle.set_compare_settings(CompareSettings::from_query(query)?);
        handle.select_view(View::Compare);
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
    let app = Box::new(Window {
        viewer,
        handle: handle.clone(),
        limit: frames.map(|limit| (rendered.clone(), limit)),
    });
    eframe::run_native("posflow viz", options, Box::new(|_| Ok(app)))
        .map_err(|e| Error::Device(format!("the viewer's window: {e}")))?;
    if frames.is_some() {
        println!("rendered {} frames ({})", rendered.get(), handle.status());
    }
    Ok(())
}

/// The viewer in a window: what its views offer to download is saved in the current directory;
/// with a limit, the window closes after that many frames.
struct Window {
    viewer: Viewer,
    handle: ViewerHandle,
    limit: Option<(Rc<Cell<u64>>, u64)>,
}

impl eframe::App for Window {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.viewer.show(ui);
        for download in self.handle.take_downloads() {
            save(&download);
        }
        let Some((rendered, limit)) = &self.limit else {
            return;
        };
        // The frame that handles the close command still draws; it is not one of the N.
        if rendered.get() < *limit {
            rendered.set(rendered.get() + 1);
        }
        if rendered.get() >= *limit {
            ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
        } else {
            ui.ctx().request_repaint();
        }
    }
}

/// Saves a download in the current directory under its name (posflow's making, a file name
/// alone; anything else is refused), written whole or not at all.
fn save(download: &Download) {
    let name = Path::new(&download.name);
    let plain = name.components().count() == 1 && name.file_name().is_some_and(|n| n == name.as_os_str());
    if !plain {
        eprintln!("error: not saved: `{}` is not a plain file name", download.name);
        return;
    }
    match posflow::checkpoint::write_atomically(name, &download.bytes) {
        Ok(()) => println!("saved {}", name.display()),
        Err(e) => eprintln!("error: {} was not saved: {e}", name.display()),
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
