//! Fuzzing checkpoints: mutants of three valid tiny checkpoints (a copy-task run with its
//! optimizer, a cached FLOATER run saved between two solves so that it holds run state, and an
//! export without optimizer) in every part of the file: the header length, the tensors' dtypes,
//! shapes, offsets and names, the model config, the run config, the training state, the
//! tokenizer and the optimizer state in the metadata, truncations and flipped bits in the data.
//! Each goes through everything that reads a checkpoint: parsing, rebuilding the model, reading
//! its run and, for a run cheap enough, resuming it for one step and evaluating it at one length.
//! No mutant may panic or take long, and every refusal names the checkpoint or what is wrong in
//! it. `POSFLOW_FUZZ_MUTANTS` sets the mutants per family (default below); run with
//! `--nocapture` to see the counts.

use crate::mutants as fuzz;
use crate::safetensors_edits;

use std::rc::Rc;

use fuzz::{Outcome, Tally, first_non_finite, is_cheap, mutants_per_family, names_one_of, tensor_names};
use posflow::backend::{Backend, CpuBackend};
use posflow::checkpoint::{Checkpoint, FLOATER_ENCODINGS_STATE};
use posflow::inference::SavedModel;
use posflow::train::{DataTask, Evaluator, RunConfig, Task, Trainer, saved_run};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use safetensors_edits::{
    METADATA, Parts, edit_metadata_json, hostile_json, join, join_text, metadata, mutate_json, pick, repack,
    split, tensors_of,
};
use serde_json::{Value, json};

const DEFAULT_MUTANTS: usize = 300;

/// The length the accepted mutants are evaluated at: short, and past training.
const EVAL_LENGTH: usize = 14;

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

/// A tiny copy-task run with position encoding `posenc` (a TOML inline table).
fn tiny_run(posenc: &str) -> RunConfig {
    let toml = format!(
        r#"
[data]
task = "copy"
min_len = 1
max_len = 4

[model]
d_model = 8
heads = 2
layers = 1
ffn = 16
max_len = 16
kind = {{ type = "causal_lm" }}
posenc = {posenc}

[train]
steps = 6
batch = 2
lr = 1e-2
warmup = 1
eval_lengths = [{EVAL_LENGTH}]
"#
    );
    RunConfig::from_toml(&toml, "fuzz base").unwrap()
}

/// The checkpoint of `run` after one step.
fn after_one_step(run: RunConfig) -> Checkpoint {
    let mut trainer = Trainer::new(cpu(), run).unwrap();
    trainer.step().unwrap();
    pollster::block_on(trainer.checkpoint()).unwrap()
}

/// The valid checkpoints every mutant starts from, by name.
fn bases() -> Vec<(&'static str, Vec<u8>)> {
    let sinusoidal = after_one_step(tiny_run(r#"{ type = "sinusoidal" }"#));
    let floater = after_one_step(tiny_run(r#"{ type = "floater", resolve_every = 3 }"#));
    let floater = floater.to_bytes().unwrap();
    assert!(
        split(&floater).header.contains_key(FLOATER_ENCODINGS_STATE),
        "a cached FLOATER run saved at step 1 holds its encodings"
    );
    let bases = vec![
        ("with optimizer", sinusoidal.to_bytes().unwrap()),
        ("floater with run state", floater),
        ("exported", sinusoidal.without_optimizer().to_bytes().unwrap()),
    ];
    for (name, bytes) in &bases {
        assert!(
            matches!(run_mutant(bytes), Outcome::Accepted),
            "the base checkpoint {name} is refused: {:?}",
            refusal(bytes)
        );
    }
    bases
}

fn refusal(bytes: &[u8]) -> Option<String> {
    match run_mutant(bytes) {
        Outcome::Accepted => None,
        Outcome::Refused(message) | Outcome::Corrupted(message) => Some(message),
    }
}

/// Everything that reads a checkpoint: parse; resume one step (`train --resume`) when its run
/// parses and is cheap, whether or not the next reader takes the file; rebuild the model
/// (`sample`, `export`); and, for a cheap run, evaluate (`eval`).
fn run_mutant(bytes: &[u8]) -> Outcome {
    match read_and_run(bytes) {
        Ok(None) => Outcome::Accepted,
        Ok(Some(why)) => Outcome::Corrupted(why),
        Err(message) => Outcome::Refused(message),
    }
}

/// `Ok(Some(why))`: accepted, but a step from finite parameters and optimizer state made some
/// non-finite without an error: a checkpoint that should have been refused.
fn read_and_run(bytes: &[u8]) -> Result<Option<String>, String> {
    let err = |e: posflow::Error| e.to_string();
    let checkpoint = Checkpoint::from_bytes(bytes, ORIGIN).map_err(err)?;
    let run = saved_run(checkpoint.metadata());
    if let Ok(run) = &run
        && is_cheap(run)
        && checkpoint.optimizer_state().is_some()
    {
        let mut trainer = Trainer::resume(cpu(), run.clone(), &checkpoint).map_err(err)?;
        let names = tensor_names(trainer.params());
        trainer.step().map_err(err)?;
        let after = pollster::block_on(trainer.checkpoint()).map_err(err)?;
        if let Some(name) = first_non_finite(&after, &names)
            && first_non_finite(&checkpoint, &names).is_none()
        {
            return Ok(Some(format!(
                "{name} is not finite after a step from finite values"
            )));
        }
    }
    let saved = SavedModel::from_checkpoint(cpu(), &checkpoint).map_err(err)?;
    let run = run.map_err(err)?;
    if !is_cheap(&run) {
        return Ok(None);
    }
    let task = DataTask::load(&run).map_err(err)?;
    let sets = task.eval_sets(&[EVAL_LENGTH], run.train.batch, 1);
    let mut evaluator = Evaluator::new(saved.model.clone());
    let report =
        pollster::block_on(evaluator.evaluate(&saved.params, sets, task.eval_bins(), task.train_len()));
    match report.failures.into_iter().next() {
        None => Ok(None),
        Some((length, message)) => Err(format!("evaluation at length {length}: {message}")),
    }
}

/// The mutants of one family from one base: a description and the file's bytes.
type Family = fn(&[u8], &mut ChaCha8Rng) -> (String, Vec<u8>);

fn header_length(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let len = u64::from_le_bytes(base[..8].try_into().unwrap());
    let new = match rng.random_range(0..6) {
        0 => 0,
        1 => rng.random_range(1..16),
        2 => *pick(&[u64::MAX, 1 << 63, 1 << 40, 100_000_001, base.len() as u64], rng),
        3 => len + rng.random_range(1..=8),
        4 => len - rng.random_range(1..=8),
        _ => rng.random_range(0..2 * len),
    };
    let mut bytes = base.to_vec();
    bytes[..8].copy_from_slice(&new.to_le_bytes());
    (format!("header length {new} (was {len})"), bytes)
}

/// An edit of one tensor's entry in the header: dtype, shape, offsets or name.
fn tensor_entry_edit(parts: &mut Parts, rng: &mut ChaCha8Rng) -> String {
    let names = tensors_of(parts);
    let name = pick(&names, rng).clone();
    let len = parts.data.len() as u64;
    let entry = parts.header[&name].as_object_mut().unwrap();
    match rng.random_range(0..4) {
        0 => {
            let dtype = *pick(
                &[
                    "F16", "BF16", "F64", "I64", "I32", "U8", "BOOL", "F8_E4M3", "C64", "X", "", "f32",
                ],
                rng,
            );
            entry.insert("dtype".into(), json!(dtype));
            format!("{name}: dtype {dtype}")
        }
        1 => {
            let mut shape: Vec<Value> = entry["shape"].as_array().unwrap().clone();
            let edit = rng.random_range(0..6);
            match edit {
                0 if !shape.is_empty() => {
                    let i = rng.random_range(0..shape.len());
                    shape[i] = json!(0);
                }
                1 if !shape.is_empty() => {
                    let i = rng.random_range(0..shape.len());
                    shape[i] = json!(*pick(&[1_000_000_000_000u64, u64::MAX, 1 << 31], rng));
                }
                2 => shape.push(json!(1)),
                3 => {
                    shape.pop();
                }
                4 => shape.reverse(),
                _ => shape = vec![json!(1_000_000_000_000u64), json!(0)],
            }
            let text = Value::Array(shape.clone()).to_string();
            entry.insert("shape".into(), Value::Array(shape));
            format!("{name}: shape {text}")
        }
        2 => {
            let [start, end] = [0, 1].map(|i| entry["data_offsets"][i].as_u64().unwrap());
            let offsets = match rng.random_range(0..5) {
                0 => json!([end, start]),
                1 => json!([start.saturating_sub(4), end]),
                2 => json!([start, len + 4]),
                3 => json!([len, len + (end - start)]),
                _ => json!([start, *pick(&[1u64 << 62, u64::MAX], rng)]),
            };
            let text = offsets.to_string();
            entry.insert("data_offsets".into(), offsets);
            format!("{name}: data_offsets {text}")
        }
        _ => {
            let entry = parts.header.remove(&name).unwrap();
            let new = pick(
                &[
                    format!("\u{1b}[31m{name}"),
                    format!("{name}\n\r\u{7}"),
                    "x".repeat(100_000),
                    String::new(),
                    format!("optim.adam_m.{name}"),
                    format!("state.{name}"),
                    FLOATER_ENCODINGS_STATE.to_string(),
                    "posenc.floater.blocks.0.w1".to_string(),
                    name.to_uppercase(),
                    METADATA.to_string(),
                ],
                rng,
            )
            .clone();
            parts.header.insert(new.clone(), entry);
            format!("{name} renamed {:?}", new.chars().take(40).collect::<String>())
        }
    }
}

/// Tensor entries edited with the offsets left as they were: safetensors' checks.
fn tensor_header(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let mut parts = split(base);
    let what = tensor_entry_edit(&mut parts, rng);
    // A negative dimension is no JSON a serializer writes: edit the text.
    if rng.random_bool(0.1) {
        let text = serde_json::to_string(&parts.header).unwrap();
        let text = text.replacen("\"shape\":[", "\"shape\":[-1,", 1);
        return (
            format!("{what}, a shape starting with -1"),
            join_text(&text, &parts.data),
        );
    }
    (what, join(&parts))
}

/// Tensor entries edited, added or removed, the offsets laid out again: posflow's checks.
fn tensor_repacked(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let mut parts = split(base);
    let names = tensors_of(&parts);
    let what = match rng.random_range(0..4) {
        0 => {
            let name = pick(&names, rng).clone();
            parts.header.remove(&name);
            format!("{name} removed")
        }
        1 => {
            let name = pick(&names, rng).clone();
            let entry = parts.header[&name].clone();
            let new = pick(
                &[
                    format!("{name}.copy"),
                    format!("optim.adam_m.{name}.copy"),
                    format!("optim.adam_v.{name}"),
                    format!("optim.other.{name}"),
                    "state.other".to_string(),
                    FLOATER_ENCODINGS_STATE.to_string(),
                    "\u{1b}[31mred".to_string(),
                ],
                rng,
            )
            .clone();
            parts.header.insert(new.clone(), entry);
            format!("{name} copied as {new:?}")
        }
        _ => tensor_entry_edit(&mut parts, rng),
    };
    match repack(&parts) {
        Some(bytes) => (format!("{what} (repacked)"), bytes),
        None => (what, join(&parts)),
    }
}

fn model_config(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let mut parts = split(base);
    let mut config: Value = serde_json::from_str(metadata(&mut parts)["config"].as_str().unwrap()).unwrap();
    let what = mutate_json(&mut config, rng);
    metadata(&mut parts).insert("config".into(), Value::String(config.to_string()));
    // Half the time the run's model says the same, so that the edit reaches past the check that
    // the two agree.
    if rng.random_bool(0.5) {
        edit_metadata_json(&mut parts, "training", |training| {
            training["run"]["model"] = config;
        });
        return (format!("config and run.model: {what}"), join(&parts));
    }
    (format!("config: {what}"), join(&parts))
}

fn run_config(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let mut parts = split(base);
    let what = edit_metadata_json(&mut parts, "training", |training| {
        mutate_json(&mut training["run"], rng)
    })
    .unwrap();
    (format!("training.run: {what}"), join(&parts))
}

fn training_state(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let mut parts = split(base);
    let what = edit_metadata_json(&mut parts, "training", |training| {
        let key = *pick(&["step", "seed", "run", "extra"], rng);
        let new = pick(&hostile_json(), rng).clone();
        let what = format!("training.{key} = {new}");
        if rng.random_bool(0.2) {
            training.as_object_mut().unwrap().remove(key);
            return format!("training.{key} removed");
        }
        training[key] = new;
        what
    })
    .unwrap();
    (what, join(&parts))
}

fn tokenizer(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let mut parts = split(base);
    let stored: Value = serde_json::from_str(metadata(&mut parts)["tokenizer"].as_str().unwrap()).unwrap();
    let chars = stored["chars"].as_str().unwrap().to_string();
    let huge: String = (0..200_000u32).filter_map(|i| char::from_u32(0x20 + i)).collect();
    let (what, text) = match rng.random_range(0..9) {
        0 => ("unsorted", json!({"specials": stored["specials"], "chars": chars.chars().rev().collect::<String>()}).to_string()),
        1 => ("a duplicate char", json!({"specials": stored["specials"], "chars": format!("{chars}{}", chars.chars().last().unwrap())}).to_string()),
        2 => ("no chars", json!({"specials": stored["specials"], "chars": ""}).to_string()),
        3 => ("200k chars", json!({"specials": stored["specials"], "chars": huge}).to_string()),
        4 => ("other specials", json!({"specials": ["<pad>"], "chars": chars}).to_string()),
        5 => ("not JSON", "{\"chars\": ".to_string()),
        6 => ("empty", String::new()),
        7 => ("control characters", json!({"specials": stored["specials"], "chars": "\u{0}\u{7}\u{1b}"}).to_string()),
        _ => {
            let mut stored = stored.clone();
            let what = mutate_json(&mut stored, rng);
            metadata(&mut parts).insert("tokenizer".into(), Value::String(stored.to_string()));
            return (format!("tokenizer: {what}"), join(&parts));
        }
    };
    if rng.random_bool(0.1) {
        metadata(&mut parts).remove("tokenizer");
        return ("tokenizer removed".into(), join(&parts));
    }
    metadata(&mut parts).insert("tokenizer".into(), Value::String(text));
    (format!("tokenizer: {what}"), join(&parts))
}

fn optimizer_state(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let mut parts = split(base);
    if !metadata(&mut parts).contains_key("optimizer") {
        metadata(&mut parts).insert(
            "optimizer".into(),
            json!({"algorithm": "adamw", "step": 1, "hyperparameters": {}})
                .to_string()
                .into(),
        );
        return ("optimizer state without moments".into(), join(&parts));
    }
    let what = edit_metadata_json(&mut parts, "optimizer", |state| {
        let targeted = [
            ("step", json!(u64::MAX)),
            ("step", json!(1u64 << 31)),
            ("step", json!(1u64 << 32)),
            ("step", json!(0)),
            ("algorithm", json!("sgd")),
        ];
        if rng.random_bool(0.3) {
            let (key, value) = pick(&targeted, rng).clone();
            state[key] = value.clone();
            return format!("optimizer.{key} = {value}");
        }
        if rng.random_bool(0.3) {
            let key = *pick(
                &["lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm"],
                rng,
            );
            let value = pick(
                &[
                    json!(2.0),
                    json!(-1.0),
                    json!(1.0),
                    json!(0),
                    json!(1e300),
                    json!(null),
                    json!("NaN"),
                ],
                rng,
            )
            .clone();
            state["hyperparameters"][key] = value.clone();
            return format!("optimizer.hyperparameters.{key} = {value}");
        }
        format!("optimizer: {}", mutate_json(state, rng))
    })
    .unwrap();
    (what, join(&parts))
}

fn metadata_keys(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let mut parts = split(base);
    let keys: Vec<String> = metadata(&mut parts).keys().cloned().collect();
    let what = match rng.random_range(0..5) {
        0 => {
            let key = pick(&keys, rng).clone();
            metadata(&mut parts).remove(&key);
            format!("{key} removed")
        }
        1 => {
            let format = pick(&["posflow/0", "posflow/2", "", "POSFLOW/1", "posflow/1 "], rng).to_string();
            metadata(&mut parts).insert("format".into(), json!(format));
            format!("format {format:?}")
        }
        2 => {
            let key = pick(&keys, rng).clone();
            let value = pick(&["", "{", "null", "[]", "\u{1b}[31m"], rng).to_string();
            metadata(&mut parts).insert(key.clone(), json!(value));
            format!("{key} = {value:?}")
        }
        3 => {
            // Safetensors' metadata holds strings only.
            let key = pick(&keys, rng).clone();
            metadata(&mut parts).insert(key.clone(), json!({"nested": 1}));
            format!("{key} not a string")
        }
        _ => {
            parts.header.remove(METADATA);
            "no metadata".into()
        }
    };
    (what, join(&parts))
}

fn truncation(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let at = rng.random_range(0..base.len());
    (format!("cut at byte {at} of {}", base.len()), base[..at].to_vec())
}

/// Random bits flipped in the data section: any value, NaN and infinities included.
fn data_flips(base: &[u8], rng: &mut ChaCha8Rng) -> (String, Vec<u8>) {
    let len = u64::from_le_bytes(base[..8].try_into().unwrap()) as usize;
    let mut bytes = base.to_vec();
    let flips = rng.random_range(1..=16);
    for _ in 0..flips {
        let at = rng.random_range(8 + len..bytes.len());
        bytes[at] ^= 1 << rng.random_range(0..8);
    }
    (format!("{flips} bits flipped"), bytes)
}

/// The origin every error about the file itself carries.
const ORIGIN: &str = "mutant.safetensors";

/// Each family, and the words one of which its refusals must contain: the checkpoint (by its
/// origin) or the part of it that is wrong.
const FAMILIES: [(&str, Family, &[&str]); 11] = [
    ("header_length", header_length, &[ORIGIN]),
    ("tensor_header", tensor_header, &[ORIGIN]),
    ("tensor_repacked", tensor_repacked, &[ORIGIN]),
    (
        "model_config",
        model_config,
        &[ORIGIN, "model config", "run config", "checkpoint's tokenizer"],
    ),
    ("run_config", run_config, &["run config", "checkpoint"]),
    (
        "training_state",
        training_state,
        &["training", "run config", "checkpoint"],
    ),
    ("tokenizer", tokenizer, &["tokenizer"]),
    ("optimizer_state", optimizer_state, &["optimizer", "checkpoint"]),
    (
        "metadata_keys",
        metadata_keys,
        &[ORIGIN, "checkpoint", "tokenizer"],
    ),
    ("truncation", truncation, &[ORIGIN]),
    // Flipped bits may make a weight NaN, which only the first step finds (until checkpoints
    // refuse non-finite weights: see the test below).
    ("data_flips", data_flips, &[ORIGIN, "loss", "non-finite"]),
];

#[test]
fn checkpoint_mutants_are_refused_clearly_or_run() {
    let bases = bases();
    let per_family = mutants_per_family(DEFAULT_MUTANTS);
    let mut tally = Tally::default();
    for (index, (family, make, anchors)) in FAMILIES.into_iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(0xC4EC + index as u64);
        for _ in 0..per_family {
            let (base_name, base) = pick(&bases, &mut rng);
            let (what, bytes) = make(base, &mut rng);
            let what = format!("{base_name}: {what}");
            tally.run(family, &what, || run_mutant(&bytes), |m| names_one_of(m, anchors));
        }
    }
    tally.report("fuzz_checkpoint");
}

/// A checkpoint whose config (and run) claims a model far larger than its tensors: loading it
/// and resuming it are refused before the claimed model is allocated, as fast as any other bad
/// file (allocating and initialising these 56 M parameters first took seconds; a claim at the
/// limit of 4 G parameters would take 16 GiB).
#[test]
fn a_checkpoint_claiming_a_large_model_is_refused_before_it_is_allocated() {
    let bytes = after_one_step(tiny_run(r#"{ type = "sinusoidal" }"#))
        .to_bytes()
        .unwrap();
    let mut parts = split(&bytes);
    let mut config: Value = serde_json::from_str(metadata(&mut parts)["config"].as_str().unwrap()).unwrap();
    for (key, value) in [("d_model", 1024), ("heads", 8), ("layers", 4), ("ffn", 4096)] {
        config[key] = json!(value);
    }
    metadata(&mut parts).insert("config".into(), Value::String(config.to_string()));
    edit_metadata_json(&mut parts, "training", |training| {
        training["run"]["model"] = config
    });
    let checkpoint = Checkpoint::from_bytes(&join(&parts), "large.safetensors").unwrap();
    let run = saved_run(checkpoint.metadata()).unwrap();
    assert!(run.model.estimated_parameters() > 50_000_000);
    let start = std::time::Instant::now();
    let loaded = SavedModel::from_checkpoint(cpu(), &checkpoint)
        .err()
        .unwrap()
        .to_string();
    let resumed = Trainer::resume(cpu(), run, &checkpoint)
        .err()
        .unwrap()
        .to_string();
    assert!(
        start.elapsed() < fuzz::MAX_MUTANT_TIME,
        "took {:?}",
        start.elapsed()
    );
    for err in [loaded, resumed] {
        assert!(
            err.contains("checkpoint large.safetensors: tensor blocks.0.attn.out.bias has shape [8], the model expects [1024]"),
            "{err}"
        );
    }
}

/// Fails until checkpoints refuse non-finite weights and keep control characters out of their
/// messages (another branch does both in `src/checkpoint.rs`). A flipped bit can make a weight
/// NaN: loading must say which tensor, not leave the first step to fail on a NaN loss. A tensor
/// name or metadata value is any string: echoed raw, `\e[31m` recolours the user's terminal.
#[test]
fn nan_weights_and_control_characters_are_refused_or_escaped() {
    let base = after_one_step(tiny_run(r#"{ type = "sinusoidal" }"#))
        .to_bytes()
        .unwrap();
    let weight = "blocks.0.attn.qkv.weight";
    for value in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut parts = split(&base);
        let start = parts.header[weight]["data_offsets"][0].as_u64().unwrap() as usize + 4 * 5;
        parts.data[start..start + 4].copy_from_slice(&value.to_le_bytes());
        let err = match Checkpoint::from_bytes(&join(&parts), ORIGIN) {
            Ok(_) => panic!("a weight of {value} is loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(ORIGIN) && err.contains(weight), "{err}");
    }
    for name in ["\u{1b}[31mred", "new\nline\r", "bell\u{7}", "\u{9b}31m"] {
        let mut parts = split(&base);
        let entry = parts.header[weight].clone();
        parts.header.insert(name.into(), entry);
        let renamed = repack(&parts).unwrap();
        let mut parts = split(&base);
        metadata(&mut parts).insert("format".into(), json!(name));
        let format = join(&parts);
        for bytes in [renamed, format] {
            let Outcome::Refused(err) = run_mutant(&bytes) else {
                panic!("{name:?} is accepted")
            };
            assert!(
                !err.chars().any(char::is_control),
                "{name:?} is not escaped: {err:?}"
            );
        }
    }
}
