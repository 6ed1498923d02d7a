//! posflow in the browser: the wasm side of the demo page (`web/index.html`, `web/main.js`).
//!
//! The page starts one backend — WebGPU when the browser has it, the CPU backend in wasm
//! otherwise — loads a checkpoint, and asks for greedy completions, next-character
//! distributions and the position encodings to draw. Everything that touches the GPU is async:
//! the browser cannot block on it. Calls must not overlap (one executor is fed, run and read
//! back per call): `main.js` queues them.

mod positions;
mod session;

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Float32Array, JSON, Object, Reflect};
use serde_json::{Value, json};
use wasm_bindgen::prelude::*;

use session::Session;

thread_local! {
    static SESSION: RefCell<Option<Rc<Session>>> = const { RefCell::new(None) };
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

fn js_error(e: posflow::Error) -> JsError {
    JsError::new(&e.to_string())
}

/// A JSON value as a plain JS object.
fn to_js(value: &Value) -> Result<JsValue, JsError> {
    JSON::parse(&value.to_string()).map_err(|_| JsError::new("could not convert a result to JS"))
}

/// Starts the backend (WebGPU if `webgpu` and the browser gives an adapter, else the CPU) and
/// returns `{backend: "webgpu" | "cpu", device, fallback}`; `fallback` says why WebGPU is not
/// used, or is null.
#[wasm_bindgen]
pub async fn start(webgpu: bool) -> Result<JsValue, JsError> {
    let session = Rc::new(Session::start(webgpu).await);
    let status = json!({
        "backend": session.backend_name(),
        "device": session.device,
        "fallback": session.fallback,
    });
    SESSION.with(|s| *s.borrow_mut() = Some(session));
    to_js(&status)
}

/// Loads a checkpoint (the bytes of a posflow `.safetensors` file; `name` labels it in
/// messages) and returns its model's description. A file that is not a checkpoint, or one of a
/// model that cannot generate text, is an error and leaves the previous model loaded.
#[wasm_bindgen(js_name = loadCheckpoint)]
pub async fn load_checkpoint(bytes: Vec<u8>, name: String) -> Result<JsValue, JsError> {
    let info = session()?.load(&bytes, &name).map_err(js_error)?;
    to_js(&info)
}

/// `prompt` followed by its greedy continuation of up to `chars` characters.
#[wasm_bindgen]
pub async fn complete(prompt: String, chars: usize) -> Result<String, JsError> {
    let model = session()?.model().map_err(js_error)?;
    model.complete(&prompt, chars).await.map_err(js_error)
}

/// The next character's distribution after `prompt`: `{char: probability}`.
#[wasm_bindgen]
pub async fn probabilities(prompt: String) -> Result<JsValue, JsError> {
    let model = session()?.model().map_err(js_error)?;
    let probs = model.probabilities(&prompt).await.map_err(js_error)?;
    to_js(&Value::Object(probs))
}

/// The loaded model's additive position terms over its `max_len` positions:
/// `{positions, panels: [{label, dims, values: Float32Array (positions × dims, row-major)}]}`.
#[wasm_bindgen(js_name = positionEncodings)]
pub async fn position_encodings() -> Result<JsValue, JsError> {
    let model = session()?.model().map_err(js_error)?;
    let (len, panels) = positions::panels(&model).await.map_err(js_error)?;
    let list = Array::new();
    for panel in panels {
        let object = Object::new();
        let set = |key: &str, value: &JsValue| Reflect::set(&object, &key.into(), value).map(drop);
        set("label", &panel.label.into())
            .and_then(|()| set("dims", &(panel.dims as u32).into()))
            .and_then(|()| set("values", &Float32Array::from(panel.values.as_slice()).into()))
            .map_err(|_| JsError::new("could not build the position panels"))?;
        list.push(&object);
    }
    let result = Object::new();
    Reflect::set(&result, &"positions".into(), &(len as u32).into())
        .and_then(|_| Reflect::set(&result, &"panels".into(), &list))
        .map_err(|_| JsError::new("could not build the position panels"))?;
    Ok(result.into())
}
