//! The parameter store: every trainable tensor's buffer, by name, on one backend. Plans of
//! different shapes (training, evaluation) bind the same buffers, so they share the weights.

use std::collections::BTreeMap;
use std::rc::Rc;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::backend::{Backend, BackendKind, Buffer, f32_words, words_f32};
use crate::error::{Error, Result};
use crate::graph::{Graph, Init, Source};
use crate::math;
use crate::memory::check_host_fits;
use crate::tensor::TensorMeta;

#[derive(Clone, Debug)]
pub struct StoredParam {
    pub meta: TensorMeta,
    pub buffer: Buffer,
}

/// Cloning shares the parameters' memory: a trainer and a generator of one model see the same values.
#[derive(Clone)]
pub struct ParamStore {
    backend: Rc<dyn Backend>,
    params: BTreeMap<String, StoredParam>,
}

impl ParamStore {
    /// Allocates and initialises every parameter the graph declares. Values are drawn on the host
    /// from `seed` and the parameter's name, so they do not depend on the backend or on the order
    /// in which parameters were declared.
    pub fn init(backend: Rc<dyn Backend>, graph: &Graph, seed: u64) -> Result<Self> {
        let mut store = Self {
            backend,
            params: BTreeMap::new(),
        };
        store.add_missing(graph, seed)?;
        Ok(store)
    }

    /// Allocates the parameters of `graph` that the store does not hold yet.
    pub fn add_missing(&mut self, graph: &Graph, seed: u64) -> Result<()> {
        if self.backend.kind() == BackendKind::Cpu {
            let words: u64 = graph
                .tensors()
                .filter(|(_, info)| matches!(info.source, Source::Param(_)))
                .map(|(_, info)| info.meta.numel() as u64)
                .sum();
            check_host_fits("the model's parameters", words * 4)?;
        }
        let mut missing = Vec::new();
        for (_, info) in graph.tensors() {
            let Source::Param(init) = info.source else {
                continue;
            };
            if let Some(existing) = self.params.get(&info.name) {
                if existing.meta != info.meta {
                    return Err(Error::Graph(format!(
                        "parameter `{}` is {} in the store but {} in the graph",
                        info.name, existing.meta, info.meta
                    )));
                }
                continue;
            }
            missing.push((info, init));
        }
        // Packed side by side on a GPU, so that AdamW updates them all in one dispatch.
        let parts: Vec<(usize, String)> = missing
            .iter()
            .map(|(info, _)| (info.meta.numel(), info.name.clone()))
            .collect();
        let buffers = self.backend.alloc_packed(&parts)?;
        for ((info, init), buffer) in missing.into_iter().zip(buffers) {
            let values = initial_values(init, info.meta.numel(), seed, &info.name);
            self.backend.write(&buffer, f32_words(&values))?;
            self.params.insert(
                info.name.clone(),
                StoredParam {
                    meta: info.meta.clone(),
                    buffer,
                },
            );
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&StoredParam> {
        self.params.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &StoredParam)> {
        self.params.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn backend(&self) -> &Rc<dyn Backend> {
        &self.backend
    }

    pub fn set(&self, name: &str, values: &[f32]) -> Result<()> {
        let p = self.lookup(name)?;
        if values.len() != p.meta.numel() {
            return Err(Error::Input(format!(
                "parameter `{name}` has {} elements, got {}",
                p.meta.numel(),
                values.len()
            )));
        }
        self.backend.write(&p.buffer, f32_words(values))
    }

    pub async fn read(&self, name: &str) -> Result<Vec<f32>> {
        let p = self.lookup(name)?;
        let mut v = words_f32(self.backend.read(&p.buffer).await?);
        v.truncate(p.meta.numel());
        Ok(v)
    }

    fn lookup(&self, name: &str) -> Result<&StoredParam> {
        self.params
            .get(name)
            .ok_or_else(|| Error::Graph(format!("no parameter named `{name}`")))
    }
}

fn initial_values(init: Init, n: usize, seed: u64, name: &str) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ fnv1a(name.as_bytes()));
    match init {
        Init::Zeros => vec![0.0; n],
        Init::Ones => vec![1.0; n],
        Init::Constant(value) => vec![value; n],
        Init::Uniform(a) => (0..n).map(|_| (rng.random::<f32>() * 2.0 - 1.0) * a).collect(),
        Init::Normal(std) => (0..n).map(|_| standard_normal(&mut rng) * std).collect(),
    }
}

/// Box-Muller; the `rand` crate leaves normal sampling to `rand_distr`, one line is not worth a crate.
fn standard_normal(rng: &mut ChaCha8Rng) -> f32 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    ((-2.0 * math::ln(u1)).sqrt() * math::cos(std::f64::consts::TAU * u2)) as f32
}

/// A stable hash of a parameter's name (std's hasher may change between releases).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}
