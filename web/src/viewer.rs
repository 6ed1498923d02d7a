//! posflow's egui viewer (`posflow::viz::Viewer`, what `posflow viz` opens natively) mounted on
//! a canvas of the page by eframe's web runner, running its models on the page's backend.

use std::rc::Rc;

use eframe::egui;
use posflow::backend::Backend;
use posflow::viz::{Spawner, View, Viewer, ViewerHandle};
use serde_json::{Value, json};
use web_sys::HtmlCanvasElement;

/// The running viewer: the runner must live as long as the page shows it.
pub struct MountedViewer {
    _runner: eframe::WebRunner,
    pub handle: ViewerHandle,
}

impl MountedViewer {
    /// Starts the viewer on `canvas`; its jobs run on `backend` as the browser's tasks. eframe
    /// renders with wgpu: WebGPU where the browser has it, WebGL2 otherwise.
    pub async fn mount(canvas: HtmlCanvasElement, backend: Rc<dyn Backend>) -> Result<Self, String> {
        let viewer = Viewer::new(backend, Spawner::new(wasm_bindgen_futures::spawn_local));
        let handle = viewer.handle();
        let runner = eframe::WebRunner::new();
        runner
            .start(
                canvas,
                eframe::WebOptions::default(),
                Box::new(move |_| Ok(Box::new(viewer))),
            )
            .await
            .map_err(|e| format!("the viewer could not start: {e:?}"))?;
        Ok(Self {
            _runner: runner,
            handle,
        })
    }

    /// `{status, view, checkpoints, errors, prompt, completedPrompt, promptField, encodingsSums,
    /// translation}`: what the viewer shows. `translation` is the translate view's finished
    /// decoding, `{source, output}` or `{source: null, error}`, or null while it runs.
    /// `completedPrompt` is the prompt of the finished completion (or null); `promptField` the
    /// prompt view's text field in CSS pixels from the canvas's top left (`{x, y, width,
    /// height}`), or null when that view is not shown; `encodingsSums[i]` the sum of |value| over
    /// the heatmaps shown for the i-th checkpoint (null before they are computed), a fingerprint
    /// by which a test sees them follow fine-tuning.
    pub fn status(&self) -> Value {
        let h = &self.handle;
        let sums: Vec<Option<f64>> = (0..h.checkpoints().len())
            .map(|i| {
                let shown = h.shown_encodings(i)?;
                Some(
                    shown
                        .maps
                        .iter()
                        .flat_map(|m| &m.values)
                        .map(|v| f64::from(v.abs()))
                        .sum(),
                )
            })
            .collect();
        json!({
            "status": h.status(),
            "view": h.view().slug(),
            "checkpoints": h.checkpoints(),
            "errors": h.errors(),
            "prompt": h.prompt(),
            "completedPrompt": h.completed_prompt(),
            "promptField": h.prompt_field().map(css_rect),
            "encodingsSums": sums,
            "translation": match h.last_translation() {
                Some(Ok((source, output))) => json!({"source": source, "output": output}),
                Some(Err(error)) => json!({"source": null, "error": error}),
                None => Value::Null,
            },
        })
    }

    /// The latest finished completion of the prompt view, prompt included, or `None` while it runs.
    pub fn last_completion(&self) -> Option<String> {
        let prompt = self.handle.completed_prompt()?;
        let text = self.handle.last_completion()?;
        Some(format!("{prompt}{text}"))
    }
}

/// eframe draws one egui point per CSS pixel at the default zoom.
fn css_rect(rect: egui::Rect) -> Value {
    json!({
        "x": rect.min.x,
        "y": rect.min.y,
        "width": rect.width(),
        "height": rect.height(),
    })
}

/// The view whose file-name-friendly name (`View::slug`) is `name`.
pub fn view_named(name: &str) -> Result<View, String> {
    View::ALL.into_iter().find(|v| v.slug() == name).ok_or_else(|| {
        let names: Vec<&str> = View::ALL.iter().map(|v| v.slug()).collect();
        format!("no view is called `{name}`: the views are {}", names.join(", "))
    })
}
