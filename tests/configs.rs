//! Every run config shipped in configs/ parses, validates and builds its trainer, and saves its
//! outputs under runs/ by its own name, so two runs never overwrite each other.

use std::path::Path;
use std::rc::Rc;

use posflow::backend::CpuBackend;
use posflow::train::{DEFAULT_RUN, RunConfig, Trainer};

#[test]
fn every_shipped_config_builds_a_trainer() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let run = RunConfig::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let t = &run.train;
        for output in t.checkpoint.iter().chain(&t.metrics) {
            assert_eq!(
                output.parent().zip(output.file_stem()),
                Some((Path::new("runs"), name.as_ref())),
                "{name}: outputs go to runs/{name}.*"
            );
        }
        Trainer::new(Rc::new(CpuBackend::new()), run).unwrap_or_else(|e| panic!("{name}: {e}"));
        names.push(name);
    }
    names.sort();
    for expected in [
        "moby_dick",
        "moby_learned",
        "moby_none",
        "moby_sinusoidal",
        "copy",
        "cmudict",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "configs/{expected}.toml is missing: {names:?}"
        );
    }
}

#[test]
fn the_built_in_default_is_configs_moby_dick() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/moby_dick.toml");
    assert_eq!(std::fs::read_to_string(path).unwrap(), DEFAULT_RUN);
}
