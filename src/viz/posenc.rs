//! The position-encoding view: each block's encoding as a positions × dimensions heatmap (as in
//! FLOATER's Figure 3), at any length. Sinusoidal and FLOATER encodings are computed live by the
//! model's own position-encoding graph; a learned table ends where it ends.

use eframe::egui;

use super::colormap::{Colormap, legend};
use super::heatmap::Heatmap;
use super::{Job, LoadedCheckpoint, State, show_result};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::inference::SavedModel;
use crate::model::posenc::{Constant, Description, Drawn, EncodingSource, PositionTerms, Positions};

/// The longest length the slider offers.
pub const MAX_LENGTH: usize = 2048;

/// The view's controls.
pub struct Settings {
    pub length: usize,
    /// Which of a checkpoint's maps (blocks) to show, by checkpoint.
    pub map: Vec<usize>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            length: 128,
            map: Vec::new(),
        }
    }
}

/// One `[positions, dims]` encoding.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodingMap {
    /// Where it goes, e.g. "input", "block 2", "block 0: k bias".
    pub label: String,
    pub positions: usize,
    pub dims: usize,
    /// Row-major; rows from `valid_positions` on are 0 and have no meaning.
    pub values: Vec<f32>,
    /// Rows past a table's end are not part of the model.
    pub valid_positions: usize,
}

/// What a checkpoint's position encoding is at one length.
#[derive(Clone, Debug, PartialEq)]
pub struct PositionEncodings {
    pub maps: Vec<EncodingMap>,
    /// What the encoding is and where it enters the model.
    pub note: String,
}

/// The encodings of `model` for `len` positions, as its encoding describes them: computed by its
/// position-encoding graph (sinusoidal, FLOATER), read from its table (learned, TUPE), fixed by
/// its settings (RoPE, ALiBi), or only described (none, T5).
pub async fn position_encodings(loaded: &LoadedCheckpoint, len: usize) -> Result<PositionEncodings> {
    let saved = &loaded.saved;
    let c = saved.model.config();
    let seq2seq = c.decoder_dims().is_some();
    let Description { note, drawn } = c.posenc.describe(c.dims(), seq2seq, len);
    let maps = match drawn {
        Drawn::Nothing => Vec::new(),
        Drawn::Table { parameter, label } if seq2seq => {
            // Each side has a table of its own.
            let mut maps = Vec::new();
            for side in ["encoder", "decoder"] {
                let name = format!("{side}.{parameter}");
                maps.push(table_map(saved, &name, &format!("{side}: {label}"), len).await?);
            }
            maps
        }
        Drawn::Table { parameter, label } => vec![table_map(saved, parameter, label, len).await?],
        Drawn::Terms if seq2seq => computed_both_sides(saved, len).await?,
        Drawn::Terms => computed(saved, len).await?,
        Drawn::Fixed {
            label,
            columns,
            values,
        } => vec![EncodingMap {
            label: label.into(),
            positions: len,
            dims: columns,
            values,
            valid_positions: len,
        }],
    };
    Ok(PositionEncodings { maps, note })
}

/// The first `len` rows of the `[max_len, d]` parameter `name`; rows past its end stay empty.
async fn table_map(saved: &SavedModel, name: &str, label: &str, len: usize) -> Result<EncodingMap> {
    let d = saved.model.config().d_model;
    let table = saved.params.read(name).await?;
    let valid = len.min(table.len() / d);
    let mut values = vec![0.0; len * d];
    values[..valid * d].copy_from_slice(&table[..valid * d]);
    Ok(EncodingMap {
        label: label.into(),
        positions: len,
        dims: d,
        values,
        valid_positions: valid,
    })
}

/// A position term to read and how to label it: `parts` names the `[L, D]` blocks of a wider
/// tensor (`q`, `k`, `v` biases side by side), or is empty for a `[L, D]` term.
struct Wanted {
    label: String,
    tensor: TensorId,
    parts: &'static [&'static str],
}

/// What a built [`PositionTerms`] adds to the residual stream or the q|k|v projections, labelled
/// after `side` ("" or e.g. "encoder: "). A table added to every block is one tensor, shown once.
fn wanted_terms(terms: &PositionTerms, side: &str, wanted: &mut Vec<Wanted>) {
    if let Some(tensor) = terms.at_input {
        wanted.push(Wanted {
            label: format!("{side}input"),
            tensor,
            parts: &[],
        });
    }
    let mut seen = Vec::new();
    for (i, &t) in terms.at_block.iter().enumerate() {
        if !seen.contains(&t) {
            seen.push(t);
            let label = if terms.at_block.iter().all(|&b| b == t) {
                format!("{side}every block")
            } else {
                format!("{side}block {i}")
            };
            wanted.push(Wanted {
                label,
                tensor: t,
                parts: &[],
            });
        }
    }
    wanted.extend(
        terms
            .attention
            .qkv_bias
            .iter()
            .enumerate()
            .map(|(i, &tensor)| Wanted {
                label: format!("{side}block {i}:"),
                tensor,
                parts: &["q bias", "k bias", "v bias"],
            }),
    );
}

/// Builds the model's position terms alone for `len` positions, runs it, and reads every term it adds to
/// the residual stream or to the q|k|v projections.
async fn computed(saved: &SavedModel, len: usize) -> Result<Vec<EncodingMap>> {
    let c = saved.model.config();
    let mut g = Graph::new();
    let terms = c.posenc.terms(
        &mut g,
        c.dims(),
        Positions::contiguous(len),
        EncodingSource::Solve,
    )?;
    let mut wanted = Vec::new();
    wanted_terms(&terms, "", &mut wanted);
    read_maps(saved, &g, &terms.inputs.constants, wanted, len).await
}

/// A seq2seq model's position terms on both sides for `len` positions: the encoder's (source
/// positions), the decoder's (target positions, with FLOATER's cross-attention q biases), and
/// FLOATER's cross-attention k/v biases from its flow over source positions.
async fn computed_both_sides(saved: &SavedModel, len: usize) -> Result<Vec<EncodingMap>> {
    let c = saved.model.config();
    let decoder = c
        .decoder_dims()
        .ok_or_else(|| Error::Input("not a seq2seq model".into()))?;
    let mut g = Graph::new();
    let encoder_terms = g.with_param_prefix("encoder.", |g| {
        c.posenc
            .terms(g, c.dims(), Positions::contiguous(len), EncodingSource::Solve)
    })?;
    let decoder_terms = g.with_param_prefix("decoder.", |g| c.posenc.decoder_terms(g, decoder, len))?;
    let cross_kv = g.with_param_prefix("decoder.", |g| {
        g.with_param_prefix("cross.", |g| c.posenc.cross_kv(g, decoder, len))
    })?;
    let mut wanted = Vec::new();
    wanted_terms(&encoder_terms, "encoder: ", &mut wanted);
    wanted_terms(&decoder_terms, "decoder: ", &mut wanted);
    wanted.extend(
        decoder_terms
            .attention
            .cross_q_bias
            .iter()
            .enumerate()
            .map(|(i, &tensor)| Wanted {
                label: format!("decoder: block {i}: cross-attention q bias"),
                tensor,
                parts: &[],
            }),
    );
    wanted.extend(cross_kv.iter().enumerate().map(|(i, &tensor)| Wanted {
        label: format!("source positions: block {i}: cross-attention"),
        tensor,
        parts: &["k bias", "v bias"],
    }));
    let mut constants = encoder_terms.inputs.constants;
    constants.extend(decoder_terms.inputs.constants);
    read_maps(saved, &g, &constants, wanted, len).await
}

/// Runs `g` for the `wanted` terms (constants fed) and splits each into `[len, D]` maps.
async fn read_maps(
    saved: &SavedModel,
    g: &Graph,
    constants: &[(TensorId, Constant)],
    wanted: Vec<Wanted>,
    len: usize,
) -> Result<Vec<EncodingMap>> {
    let d = saved.model.config().d_model;
    let outputs: Vec<TensorId> = wanted.iter().map(|w| w.tensor).collect();
    let exec = Executor::new(g, &outputs, &saved.params)?;
    for (t, values) in constants {
        match values {
            Constant::F32(v) => exec.set_f32(*t, v)?,
            Constant::I32(v) => exec.set_i32(*t, v)?,
        }
    }
    exec.run()?;
    exec.check().await?;
    let mut maps = Vec::new();
    for w in wanted {
        let values = exec.read(w.tensor).await?;
        let map = |label: String, values: Vec<f32>| EncodingMap {
            label,
            positions: len,
            dims: d,
            values,
            valid_positions: len,
        };
        if w.parts.is_empty() {
            maps.push(map(w.label, values));
            continue;
        }
        // `[L, parts · D]`: the parts side by side in each row.
        let width = w.parts.len() * d;
        for (part, name) in w.parts.iter().enumerate() {
            let values = values
                .chunks(width)
                .flat_map(|row| &row[part * d..(part + 1) * d])
                .copied()
                .collect();
            maps.push(map(format!("{} {name}", w.label), values));
        }
    }
    Ok(maps)
}

pub(crate) fn show(ui: &mut egui::Ui, s: &mut State, jobs: &mut Vec<Job>) {
    let compared: Vec<usize> = (0..s.checkpoints.len()).filter(|&i| s.compared[i]).collect();
    if compared.is_empty() {
        ui.label("Load a checkpoint (and tick it in the side panel) to see its position encodings.");
        return;
    }
    ui.horizontal(|ui| {
        ui.add(
            egui::Slider::new(&mut s.posenc.length, 1..=MAX_LENGTH)
                .logarithmic(true)
                .text("positions"),
        );
        ui.weak("longer than training shows how each encoding extrapolates");
    });
    s.posenc.map.resize(s.checkpoints.len(), 0);
    let len = s.posenc.length;
    let width = (ui.available_width() / compared.len() as f32 - 12.0).max(220.0);
    // Room below for the fine-tuning section, so that the heatmap is in sight while it trains.
    let height = (ui.available_height() - 120.0 - super::finetune::SECTION_HEIGHT).clamp(260.0, 640.0);
    ui.horizontal_top(|ui| {
        for &i in &compared {
            let checkpoint = s.checkpoints[i].clone();
            let version = s.fine_tune.version(i);
            let computed = s.encodings.entry(i).or_default();
            // While the encoder trains, the last picture stays up until the next is ready.
            let requested = if computed.key.is_some_and(|(l, _)| l == len) {
                computed.refresh((len, version))
            } else {
                computed.request((len, version))
            };
            if requested {
                jobs.push(Job::Encodings {
                    checkpoint: i,
                    len,
                    version,
                });
            }
            let selected = &mut s.posenc.map[i];
            ui.vertical(|ui| {
                ui.set_width(width);
                ui.strong(&checkpoint.name);
                ui.weak(checkpoint.describe());
                show_result(ui, computed.result(), |ui, encodings| {
                    show_encodings(ui, &checkpoint, encodings, selected, [width, height]);
                });
            });
        }
    });
    super::finetune::show(ui, s);
}

fn show_encodings(
    ui: &mut egui::Ui,
    checkpoint: &LoadedCheckpoint,
    encodings: &PositionEncodings,
    selected: &mut usize,
    [width, height]: [f32; 2],
) {
    // A single map gets its label in the combo box's place, so that side-by-side maps line up.
    if encodings.maps.len() == 1 {
        ui.add_sized(
            [120.0, 20.0],
            egui::Label::new(format!("map: {}", encodings.maps[0].label)),
        );
    }
    if encodings.maps.len() > 1 {
        *selected = (*selected).min(encodings.maps.len() - 1);
        egui::ComboBox::new(("posflow.posenc.map", &checkpoint.name), "map")
            .selected_text(&encodings.maps[*selected].label)
            .show_ui(ui, |ui| {
                for (k, map) in encodings.maps.iter().enumerate() {
                    ui.selectable_value(selected, k, &map.label);
                }
            });
    }
    if let Some(map) = encodings.maps.get(*selected) {
        let colormap = Colormap::diverging_for(&map.values[..map.valid_positions * map.dims]);
        legend(ui, &colormap, "value");
        let train = checkpoint.train_len.map(|n| (n, "trained length"));
        Heatmap {
            id: format!("posenc {} {}", checkpoint.name, map.label),
            values: &map.values,
            rows: map.positions,
            cols: map.dims,
            colormap,
            row_title: "position",
            col_title: "dimension",
            row_labels: None,
            col_labels: None,
            valid_rows: map.valid_positions,
            row_mark: train,
        }
        .show(ui, egui::vec2(width, height));
    }
    ui.add(egui::Label::new(&encodings.note).wrap());
}
