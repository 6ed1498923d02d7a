//! The crate's import graph has no cycles: no two files under `src/` name each other, and no two
//! top-level modules do, so the floors of DESIGN.md stack one way. An import is a `use` line or a
//! path written inline in code (`super::task::f()`, `crate::data::Batch::new`); test code (a
//! file's `#[cfg(test)] mod tests`, `tests.rs` and `*_tests.rs` files, `testing.rs`) may reach
//! anywhere and is left out. A module's own `mod.rs` re-exporting its children is no edge.
//!
//! Also the position encodings' seam: outside `src/model/posenc/`, nothing under `src/` (tests
//! and comments included) names an encoding's variant (`PosEnc::Floater`, or any `Type::Floater`);
//! everything reaches them through the `Encoding` trait and the registry's presets and forms, so a
//! new encoding is a file and a registry line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A file and the module path it defines (`src/model/posenc/mod.rs` is `model::posenc`).
struct Source {
    path: PathBuf,
    module: Vec<String>,
    /// Its text without test code and comments.
    code: String,
}

fn sources(src: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                if name == "tests" || name == "testing" || name.ends_with("_tests") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                files.push(Source {
                    module: module_of(src, &path),
                    code: without_comments(without_tests(&text)),
                    path,
                });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

fn module_of(src: &Path, path: &Path) -> Vec<String> {
    let relative = path.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    parts
}

/// The text before its inline `#[cfg(test)] mod tests { … }`, which closes a file. A
/// `#[cfg(test)] mod tests;` naming a file of its own declares no code here: the text goes on
/// past it (five `mod.rs` files declare theirs near the top).
fn without_tests(text: &str) -> &str {
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]") {
        let at = from + at;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        if let Some(after) = rest.strip_prefix("mod tests")
            && after.trim_start().starts_with('{')
        {
            return &text[..at];
        }
        from = at + 1;
    }
    text
}

fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use` tree names: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap().trim();
        return vec![path.to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut current) = (Vec::new(), 0, String::new());
    for ch in inner.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(ch);
        }
    }
    parts.push(current);
    parts
        .iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p))
        .map(|p| match (prefix.is_empty(), p.as_str()) {
            (true, _) => p,
            (false, "self") => prefix.to_string(),
            (false, _) => format!("{prefix}::{p}"),
        })
        .collect()
}

/// Every path a file imports: its `use` trees, and `crate::…` / `super::…` paths inline.
fn imported_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = String::new();
    let mut statement: Option<String> = None;
    for line in code.lines() {
        if let Some(s) = statement.as_mut() {
            s.push(' ');
            s.push_str(line);
        } else {
            let trimmed = line.trim_start();
            let after_pub = match trimmed.strip_prefix("pub") {
                Some(r) if r.starts_with('(') => r[r.find(')').map_or(0, |i| i + 1)..].trim_start(),
                Some(r) if r.starts_with(' ') => r.trim_start(),
                _ => trimmed,
            };
            match after_pub.strip_prefix("use ") {
                Some(tree) => statement = Some(tree.to_string()),
                None => {
                    rest.push_str(line);
                    rest.push('\n');
                    continue;
                }
            }
        }
        let s = statement.as_ref().unwrap();
        if let Some(end) = s.find(';') {
            paths.extend(expand(&s[..end]));
            statement = None;
        }
    }
    paths.extend(inline_paths(&rest));
    paths
}

/// `crate::a::b` and `super::a` written in code, not preceded by a word or `::`.
fn inline_paths(code: &str) -> Vec<String> {
    let bytes = code.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    for root in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(root) {
            let at = from + at;
            from = at + root.len();
            if at > 0 && (word(bytes[at - 1]) || bytes[at - 1] == b':') {
                continue;
            }
            // Segments of word characters joined by `::`.
            let mut end = at;
            loop {
                end += code[end..].bytes().take_while(|&b| word(b)).count();
                let joined = code[end..].starts_with("::");
                if !(joined && bytes.get(end + 2).is_some_and(|&b| word(b))) {
                    break;
                }
                end += 2;
            }
            if end > at {
                found.push(code[at..end].to_string());
            }
        }
    }
    found
}

/// The file a path names: the longest prefix of it that is a module.
fn resolve<'a>(modules: &'a BTreeMap<Vec<String>, PathBuf>, parts: &[String]) -> Option<&'a PathBuf> {
    (0..=parts.len())
        .rev()
        .find_map(|i| modules.get(&parts[..i].to_vec()))
}

/// Each file's imports, as files.
fn import_graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let files = sources(src);
    let modules: BTreeMap<Vec<String>, PathBuf> =
        files.iter().map(|f| (f.module.clone(), f.path.clone())).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let mut targets = BTreeSet::new();
        for path in imported_paths(&file.code) {
            let parts: Vec<String> = path.split("::").map(|p| p.trim().to_string()).collect();
            let absolute: Vec<String> = match parts[0].as_str() {
                "crate" => parts[1..].to_vec(),
                "super" => {
                    let ups = parts.iter().take_while(|p| *p == "super").count();
                    let keep = file.module.len().saturating_sub(ups);
                    file.module[..keep].iter().chain(&parts[ups..]).cloned().collect()
                }
                "self" => file.module.iter().chain(&parts[1..]).cloned().collect(),
                _ => continue,
            };
            if let Some(target) = resolve(&modules, &absolute)
                && *target != file.path
            {
                targets.insert(target.clone());
            }
        }
        graph.insert(file.path.clone(), targets);
    }
    graph
}

/// `src/…` of a path under the crate.
fn short(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The variants of the registry's `PosEnc` (`Floater = "floater" => …` lines), `None` left out:
/// it is also `Option`'s.
fn encoding_variants(src: &Path) -> Vec<String> {
    let registry = std::fs::read_to_string(src.join("model/posenc/registry.rs")).unwrap();
    let list = &registry[registry.find("registry! {").expect("the registry's list")..];
    list.lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().split_once(" = \"")?;
            (rest.contains("\" => ") && name != "None").then(|| name.to_string())
        })
        .collect()
}

/// The `.rs` files under `src` outside `src/model/posenc/` that name a variant of `variants` as
/// `Type::Variant` anywhere (tests and comments too), with the first such name.
fn files_naming_an_encoding(src: &Path, variants: &[String]) -> Vec<(PathBuf, String)> {
    let posenc = src.join("model").join("posenc");
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && path != posenc {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                if let Some(name) = first_variant_named(&text, variants) {
                    files.push((path, name));
                }
            }
        }
    }
    files.sort();
    files
}

/// The first `Type::Variant` in `text` (Type capitalised, Variant one of `variants` whole).
fn first_variant_named(text: &str, variants: &[String]) -> Option<String> {
    text.match_indices("::").find_map(|(at, _)| {
        let ty: String = text[..at]
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let name: String = text[at + 2..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (ty.starts_with(|c: char| c.is_ascii_uppercase()) && variants.contains(&name))
            .then(|| format!("{ty}::{name}"))
    })
}

#[test]
fn only_the_registry_names_an_encoding() {
    let variants = encoding_variants(&src());
    assert!(variants.len() >= 8, "{variants:?}");
    let found = files_naming_an_encoding(&src(), &variants);
    assert!(found.is_empty(), "outside src/model/posenc/: {found:?}");
}

/// The check sees a variant wherever it is named outside `posenc/`, and only a whole one.
#[test]
fn the_encoding_check_sees_a_variant_named_anywhere() {
    let dir = std::env::temp_dir().join(format!("posflow-registry-check-{}", std::process::id()));
    let write = |name: &str, text: &str| {
        std::fs::create_dir_all(dir.join("model/posenc")).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    };
    let variants = ["Rope".to_string(), "Floater".to_string(), "TupeA".to_string()];
    write("model/posenc/registry.rs", "fn f() { PosEnc::Rope(x) }\n");
    write("other.rs", "fn f() { PosEnc::default(); Kind::Ropes; x::Rope }\n");
    assert!(files_naming_an_encoding(&dir, &variants).is_empty());
    write("viz.rs", "fn f(p: PosEnc) { if let PosEnc::Floater(f) = p {} }\n");
    write("tested.rs", "#[cfg(test)]\nmod tests {\n    // View::TupeA\n}\n");
    let found = files_naming_an_encoding(&dir, &variants);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        [
            (dir.join("tested.rs"), "View::TupeA".to_string()),
            (dir.join("viz.rs"), "PosEnc::Floater".to_string())
        ]
    );
}

#[test]
fn no_two_files_import_each_other() {
    let graph = import_graph(&src());
    assert!(graph.len() > 100, "read {} files", graph.len());
    let cycles: Vec<String> = graph
        .iter()
        .flat_map(|(a, targets)| targets.iter().map(move |b| (a, b)))
        .filter(|(a, b)| a < b && graph[*b].contains(*a))
        .map(|(a, b)| format!("{} <-> {}", short(a), short(b)))
        .collect();
    assert!(
        cycles.is_empty(),
        "two-file import cycles:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_top_level_modules_import_one_way() {
    let src = src();
    let top = |path: &Path| module_of(&src, path).first().cloned().unwrap_or_default();
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, targets) in import_graph(&src) {
        for target in targets {
            let (a, b) = (top(&file), top(&target));
            if a != b && !a.is_empty() && !b.is_empty() {
                modules.entry(a).or_default().insert(b);
            }
        }
    }
    // A module that reaches itself through the others is in a cycle.
    let mut cycles = Vec::new();
    for start in modules.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = modules[start].iter().collect();
        while let Some(m) = stack.pop() {
            if seen.insert(m.clone()) {
                stack.extend(modules.get(m).into_iter().flatten());
            }
        }
        if seen.contains(start) {
            cycles.push(start.clone());
        }
    }
    assert!(
        cycles.is_empty(),
        "modules in an import cycle: {cycles:?}\n{modules:#?}"
    );
}

/// The reader finds what a cycle is made of: use trees, renames, `pub(crate) use`, and paths
/// written inline, also after a `mod tests;` declaration, but not in comments or test code.
#[test]
fn the_reader_sees_use_lines_and_inline_paths() {
    let code = without_comments(without_tests(
        "use super::{config::{A, B as C}, task};\npub(crate) use crate::data::{self, Batch};\n\
         #[cfg(test)]\nmod tests;\n\
         fn f() { super::task::g(); x::crate::no(); } // crate::comment::no\n\
         #[cfg(test)]\nmod tests { use crate::model::X; }",
    ));
    let paths = imported_paths(&code);
    assert_eq!(
        paths,
        [
            "super::config::A",
            "super::config::B",
            "super::task",
            "crate::data",
            "crate::data::Batch",
            "super::task::g",
        ]
    );
}
