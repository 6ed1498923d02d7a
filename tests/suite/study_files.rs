//! The study files posflow ships (`studies/*.toml`) load and plan, and the Chomsky-hierarchy
//! studies cover what issue 41 asks: six tasks or more across the three levels, each with no
//! encoding and every encoding standard and randomized, learned and TUPE-A in two tasks or more.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use posflow::data::chomsky::Level;
use posflow::study::Study;

fn study_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("studies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_shipped_study_file_loads_and_plans() {
    let files = study_files();
    assert!(files.len() >= 20, "{files:?}");
    for path in files {
        let study = Study::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!study.claims.is_empty(), "{}", path.display());
    }
}

#[test]
fn the_chomsky_studies_cover_six_tasks_of_three_levels_with_every_encoding() {
    // Every variant of each task, over its files (a task may be split in two).
    let mut tasks: BTreeMap<String, (Level, BTreeSet<String>)> = BTreeMap::new();
    for path in study_files() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("chomsky_") || name == "chomsky_gpu" {
            continue;
        }
        let study = Study::load(&path).unwrap();
        let (task, _) = study
            .base
            .data
            .chomsky()
            .expect("a Chomsky study trains on a Chomsky task");
        let entry = tasks
            .entry(format!("{task:?}"))
            .or_insert_with(|| (task.generator().level(), BTreeSet::new()));
        entry.1.extend(study.variants.iter().map(|v| v.name.clone()));
        for variant in &study.variants {
            let randomized = variant.run.model.random_positions;
            assert_eq!(
                randomized.is_some(),
                variant.name.ends_with("_rand"),
                "{name}: {}",
                variant.name
            );
        }
    }
    assert!(tasks.len() >= 6, "{tasks:?}");
    for level in [Level::Regular, Level::ContextFree, Level::ContextSensitive] {
        assert!(tasks.values().any(|(l, _)| *l == level), "{level:?}");
    }
    let mut with_tables = 0;
    for (task, (_, variants)) in &tasks {
        let mut required = vec!["none".to_string()];
        for encoding in ["sinusoidal", "rope", "alibi", "relative", "floater"] {
            required.extend([encoding.to_string(), format!("{encoding}_rand")]);
        }
        for variant in &required {
            assert!(variants.contains(variant), "{task} lacks {variant}: {variants:?}");
        }
        if ["learned", "learned_rand", "tupe_a", "tupe_a_rand"]
            .iter()
            .all(|v| variants.contains(*v))
        {
            with_tables += 1;
        }
    }
    assert!(with_tables >= 2, "learned and TUPE-A in {with_tables} tasks");
}
