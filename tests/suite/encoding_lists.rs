//! The lists outside Rust that name encodings hold exactly the registry's: the PyTorch port's
//! table, the reference checkpoints its parity tests read (one or more per encoding), and the
//! encodings `studies/chomsky.py` writes into the Chomsky studies (each a registry preset, as a
//! token classifier has it). A new encoding that one of them misses fails here.

use std::collections::BTreeSet;
use std::path::Path;

use posflow::checkpoint::Checkpoint;
use posflow::model::posenc::{TYPES, preset};

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The `"key": value` keys of the Python dict literal `NAME = { … }` in `text`.
fn dict_keys(text: &str, name: &str) -> BTreeSet<String> {
    let start = text
        .find(&format!("\n{name} = {{"))
        .unwrap_or_else(|| panic!("no {name}"));
    let body = &text[start..start + text[start..].find("\n}").unwrap()];
    body.lines()
        .filter_map(|line| {
            line.trim()
                .strip_prefix('"')?
                .split_once('"')
                .map(|(key, _)| key.to_string())
        })
        .collect()
}

fn registry() -> BTreeSet<String> {
    TYPES.iter().map(|t| t.to_string()).collect()
}

#[test]
fn the_pytorch_port_has_every_encoding_and_no_other() {
    let port = dict_keys(&read("python/posflow_torch/encodings.py"), "POSENCS");
    assert_eq!(port, registry());
}

/// The `posenc` type of a checkpoint's model config.
fn posenc_type(path: &Path) -> String {
    let metadata = Checkpoint::read_metadata(path).unwrap();
    let config: serde_json::Value = serde_json::from_str(&metadata.config).unwrap();
    config["posenc"]["type"].as_str().unwrap().to_string()
}

#[test]
fn every_encoding_has_a_reference_checkpoint() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/models");
    let covered: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.ends_with(".safetensors") && !name.contains(".expected.")
        })
        .map(|path| posenc_type(&path))
        .collect();
    assert_eq!(covered, registry());
}

/// `("name", "label", posenc)` rows of a Python list `NAME = [ … ]`, the posenc a literal
/// string or a constant of the file.
fn chomsky_encodings(text: &str, list: &str) -> Vec<(String, String)> {
    let start = text
        .find(&format!("\n{list} = ["))
        .unwrap_or_else(|| panic!("no {list}"));
    let body = &text[start..start + text[start..].find("\n]").unwrap()];
    body.lines()
        .filter_map(|line| {
            let row = line.trim().strip_prefix("(\"")?.strip_suffix("),")?;
            let (name, rest) = row.split_once('"')?;
            let (_label, posenc) = rest.strip_prefix(", \"")?.split_once("\", ")?;
            let posenc = match posenc.strip_prefix('\'') {
                Some(literal) => literal.strip_suffix('\'')?.to_string(),
                None => {
                    let define = format!("\n{posenc} = '");
                    let at = text
                        .find(&define)
                        .unwrap_or_else(|| panic!("no constant {posenc}"))
                        + define.len();
                    text[at..at + text[at..].find('\'').unwrap()].to_string()
                }
            };
            Some((name.to_string(), posenc))
        })
        .collect()
}

#[test]
fn the_chomsky_studies_encodings_are_the_registry_s_presets() {
    let script = read("studies/chomsky.py");
    let rows: Vec<(String, String)> = ["ENCODINGS", "TABLES"]
        .iter()
        .flat_map(|list| chomsky_encodings(&script, list))
        .collect();
    assert!(rows.len() >= 7, "{rows:?}");
    for (name, posenc) in rows {
        let preset = preset(&name).unwrap_or_else(|| panic!("studies/chomsky.py's {name} is no preset"));
        assert_eq!(posenc, preset.posenc_for(true), "{name}");
    }
}
