//! Resume is exact: for every position encoding and block kind, a run saved after k steps and
//! resumed on a fresh trainer ends with the parameters, AdamW moments and losses of the
//! uninterrupted run, bit for bit on the CPU. FLOATER with `resolve_every` > 1 needs its cached
//! encodings in the checkpoint for that (run state, `state.*`); a tampered or unknown run-state
//! tensor is refused, and an export drops it.

use crate::common::rewrite;

use std::collections::BTreeMap;
use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend};
use posflow::checkpoint::{Checkpoint, FLOATER_ENCODINGS_STATE, adam_m_name, adam_v_name};
use posflow::train::{RunConfig, StepStats, Trainer};
use rewrite::rewritten;
use safetensors::{Dtype, SafeTensors};

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

/// Steps of every run here; the checkpoints are taken at `RESUME_AT` unless a test says otherwise.
const STEPS: usize = 7;
const RESUME_AT: usize = 4;

/// A tiny char LM on Moby Dick (d_model 8, 2 layers, windows of 8, batch 2) with `posenc` and
/// `block` (TOML inline tables) and `dropout`. Warmup and cosine decay make the learning rate
/// change every step, so a schedule that restarted on resume would show.
fn tiny(posenc: &str, block: &str, dropout: f32) -> RunConfig {
    let toml = format!(
        r#"
[data]
task = "moby_dick"
seq_len = 8

[model]
d_model = 8
heads = 2
layers = 2
ffn = 16
max_len = 8
dropout = {dropout}
kind = {{ type = "causal_lm" }}
posenc = {posenc}
block = {block}

[train]
steps = {STEPS}
batch = 2
seed = 3
lr = 1e-2
warmup = 2
decay = "cosine"
"#
    );
    RunConfig::from_toml(&toml, "resume test").unwrap()
}

const RESIDUAL: &str = r#"{ type = "residual" }"#;
const CACHED_FLOATER: &str = r#"{ type = "floater", resolve_every = 3 }"#;

/// (what, posenc, block, dropout): every position encoding and block kind; dropout on some, so
/// its masks must follow the step too.
const CONFIGS: [(&str, &str, &str, f32); 10] = [
    ("learned", r#"{ type = "learned" }"#, RESIDUAL, 0.1),
    ("sinusoidal", r#"{ type = "sinusoidal" }"#, RESIDUAL, 0.0),
    (
        "relative",
        r#"{ type = "relative", buckets = 4, max_distance = 8 }"#,
        RESIDUAL,
        0.1,
    ),
    (
        "tupe_a",
        r#"{ type = "tupe_a", untie_cls = false }"#,
        RESIDUAL,
        0.0,
    ),
    (
        "floater (authors' form)",
        r#"{ type = "floater" }"#,
        RESIDUAL,
        0.0,
    ),
    ("floater cached every 3", CACHED_FLOATER, RESIDUAL, 0.1),
    (
        "floater additive",
        r#"{ type = "floater", form = "additive" }"#,
        RESIDUAL,
        0.0,
    ),
    ("rk2", r#"{ type = "sinusoidal" }"#, r#"{ type = "rk2" }"#, 0.1),
    (
        "rk2_gated",
        r#"{ type = "sinusoidal" }"#,
        r#"{ type = "rk2_gated" }"#,
        0.0,
    ),
    ("rk4", r#"{ type = "learned" }"#, r#"{ type = "rk4" }"#, 0.0),
];

fn train(trainer: &mut Trainer, steps: usize) -> Vec<StepStats> {
    (0..steps).map(|_| trainer.step().unwrap()).collect()
}

fn checkpoint_bytes(trainer: &Trainer) -> Vec<u8> {
    pollster::block_on(trainer.checkpoint())
        .unwrap()
        .to_bytes()
        .unwrap()
}

/// Every tensor a resumed run continues from, as bit patterns: parameters, AdamW's moments and
/// run state; and AdamW's step.
fn run_state(trainer: &Trainer) -> (BTreeMap<String, Vec<u32>>, u64) {
    let checkpoint = pollster::block_on(trainer.checkpoint()).unwrap();
    let mut tensors = BTreeMap::new();
    for (name, _) in trainer.params().iter() {
        for tensor in [name.to_string(), adam_m_name(name), adam_v_name(name)] {
            let (_, values) = checkpoint.f32_tensor(&tensor).unwrap();
            tensors.insert(tensor, values.iter().map(|v| v.to_bits()).collect());
        }
    }
    if let Some((_, values)) = checkpoint.f32_tensor(FLOATER_ENCODINGS_STATE) {
        let bits = values.iter().map(|v| v.to_bits()).collect();
        tensors.insert(FLOATER_ENCODINGS_STATE.into(), bits);
    }
    (tensors, checkpoint.optimizer_state().unwrap().step)
}

/// Trains `run` uninterrupted, and again saved (to bytes and back) after `at` steps and resumed on
/// a fresh trainer; both must end in the same state with the same step statistics.
fn assert_resume_is_exact(what: &str, run: &RunConfig, at: usize) {
    let mut uninterrupted = Trainer::new(cpu(), run.clone()).unwrap();
    let expected = train(&mut uninterrupted, STEPS);

    let mut before = Trainer::new(cpu(), run.clone()).unwrap();
    let mut stats = train(&mut before, at);
    let bytes = checkpoint_bytes(&before);
    drop(before);
    let checkpoint = Checkpoint::from_bytes(&bytes, what).unwrap();
    let mut after = Trainer::resume(cpu(), run.clone(), &checkpoint).unwrap();
    assert_eq!(after.steps_done(), at, "{what}");
    stats.extend(train(&mut after, STEPS - at));

    // Bit patterns, so that even a difference in the last bit (or a NaN) fails.
    let bits = |stats: &[StepStats]| -> Vec<[u32; 3]> {
        stats
            .iter()
            .map(|s| [s.loss.to_bits(), s.lr.to_bits(), s.grad_norm.to_bits()])
            .collect()
    };
    assert!(
        bits(&stats) == bits(&expected),
        "{what}: resumed at step {at}, the steps were\n{stats:?}\nnot\n{expected:?}"
    );
    let (resumed, resumed_step) = run_state(&after);
    let (reference, reference_step) = run_state(&uninterrupted);
    assert_eq!(resumed_step, reference_step, "{what}: AdamW's step");
    assert_eq!(
        resumed.keys().collect::<Vec<_>>(),
        reference.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (name, values) in &reference {
        assert!(
            resumed[name] == *values,
            "{what}: {name} differs after resuming at step {at}"
        );
    }
}

#[test]
fn a_resumed_run_is_bit_identical_for_every_position_encoding_and_block() {
    for (what, posenc, block, dropout) in CONFIGS {
        assert_resume_is_exact(what, &tiny(posenc, block, dropout), RESUME_AT);
    }
}

/// Resumed at a solve (step 3) and between two solves (steps 4 and 5 take step 3's): all exact.
/// Only checkpoints between solves need the cache, so only they carry it.
#[test]
fn cached_floater_resumes_exactly_between_solves_and_at_one() {
    let run = tiny(CACHED_FLOATER, RESIDUAL, 0.1);
    for at in [3, 4, 5] {
        assert_resume_is_exact("floater cached every 3", &run, at);
    }
    let mut trainer = Trainer::new(cpu(), run).unwrap();
    for at in 1..=6 {
        train(&mut trainer, 1);
        let checkpoint = pollster::block_on(trainer.checkpoint()).unwrap();
        let cache = checkpoint.f32_tensor(FLOATER_ENCODINGS_STATE);
        assert_eq!(cache.is_some(), at % 3 != 0, "after {at} steps");
        if let Some((shape, _)) = cache {
            // [positions, 3 · layers (q, k, v rows), d_model]
            assert_eq!(shape, [8, 6, 8], "after {at} steps");
        }
    }
}

fn resume_error(run: &RunConfig, bytes: &[u8]) -> String {
    match Checkpoint::from_bytes(bytes, "tampered.safetensors")
        .and_then(|checkpoint| Trainer::resume(cpu(), run.clone(), &checkpoint))
    {
        Ok(_) => panic!("the tampered checkpoint was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_tampered_or_unknown_run_state_tensor_is_refused_with_its_name() {
    let run = tiny(CACHED_FLOATER, RESIDUAL, 0.0);
    let mut trainer = Trainer::new(cpu(), run.clone()).unwrap();
    train(&mut trainer, RESUME_AT);
    let valid = checkpoint_bytes(&trainer);

    let wrong_shape = rewritten(&valid, |t, _| {
        let (_, shape, data) = t.get_mut(FLOATER_ENCODINGS_STATE).unwrap();
        // The same number of values, so only the shape can tell.
        *shape = vec![6, 8, 8];
        assert_eq!(data.len(), 6 * 8 * 8 * 4);
    });
    let err = resume_error(&run, &wrong_shape);
    for part in [
        "tampered.safetensors",
        FLOATER_ENCODINGS_STATE,
        "[6, 8, 8]",
        "[8, 6, 8]",
    ] {
        assert!(err.contains(part), "expected {part:?} in: {err}");
    }

    let wrong_dtype = rewritten(&valid, |t, _| {
        t.get_mut(FLOATER_ENCODINGS_STATE).unwrap().0 = Dtype::I32;
    });
    let err = resume_error(&run, &wrong_dtype);
    assert!(
        err.contains(FLOATER_ENCODINGS_STATE) && err.contains("I32"),
        "{err}"
    );

    let unknown = rewritten(&valid, |t, _| {
        t.insert("state.data.position".into(), (Dtype::F32, vec![1], vec![0; 4]));
    });
    let err = resume_error(&run, &unknown);
    assert!(
        err.contains("state.data.position") && err.contains(FLOATER_ENCODINGS_STATE),
        "the error names the tensor and the run state there is: {err}"
    );

    // A run that does not cache has no such state: a checkpoint claiming some is not its own.
    let uncached = tiny(r#"{ type = "floater" }"#, RESIDUAL, 0.0);
    let mut plain = Trainer::new(cpu(), uncached.clone()).unwrap();
    train(&mut plain, 1);
    let cache = valid_cache(&valid);
    let with_cache = rewritten(&checkpoint_bytes(&plain), |t, _| {
        t.insert(FLOATER_ENCODINGS_STATE.into(), cache);
    });
    let err = resume_error(&uncached, &with_cache);
    assert!(
        err.contains(FLOATER_ENCODINGS_STATE) && err.contains("keeps no such state"),
        "{err}"
    );
}

fn valid_cache(bytes: &[u8]) -> (Dtype, Vec<usize>, Vec<u8>) {
    let file = SafeTensors::deserialize(bytes).unwrap();
    let t = file.tensor(FLOATER_ENCODINGS_STATE).unwrap();
    (t.dtype(), t.shape().to_vec(), t.data().to_vec())
}

/// A checkpoint without the cache between two solves (as builds before run state wrote them)
/// still resumes: its first step solves, as documented, so the dynamics train at that step.
#[test]
fn a_checkpoint_without_the_cache_resumes_by_solving_first() {
    let run = tiny(CACHED_FLOATER, RESIDUAL, 0.0);
    let mut trainer = Trainer::new(cpu(), run.clone()).unwrap();
    train(&mut trainer, RESUME_AT);
    let without = rewritten(&checkpoint_bytes(&trainer), |t, _| {
        assert!(t.remove(FLOATER_ENCODINGS_STATE).is_some());
    });
    let checkpoint = Checkpoint::from_bytes(&without, "old.safetensors").unwrap();
    let mut resumed = Trainer::resume(cpu(), run, &checkpoint).unwrap();
    let dynamics = |t: &Trainer| pollster::block_on(t.params().read("posenc.floater.w1")).unwrap();
    let before = dynamics(&resumed);
    train(&mut resumed, 1);
    assert_ne!(
        dynamics(&resumed),
        before,
        "the first resumed step solves and trains the flow"
    );
}

/// An export for inference keeps the parameters only: no moments, no run state.
#[test]
fn an_export_drops_the_run_state() {
    let mut trainer = Trainer::new(cpu(), tiny(CACHED_FLOATER, RESIDUAL, 0.0)).unwrap();
    train(&mut trainer, RESUME_AT);
    let checkpoint = pollster::block_on(trainer.checkpoint()).unwrap();
    assert!(checkpoint.f32_tensor(FLOATER_ENCODINGS_STATE).is_some());
    let exported = checkpoint.without_optimizer();
    assert!(exported.f32_tensor(FLOATER_ENCODINGS_STATE).is_none());
    let bytes = exported.to_bytes().unwrap();
    let names: Vec<String> = SafeTensors::deserialize(&bytes)
        .unwrap()
        .names()
        .into_iter()
        .map(str::to_string)
        .collect();
    assert!(
        names.iter().all(|n| trainer.params().get(n).is_some()),
        "{names:?}"
    );
}

/// A parameter named like run state would read back as run state: refused when saving.
#[test]
fn a_parameter_named_like_run_state_is_refused() {
    let mut g = posflow::Graph::new();
    g.param("state.scale", &[1], posflow::Init::Zeros).unwrap();
    let params = posflow::params::ParamStore::init(cpu(), &g, 0).unwrap();
    let metadata = posflow::checkpoint::Metadata {
        config: "{}".into(),
        training: Default::default(),
        tokenizer: None,
    };
    let err = pollster::block_on(Checkpoint::gather(&params, None, metadata))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("parameter `state.scale` starts with `state.`"),
        "{err}"
    );
}
