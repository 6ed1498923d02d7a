//! posflow in the browser: the wasm side of the demo page (`web/index.html`, `web/main.js`).
//!
//! The page starts one backend — WebGPU when the browser has it, the CPU backend in wasm
//! otherwise —, mounts posflow's egui viewer (the views of `posflow viz`) on a canvas with that
//! backend, loads a checkpoint into both, and asks a language model for greedy completions and
//! next-character distributions, or a seq2seq model for translations (beam search). Everything
//! that touches the GPU is async: the browser cannot block on it.
//! Session calls must not overlap (one executor is fed, run and read back per call): `main.js`
//! queues them. The viewer runs its own jobs on its own copy of the model.
// Only the browser runs this crate.
#![cfg(target_arch = "wasm32")]

mod session;
mod viewer;

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::JSON;
use serde_json::{Value, json};
use wasm_bindgen::prelude::*;
use web_sys::HtmlCanvasElement;

use session::{BackendChoice, Session};
use viewer::MountedViewer;

thread_local! {
    static SESSION: RefCell<Option<Rc<Session>>> = const { RefCell::new(None) };
    static VIEWER: RefCell<Option<Rc<MountedViewer>>> = const { RefCell::new(None) };
}

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = console, js_name = error)]
    fn console_error(message: &str);
}

/// Panics reach the browser console with their message instead of a bare `unreachable`.
#[wasm_bindgen(start)]
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| console_error(&info.to_string())));
}

fn session() -> Result<Rc<Session>, JsError> {
    SESSION
        .with(|s| s.borrow().clone())
        .ok_or_else(|| JsError::new("posflow has not started: call start() first"))
}

fn viewer() -> Result<Rc<MountedViewer>, JsError> {
    VIEWER
        .with(|v| v.borrow().clone())
        .ok_or_else(|| JsError::new("the viewer is not mounted: call mountViewer(canvas) first"))
}

fn js_error(e: posflow::Error) -> JsError {
    JsError::new(&e.to_string())
}

/// A JSON value as a plain JS object.
fn to_js(value: &Value) -> Result<JsValue, JsError> {
    JSON::parse(&value.to_string()).map_err(|_| JsError::new("could not convert a result to JS"))
}

/// The threads the page's CPU products run on: its own and the helpers `serveProducts` runs in
/// (1 in the single-thread build).
#[wasm_bindgen(js_name = productThreads)]
pub fn product_threads() -> usize {
    #[cfg(target_feature = "atomics")]
    let helpers = posflow::page_threads::helpers();
    #[cfg(not(target_feature = "atomics"))]
    let helpers = 0;
    helpers + 1
}

/// `[module, memory]`: what a helper Worker (web/helper.js) instantiates to run this wasm on the
/// page's memory. Only in the threaded build.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen(js_name = threadHandles)]
pub fn thread_handles() -> js_sys::Array {
    js_sys::Array::of2(&wasm_bindgen::module(), &wasm_bindgen::memory())
}

/// How many helper Workers the page may start at most. Only in the threaded build.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen(js_name = maxHelpers)]
pub fn max_helpers() -> usize {
    posflow::page_threads::MAX_HELPERS
}

/// A helper Worker's life: it takes tasks of the page's products, parked between them, until the
/// page closes. Only in the threaded build.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen(js_name = serveProducts)]
pub fn serve_products() {
    posflow::page_threads::serve()
}

/// Starts the backend that `backend` (`auto`, `webgpu` or `cpu`; the page's `?backend=`) asks
/// for, where `has_webgpu` says whether the browser has the WebGPU API, and returns `{backend:
/// "webgpu" | "cpu", device, fallback, notice}`; `fallback` says why the page runs on the CPU, or
/// is null. `auto` takes a hardware WebGPU adapter and otherwise the CPU backend; any other name
/// starts as `auto`, and `notice` says so (null otherwise), so that a mistyped link still opens.
#[wasm_bindgen]
pub async fn start(backend: &str, has_webgpu: bool) -> Result<JsValue, JsError> {
    let (choice, notice) = match BackendChoice::parse(backend) {
        Ok(choice) => (choice, None),
        Err(why) => (
            BackendChoice::Auto,
            Some(format!("{why}; the page started as auto")),
        ),
    };
    let session = Rc::new(Session::start(choice, has_webgpu).await);
    let status = json!({
        "backend": session.backend_name(),
        "device": session.device,
        "fallback": session.fallback,
        "notice": notice,
    });
    SESSION.with(|s| *s.borrow_mut() = Some(session));
    to_js(&status)
}

/// Mounts the viewer on `canvas`, running its models on the backend `start` picked.
#[wasm_bindgen(js_name = mountViewer)]
pub async fn mount_viewer(canvas: HtmlCanvasElement) -> Result<(), JsError> {
    let backend = session()?.backend.clone();
    let mounted = MountedViewer::mount(canvas, backend)
        .await
        .map_err(|e| JsError::new(&e))?;
    VIEWER.with(|v| *v.borrow_mut() = Some(Rc::new(mounted)));
    Ok(())
}

/// Loads a checkpoint (the bytes of a posflow `.safetensors` file; `name` labels it in
/// messages) into the session and the viewer (where it becomes the active one: a language model's
/// prompt is completed again, a seq2seq model's translate tab opens and decodes its source), and
/// returns its model's description (`kind`: "causal_lm" or "seq2seq"). A file that is not a
/// checkpoint, or one of an encoder (which generates nothing), is an error and leaves the previous
/// model loaded.
#[wasm_bindgen(js_name = loadCheckpoint)]
pub async fn load_checkpoint(bytes: Vec<u8>, name: String) -> Result<JsValue, JsError> {
    let session = session()?;
    let info = session.load(&bytes, &name).map_err(js_error)?;
    let handle = &viewer()?.handle;
    handle.load_checkpoint_bytes(&name, &bytes).map_err(js_error)?;
    if session.model().map_err(js_error)?.is_seq2seq() {
        let (source, beam) = handle.source();
        handle.select_view(posflow::viz::View::Translate);
        handle.set_source(&source, beam);
    } else {
        handle.set_prompt(&handle.prompt());
    }
    to_js(&info)
}

/// Selects the viewer's tab by its name: `position_encodings`, `attention`, `tupe`, `metrics`,
/// `prompt`, `translate` or `compare`.
#[wasm_bindgen(js_name = selectView)]
pub fn select_view(name: &str) -> Result<(), JsError> {
    let view = viewer::view_named(name).map_err(|e| JsError::new(&e))?;
    viewer()?.handle.select_view(view);
    Ok(())
}

/// Sets the viewer's prompt and completes it (as typing it and pressing Enter would).
#[wasm_bindgen(js_name = setPrompt)]
pub fn set_prompt(prompt: &str) -> Result<(), JsError> {
    viewer()?.handle.set_prompt(prompt);
    Ok(())
}

/// Sets the translate view's source and beam and decodes it (as typing it there would).
#[wasm_bindgen(js_name = setSource)]
pub fn set_source(source: &str, beam: usize) -> Result<(), JsError> {
    viewer()?.handle.set_source(source, beam);
    Ok(())
}

/// What the viewer shows: `{status: "empty" | "busy" | "ready", view, checkpoints, errors,
/// prompt, completedPrompt, promptField: {x, y, width, height} | null, encodingsSums,
/// translation: {source, output} | {source: null, error} | null}` (CSS pixels from the canvas's
/// corner).
#[wasm_bindgen(js_name = viewerStatus)]
pub fn viewer_status() -> Result<JsValue, JsError> {
    to_js(&viewer()?.status())
}

/// The viewer's latest finished completion, prompt included, or null while it computes.
#[wasm_bindgen(js_name = lastCompletion)]
pub fn last_completion() -> Result<Option<String>, JsError> {
    Ok(viewer()?.last_completion())
}

/// Starts fine-tuning the viewer's active checkpoint's position encoder on `text` for `steps`
/// steps, one per frame, the position-encoding heatmap following (the fine-tuning section of
/// that view does the same). The session's model (`complete`, `probabilities`) is not changed.
#[wasm_bindgen(js_name = fineTune)]
pub fn fine_tune(text: &str, steps: usize) -> Result<(), JsError> {
    viewer()?.handle.start_fine_tune(text, steps).map_err(js_error)
}

/// Stops fine-tuning after the running step.
#[wasm_bindgen(js_name = stopFineTune)]
pub fn stop_fine_tune() -> Result<(), JsError> {
    viewer()?.handle.stop_fine_tune();
    Ok(())
}

/// Stops fine-tuning and restores the position encoders as loaded.
#[wasm_bindgen(js_name = resetFineTune)]
pub fn reset_fine_tune() -> Result<(), JsError> {
    viewer()?.handle.reset_fine_tune();
    Ok(())
}

/// `{stepsDone, stepsTotal, running, losses, error}`: where fine-tuning stands.
#[wasm_bindgen(js_name = fineTuneStatus)]
pub fn fine_tune_status() -> Result<JsValue, JsError> {
    let s = viewer()?.handle.fine_tune_status();
    to_js(&json!({
        "stepsDone": s.steps_done,
        "stepsTotal": s.steps_total,
        "running": s.running,
        "losses": s.losses,
        "error": s.error,
    }))
}

/// `prompt` followed by its greedy continuation of up to `chars` characters.
#[wasm_bindgen]
pub async fn complete(prompt: String, chars: usize) -> Result<String, JsError> {
    let model = session()?.model().map_err(js_error)?;
    model.complete(&prompt, chars).await.map_err(js_error)
}

/// A seq2seq model's best output for `source` with `beam` hypotheses: `{output, score}`, what
/// `posflow translate --beam B --scores` prints natively.
#[wasm_bindgen]
pub async fn translate(source: String, beam: usize) -> Result<JsValue, JsError> {
    let model = session()?.model().map_err(js_error)?;
    let found = model.translate(&source, beam).await.map_err(js_error)?;
    to_js(&found)
}

/// The next character's distribution after `prompt`: `{char: probability}`.
#[wasm_bindgen]
pub async fn probabilities(prompt: String) -> Result<JsValue, JsError> {
    let model = session()?.model().map_err(js_error)?;
    let probs = model.probabilities(&prompt).await.map_err(js_error)?;
    to_js(&Value::Object(probs))
}

/// Sets the Compare tab's settings from a link's query (`task=…&enc=a,b_rand&seeds=3&train=10&
/// test=11-40&preset=fast`; keys it lacks keep the defaults) and opens the tab. An unknown key,
/// task, encoding or preset, or a value that is not a number, is an error; settings that parse
/// but cannot run are shown refused in the tab (`compareStatus().refusal`).
#[wasm_bindgen(js_name = setCompare)]
pub fn set_compare(query: &str) -> Result<(), JsError> {
    let settings = posflow::viz::compare::CompareSettings::from_query(query).map_err(js_error)?;
    let handle = &viewer()?.handle;
    handle.set_compare_settings(settings);
    handle.select_view(posflow::viz::View::Compare);
    Ok(())
}

/// The Compare tab's settings as a link's query (what the page keeps in its URL).
#[wasm_bindgen(js_name = compareQuery)]
pub fn compare_query() -> Result<String, JsError> {
    Ok(viewer()?.handle.compare_settings().to_query())
}

/// Starts the comparison (as the tab's Start does); a refusal is an error with the reason.
#[wasm_bindgen(js_name = startCompare)]
pub fn start_compare() -> Result<(), JsError> {
    viewer()?.handle.start_compare().map_err(js_error)
}

/// Stops the comparison after the running slice of steps; what finished stays.
#[wasm_bindgen(js_name = stopCompare)]
pub fn stop_compare() -> Result<(), JsError> {
    viewer()?.handle.stop_compare();
    Ok(())
}

/// `{stepsDone, stepsTotal, runsDone, runsTotal, running, done, seconds, wallSeconds, verdicts:
/// [{name, verdict, sequences}], error, refusal}`: where the comparison stands (`seconds` training,
/// `wallSeconds` since Start); `refusal` is why the settings as they stand cannot run (null when
/// they can); `reproduction` how closely `posflow study` of its file re-runs it; `sanity` each
/// encoding's sanity check (did it learn the training lengths), apart from the `verdicts`; a
/// claim's `sequences` are those each run was evaluated on in its bin.
#[wasm_bindgen(js_name = compareStatus)]
pub fn compare_status() -> Result<JsValue, JsError> {
    let handle = &viewer()?.handle;
    let s = handle.compare_status();
    let refusal = handle.compare_study_toml().err().map(|e| e.to_string());
    let named = |claims: &[posflow::viz::ClaimStatus]| -> Vec<Value> {
        claims
            .iter()
            .map(|c| json!({"name": c.name, "verdict": c.verdict, "sequences": c.sequences}))
            .collect()
    };
    let (verdicts, sanity) = (named(&s.verdicts), named(&s.sanity));
    to_js(&json!({
        "stepsDone": s.steps_done,
        "stepsTotal": s.steps_total,
        "runsDone": s.runs_done,
        "runsTotal": s.runs_total,
        "running": s.running,
        "done": s.done,
        "seconds": s.seconds,
        "wallSeconds": s.wall_seconds,
        "verdicts": verdicts,
        "sanity": sanity,
        "error": s.error,
        "refusal": refusal,
        "reproduction": handle.compare_reproduction(),
    }))
}

/// The study file that reproduces the comparison with `posflow study` natively.
#[wasm_bindgen(js_name = compareStudy)]
pub fn compare_study() -> Result<String, JsError> {
    viewer()?.handle.compare_study_toml().map_err(js_error)
}

/// Offers the study file for download, as the tab's "Download study" button does (the page then
/// hands it to the browser).
#[wasm_bindgen(js_name = downloadStudy)]
pub fn download_study() -> Result<(), JsError> {
    viewer()?.handle.download_compare_study().map_err(js_error)
}

/// The comparison's finished runs as `posflow study` writes them in `result.json` (variant, seed,
/// run config, seconds, training loss per step, evaluations).
#[wasm_bindgen(js_name = compareResults)]
pub fn compare_results() -> Result<JsValue, JsError> {
    let results = viewer()?.handle.compare_results();
    to_js(&serde_json::to_value(&results).map_err(|e| JsError::new(&e.to_string()))?)
}

/// The files the viewer offered to save since the last call (the Compare tab's Download
/// buttons): `[{name, bytes: Uint8Array}]`, for the page to hand to the browser.
#[wasm_bindgen(js_name = takeDownloads)]
pub fn take_downloads() -> Result<js_sys::Array, JsError> {
    let out = js_sys::Array::new();
    for d in viewer()?.handle.take_downloads() {
        let file = js_sys::Object::new();
        let set = |key: &str, value: &JsValue| js_sys::Reflect::set(&file, &JsValue::from_str(key), value);
        set("name", &JsValue::from_str(&d.name)).map_err(|_| JsError::new("could not build a download"))?;
        set("bytes", &js_sys::Uint8Array::from(d.bytes.as_slice()).into())
            .map_err(|_| JsError::new("could not build a download"))?;
        out.push(&file);
    }
    Ok(out)
}

/// Times the training step `posflow bench train --variants VARIANT` times (the peers' step, or
/// one change to it) on the page's backend: `warmup` untimed steps, then `steps` timed ones, each
/// from feeding its batch to reading its loss back. Returns `{variant, device, steps,
/// medianMs, meanMs, bestMs, tokensPerSecond, firstLoss, lastLoss, profile}`; with `profile`
/// true (on the CPU), `profile` is where a step's time went, `[{op, calls, msPerStep}]` per op
/// kind over the steps after the first (what `POSFLOW_PROFILE=1` prints natively), else null. On
/// the CPU it holds the page for the whole run (one step at a time on the page's only thread).
#[wasm_bindgen(js_name = benchTrain)]
pub async fn bench_train(
    variant: String,
    steps: usize,
    warmup: usize,
    profile: bool,
) -> Result<JsValue, JsError> {
    use posflow::bench::{TrainBench, TrainShape};
    let session = session()?;
    let bench = TrainBench {
        warmup,
        ..TrainBench::variant(TrainShape::Peers, &variant).map_err(js_error)?
    };
    posflow::backend::profile::request(profile);
    let row = posflow::bench::train(&session.backend, &bench, steps).await;
    posflow::backend::profile::request(false);
    let row = row.map_err(js_error)?;
    let profile = row.profile.as_ref().map(|p| {
        let runs = p.runs.max(1) as f64;
        p.ops
            .iter()
            .map(|op| json!({"op": op.name, "calls": op.calls as f64 / runs, "msPerStep": op.seconds * 1e3 / runs}))
            .collect::<Vec<_>>()
    });
    to_js(&json!({
        "variant": variant,
        "device": session.device,
        "steps": row.steps,
        "medianMs": row.median_seconds * 1e3,
        "meanMs": row.mean_seconds * 1e3,
        "bestMs": row.best_seconds * 1e3,
        "tokensPerSecond": row.tokens_per_second,
        "firstLoss": row.first_loss,
        "lastLoss": row.last_loss,
        "profile": profile,
    }))
}
