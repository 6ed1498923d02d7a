//! Checkpoints: a bit-exact round trip, a resumed run that matches an uninterrupted one, a clear
//! error for every bad file with the model left untouched, and saves that never destroy the
//! previous checkpoint. `tests/reference/read_checkpoint.py` opens the round trip's file in PyTorch.

use crate::common::rewrite;
use crate::common::scratch as scratch_dir;

use rewrite::rewritten;
use scratch_dir::scratch;
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use posflow::TensorMeta;
use posflow::backend::{Backend, CpuBackend, gpu_for_tests, read_blocking};
use posflow::checkpoint::{Checkpoint, Metadata, TrainingState};
use posflow::exec::Executor;
use posflow::graph::{Graph, Init, TensorId};
use posflow::mlp::xor_data;
use posflow::optim::{AdamW, Optimizer};
use posflow::params::ParamStore;
use safetensors::Dtype;

const POINTS: usize = 64;

/// The MLP of `posflow::mlp` with its store and optimizer in reach, plus optional extra parameters
/// to build models that differ from it.
struct Run {
    params: ParamStore,
    optimizer: Optimizer,
    exec: Executor,
    loss: TensorId,
}

fn mlp_run(backend: Rc<dyn Backend>, hidden: usize, seed: u64, extra_param: Option<&str>) -> Run {
    let mut g = Graph::new();
    let x = g.input("x", TensorMeta::f32(&[POINTS, 2]));
    let target = g.input("y", TensorMeta::f32(&[POINTS, 1]));
    let w1 = g.param("w1", &[2, hidden], Init::Normal(1.0)).unwrap();
    let b1 = g.param("b1", &[hidden], Init::Zeros).unwrap();
    let w2 = g.param("w2", &[hidden, 1], Init::Normal(0.2)).unwrap();
    let b2 = g.param("b2", &[1], Init::Zeros).unwrap();
    let z = g.matmul(x, w1).unwrap();
    let z = g.add(z, b1).unwrap();
    let a = g.tanh(z).unwrap();
    let out = g.matmul(a, w2).unwrap();
    let mut out = g.add(out, b2).unwrap();
    if let Some(name) = extra_param {
        let extra = g.param(name, &[1], Init::Normal(0.1)).unwrap();
        out = g.add(out, extra).unwrap();
    }
    let err = g.sub(out, target).unwrap();
    let sq = g.mul(err, err).unwrap();
    let total = g.sum_all(sq).unwrap();
    let loss = g.scale(total, 1.0 / POINTS as f32).unwrap();
    let grads = g.backward(loss).unwrap();
    let params = ParamStore::init(backend, &g, seed).unwrap();
    let config = AdamW {
        lr: 0.01,
        weight_decay: 0.01,
        ..AdamW::default()
    };
    let optimizer = Optimizer::new(config, &params).unwrap();
    let mut outputs = vec![loss];
    outputs.extend(grads.iter().map(|(_, grad)| grad));
    let mut exec = Executor::new(&g, &outputs, &params).unwrap();
    optimizer.attach(&mut exec, &g, &grads, &params).unwrap();
    let (xs, ys) = xor_data(POINTS, 7);
    exec.set_f32(x, &xs).unwrap();
    exec.set_f32(target, &ys).unwrap();
    Run {
        params,
        optimizer,
        exec,
        loss,
    }
}

impl Run {
    fn cpu(seed: u64) -> Self {
        mlp_run(Rc::new(CpuBackend::new()), 8, seed, None)
    }

    /// The loss before each of `steps` updates.
    fn train(&mut self, steps: usize) -> Vec<f32> {
        (0..steps)
            .map(|_| {
                self.optimizer.prepare_step(0.01).unwrap();
                self.exec.run().unwrap();
                self.exec.read_blocking(self.loss).unwrap()[0]
            })
            .collect()
    }

    /// The bits of every parameter and moment, and the step: what a restore must reproduce.
    fn snapshot(&self) -> (u64, BTreeMap<String, Vec<u32>>) {
        let backend = self.params.backend();
        let mut values = BTreeMap::new();
        for (name, p) in self.params.iter() {
            let moments = self.optimizer.moments_of(name).unwrap();
            for (key, buffer) in [
                (name.to_string(), &p.buffer),
                (format!("{name} m"), &moments.m),
                (format!("{name} v"), &moments.v),
            ] {
                let mut words = read_blocking(&**backend, buffer).unwrap();
                words.truncate(p.meta.numel());
                values.insert(key, words);
            }
        }
        (self.optimizer.step(), values)
    }

    fn save(&self, path: &Path, with_optimizer: bool) -> posflow::Result<()> {
        let optimizer = with_optimizer.then_some(&self.optimizer);
        Checkpoint::save(&self.params, optimizer, metadata(self.optimizer.step()), path)
    }
}

fn metadata(step: u64) -> Metadata {
    let mut extra = serde_json::Map::new();
    extra.insert("data_cursor".into(), serde_json::json!(step * 64));
    Metadata {
        config: r#"{"model":"mlp","hidden":8}"#.into(),
        training: TrainingState { step, seed: 3, extra },
        tokenizer: Some(r#"{"kind":"char","vocab":"ab"}"#.into()),
    }
}

#[test]
fn round_trip_restores_parameters_moments_and_step_bit_exactly() {
    let dir = scratch("checkpoint", "round_trip");
    let path = dir.join("mlp.safetensors");
    let mut trained = Run::cpu(0);
    trained.train(5);
    trained.save(&path, true).unwrap();
    assert!(
        !dir.join("mlp.safetensors.tmp").exists(),
        "the temporary file must be renamed"
    );

    let mut fresh = Run::cpu(1);
    assert_ne!(fresh.snapshot(), trained.snapshot());
    let checkpoint = Checkpoint::load(&path).unwrap();
    checkpoint
        .restore(&fresh.params, Some(&mut fresh.optimizer))
        .unwrap();
    assert_eq!(fresh.snapshot(), trained.snapshot());
    assert_eq!(checkpoint.metadata(), &metadata(5));
    let state = checkpoint.optimizer_state().unwrap();
    assert_eq!(
        (state.step, &state.hyperparameters),
        (5, trained.optimizer.config())
    );

    // Without a store: what `posflow eval` reads to build the model first.
    assert_eq!(Checkpoint::read_metadata(&path).unwrap(), metadata(5));
}

#[test]
fn parameters_alone_restore_without_touching_the_optimizer() {
    let dir = scratch("checkpoint", "params_only");
    let path = dir.join("weights.safetensors");
    let mut trained = Run::cpu(0);
    trained.train(3);
    trained.save(&path, false).unwrap();
    let fresh = Run::cpu(1);
    let before = fresh.snapshot();
    Checkpoint::load(&path)
        .unwrap()
        .restore(&fresh.params, None)
        .unwrap();
    let (step, after) = fresh.snapshot();
    let (_, trained_values) = trained.snapshot();
    assert_eq!(step, 0);
    for (key, words) in &after {
        let expected = if key.contains(' ') {
            &before.1[key]
        } else {
            &trained_values[key]
        };
        assert_eq!(words, expected, "{key}");
    }
}

#[test]
fn resumed_training_matches_an_uninterrupted_run_exactly() {
    let (first, then) = (8, 7);
    let uninterrupted = Run::cpu(0).train(first + then);

    let dir = scratch("checkpoint", "resume");
    let path = dir.join("run.safetensors");
    let mut before = Run::cpu(0);
    let mut curve = before.train(first);
    before.save(&path, true).unwrap();
    drop(before);
    let mut resumed = Run::cpu(99);
    Checkpoint::load(&path)
        .unwrap()
        .restore(&resumed.params, Some(&mut resumed.optimizer))
        .unwrap();
    curve.extend(resumed.train(then));
    assert_eq!(curve, uninterrupted);
}

#[test]
fn a_checkpoint_saved_on_the_gpu_loads_on_the_cpu() {
    let Some(gpu) = gpu_for_tests() else { return };
    let dir = scratch("checkpoint", "gpu_to_cpu");
    let path = dir.join("gpu.safetensors");
    let mut on_gpu = mlp_run(gpu, 8, 0, None);
    on_gpu.train(3);
    on_gpu.save(&path, true).unwrap();
    let mut on_cpu = Run::cpu(1);
    Checkpoint::load(&path)
        .unwrap()
        .restore(&on_cpu.params, Some(&mut on_cpu.optimizer))
        .unwrap();
    assert_eq!(on_cpu.snapshot(), on_gpu.snapshot());
}

/// Loads `bytes` as `name` into a fresh model with its optimizer; the error must contain every
/// one of `expected` and the model must be exactly as before.
fn assert_rejected(dir: &Path, name: &str, bytes: &[u8], expected: &[&str]) {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let mut run = Run::cpu(1);
    run.train(2);
    let before = run.snapshot();
    let err = Checkpoint::load(&path)
        .and_then(|c| c.restore(&run.params, Some(&mut run.optimizer)))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&path.display().to_string()), "{name}: {err}");
    for part in expected {
        assert!(err.contains(part), "{name}: expected `{part}` in: {err}");
    }
    assert_eq!(run.snapshot(), before, "{name}: the model changed");
}

fn saved_bytes(run: &Run, dir: &Path, with_optimizer: bool) -> Vec<u8> {
    let path = dir.join("source.safetensors");
    run.save(&path, with_optimizer).unwrap();
    std::fs::read(&path).unwrap()
}

#[test]
fn bad_files_are_rejected_with_the_reason_and_leave_the_model_unchanged() {
    let dir = scratch("checkpoint", "bad_files");
    let valid = saved_bytes(&Run::cpu(0), &dir, true);
    let not_safetensors = "is not a valid safetensors file";

    assert_rejected(&dir, "empty.safetensors", b"", &[not_safetensors]);
    assert_rejected(
        &dir,
        "text.safetensors",
        b"{\"model\": \"mlp\"}\n",
        &[not_safetensors],
    );
    assert_rejected(&dir, "garbage.safetensors", &[0xff; 64], &[not_safetensors]);
    let truncated = &valid[..valid.len() - 10];
    assert_rejected(&dir, "truncated.safetensors", truncated, &[not_safetensors]);
    let mut corrupt_header = valid.clone();
    corrupt_header[12] = b'\x00';
    assert_rejected(&dir, "corrupt.safetensors", &corrupt_header, &[not_safetensors]);

    let no_format = rewritten(&valid, |_, m| {
        m.remove("format");
    });
    assert_rejected(
        &dir,
        "no_format.safetensors",
        &no_format,
        &["no `format`", "not a posflow checkpoint"],
    );
    let future = rewritten(&valid, |_, m| {
        m.insert("format".into(), "posflow/2".into());
    });
    assert_rejected(
        &dir,
        "future.safetensors",
        &future,
        &["format `posflow/2`", "reads `posflow/1`"],
    );
    let bad_config = rewritten(&valid, |_, m| {
        m.insert("config".into(), "{hidden: 8".into());
    });
    assert_rejected(
        &dir,
        "bad_config.safetensors",
        &bad_config,
        &["`config` is not valid JSON"],
    );
    let f64_tensor = rewritten(&valid, |t, _| {
        t.insert("b2".into(), (Dtype::F64, vec![1], vec![0; 8]));
    });
    assert_rejected(
        &dir,
        "f64.safetensors",
        &f64_tensor,
        &["tensor b2 has dtype F64", "F32"],
    );
    let i32_tensor = rewritten(&valid, |t, _| {
        t.insert("b2".into(), (Dtype::I32, vec![1], vec![0; 4]));
        t.insert("optim.adam_m.b2".into(), (Dtype::I32, vec![1], vec![0; 4]));
        t.insert("optim.adam_v.b2".into(), (Dtype::I32, vec![1], vec![0; 4]));
    });
    assert_rejected(
        &dir,
        "i32.safetensors",
        &i32_tensor,
        &["tensor b2 has dtype I32, the model expects F32"],
    );
    let orphan_moments = rewritten(&valid, |_, m| {
        m.remove("optimizer");
    });
    assert_rejected(
        &dir,
        "orphan_moments.safetensors",
        &orphan_moments,
        &["optimizer tensor", "no `optimizer` metadata"],
    );
    let missing_moment = rewritten(&valid, |t, _| {
        t.remove("optim.adam_v.w1");
    });
    assert_rejected(
        &dir,
        "missing_moment.safetensors",
        &missing_moment,
        &["no tensor optim.adam_v.w1"],
    );

    let extra = saved_bytes(
        &mlp_run(Rc::new(CpuBackend::new()), 8, 0, Some("bias_extra")),
        &dir,
        true,
    );
    assert_rejected(
        &dir,
        "extra.safetensors",
        &extra,
        &["tensor bias_extra is not a parameter of the model"],
    );
    let missing = rewritten(&valid, |t, _| {
        for name in ["w2", "optim.adam_m.w2", "optim.adam_v.w2"] {
            t.remove(name);
        }
    });
    assert_rejected(
        &dir,
        "missing.safetensors",
        &missing,
        &["has no tensor w2, the model expects shape [8, 1]"],
    );

    let weights_only = saved_bytes(&Run::cpu(0), &dir, false);
    assert_rejected(
        &dir,
        "weights_only.safetensors",
        &weights_only,
        &["holds no optimizer state"],
    );

    let path = dir.join("absent.safetensors");
    let err = Checkpoint::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("absent.safetensors") && err.contains("cannot be read"),
        "{err}"
    );
}

#[test]
fn a_shape_mismatch_names_the_tensor_and_both_shapes() {
    let dir = scratch("checkpoint", "shape_mismatch");
    let wider = mlp_run(Rc::new(CpuBackend::new()), 16, 0, None);
    let path = dir.join("run.safetensors");
    wider.save(&path, false).unwrap();
    let run = Run::cpu(1);
    let before = run.snapshot();
    let err = Checkpoint::load(&path)
        .and_then(|c| c.restore(&run.params, None))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "checkpoint {}: tensor b1 has shape [16], the model expects [8]",
            path.display()
        )
    );
    assert_eq!(run.snapshot(), before);
}

#[test]
fn a_failed_save_leaves_the_previous_checkpoint_intact() {
    let dir = scratch("checkpoint", "failed_save");
    let path = dir.join("run.safetensors");
    let mut run = Run::cpu(0);
    run.train(2);
    run.save(&path, true).unwrap();
    let good = std::fs::read(&path).unwrap();
    run.train(2);

    // The temporary file cannot be created: the previous checkpoint stays as it was.
    std::fs::create_dir(dir.join("run.safetensors.tmp")).unwrap();
    let err = run.save(&path, true).unwrap_err().to_string();
    assert!(err.contains("run.safetensors"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), good);
    std::fs::remove_dir(dir.join("run.safetensors.tmp")).unwrap();

    // A parameter name that would read back as optimizer state is refused before anything is written.
    let clash = mlp_run(Rc::new(CpuBackend::new()), 8, 0, Some("optim.scale"));
    let err = clash.save(&path, false).unwrap_err().to_string();
    assert!(
        err.contains("parameter `optim.scale` starts with `optim.`"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), good);

    let nowhere = dir.join("no such directory").join("run.safetensors");
    let err = run.save(&nowhere, true).unwrap_err().to_string();
    assert!(err.contains("no such directory"), "{err}");
    assert!(!nowhere.parent().unwrap().exists());

    // A model config that is not JSON would make an unreadable checkpoint: refused.
    let mut bad = metadata(4);
    bad.config = "hidden=8".into();
    let err = Checkpoint::save(&run.params, None, bad, &path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the model config is not valid JSON"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), good);
}
