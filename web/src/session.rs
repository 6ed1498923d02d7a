//! What the page holds: one backend, chosen at start, and the model loaded last.

use std::cell::RefCell;
use std::rc::Rc;

use posflow::arithmetic::Arithmetic;
use posflow::backend::{Backend, BackendKind, CpuBackend, GpuBackend, gpu::SoftwareAdapters};
use posflow::checkpoint::Checkpoint;
use posflow::data::{BOS, PairTokenizer, TaskTokenizer};
use posflow::inference::{DecodeOptions, Generator, MAX_BEAM, SavedModel, Seq2SeqDecoder};
use posflow::model::ModelKind;
use posflow::train::saved_run;
use posflow::{Error, Result};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use serde_json::{Map, Value, json};
use wasm_bindgen::prelude::*;

pub struct Session {
    pub backend: Rc<dyn Backend>,
    /// What runs the model, in words.
    pub device: String,
    /// Why the page runs on the CPU although WebGPU was asked for; `None` when it was not.
    pub fallback: Option<String>,
    model: RefCell<Option<Rc<Loaded>>>,
}

/// A checkpoint's model, ready to predict.
pub struct Loaded {
    pub saved: SavedModel,
    predicts: Predicts,
}

/// What a loaded model does with the page's text.
enum Predicts {
    /// A language model continues a prompt.
    Text {
        generator: Generator,
        /// Whether prompts get a <bos> in front (the prompted tasks), as `posflow sample` does.
        starts_with_bos: bool,
    },
    /// A seq2seq model decodes a source, as `posflow translate` does.
    Translation {
        decoder: Seq2SeqDecoder,
        tokenizer: PairTokenizer,
    },
}

/// Which backend the page asked for (`?backend=` in its address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// A hardware WebGPU adapter, else the CPU: a software adapter (SwiftShader) is far slower
    /// than the CPU backend in wasm, as natively `--device auto` refuses lavapipe.
    Auto,
    /// WebGPU, software adapters too.
    WebGpu,
    Cpu,
}

impl BackendChoice {
    pub fn parse(name: &str) -> std::result::Result<Self, String> {
        match name {
            "" | "auto" => Ok(Self::Auto),
            "webgpu" => Ok(Self::WebGpu),
            "cpu" => Ok(Self::Cpu),
            other => Err(format!(
                "?backend={other} is not a backend: use auto, webgpu or cpu"
            )),
        }
    }
}

impl Session {
    /// The backend `choice` asks for, where `has_webgpu` says whether the browser has the API;
    /// the CPU backend when WebGPU is not there or not wanted (`fallback` says why).
    pub async fn start(choice: BackendChoice, has_webgpu: bool) -> Self {
        let gpu = match (choice, has_webgpu) {
            (BackendChoice::Cpu, _) => Err("the page was asked for the CPU backend (?backend=cpu)".into()),
            (_, false) => Err("this browser has no WebGPU (navigator.gpu is missing)".into()),
            (BackendChoice::WebGpu, true) => {
                GpuBackend::new(SoftwareAdapters::Allow).await.map_err(no_adapter)
            }
            (BackendChoice::Auto, true) => GpuBackend::new(SoftwareAdapters::Allow)
                .await
                .map_err(no_adapter)
                .and_then(software_refused),
        };
        let (backend, device, fallback): (Rc<dyn Backend>, _, _) = match gpu {
            Ok(gpu) => {
                let device = describe_adapter(gpu.adapter_info());
                (Rc::new(gpu), device, None)
            }
            Err(why) => {
                // The page's products are the portable order whatever it is asked; saying so
                // keeps what it reports true.
                let cpu = CpuBackend::with_arithmetic(Arithmetic::Portable);
                let device = cpu.describe();
                (Rc::new(cpu), device, Some(why))
            }
        };
        Self {
            backend,
            device,
            fallback,
            model: RefCell::new(None),
        }
    }

    pub fn backend_name(&self) -> &'static str {
        match self.backend.kind() {
            BackendKind::Gpu => "webgpu",
            BackendKind::Cpu => "cpu",
        }
    }

    /// Parses and loads a checkpoint (a language model or a seq2seq model); on any error the
    /// model loaded before stays.
    pub fn load(&self, bytes: &[u8], name: &str) -> Result<Value> {
        let checkpoint = Checkpoint::from_bytes(bytes, name)?;
        let saved = SavedModel::from_checkpoint(self.backend.clone(), &checkpoint)?;
        let config = saved.model.config();
        let (predicts, kind) = match (config.kind, &saved.tokenizer) {
            (ModelKind::Seq2Seq { .. }, TaskTokenizer::Pairs(pairs)) => (
                Predicts::Translation {
                    decoder: Seq2SeqDecoder::new(&saved.model, &saved.params)?,
                    tokenizer: pairs.clone(),
                },
                "seq2seq",
            ),
            _ => {
                let mut generator = saved.generator()?;
                let starts_with_bos = saved_run(&saved.metadata).is_ok_and(|run| run.data.starts_with_bos());
                if starts_with_bos {
                    generator = generator.starting_with_bos();
                }
                (
                    Predicts::Text {
                        generator,
                        starts_with_bos,
                    },
                    "causal_lm",
                )
            }
        };
        let parameters: usize = saved.params.iter().map(|(_, p)| p.meta.numel()).sum();
        let info = json!({
            "name": name,
            "kind": kind,
            "vocab": config.vocab,
            "d_model": config.d_model,
            "layers": config.layers,
            "decoder_layers": config.decoder_dims().map(|d| d.layers),
            "heads": config.heads,
            "ffn": config.ffn,
            "max_len": config.max_len,
            "posenc": serde_json::to_value(config.posenc).map_err(|e| Error::Input(e.to_string()))?,
            "parameters": parameters,
            "step": saved.metadata.training.step,
        });
        *self.model.borrow_mut() = Some(Rc::new(Loaded { saved, predicts }));
        Ok(info)
    }

    pub fn model(&self) -> Result<Rc<Loaded>> {
        self.model
            .borrow()
            .clone()
            .ok_or_else(|| Error::Input("no model is loaded yet".into()))
    }
}

/// The adapter's name (browsers may hide it) and whether it is a software one (SwiftShader).
#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = console, js_name = warn)]
    fn console_warn(message: &str);
}

/// The page's line for a browser whose WebGPU gives no adapter; wgpu's details (which backends
/// it tried) go to the console.
fn no_adapter(e: Error) -> String {
    console_warn(&format!("posflow: {e}"));
    "this browser's WebGPU offers no adapter".into()
}

/// The GPU backend unless its adapter is a software one; the reason, in words, otherwise.
fn software_refused(gpu: GpuBackend) -> std::result::Result<GpuBackend, String> {
    if gpu.adapter_info().device_type == wgpu::DeviceType::Cpu {
        return Err(
            "this browser's WebGPU adapter is a software renderer, slower than the CPU \
                    backend (open the page with ?backend=webgpu to use it anyway)"
                .into(),
        );
    }
    Ok(gpu)
}

fn describe_adapter(info: &wgpu::AdapterInfo) -> String {
    let name = if info.name.is_empty() {
        "WebGPU adapter"
    } else {
        info.name.as_str()
    };
    match info.device_type {
        wgpu::DeviceType::Cpu => format!("{name} (software)"),
        _ => name.to_string(),
    }
}

impl Loaded {
    pub fn is_seq2seq(&self) -> bool {
        matches!(self.predicts, Predicts::Translation { .. })
    }

    /// A language model's generator; a seq2seq model's is an error saying what it does instead.
    fn text(&self) -> Result<(&Generator, bool)> {
        match &self.predicts {
            Predicts::Text {
                generator,
                starts_with_bos,
            } => Ok((generator, *starts_with_bos)),
            Predicts::Translation { .. } => Err(Error::Input(
                "the loaded model is a seq2seq model: it translates a source (translate), it does not \
                 continue a prompt"
                    .into(),
            )),
        }
    }

    /// `prompt` and its greedy continuation of up to `chars` characters.
    pub async fn complete(&self, prompt: &str, chars: usize) -> Result<String> {
        let (generator, _) = self.text()?;
        // Temperature 0 never draws from the generator.
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let text = generator.complete(prompt, chars, 0.0, &mut rng).await?;
        Ok(format!("{prompt}{text}"))
    }

    /// The next token's distribution after `prompt`, by character (special tokens by name, as
    /// `posflow sample --probabilities` prints it).
    pub async fn probabilities(&self, prompt: &str) -> Result<Map<String, Value>> {
        let (generator, starts_with_bos) = self.text()?;
        let tokenizer = self.saved.tokenizer.chars()?;
        let mut context = if starts_with_bos { vec![BOS] } else { Vec::new() };
        context.extend(tokenizer.encode(prompt)?);
        let probs = generator.next_probabilities(&context).await?;
        probs
            .iter()
            .enumerate()
            .map(|(id, &p)| {
                let name = match tokenizer.specials().get(id) {
                    Some(special) => special.to_string(),
                    None => tokenizer.decode(&[id as i32])?,
                };
                Ok((name, Value::from(p)))
            })
            .collect()
    }

    /// A seq2seq model's best output for `source` with `beam` hypotheses (1 is greedy), with
    /// `posflow translate`'s defaults otherwise: `{output, score}`.
    pub async fn translate(&self, source: &str, beam: usize) -> Result<Value> {
        let Predicts::Translation { decoder, tokenizer } = &self.predicts else {
            return Err(Error::Input(
                "the loaded model is a language model: it continues a prompt (complete), it does not \
                 translate"
                    .into(),
            ));
        };
        if source.trim().is_empty() {
            return Err(Error::Input("the source is empty".into()));
        }
        if !(1..=MAX_BEAM).contains(&beam) {
            return Err(Error::Input(format!(
                "the beam must be 1 to {MAX_BEAM}, got {beam}"
            )));
        }
        let ids = tokenizer.encode_source(source)?;
        let options = DecodeOptions {
            beam,
            ..DecodeOptions::default()
        };
        let best = decoder
            .decode(&[ids], &options)
            .await?
            .pop()
            .ok_or_else(|| Error::Input("decoding returned no hypothesis".into()))?;
        Ok(json!({
            "output": tokenizer.decode_target(&best.tokens)?,
            "score": best.score,
        }))
    }
}
