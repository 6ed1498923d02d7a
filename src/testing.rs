//! Test harness shared by every op's tests: run a small graph on the CPU and the GPU and compare,
//! check gradients against central finite differences, and compare with PyTorch reference values
//! committed under `tests/reference/`.

use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::{Mutex, OnceLock};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::backend::gpu::GpuBackend;
use crate::backend::{Backend, CpuBackend, gpu_backend_for_tests};
use crate::exec::Executor;
use crate::graph::{Graph, Init, TensorId};
use crate::kernel::AdapterKind;
use crate::params::ParamStore;
use crate::tensor::TensorMeta;

pub enum Feed {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// A graph under test: `out` is the op's result; `feeds` are values for its inputs (token ids).
pub struct Built {
    pub out: TensorId,
    pub feeds: Vec<(TensorId, Feed)>,
}

/// Everything a run produced: the output, the loss sum(out * upstream), every parameter's gradient.
pub struct Results {
    pub out: Vec<f32>,
    pub loss: f32,
    pub grads: BTreeMap<String, Vec<f32>>,
}

/// The process's one GPU device (`None` where there is none, after saying so): test threads
/// share it, since libtest runs each test on a new thread and a device per thread soon exhausts
/// a real GPU's driver ("Parent device is lost" on an H100 after a few hundred).
fn shared_gpu() -> Option<GpuBackend> {
    static SHARED: OnceLock<Option<Mutex<GpuBackend>>> = OnceLock::new();
    SHARED
        .get_or_init(|| gpu_backend_for_tests().map(Mutex::new))
        .as_ref()
        .map(|gpu| gpu.lock().unwrap_or_else(|e| e.into_inner()).share())
}

/// A test thread's GPU backend, leaked (see below); `None` where the machine has none.
type LeakedGpu = &'static Option<Rc<dyn Backend>>;

thread_local! {
    // Leaked on purpose: dropping a wgpu device inside a thread-local destructor touches wgpu's
    // own thread-locals, which may already be gone. What leaks is a handle and its pipelines.
    static GPU: OnceCell<LeakedGpu> = const { OnceCell::new() };
    static GPU_WITH: RefCell<HashMap<(AdapterKind, Option<bool>), LeakedGpu>> = RefCell::new(HashMap::new());
}

/// The process's GPU device for this test thread; `None` where the machine has none.
pub fn gpu() -> Option<Rc<dyn Backend>> {
    let make = || &*Box::leak(Box::new(shared_gpu().map(|g| Rc::new(g) as Rc<dyn Backend>)));
    GPU.with(|cell| (*cell.get_or_init(make)).clone())
}

/// The process's GPU device for this test thread, running the kernels the ops choose for
/// adapters of `kind` whatever the adapter is: CI's software adapter runs the GPUs' kernels too.
pub fn gpu_with_kernels_for(kind: AdapterKind) -> Option<Rc<dyn Backend>> {
    gpu_with(kind, None)
}

/// As [`gpu_with_kernels_for`], its modules built with subgroup operations or without
/// (`Some(on)`; `None`: as the device would). Asking for subgroups of a device without them gives
/// `None`, after saying so; with `POSFLOW_REQUIRE_SUBGROUPS=1` (CI's) it fails the test instead.
pub fn gpu_with(kind: AdapterKind, subgroups: Option<bool>) -> Option<Rc<dyn Backend>> {
    let make = || {
        let gpu = shared_gpu().and_then(|g| {
            let g = g.with_kernels_for(kind);
            let g = match subgroups {
                Some(on) => g.with_subgroups(on),
                None => g,
            };
            if subgroups == Some(true) && !g.uses_subgroups() {
                no_subgroups(&g.describe());
                return None;
            }
            Some(Rc::new(g) as Rc<dyn Backend>)
        });
        &*Box::leak(Box::new(gpu))
    };
    GPU_WITH
        .with(|cells| *cells.borrow_mut().entry((kind, subgroups)).or_insert_with(make))
        .clone()
}

fn no_subgroups(adapter: &str) {
    if std::env::var("POSFLOW_REQUIRE_SUBGROUPS").as_deref() == Ok("1") {
        panic!("POSFLOW_REQUIRE_SUBGROUPS=1 but {adapter} has no subgroup operations");
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED SUBGROUP CHECKS ({adapter} has no subgroup operations; set \
             POSFLOW_REQUIRE_SUBGROUPS=1 to fail instead)"
        );
    });
}

/// The process's GPU device for this test thread twice: its modules built on subgroup operations
/// (where the device has them) and without. For ops whose kernels do not differ by adapter kind.
pub fn gpus_with_and_without_subgroups() -> Vec<Rc<dyn Backend>> {
    [Some(true), Some(false)]
        .into_iter()
        .filter_map(|subgroups| gpu_with(AdapterKind::Gpu, subgroups))
        .collect()
}

/// Every set of GPU kernels a test compares with the CPU: the GPUs' kernels on subgroup operations
/// (where the device has them) and without, and the software adapters' kernels.
pub fn gpu_kernel_sets() -> Vec<(&'static str, Rc<dyn Backend>)> {
    [
        ("GPU kernels on subgroups", AdapterKind::Gpu, Some(true)),
        ("GPU kernels without subgroups", AdapterKind::Gpu, Some(false)),
        ("software kernels", AdapterKind::Software, None),
    ]
    .into_iter()
    .filter_map(|(label, kind, subgroups)| gpu_with(kind, subgroups).map(|gpu| (label, gpu)))
    .collect()
}

/// A new GPU backend on the process's device, running the kernels for adapters of `kind`, that
/// times each op's same-bits kernels and runs the fastest (`Op::gpu_alternatives`), with a tuner
/// of its own: nothing timed yet.
pub fn gpu_tuning(kind: AdapterKind) -> Option<Rc<dyn Backend>> {
    shared_gpu().map(|g| Rc::new(g.with_kernels_for(kind).with_tuning(true)) as Rc<dyn Backend>)
}

pub fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

pub fn random_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect()
}

/// Integers in [0, below), for token ids and targets.
pub fn random_ints(n: usize, below: i32, seed: u64) -> Vec<i32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0..below)).collect()
}

/// An i32 input called `name` and the feed that gives it `values`.
pub fn int_input(
    g: &mut Graph,
    name: &str,
    shape: &[usize],
    values: Vec<i32>,
) -> (TensorId, (TensorId, Feed)) {
    let t = g.input(name, TensorMeta::i32(shape));
    (t, (t, Feed::I32(values)))
}

/// The weights w of the loss sum(out * w) that [`run`] uses for `seed`.
pub fn upstream_weights(n: usize, seed: u64) -> Vec<f32> {
    random_vec(n, seed ^ 0x5eed)
}

/// A parameter with uniform random values, for ops under test.
pub fn param(g: &mut Graph, name: &str, shape: &[usize]) -> TensorId {
    g.param(name, shape, Init::Uniform(1.0))
        .expect("fresh parameter name")
}

/// Values that replace the seeded ones: parameters and inputs by name, and the loss weights.
#[derive(Default)]
pub struct Overrides {
    pub params: BTreeMap<String, Vec<f32>>,
    pub inputs: BTreeMap<String, Feed>,
    pub upstream: Option<Vec<f32>>,
}

/// The common case: one parameter `x` of `shape`, and `op` applied to it.
pub fn on_param(
    shape: &'static [usize],
    op: impl Fn(&mut Graph, TensorId) -> crate::Result<TensorId> + 'static,
) -> impl Fn(&mut Graph) -> Built {
    move |g| {
        let x = param(g, "x", shape);
        Built {
            out: op(g, x).unwrap(),
            feeds: vec![],
        }
    }
}

/// Builds the graph, appends loss = sum(out * upstream) and its backward pass, and runs it.
/// Parameters come from `seed`, so every backend sees the same values.
pub fn run(
    backend: Rc<dyn Backend>,
    build: &dyn Fn(&mut Graph) -> Built,
    seed: u64,
    over: &Overrides,
) -> Results {
    let (mut g, mut built, mut upstream, loss) = build_with_loss(build, seed);
    let grads = g.backward(loss).expect("backward");
    let params = ParamStore::init(backend, &g, seed).expect("params");
    for (name, v) in &over.params {
        params.set(name, v).expect("override parameter");
    }
    if let Some(u) = &over.upstream {
        upstream.1 = u.clone();
    }
    for (t, f) in built.feeds.iter_mut() {
        match over.inputs.get(&g.info(*t).name) {
            Some(Feed::F32(v)) => *f = Feed::F32(v.clone()),
            Some(Feed::I32(v)) => *f = Feed::I32(v.clone()),
            None => {}
        }
    }
    let grad_list: Vec<(String, TensorId)> =
        grads.iter().map(|(p, gr)| (g.info(p).name.clone(), gr)).collect();
    let mut outputs = vec![built.out, loss];
    outputs.extend(grad_list.iter().map(|(_, t)| *t));
    let exec = Executor::new(&g, &outputs, &params).expect("plan");
    feed(&exec, &built, upstream);
    exec.run().expect("run");
    Results {
        out: exec.read_blocking(built.out).expect("read out"),
        loss: exec.read_blocking(loss).expect("read loss")[0],
        grads: grad_list
            .iter()
            .map(|(name, t)| (name.clone(), exec.read_blocking(*t).expect("read grad")))
            .collect(),
    }
}

fn build_with_loss(
    build: &dyn Fn(&mut Graph) -> Built,
    seed: u64,
) -> (Graph, Built, (TensorId, Vec<f32>), TensorId) {
    let mut g = Graph::new();
    let built = build(&mut g);
    let shape = g.shape(built.out).to_vec();
    let r = g.input("upstream", TensorMeta::f32(&shape));
    let weighted = g.mul(built.out, r).expect("mul");
    let loss = g.sum_all(weighted).expect("sum");
    let upstream = upstream_weights(shape.iter().product(), seed);
    (g, built, (r, upstream), loss)
}

fn feed(exec: &Executor, built: &Built, upstream: (TensorId, Vec<f32>)) {
    exec.set_f32(upstream.0, &upstream.1).expect("feed upstream");
    for (t, f) in &built.feeds {
        match f {
            Feed::F32(v) => exec.set_f32(*t, v),
            Feed::I32(v) => exec.set_i32(*t, v),
        }
        .expect("feed input");
    }
}

/// Asserts |a - b| <= atol + rtol * |b| elementwise, naming the first element that differs.
pub fn assert_close(what: &str, a: &[f32], b: &[f32], atol: f32, rtol: f32) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= atol + rtol * y.abs() && x.is_finite() == y.is_finite(),
            "{what}[{i}]: {x} vs {y} (atol {atol}, rtol {rtol})"
        );
    }
}

/// The GPU kernels agree with the CPU reference, forward and backward.
pub fn check_gpu_matches_cpu(build: &dyn Fn(&mut Graph) -> Built, atol: f32, rtol: f32) {
    let Some(gpu) = gpu() else { return };
    let want = run(cpu(), build, 7, &Overrides::default());
    assert_results_match(
        "GPU",
        &run(gpu, build, 7, &Overrides::default()),
        &want,
        atol,
        rtol,
    );
}

/// [`check_gpu_matches_cpu`] for an op whose kernels differ by adapter kind or by subgroups: every
/// set of [`gpu_kernel_sets`], forward and backward, against one CPU reference.
pub fn check_each_kind_matches_cpu(build: &dyn Fn(&mut Graph) -> Built, atol: f32, rtol: f32) {
    let want = run(cpu(), build, 7, &Overrides::default());
    for (label, gpu) in gpu_kernel_sets() {
        let got = run(gpu, build, 7, &Overrides::default());
        assert_results_match(label, &got, &want, atol, rtol);
    }
}

/// The kernels chosen for adapters of `kind` agree with the CPU reference, forward and backward.
pub fn check_kind_matches_cpu(kind: AdapterKind, build: &dyn Fn(&mut Graph) -> Built, atol: f32, rtol: f32) {
    let Some(gpu) = gpu_with_kernels_for(kind) else {
        return;
    };
    let want = run(cpu(), build, 7, &Overrides::default());
    let got = run(gpu, build, 7, &Overrides::default());
    assert_results_match(&format!("{kind:?} kernels"), &got, &want, atol, rtol);
}

/// The same output and the same gradients, by name, within atol + rtol·|want|.
fn assert_results_match(on: &str, got: &Results, want: &Results, atol: f32, rtol: f32) {
    assert_close(&format!("{on}: output"), &got.out, &want.out, atol, rtol);
    assert_eq!(
        got.grads.keys().collect::<Vec<_>>(),
        want.grads.keys().collect::<Vec<_>>(),
        "{on}: gradients"
    );
    for (name, g) in &got.grads {
        assert_close(&format!("{on}: grad {name}"), g, &want.grads[name], atol, rtol);
    }
}

/// The backward pass agrees with central finite differences of the loss, on the CPU, for up to
/// `samples` elements of every parameter.
pub fn check_gradients(build: &dyn Fn(&mut Graph) -> Built, eps: f32, tol: f32, samples: usize) {
    let seed = 11;
    let analytic = run(cpu(), build, seed, &Overrides::default());
    let (g, _, _, _) = build_with_loss(build, seed);
    let base = ParamStore::init(cpu(), &g, seed).expect("params");
    for (name, grad) in &analytic.grads {
        let values = pollster::block_on(base.read(name)).expect("read param");
        let step = (values.len() / samples).max(1);
        for i in (0..values.len()).step_by(step) {
            let loss_at = |delta: f32| {
                let mut v = values.clone();
                v[i] += delta;
                let over = Overrides {
                    params: BTreeMap::from([(name.clone(), v)]),
                    ..Default::default()
                };
                run(cpu(), build, seed, &over).loss
            };
            let numeric = (loss_at(eps) - loss_at(-eps)) / (2.0 * eps);
            let scale = 1.0f32.max(numeric.abs()).max(grad[i].abs());
            assert!(
                (numeric - grad[i]).abs() <= tol * scale,
                "d loss / d {name}[{i}]: finite difference {numeric}, backward {}",
                grad[i]
            );
        }
    }
}

/// The op matches PyTorch on the committed case `case` of `tests/reference/<family>.safetensors`
/// (written by `tests/reference/gen_<family>.py`): output and every gradient, on the CPU and, where
/// there is one, on the GPU. Parameters and inputs are matched to the file by name.
pub fn check_reference(family: &str, case: &str, build: &dyn Fn(&mut Graph) -> Built, atol: f32, rtol: f32) {
    let path = format!(
        "{}/tests/reference/{family}.safetensors",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let tensor = |name: &str| {
        file.tensor(&format!("{case}/{name}"))
            .unwrap_or_else(|e| panic!("{path}: {case}/{name}: {e}"))
    };
    let floats = |name: &str| -> Vec<f32> { bytemuck::pod_collect_to_vec(tensor(name).data()) };

    let mut g = Graph::new();
    build(&mut g);
    let mut over = Overrides {
        upstream: Some(floats("upstream")),
        ..Default::default()
    };
    for (_, info) in g.tensors() {
        let Ok(t) = file.tensor(&format!("{case}/{}", info.name)) else {
            continue;
        };
        let data = t.data();
        match info.source {
            crate::graph::Source::Param(_) => {
                over.params
                    .insert(info.name.clone(), bytemuck::pod_collect_to_vec(data));
            }
            crate::graph::Source::Input => {
                let feed = match info.meta.dtype {
                    crate::tensor::DType::F32 => Feed::F32(bytemuck::pod_collect_to_vec(data)),
                    crate::tensor::DType::I32 => Feed::I32(bytemuck::pod_collect_to_vec(data)),
                };
                over.inputs.insert(info.name.clone(), feed);
            }
            crate::graph::Source::Node { .. } => {}
        }
    }
    let mut backends = vec![cpu()];
    backends.extend(gpu());
    for backend in backends {
        let on = backend.describe();
        let got = run(backend, build, 0, &over);
        assert_close(
            &format!("{case} output on {on}"),
            &got.out,
            &floats("out"),
            atol,
            rtol,
        );
        for (name, grad) in &got.grads {
            assert_close(
                &format!("{case} grad {name} on {on}"),
                grad,
                &floats(&format!("grad/{name}")),
                atol,
                rtol,
            );
        }
    }
}

/// A tiny model config as JSON, which config tests edit one field at a time.
pub(crate) const TINY_CONFIG: &str = r#"{ "vocab": 30, "d_model": 32, "heads": 2, "layers": 2, "ffn": 128, "max_len": 16,
    "kind": { "type": "causal_lm" }, "posenc": { "type": "sinusoidal" } }"#;

/// `TINY_CONFIG`'s encoding, as it writes it.
pub(crate) const SINUSOIDAL: &str = r#"{ "type": "sinusoidal" }"#;

/// `TINY_CONFIG` with its encoding replaced by `posenc` (JSON), read.
pub(crate) fn tiny_with_posenc(posenc: &str) -> crate::error::Result<crate::model::ModelConfig> {
    crate::model::ModelConfig::from_json(&TINY_CONFIG.replace(SINUSOIDAL, posenc))
}

/// The error of `TINY_CONFIG` with `from` replaced by `to`.
pub(crate) fn config_error(from: &str, to: &str) -> String {
    assert!(TINY_CONFIG.contains(from), "{from} is not in the config");
    crate::model::ModelConfig::from_json(&TINY_CONFIG.replace(from, to))
        .unwrap_err()
        .to_string()
}

/// The encoding of the preset `name` (as a causal LM has it).
pub(crate) fn preset(name: &str) -> crate::model::PosEnc {
    crate::model::PosEnc::from_preset(name, false).unwrap()
}

/// The encoding of a `posenc` inline table.
pub(crate) fn posenc(toml: &str) -> crate::model::PosEnc {
    crate::model::PosEnc::from_inline_toml(toml).unwrap()
}
