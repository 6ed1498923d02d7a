//! The visualizer: what its views compute (position encodings, TUPE's correlation, attention,
//! completions), its errors, and its pictures (`posflow viz --export`).
#![cfg(feature = "viz")]

use crate::common::binary;
use crate::common::scratch as scratch_dir;

use binary::posflow_in;
use scratch_dir::scratch;
use std::collections::BTreeMap;
use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend};
use posflow::checkpoint::{Checkpoint, Metadata, TrainingState};
use posflow::data::CharTokenizer;
use posflow::model::posenc::sinusoidal_table;
use posflow::model::{
    Block, EmbedScale, FloaterConfig, LN_EPS, Model, ModelConfig, ModelKind, PosEnc, TupeForm,
};
use posflow::params::ParamStore;
use posflow::viz::attention::attention_view;
use posflow::viz::colormap::Colormap;
use posflow::viz::metrics::parse_metrics;
use posflow::viz::posenc::position_encodings;
use posflow::viz::tupe::tupe_correlation;
use posflow::viz::{LoadedCheckpoint, Spawner, Viewer, ViewerHandle};

use eframe::egui;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use posflow::model::{Learned, Relative, Sinusoidal, TupeA};

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

const TEXT: &str = "call me ishmael.";

fn config(posenc: PosEnc, kind: ModelKind) -> ModelConfig {
    ModelConfig {
        vocab: CharTokenizer::from_text(TEXT).vocab_size(),
        d_model: 16,
        heads: 2,
        layers: 2,
        ffn: 32,
        dropout: 0.0,
        max_len: 12,
        kind,
        posenc,
        embed_scale: EmbedScale::None,
        block: Block::Residual,
        ..ModelConfig::default()
    }
}

fn lm(posenc: PosEnc) -> ModelConfig {
    config(posenc, ModelKind::CausalLm { tied_head: true })
}

/// The parameters of `config` at their initial values, with `adjust` applied, as checkpoint bytes
/// (no run config, as a library user would save them).
fn checkpoint_bytes(config: &ModelConfig, adjust: impl Fn(&ParamStore)) -> Vec<u8> {
    let model = Model::new(config.clone()).unwrap();
    let g = model.declare_params().unwrap();
    let params = ParamStore::init(cpu(), &g, 3).unwrap();
    adjust(&params);
    let metadata = Metadata {
        config: serde_json::to_string(config).unwrap(),
        training: TrainingState::default(),
        tokenizer: Some(CharTokenizer::from_text(TEXT).to_json()),
    };
    let checkpoint = pollster::block_on(Checkpoint::gather(&params, None, metadata)).unwrap();
    checkpoint.to_bytes().unwrap()
}

fn load(config: &ModelConfig) -> LoadedCheckpoint {
    LoadedCheckpoint::from_bytes(cpu(), "test", &checkpoint_bytes(config, |_| {})).unwrap()
}

fn read(loaded: &LoadedCheckpoint, name: &str) -> Vec<f32> {
    pollster::block_on(loaded.saved.params.read(name)).unwrap()
}

#[test]
fn colormap_legend_ends_are_the_map_s_range_and_colours() {
    let map = Colormap::diverging_for(&[-0.5, 2.0, 1.0]);
    assert_eq!(map.range(), (-2.0, 2.0));
    // The ends are the two saturated colours, the middle white.
    let (low, high) = map.range();
    assert_eq!(map.color(low), egui_rgb(33, 102, 172));
    assert_eq!(map.color(0.0), egui_rgb(247, 247, 247));
    assert_eq!(map.color(high), egui_rgb(178, 24, 43));
    assert_eq!(Colormap::Sequential { max: 1.0 }.range(), (0.0, 1.0));
}

fn egui_rgb(r: u8, g: u8, b: u8) -> eframe::egui::Color32 {
    eframe::egui::Color32::from_rgb(r, g, b)
}

/// The heatmap of a sinusoidal model is the table itself, past the model's max_len too.
#[test]
fn sinusoidal_heatmap_is_the_sinusoidal_table_at_any_length() {
    let loaded = load(&lm(PosEnc::Sinusoidal(Sinusoidal {
        every_block: false,
        ..Sinusoidal::default()
    })));
    let encodings = pollster::block_on(position_encodings(&loaded, 50)).unwrap();
    assert_eq!(encodings.maps.len(), 1);
    let map = &encodings.maps[0];
    assert_eq!(
        (map.label.as_str(), map.positions, map.dims, map.valid_positions),
        ("input", 50, 16, 50)
    );
    assert_eq!(map.values, sinusoidal_table(50, 16));
}

/// A learned table shows its rows and marks where it ends: nothing is invented past it.
#[test]
fn a_learned_table_ends_at_its_length() {
    let loaded = load(&lm(PosEnc::Learned(Learned {})));
    let encodings = pollster::block_on(position_encodings(&loaded, 30)).unwrap();
    let map = &encodings.maps[0];
    assert_eq!((map.positions, map.valid_positions), (30, 12));
    let table = read(&loaded, "pos_emb.weight");
    assert_eq!(&map.values[..12 * 16], &table[..]);
    assert!(map.values[12 * 16..].iter().all(|&v| v == 0.0));
    assert!(encodings.note.contains("max_len = 12"), "{}", encodings.note);
}

/// FLOATER solves one map per block for lengths past training; T5 has no table and says why.
#[test]
fn floater_encodings_run_past_the_table_and_relative_is_described() {
    let floater: FloaterConfig = toml::from_str(r#"form = "additive""#).unwrap();
    let loaded = load(&lm(PosEnc::Floater(floater)));
    let encodings = pollster::block_on(position_encodings(&loaded, 40)).unwrap();
    let labels: Vec<&str> = encodings.maps.iter().map(|m| m.label.as_str()).collect();
    assert_eq!(labels, ["block 0", "block 1"]);
    for map in &encodings.maps {
        assert_eq!((map.positions, map.valid_positions), (40, 40));
        assert!(map.values.iter().all(|v| v.is_finite()));
    }
    // Each block starts from its own initial value.
    let initial = read(&loaded, "posenc.floater.initial");
    assert_eq!(&encodings.maps[1].values[..16], &initial[16..32]);

    // The compatible form: the sinusoidal table at the input, then every block's q, k and v
    // biases, each starting at its row of b(0) = `qkv_initial` [3, layers, D].
    let compatible = load(&lm(PosEnc::Floater(toml::from_str("").unwrap())));
    let encodings = pollster::block_on(position_encodings(&compatible, 40)).unwrap();
    let labels: Vec<&str> = encodings.maps.iter().map(|m| m.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "input",
            "block 0: q bias",
            "block 0: k bias",
            "block 0: v bias",
            "block 1: q bias",
            "block 1: k bias",
            "block 1: v bias"
        ]
    );
    assert_eq!(encodings.maps[0].values, sinusoidal_table(40, 16));
    let initial = read(&compatible, "posenc.floater.qkv_initial");
    let layers = 2;
    for (k, map) in encodings.maps[1..].iter().enumerate() {
        let (layer, part) = (k / 3, k % 3);
        let row = (part * layers + layer) * 16;
        assert_eq!(&map.values[..16], &initial[row..row + 16], "{}", map.label);
        assert!(map.values.iter().all(|v| v.is_finite()));
        assert_ne!(
            map.values[..16],
            map.values[39 * 16..],
            "{}: no drift along the positions",
            map.label
        );
    }

    let relative = load(&lm(PosEnc::Relative(Relative {
        buckets: 8,
        max_distance: 20,
        learned_absolute: false,
    })));
    let encodings = pollster::block_on(position_encodings(&relative, 40)).unwrap();
    assert!(encodings.maps.is_empty());
    assert!(
        encodings.note.contains("relative position bias"),
        "{}",
        encodings.note
    );
}

/// Each `gain.len()`-wide row of `table` through a layer norm, in f64.
fn layer_normed_rows(table: &[f32], gain: &[f32], bias: &[f32]) -> Vec<Vec<f64>> {
    let d = gain.len();
    table
        .chunks(d)
        .map(|p| {
            let mean = p.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
            let var = p.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / d as f64;
            let rstd = 1.0 / (var + f64::from(LN_EPS)).sqrt();
            (0..d)
                .map(|k| (f64::from(p[k]) - mean) * rstd * f64::from(gain[k]) + f64::from(bias[k]))
                .collect()
        })
        .collect()
}

/// TUPE's positional correlation per head equals (LN(p_i) U_Q^h)·(LN(p_j) U_K^h) / √(2·Dh) from
/// the parameters, and the untied θ's are read back.
#[test]
fn tupe_correlation_matches_a_direct_computation() {
    let c = config(
        PosEnc::TupeA(TupeA {
            untie_cls: true,
            form: TupeForm::Paper,
        }),
        ModelKind::Encoder { n_classes: 2 },
    );
    // Non-trivial layer norm and θ's, so that leaving them out would show.
    let bytes = checkpoint_bytes(&c, |params| {
        let ramp = |n: usize, base: f32| (0..n).map(|i| base + 0.05 * i as f32).collect::<Vec<_>>();
        params.set("posenc.tupe.ln.gain", &ramp(16, 0.8)).unwrap();
        params.set("posenc.tupe.ln.bias", &ramp(16, -0.3)).unwrap();
        params.set("posenc.tupe.cls_to_others", &[0.5, -1.5]).unwrap();
        params.set("posenc.tupe.others_to_cls", &[2.0, 0.25]).unwrap();
    });
    let loaded = LoadedCheckpoint::from_bytes(cpu(), "tupe", &bytes).unwrap();
    let tupe = pollster::block_on(tupe_correlation(&loaded.saved)).unwrap();
    let (d, heads, dh, len) = (16, 2, 8, 12);
    assert_eq!((tupe.heads, tupe.len), (heads, len));
    assert_eq!(tupe.untied, Some((vec![0.5, -1.5], vec![2.0, 0.25])));

    let table = read(&loaded, "posenc.tupe.weight");
    let gain = read(&loaded, "posenc.tupe.ln.gain");
    let bias = read(&loaded, "posenc.tupe.ln.bias");
    let (uq, uk) = (
        read(&loaded, "posenc.tupe.query.weight"),
        read(&loaded, "posenc.tupe.key.weight"),
    );
    let normed = layer_normed_rows(&table, &gain, &bias);
    let project = |p: &[f64], u: &[f32], column: usize| -> f64 {
        (0..d).map(|k| p[k] * f64::from(u[k * d + column])).sum()
    };
    let scale = 1.0 / (2.0 * dh as f64).sqrt();
    let mut worst = 0f64;
    for h in 0..heads {
        for i in 0..len {
            for j in 0..len {
                let direct: f64 = (0..dh)
                    .map(|e| project(&normed[i], &uq, h * dh + e) * project(&normed[j], &uk, h * dh + e))
                    .sum::<f64>()
                    * scale;
                let got = f64::from(tupe.values[(h * len + i) * len + j]);
                worst = worst.max((got - direct).abs());
            }
        }
    }
    assert!(worst < 1e-5, "largest difference {worst}");
    assert!(
        tupe.values.iter().any(|v| v.abs() > 1e-4),
        "the correlation is all zero"
    );

    let not_tupe = load(&lm(PosEnc::Learned(Learned {})));
    let err = pollster::block_on(tupe_correlation(&not_tupe.saved)).unwrap_err();
    assert!(err.to_string().contains("learned table"), "{err}");
}

#[test]
fn attention_rows_are_distributions_over_the_typed_tokens() {
    let loaded = load(&lm(PosEnc::Learned(Learned {})));
    let view = pollster::block_on(attention_view(&loaded, "me ishmael. call")).unwrap();
    // 16 characters, cut to the table's 12.
    assert_eq!(view.truncated_from, Some(16));
    assert_eq!(view.tokens[..3], ["m", "e", "·"]);
    assert_eq!(
        (
            view.maps.layers.len(),
            view.maps.heads,
            view.maps.queries,
            view.maps.keys
        ),
        (2, 2, 12, 12)
    );
    for layer in 0..2 {
        for head in 0..2 {
            for row in view.maps.head(layer, head).chunks(12) {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
            }
        }
    }
    let err = pollster::block_on(attention_view(&loaded, "call me Z")).unwrap_err();
    assert!(err.to_string().contains("never saw"), "{err}");
}

#[test]
fn a_metrics_log_with_a_bad_line_is_an_error_naming_the_line() {
    let good = r#"{"kind":"train","step":0,"loss":4.5,"lr":0.001,"grad_norm":1.0,"tokens_per_s":100.0}"#;
    assert_eq!(parse_metrics(good).unwrap().len(), 1);
    let err = parse_metrics(&format!("{good}\n\n{{\"kind\":\"train\",\"step\":1}}\n"))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("metrics log line 3: missing field"), "{err}");
    let err = parse_metrics("not json").unwrap_err().to_string();
    assert!(err.contains("line 1") && err.contains("`not json`"), "{err}");
}

/// A file that is not a checkpoint, or a truncated one, is an error the viewer lists; it never
/// panics and loads nothing.
#[test]
fn broken_checkpoint_bytes_are_an_error_in_the_viewer() {
    let viewer = Viewer::new(cpu(), Spawner::blocking());
    let handle = viewer.handle();
    assert_eq!(handle.status(), "empty");
    let good = checkpoint_bytes(&lm(PosEnc::Learned(Learned {})), |_| {});
    for (name, bytes) in [
        ("junk.bin", b"definitely not safetensors".to_vec()),
        ("short.safetensors", good[..good.len() / 2].to_vec()),
        ("empty.safetensors", Vec::new()),
    ] {
        let err = handle.load_checkpoint_bytes(name, &bytes).unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
    }
    assert!(handle.load_metrics_text("bad.jsonl", "{").is_err());
    assert_eq!(handle.checkpoints(), Vec::<String>::new());
    assert_eq!(handle.errors().len(), 4);
    assert_eq!(handle.status(), "empty");

    handle.load_checkpoint_bytes("good.safetensors", &good).unwrap();
    assert_eq!(handle.checkpoints(), ["good.safetensors"]);
    assert_eq!(handle.status(), "ready");
}

/// The page drives the prompt through the handle and reads the greedy completion back.
#[test]
fn the_handle_completes_a_prompt() {
    let viewer = Viewer::new(cpu(), Spawner::blocking());
    let handle = viewer.handle();
    assert_eq!(handle.last_completion(), None);
    handle
        .load_checkpoint_bytes("lm", &checkpoint_bytes(&lm(PosEnc::Learned(Learned {})), |_| {}))
        .unwrap();
    handle.set_prompt("call ");
    let first = handle.last_completion().expect("a completion");
    assert!(first.chars().all(|c| TEXT.contains(c)), "{first:?}");
    // Greedy: the same prompt gives the same text.
    handle.set_prompt("me ");
    handle.set_prompt("call ");
    assert_eq!(handle.last_completion(), Some(first));
    // A character the model never saw is an error, and no completion.
    handle.set_prompt("Q");
    assert_eq!(handle.last_completion(), None);
    assert_eq!(handle.status(), "ready");
}

#[test]
fn jobs_run_one_at_a_time_in_order() {
    // A page's spawner: tasks run later, beside the frames (here: when the test says so).
    let tasks: Rc<std::cell::RefCell<Vec<posflow::viz::Task>>> = Rc::default();
    let queued = tasks.clone();
    let viewer = Viewer::new(cpu(), Spawner::new(move |task| queued.borrow_mut().push(task)));
    let handle = viewer.handle();
    let bytes = checkpoint_bytes(&lm(PosEnc::Learned(Learned {})), |_| {});
    handle.load_checkpoint_bytes("lm", &bytes).unwrap();
    handle.set_prompt("call ");
    handle.set_prompt("me ");
    // Two completions share one generator: one task runs both, the second after the first.
    assert_eq!(tasks.borrow().len(), 1);
    assert_eq!(handle.status(), "busy");
    let runner = tasks.borrow_mut().pop().unwrap();
    pollster::block_on(runner);
    assert_eq!(handle.status(), "ready");
    assert_eq!(handle.completed_prompt().as_deref(), Some("me "));

    let reference = Viewer::new(cpu(), Spawner::blocking());
    reference.handle().load_checkpoint_bytes("lm", &bytes).unwrap();
    reference.handle().set_prompt("me ");
    assert_eq!(handle.last_completion(), reference.handle().last_completion());
    // The queue is empty again: the next job gets a new runner.
    handle.set_prompt("call ");
    assert_eq!(tasks.borrow().len(), 1);
}

/// Every parameter's bits, by name.
fn bits(loaded: &LoadedCheckpoint) -> BTreeMap<String, Vec<u32>> {
    let params = &loaded.saved.params;
    params
        .iter()
        .map(|(name, _)| {
            let values = pollster::block_on(params.read(name)).unwrap();
            (name.to_string(), values.iter().map(|v| v.to_bits()).collect())
        })
        .collect()
}

fn floater() -> ModelConfig {
    lm(PosEnc::Floater(toml::from_str("").unwrap()))
}

/// The whole window, tall enough that the fine-tuning section is on screen.
fn window(viewer: &Viewer) -> Harness<'_> {
    Harness::builder()
        .with_size(egui::vec2(1280.0, 1400.0))
        .build_ui(|ui| viewer.show(ui))
}

/// Frames until fine-tuning stops: each runs one step.
fn frames_until_fine_tuned(harness: &mut Harness, handle: &ViewerHandle) {
    for _ in 0..50 {
        harness.step();
        if !handle.fine_tune_status().running {
            return;
        }
    }
    panic!("still fine-tuning: {:?}", handle.fine_tune_status());
}

/// A few steps through the handle move FLOATER's parameters alone and the encodings with them;
/// Reset puts them back bit for bit.
#[test]
fn fine_tuning_moves_only_the_position_encoder_and_reset_restores_it() {
    let viewer = Viewer::new(cpu(), Spawner::blocking());
    let handle = viewer.handle();
    handle
        .load_checkpoint_bytes("floater", &checkpoint_bytes(&floater(), |_| {}))
        .unwrap();
    let loaded = handle.loaded_checkpoint(0).unwrap();
    let before = bits(&loaded);
    handle.set_length(20);
    let encodings_before = pollster::block_on(position_encodings(&loaded, 20)).unwrap();
    let mut harness = window(&viewer);
    harness.step();
    harness.get_by_label("Start");
    assert_eq!(handle.shown_encodings(0).as_ref(), Some(&encodings_before));

    handle.start_fine_tune(&"call me ishmael. ".repeat(4), 6).unwrap();
    frames_until_fine_tuned(&mut harness, &handle);
    let status = handle.fine_tune_status();
    assert_eq!(
        (status.steps_done, status.steps_total, status.error),
        (6, 6, None)
    );
    assert_eq!(status.losses.len(), 6);
    assert!(status.losses.iter().all(|l| l.is_finite()), "{:?}", status.losses);
    harness.step();
    harness.get_by_label_contains("step 6 / 6");
    for (name, after) in bits(&loaded) {
        assert_eq!(after != before[&name], name.starts_with("posenc."), "{name}");
    }
    // The heatmap shows the fine-tuned encodings.
    let encodings_after = pollster::block_on(position_encodings(&loaded, 20)).unwrap();
    assert_ne!(encodings_after, encodings_before);
    assert_eq!(handle.shown_encodings(0), Some(encodings_after));

    handle.reset_fine_tune();
    assert_eq!(bits(&loaded), before);
    assert_eq!(handle.fine_tune_status().steps_done, 0);
    harness.run_steps(2);
    assert_eq!(handle.shown_encodings(0), Some(encodings_before));
}

/// Bad texts, no checkpoint and a sinusoidal model are errors that say why, also in the view.
#[test]
fn fine_tuning_errors_are_explained() {
    let viewer = Viewer::new(cpu(), Spawner::blocking());
    let handle = viewer.handle();
    let err = handle.start_fine_tune("call me", 5).unwrap_err().to_string();
    assert!(err.contains("load a checkpoint"), "{err}");

    handle
        .load_checkpoint_bytes("floater", &checkpoint_bytes(&floater(), |_| {}))
        .unwrap();
    let err = handle
        .start_fine_tune(&"call me Ishmael. ".repeat(4), 5)
        .unwrap_err()
        .to_string();
    assert!(err.contains("never saw") && err.contains('I'), "{err}");
    assert_eq!(handle.fine_tune_status().error, Some(err));
    let err = handle.start_fine_tune("call me", 5).unwrap_err().to_string();
    assert!(err.contains("at least 13"), "{err}");
    let mut harness = window(&viewer);
    harness.step();
    harness.get_by_label_contains("at least 13");

    let sinusoidal = checkpoint_bytes(
        &lm(PosEnc::Sinusoidal(Sinusoidal {
            every_block: false,
            ..Sinusoidal::default()
        })),
        |_| {},
    );
    handle.load_checkpoint_bytes("sinusoidal", &sinusoidal).unwrap();
    let err = handle
        .start_fine_tune(&"call me ishmael. ".repeat(4), 5)
        .unwrap_err()
        .to_string();
    assert!(err.contains("sinusoidal cannot be fine-tuned"), "{err}");
    harness.step();
    harness.get_by_label_contains("has no trained parameters");
    assert!(harness.query_by_label("Start").is_none());
    assert!(!handle.fine_tune_status().running);
}

const TINY_RUN: &str = r#"
[data]
task = "moby_dick"
seq_len = 32

[model]
d_model = 16
heads = 2
layers = 2
ffn = 32
max_len = 32
kind = { type = "causal_lm" }
posenc = { type = "floater" }

[train]
steps = 4
batch = 4
lr = 1e-2
eval_every = 2
eval_lengths = [16, 32]
checkpoint = "tiny.safetensors"
metrics = "tiny.jsonl"
sample_prompt = "Call me "
"#;

/// Trains a tiny FLOATER run, exports every view, and checks each picture has real content: many
/// pixels that are not the background (the most common colour).
#[test]
fn export_writes_one_picture_per_view_with_content() {
    let dir = scratch("viz", "export");
    std::fs::write(dir.join("tiny.toml"), TINY_RUN).unwrap();
    let o = posflow_in(&dir, &["train", "--config", "tiny.toml", "--device", "cpu"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = posflow_in(
        &dir,
        &[
            "--device",
            "cpu",
            "viz",
            "--checkpoint",
            "tiny.safetensors",
            "--metrics",
            "tiny.jsonl",
            "--length",
            "96",
            "--export",
            "out",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    // The renderer is egui's wgpu one: with no adapter at all it has nothing to draw with.
    if !o.status.success()
        && err.contains("no GPU adapter found")
        && std::env::var("POSFLOW_REQUIRE_GPU").as_deref() != Ok("1")
    {
        eprintln!(
            "SKIPPED VIEW EXPORT (no adapter for egui's renderer; set POSFLOW_REQUIRE_GPU=1 to fail instead): {err}"
        );
        return;
    }
    assert!(o.status.success(), "{err}");
    let expected = [
        ("position_encodings", 60_000),
        ("position_encodings_finetuned", 60_000),
        ("attention", 20_000),
        ("tupe", 2_000),
        ("metrics", 10_000),
        ("prompt", 5_000),
    ];
    for (view, at_least) in expected {
        let path = dir.join("out").join(format!("{view}.png"));
        let image = image::open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .to_rgba8();
        assert_eq!(image.dimensions(), (1280, 860), "{view}");
        let mut counts = std::collections::HashMap::new();
        for p in image.pixels() {
            *counts.entry(p.0).or_insert(0usize) += 1;
        }
        let background = counts.values().max().copied().unwrap();
        let content = image.pixels().len() - background;
        assert!(content >= at_least, "{view}: {content} pixels of content");
    }

    // A broken checkpoint fails an export (nobody would see the message in a picture).
    std::fs::write(dir.join("broken.safetensors"), b"nope").unwrap();
    let o = posflow_in(
        &dir,
        &["viz", "--checkpoint", "broken.safetensors", "--export", "out2"],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error: checkpoint broken.safetensors"), "{err}");
}

/// In the authors' code form position i reads table row i + 1 through U_Q, U_K with biases, and
/// the untied θ1, θ2 shown are rows 0's and 1's correlations with themselves.
#[test]
fn tupe_code_form_correlation_reads_the_rows_after_the_first_and_its_thetas() {
    let c = config(
        PosEnc::TupeA(TupeA {
            untie_cls: true,
            form: TupeForm::Code,
        }),
        ModelKind::MaskedLm {},
    );
    let bytes = checkpoint_bytes(&c, |params| {
        let ramp = |n: usize, base: f32| (0..n).map(|i| base + 0.05 * i as f32).collect::<Vec<_>>();
        params.set("posenc.tupe.query.bias", &ramp(16, -0.4)).unwrap();
        params.set("posenc.tupe.key.bias", &ramp(16, 0.1)).unwrap();
    });
    let loaded = LoadedCheckpoint::from_bytes(cpu(), "tupe_code", &bytes).unwrap();
    let tupe = pollster::block_on(tupe_correlation(&loaded.saved)).unwrap();
    let (d, heads, dh, len) = (16, 2, 8, 12);
    assert_eq!((tupe.heads, tupe.len), (heads, len));
    let table = read(&loaded, "posenc.tupe.weight");
    assert_eq!(table.len(), (len + 1) * d);
    let gain = read(&loaded, "posenc.tupe.ln.gain");
    let bias = read(&loaded, "posenc.tupe.ln.bias");
    let [uq, bq, uk, bk] = ["query.weight", "query.bias", "key.weight", "key.bias"]
        .map(|name| read(&loaded, &format!("posenc.tupe.{name}")));
    let normed = layer_normed_rows(&table, &gain, &bias);
    let project = |p: &[f64], u: &[f32], b: &[f32], column: usize| -> f64 {
        (0..d).map(|k| p[k] * f64::from(u[k * d + column])).sum::<f64>() + f64::from(b[column])
    };
    let correlation = |h: usize, row_i: usize, row_j: usize| -> f64 {
        (0..dh)
            .map(|e| {
                project(&normed[row_i], &uq, &bq, h * dh + e) * project(&normed[row_j], &uk, &bk, h * dh + e)
            })
            .sum::<f64>()
            / (2.0 * dh as f64).sqrt()
    };
    let mut worst = 0f64;
    for h in 0..heads {
        for i in 0..len {
            for j in 0..len {
                let got = f64::from(tupe.values[(h * len + i) * len + j]);
                worst = worst.max((got - correlation(h, i + 1, j + 1)).abs());
            }
        }
    }
    let (theta1, theta2) = tupe.untied.expect("the code form unties [CLS]");
    for h in 0..heads {
        worst = worst.max((f64::from(theta1[h]) - correlation(h, 0, 0)).abs());
        worst = worst.max((f64::from(theta2[h]) - correlation(h, 1, 1)).abs());
    }
    assert!(worst < 1e-5, "largest difference {worst}");
}
