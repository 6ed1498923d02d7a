//! What the page holds: one backend, chosen at start, and the model loaded last.

use std::cell::RefCell;
use std::rc::Rc;

use posflow::backend::{Backend, BackendKind, CpuBackend, GpuBackend, gpu::SoftwareAdapters};
use posflow::checkpoint::Checkpoint;
use posflow::data::{BOS, SPECIAL_TOKENS};
use posflow::inference::{Generator, SavedModel};
use posflow::train::saved_run;
use posflow::{Error, Result};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use serde_json::{Map, Value, json};

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
    generator: Generator,
    /// Whether prompts get a <bos> in front (the prompted tasks), as `posflow sample` does.
    starts_with_bos: bool,
}

impl Session {
    /// The WebGPU backend when `webgpu` and the browser gives an adapter (software ones too:
    /// the page has no faster GPU to wait for), the CPU backend otherwise.
    pub async fn start(webgpu: bool) -> Self {
        let gpu = if webgpu {
            GpuBackend::new(SoftwareAdapters::Allow).await
        } else {
            Err(Error::Device(
                "this browser has no WebGPU (navigator.gpu is missing)".into(),
            ))
        };
        let (backend, device, fallback): (Rc<dyn Backend>, _, _) = match gpu {
            Ok(gpu) => {
                let device = describe_adapter(gpu.adapter_info());
                (Rc::new(gpu), device, None)
            }
            Err(e) => {
                let cpu = CpuBackend::new();
                let device = cpu.describe();
                (Rc::new(cpu), device, Some(e.to_string()))
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

    /// Parses and loads a checkpoint; on any error the model loaded before stays.
    pub fn load(&self, bytes: &[u8], name: &str) -> Result<Value> {
        let checkpoint = Checkpoint::from_bytes(bytes, name)?;
        let saved = SavedModel::from_checkpoint(self.backend.clone(), &checkpoint)?;
        let mut generator = saved.generator()?;
        let starts_with_bos = saved_run(&saved.metadata).is_ok_and(|run| run.data.starts_with_bos());
        if starts_with_bos {
            generator = generator.starting_with_bos();
        }
        let config = saved.model.config();
        let parameters: usize = saved.params.iter().map(|(_, p)| p.meta.numel()).sum();
        let info = json!({
            "name": name,
            "vocab": config.vocab,
            "d_model": config.d_model,
            "layers": config.layers,
            "heads": config.heads,
            "ffn": config.ffn,
            "max_len": config.max_len,
            "posenc": serde_json::to_value(config.posenc).map_err(|e| Error::Input(e.to_string()))?,
            "parameters": parameters,
            "step": saved.metadata.training.step,
        });
        let loaded = Loaded {
            saved,
            generator,
            starts_with_bos,
        };
        *self.model.borrow_mut() = Some(Rc::new(loaded));
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
    /// `prompt` and its greedy continuation of up to `chars` characters.
    pub async fn complete(&self, prompt: &str, chars: usize) -> Result<String> {
        // Temperature 0 never draws from the generator.
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let text = self.generator.complete(prompt, chars, 0.0, &mut rng).await?;
        Ok(format!("{prompt}{text}"))
    }

    /// The next token's distribution after `prompt`, by character (special tokens by name, as
    /// `posflow sample --probabilities` prints it).
    pub async fn probabilities(&self, prompt: &str) -> Result<Map<String, Value>> {
        let tokenizer = &self.saved.tokenizer;
        let mut context = if self.starts_with_bos {
            vec![BOS]
        } else {
            Vec::new()
        };
        context.extend(tokenizer.encode(prompt)?);
        let probs = self.generator.next_probabilities(&context).await?;
        probs
            .iter()
            .enumerate()
            .map(|(id, &p)| {
                let name = match SPECIAL_TOKENS.get(id) {
                    Some(special) => special.to_string(),
                    None => tokenizer.decode(&[id as i32])?,
                };
                Ok((name, Value::from(p)))
            })
            .collect()
    }
}
