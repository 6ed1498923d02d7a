//! Fuzzing run configs: mutants of every config in `configs/` and of a tiny run, with each size
//! field at 0, negative, huge, infinite or NaN, fields of the wrong type, missing or unknown keys,
//! values TOML cannot hold, and inconsistent combinations. Each is parsed; a config accepted and
//! cheap to run trains one step, one accepted but expensive goes through `validate` only. No
//! mutant may panic or take long, and every refusal names what is wrong: for a mutation of one
//! field, its key. `POSFLOW_FUZZ_MUTANTS` sets the mutants per family (default below); run with
//! `--nocapture` to see the counts.

use crate::mutants as fuzz;

use std::path::Path;
use std::rc::Rc;

use fuzz::{Outcome, Tally, first_non_finite, is_cheap, mutants_per_family, names_one_of, tensor_names};
use posflow::backend::CpuBackend;
use posflow::train::{RunConfig, Trainer};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use toml::{Table, Value};

const DEFAULT_MUTANTS: usize = 200;

/// A tiny copy-task run: most mutants of it are cheap enough to train a step.
const TINY: &str = r#"
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
kind = { type = "causal_lm" }
posenc = { type = "sinusoidal" }

[train]
steps = 4
batch = 2
lr = 1e-2
warmup = 1
eval_lengths = [6, 12]
"#;

/// The base runs: the tiny one and every config shipped, as parsed tables.
fn bases() -> Vec<(String, Table)> {
    let mut bases = vec![("tiny".to_string(), TINY.to_string())];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        bases.push((name, std::fs::read_to_string(&path).unwrap()));
    }
    bases
        .into_iter()
        .map(|(name, text)| {
            let table: Table = toml::from_str(&text).unwrap();
            // The emitter below must write what the file says.
            assert_eq!(
                RunConfig::from_toml(&emit(&table), &name).unwrap(),
                RunConfig::from_toml(&text, &name).unwrap(),
                "{name}"
            );
            (name, table)
        })
        .collect()
}

/// A value written into the TOML text as is, for what a `toml::Value` cannot hold.
const RAW: &str = "@@raw@@";

/// The run's TOML text (`toml` here has no serializer): top-level keys, then one section per
/// table, nested tables inline.
fn emit(table: &Table) -> String {
    let mut text = String::new();
    for (key, value) in table.iter().filter(|(_, v)| !v.is_table()) {
        text += &format!("{} = {}\n", emit_key(key), emit_value(value));
    }
    for (key, value) in table {
        if let Value::Table(section) = value {
            text += &format!("[{}]\n", emit_key(key));
            for (key, value) in section {
                text += &format!("{} = {}\n", emit_key(key), emit_value(value));
            }
        }
    }
    text
}

fn emit_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.into()
    } else {
        serde_json::to_string(key).unwrap()
    }
}

fn emit_value(value: &Value) -> String {
    match value {
        // JSON's string escapes are TOML's.
        Value::String(s) => serde_json::to_string(s).unwrap(),
        Value::Integer(i) => i.to_string(),
        Value::Float(f) if f.is_nan() => "nan".into(),
        Value::Float(f) if f.is_infinite() => if *f > 0.0 { "inf" } else { "-inf" }.into(),
        Value::Float(f) => format!("{f:?}"),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(emit_value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Table(table) => {
            let entries: Vec<String> = table
                .iter()
                .map(|(k, v)| format!("{} = {}", emit_key(k), emit_value(v)))
                .collect();
            format!("{{ {} }}", entries.join(", "))
        }
    }
}

/// A hostile value for a field: a TOML value, or raw text TOML cannot parse into one.
#[derive(Clone, Debug)]
enum Hostile {
    Value(Value),
    Raw(&'static str),
}

fn hostile_values() -> Vec<Hostile> {
    use Hostile::{Raw, Value as V};
    let mut values = vec![
        V(Value::Integer(0)),
        V(Value::Integer(-1)),
        V(Value::Integer(1)),
        V(Value::Integer(3)),
        V(Value::Integer(1_000_000_000_000)),
        V(Value::Integer(1 << 20)),
        V(Value::Integer(1 << 32)),
        V(Value::Integer(i64::MAX)),
        V(Value::Integer(i64::MIN)),
        V(Value::Float(0.0)),
        V(Value::Float(-1.0)),
        V(Value::Float(0.5)),
        V(Value::Float(1.0)),
        V(Value::Float(2.0)),
        V(Value::Float(1e-30)),
        V(Value::Float(1e12)),
        V(Value::Float(1e19)),
        V(Value::Float(1e300)),
        V(Value::Float(f64::INFINITY)),
        V(Value::Float(f64::NEG_INFINITY)),
        V(Value::Float(f64::NAN)),
        V(Value::String("8".into())),
        V(Value::String("NaN".into())),
        V(Value::String(String::new())),
        V(Value::Boolean(true)),
        V(Value::Array(vec![])),
        V(Value::Array(vec![Value::Integer(8)])),
        V(Value::Table(Table::new())),
    ];
    values.extend(
        [
            "9223372036854775808",  // 2⁶³
            "18446744073709551616", // 2⁶⁴
            "-9223372036854775809",
            "1e999",
            "0x7fffffffffffffff",
            "1_000_000_000_000",
            "",
            "\"\\u001b[31m\"",
        ]
        .map(Raw),
    );
    values
}

/// Where a size field lives: a section's key, or a key of the position encoding (which the
/// mutation switches to the encoding that has it).
#[derive(Clone, Copy, Debug)]
enum Field {
    Data(&'static str),
    Model(&'static str),
    Relative(&'static str),
    Floater(&'static str),
    Train(&'static str),
}

impl Field {
    fn key(self) -> &'static str {
        match self {
            Self::Data(k) | Self::Model(k) | Self::Relative(k) | Self::Floater(k) | Self::Train(k) => k,
        }
    }
}

const SIZE_FIELDS: [Field; 36] = [
    Field::Model("vocab"),
    Field::Model("d_model"),
    Field::Model("heads"),
    Field::Model("layers"),
    Field::Model("ffn"),
    Field::Model("max_len"),
    Field::Model("dropout"),
    Field::Relative("buckets"),
    Field::Relative("max_distance"),
    Field::Floater("substeps"),
    Field::Floater("max_steps"),
    Field::Floater("resolve_every"),
    Field::Floater("delta"),
    Field::Floater("rtol"),
    Field::Floater("atol"),
    Field::Data("seq_len"),
    Field::Data("min_len"),
    Field::Data("max_len"),
    Field::Data("valid_fraction"),
    Field::Train("steps"),
    Field::Train("batch"),
    Field::Train("warmup"),
    Field::Train("eval_lengths"),
    Field::Train("eval_batches"),
    Field::Train("eval_every"),
    Field::Train("lr"),
    Field::Train("beta1"),
    Field::Train("beta2"),
    Field::Train("eps"),
    Field::Train("weight_decay"),
    Field::Train("clip_grad_norm"),
    Field::Train("final_lr_fraction"),
    Field::Train("seed"),
    Field::Train("sample_prompt"),
    Field::Model("embed_scale"),
    Field::Data("task"),
];

fn section<'a>(table: &'a mut Table, name: &str) -> &'a mut Table {
    table
        .get_mut(name)
        .and_then(Value::as_table_mut)
        .unwrap_or_else(|| panic!("no [{name}]"))
}

/// Sets `field` of `table` to `value` (the raw placeholder for raw text). Returns false where
/// the base has no such field to mutate (a data key of another task).
fn set_field(table: &mut Table, field: Field, value: Value, rng: &mut ChaCha8Rng) -> bool {
    match field {
        Field::Data(key) => {
            let data = section(table, "data");
            if key != "task" && !data.contains_key(key) {
                return false;
            }
            data.insert(key.into(), value);
        }
        Field::Model(key) => {
            section(table, "model").insert(key.into(), value);
        }
        Field::Train(key) => {
            let value = match (key, value) {
                // A list of lengths: the hostile value as one of them, or instead of the list.
                ("eval_lengths", v @ (Value::Integer(_) | Value::Float(_))) if rng.random_bool(0.7) => {
                    Value::Array(vec![Value::Integer(16), v])
                }
                (_, v) => v,
            };
            section(table, "train").insert(key.into(), value);
        }
        Field::Relative(key) => {
            let mut posenc = Table::new();
            posenc.insert("type".into(), Value::String("relative".into()));
            posenc.insert(key.into(), value);
            section(table, "model").insert("posenc".into(), Value::Table(posenc));
        }
        Field::Floater(key) => {
            let mut posenc = Table::new();
            posenc.insert("type".into(), Value::String("floater".into()));
            if matches!(key, "rtol" | "atol" | "max_steps") && rng.random_bool(0.5) {
                posenc.insert("method".into(), Value::String("dopri5".into()));
            }
            posenc.insert(key.into(), value);
            section(table, "model").insert("posenc".into(), Value::Table(posenc));
        }
    }
    true
}

/// The TOML text of `table` with the raw placeholder replaced by `raw`.
fn with_raw(table: &Table, raw: &str) -> String {
    emit(table).replace(&format!("\"{RAW}\""), raw)
}

/// Parses `text`; if accepted, trains one step where that is cheap and validates otherwise.
fn run_mutant(text: &str) -> Outcome {
    let run = match RunConfig::from_toml(text, "mutant.toml") {
        Ok(run) => run,
        Err(e) => return Outcome::Refused(e.to_string()),
    };
    if let Err(e) = run.validate() {
        panic!("a config from_toml accepted fails validate: {e}");
    }
    if !is_cheap(&run) {
        return Outcome::Accepted;
    }
    let stepped = Trainer::new(Rc::new(CpuBackend::new()), run).and_then(|mut trainer| {
        trainer.step()?;
        let after = pollster::block_on(trainer.checkpoint())?;
        Ok(first_non_finite(&after, &tensor_names(trainer.params())).cloned())
    });
    match stepped {
        Ok(None) => Outcome::Accepted,
        Ok(Some(name)) => Outcome::Corrupted(format!("{name} is not finite after the first step")),
        Err(e) => Outcome::Refused(e.to_string()),
    }
}

/// One mutation of one field: its key must be in any refusal.
fn size_field_mutant(bases: &[(String, Table)], rng: &mut ChaCha8Rng) -> Mutant {
    let values = hostile_values();
    loop {
        let (name, base) = pick_base(bases, rng);
        let mut table = base.clone();
        let field = SIZE_FIELDS[rng.random_range(0..SIZE_FIELDS.len())];
        let hostile = values[rng.random_range(0..values.len())].clone();
        let (value, raw) = match &hostile {
            Hostile::Value(v) => (v.clone(), None),
            Hostile::Raw(text) => (Value::String(RAW.into()), Some(*text)),
        };
        if !set_field(&mut table, field, value, rng) {
            continue;
        }
        let text = match raw {
            Some(raw) => with_raw(&table, raw),
            None => emit(&table),
        };
        let what = format!("{name}: {field:?} = {hostile:?}");
        return (what, text, vec![field.key().into()]);
    }
}

/// Bases are picked with the tiny run half of the time, so that many mutants train.
fn pick_base<'a>(bases: &'a [(String, Table)], rng: &mut ChaCha8Rng) -> &'a (String, Table) {
    if rng.random_bool(0.5) {
        &bases[0]
    } else {
        &bases[rng.random_range(0..bases.len())]
    }
}

/// Two fields that are each fine but not together; a refusal must name one of them.
fn inconsistent_mutant(bases: &[(String, Table)], rng: &mut ChaCha8Rng) -> Mutant {
    let (name, base) = pick_base(bases, rng);
    let mut table = base.clone();
    let int = |v: i64| Value::Integer(v);
    let small = rng.random_range(1..64i64);
    let large = small + rng.random_range(1..1000i64);
    let (what, keys): (String, [&str; 2]) = match rng.random_range(0..6) {
        0 => {
            // heads not dividing d_model
            let model = section(&mut table, "model");
            model.insert("d_model".into(), int(large));
            model.insert("heads".into(), int(small + 1));
            (
                format!("d_model {large}, heads {}", small + 1),
                ["d_model", "heads"],
            )
        }
        1 => {
            // the training sequences longer than the model's max_len
            let data = section(&mut table, "data");
            let key = if data.contains_key("seq_len") {
                "seq_len"
            } else {
                "max_len"
            };
            if data.contains_key(key) {
                data.insert(key.into(), int(large));
            }
            section(&mut table, "model").insert("max_len".into(), int(small));
            (
                format!("[data] {key} {large}, [model] max_len {small}"),
                ["max_len", key],
            )
        }
        2 => {
            let data = section(&mut table, "data");
            data.insert("task".into(), Value::String("copy".into()));
            data.retain(|k, _| k == "task");
            data.insert("min_len".into(), int(large));
            data.insert("max_len".into(), int(small));
            // The copy task trains a causal LM: a seq2seq base would be a second inconsistency,
            // and so would an encoder's untied [CLS].
            let mut kind = Table::new();
            kind.insert("type".into(), Value::String("causal_lm".into()));
            let model = section(&mut table, "model");
            model.insert("kind".into(), Value::Table(kind));
            if let Some(Value::Table(posenc)) = model.get_mut("posenc")
                && posenc.contains_key("untie_cls")
            {
                posenc.insert("untie_cls".into(), Value::Boolean(false));
            }
            (
                format!("min_len {large} > max_len {small}"),
                ["min_len", "max_len"],
            )
        }
        3 => {
            let train = section(&mut table, "train");
            train.insert("steps".into(), int(small));
            train.insert("warmup".into(), int(large));
            (format!("warmup {large} > steps {small}"), ["warmup", "steps"])
        }
        4 => {
            // a relative encoding whose max_distance is within the exact buckets
            let mut posenc = Table::new();
            posenc.insert("type".into(), Value::String("relative".into()));
            posenc.insert("buckets".into(), int(2 * large));
            posenc.insert("max_distance".into(), int(small));
            section(&mut table, "model").insert("posenc".into(), Value::Table(posenc));
            (
                format!("buckets {}, max_distance {small}", 2 * large),
                ["buckets", "max_distance"],
            )
        }
        _ => {
            // an odd d_model with a sinusoidal table
            let model = section(&mut table, "model");
            let mut posenc = Table::new();
            posenc.insert("type".into(), Value::String("sinusoidal".into()));
            model.insert("posenc".into(), Value::Table(posenc));
            model.insert("d_model".into(), int(2 * small + 1));
            model.insert("heads".into(), int(1));
            (
                format!("sinusoidal, d_model {}", 2 * small + 1),
                ["d_model", "sinusoidal"],
            )
        }
    };
    (
        format!("{name}: {what}"),
        emit(&table),
        keys.map(String::from).to_vec(),
    )
}

/// Every key of the file, as (section, key), the sections themselves as ("", section).
fn keys_of(table: &Table) -> Vec<(String, String)> {
    let mut keys = Vec::new();
    for (name, value) in table {
        keys.push((String::new(), name.clone()));
        if let Value::Table(section) = value {
            keys.extend(section.keys().map(|k| (name.clone(), k.clone())));
        }
    }
    keys
}

fn key_slot<'a>(table: &'a mut Table, section_name: &str) -> &'a mut Table {
    if section_name.is_empty() {
        table
    } else {
        section(table, section_name)
    }
}

/// Any key with a value of another type.
fn wrong_type_mutant(bases: &[(String, Table)], rng: &mut ChaCha8Rng) -> Mutant {
    let (name, base) = pick_base(bases, rng);
    let mut table = base.clone();
    let keys = keys_of(&table);
    let (section_name, key) = keys[rng.random_range(0..keys.len())].clone();
    let slot = key_slot(&mut table, &section_name);
    let old = slot[&key].clone();
    let candidates = [
        Value::String("x".into()),
        Value::Integer(7),
        Value::Float(0.25),
        Value::Boolean(false),
        Value::Array(vec![Value::String("a".into())]),
        Value::Table(Table::new()),
    ];
    let others: Vec<&Value> = candidates
        .iter()
        .filter(|c| c.type_str() != old.type_str())
        .collect();
    let value = others[rng.random_range(0..others.len())].clone();
    slot.insert(key.clone(), value.clone());
    let what = format!(
        "{name}: [{section_name}] {key} = {value:?} (was {})",
        old.type_str()
    );
    (what, emit(&table), vec![key])
}

/// A key removed: a required one must be named as missing.
fn missing_key_mutant(bases: &[(String, Table)], rng: &mut ChaCha8Rng) -> Mutant {
    let (name, base) = pick_base(bases, rng);
    let mut table = base.clone();
    let keys = keys_of(&table);
    let (section_name, key) = keys[rng.random_range(0..keys.len())].clone();
    key_slot(&mut table, &section_name).remove(&key);
    let what = format!("{name}: [{section_name}] {key} removed");
    (what, emit(&table), vec![key])
}

/// A key no config has, in a section or at the top.
fn unknown_key_mutant(bases: &[(String, Table)], rng: &mut ChaCha8Rng) -> Mutant {
    let (name, base) = pick_base(bases, rng);
    let mut table = base.clone();
    let sections = ["", "data", "model", "train"];
    let section_name = sections[rng.random_range(0..sections.len())];
    let long = "x".repeat(5000);
    let names = ["d_modle", "lr_max", "seq-len", "\u{1b}[31mred", &long];
    let key = names[rng.random_range(0..names.len())];
    key_slot(&mut table, section_name).insert(key.into(), Value::Integer(1));
    let what = format!(
        "{name}: [{section_name}] unknown key {:?}",
        key.chars().take(20).collect::<String>()
    );
    // A name with an escape is quoted in the message; its printable part must be there.
    let anchor = if key.starts_with('\u{1b}') {
        "red"
    } else {
        &key[..key.len().min(64)]
    };
    (what, emit(&table), vec![anchor.into()])
}

/// Several mutations of the kinds above together: anything may happen but a panic, a hang or an
/// empty error.
fn compound_mutant(bases: &[(String, Table)], rng: &mut ChaCha8Rng) -> Mutant {
    let (name, base) = pick_base(bases, rng);
    let mut table = base.clone();
    let values = hostile_values();
    let mut whats = Vec::new();
    let mut keys = Vec::new();
    for _ in 0..rng.random_range(2..5) {
        let field = SIZE_FIELDS[rng.random_range(0..SIZE_FIELDS.len())];
        let Hostile::Value(value) = values[rng.random_range(0..values.len())].clone() else {
            continue;
        };
        if set_field(&mut table, field, value.clone(), rng) {
            whats.push(format!("{field:?} = {value:?}"));
            keys.push(field.key().into());
        }
    }
    // The message must still say something about the config.
    keys.extend(["[data]", "[model]", "[train]", "model config", "mutant.toml"].map(String::from));
    (format!("{name}: {}", whats.join(", ")), emit(&table), keys)
}

/// What a mutant does, its TOML text, and the words one of which a refusal must contain.
type Mutant = (String, String, Vec<String>);

type Family = fn(&[(String, Table)], &mut ChaCha8Rng) -> Mutant;

const FAMILIES: [(&str, Family); 6] = [
    ("size_field", size_field_mutant),
    ("inconsistent", inconsistent_mutant),
    ("wrong_type", wrong_type_mutant),
    ("missing_key", missing_key_mutant),
    ("unknown_key", unknown_key_mutant),
    ("compound", compound_mutant),
];

#[test]
fn config_mutants_are_refused_clearly_or_run() {
    let bases = bases();
    let per_family = mutants_per_family(DEFAULT_MUTANTS);
    let mut tally = Tally::default();
    for (index, (family, make)) in FAMILIES.into_iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(0xC0F1 + index as u64);
        for _ in 0..per_family {
            let (what, text, keys) = make(&bases, &mut rng);
            tally.run(
                family,
                &what,
                || run_mutant(&text),
                |message| names_one_of(message, &keys),
            );
        }
    }
    tally.report("fuzz_config");
}
