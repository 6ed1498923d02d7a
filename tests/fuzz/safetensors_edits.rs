//! Taking a safetensors file apart and putting it back, for the checkpoint fuzzer: its header as
//! JSON and its data, offsets laid out again after an edit, and random hostile edits of JSON
//! values (the header's entries, the configs the metadata holds as JSON text).

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value, json};

/// A safetensors file taken apart: its header as JSON and its data section.
pub struct Parts {
    pub header: Map<String, Value>,
    pub data: Vec<u8>,
}

pub fn split(bytes: &[u8]) -> Parts {
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    Parts {
        header,
        data: bytes[8 + len..].to_vec(),
    }
}

/// The file of `header` (as text) and `data`, the header's length in front.
pub fn join_text(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

pub fn join(parts: &Parts) -> Vec<u8> {
    join_text(&serde_json::to_string(&parts.header).unwrap(), &parts.data)
}

pub const METADATA: &str = "__metadata__";

pub fn tensors_of(parts: &Parts) -> Vec<String> {
    parts.header.keys().filter(|k| *k != METADATA).cloned().collect()
}

pub fn pick<'a, T>(items: &'a [T], rng: &mut ChaCha8Rng) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

fn bytes_per_element(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "F64" | "I64" | "U64" | "C64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "U8" | "I8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => 1,
        _ => return None,
    })
}

/// The tensors' offsets laid out again from their dtypes and shapes, each tensor's old bytes cut
/// or padded with zeros to its new size, so that the file passes safetensors' own checks and
/// reaches posflow's. `None` if a tensor's size cannot be computed or is over a megabyte.
pub fn repack(parts: &Parts) -> Option<Vec<u8>> {
    let mut tensors: Vec<(u64, String)> = Vec::new();
    for name in tensors_of(parts) {
        let start = parts.header[&name]["data_offsets"][0]
            .as_u64()
            .unwrap_or(u64::MAX);
        tensors.push((start, name));
    }
    tensors.sort();
    let mut header = parts.header.clone();
    let mut data = Vec::new();
    for (_, name) in tensors {
        let info = header.get_mut(&name)?.as_object_mut()?;
        let width = bytes_per_element(info.get("dtype")?.as_str()?)?;
        let numel = info
            .get("shape")?
            .as_array()?
            .iter()
            .try_fold(1u64, |n, d| n.checked_mul(d.as_u64()?))?;
        let size = numel.checked_mul(width as u64).filter(|&s| s <= 1 << 20)? as usize;
        let old = info["data_offsets"]
            .as_array()
            .and_then(|o| Some((o.first()?.as_u64()? as usize, o.get(1)?.as_u64()? as usize)));
        let mut bytes = match old {
            Some((s, e)) => parts.data.get(s..e).unwrap_or_default().to_vec(),
            None => Vec::new(),
        };
        bytes.resize(size, 0);
        info.insert("data_offsets".into(), json!([data.len(), data.len() + size]));
        data.extend_from_slice(&bytes);
    }
    Some(join(&Parts { header, data }))
}

/// Values that a JSON field of any type may be set to.
pub fn hostile_json() -> Vec<Value> {
    vec![
        json!(0),
        json!(-1),
        json!(1),
        json!(3),
        json!(1_000_000_000_000u64),
        json!(10_000_000_000_000_000_000u64),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1 << 20),
        json!(0.5),
        json!(-0.5),
        json!(2.0),
        json!(1e300),
        json!(-1e300),
        json!("NaN"),
        json!("inf"),
        json!(""),
        json!("\u{1b}[31mred"),
        Value::Null,
        json!(true),
        json!([]),
        json!([1, 2]),
        json!({}),
    ]
}

/// A step of a path into a JSON value.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// The path of every node under `value` (not `value` itself).
fn paths(value: &Value) -> Vec<Vec<Step>> {
    let mut all = Vec::new();
    let children: Vec<(Step, &Value)> = match value {
        Value::Object(map) => map.iter().map(|(k, v)| (Step::Key(k.clone()), v)).collect(),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (Step::Index(i), v))
            .collect(),
        _ => Vec::new(),
    };
    for (step, child) in children {
        all.push(vec![step.clone()]);
        for mut path in paths(child) {
            path.insert(0, step.clone());
            all.push(path);
        }
    }
    all
}

fn node_mut<'a>(value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |v, step| match step {
        Step::Key(k) => v.get_mut(k),
        Step::Index(i) => v.get_mut(*i),
    })
}

/// Sets the node at `path` to `new`, or removes it (`None`). False if the path is not there.
fn edit(value: &mut Value, path: &[Step], new: Option<Value>) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    let Some(parent) = node_mut(value, parent) else {
        return false;
    };
    match (parent, last, new) {
        (Value::Object(map), Step::Key(k), Some(new)) => map.insert(k.clone(), new).is_some(),
        (Value::Object(map), Step::Key(k), None) => map.remove(k).is_some(),
        (Value::Array(items), Step::Index(i), Some(new)) if *i < items.len() => {
            items[*i] = new;
            true
        }
        (Value::Array(items), Step::Index(i), None) if *i < items.len() => {
            items.remove(*i);
            true
        }
        _ => false,
    }
}

fn describe(path: &[Step]) -> String {
    path.iter()
        .map(|s| match s {
            Step::Key(k) => k.clone(),
            Step::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// One random edit of a node of `value`: a hostile value, removal, or an unknown key beside it.
pub fn mutate_json(value: &mut Value, rng: &mut ChaCha8Rng) -> String {
    let all = paths(value);
    let path = pick(&all, rng).clone();
    let what = describe(&path);
    match rng.random_range(0..10) {
        0 => {
            edit(value, &path, None);
            format!("{what} removed")
        }
        1 => {
            let (_, parent) = path.split_last().unwrap();
            if let Some(Value::Object(map)) = node_mut(value, parent) {
                map.insert("surplus".into(), json!(1));
            }
            format!("unknown key beside {what}")
        }
        _ => {
            let new = pick(&hostile_json(), rng).clone();
            let text = new.to_string();
            edit(value, &path, Some(new));
            format!("{what} = {text}")
        }
    }
}

pub fn metadata(parts: &mut Parts) -> &mut Map<String, Value> {
    parts.header[METADATA].as_object_mut().unwrap()
}

/// The JSON held in metadata string `key`, edited by `f`, stored back as a string.
pub fn edit_metadata_json<T>(parts: &mut Parts, key: &str, f: impl FnOnce(&mut Value) -> T) -> Option<T> {
    let text = metadata(parts).get(key)?.as_str()?.to_string();
    let mut value: Value = serde_json::from_str(&text).unwrap();
    let out = f(&mut value);
    metadata(parts).insert(key.into(), Value::String(value.to_string()));
    Some(out)
}
