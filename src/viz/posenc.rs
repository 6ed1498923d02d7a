//! The position-encoding view: each block's encoding as a positions × dimensions heatmap (as in
//! FLOATER's Figure 3), at any length. Sinusoidal and FLOATER encodings are computed live by the
//! model's own position-encoding graph; a learned table ends where it ends.

use eframe::egui;

use super::colormap::{Colormap, legend};
use super::heatmap::Heatmap;
use super::{Job, LoadedCheckpoint, State, show_result};
use crate::error::Result;
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::inference::SavedModel;
use crate::model::posenc::{self, Constant};
use crate::model::{FloaterForm, PosEnc};

/// Parameter names from the table in `model/mod.rs` (checkpoints rely on them; the position
/// encodings keep their own copies private).
const LEARNED_TABLE: &str = "pos_emb.weight";
pub(crate) const TUPE_TABLE: &str = "posenc.tupe.weight";

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

/// The encodings of `model` for `len` positions: computed by the model's position-encoding graph
/// (sinusoidal, FLOATER), read from its table (learned, TUPE), or only described (none, T5).
pub async fn position_encodings(loaded: &LoadedCheckpoint, len: usize) -> Result<PositionEncodings> {
    let saved = &loaded.saved;
    let c = saved.model.config();
    let name = super::posenc_name(&c.posenc);
    match c.posenc {
        PosEnc::None => Ok(PositionEncodings {
            maps: Vec::new(),
            note: "No position encoding: only the causal mask tells the model where a token is.".into(),
        }),
        PosEnc::Relative {
            buckets,
            max_distance,
        } => Ok(PositionEncodings {
            maps: Vec::new(),
            note: format!(
                "T5 relative position bias: nothing is added to the tokens; every layer's attention logits get a \
                 trained bias per head for the bucket of the offset j - i ({buckets} buckets, log-spaced up to \
                 {max_distance}). It has no absolute table to draw."
            ),
        }),
        PosEnc::Learned => Ok(PositionEncodings {
            maps: vec![table_map(saved, LEARNED_TABLE, "input", len).await?],
            note: format!(
                "{name}: a trained [max_len = {}, d] table added to the token embeddings; a model cannot read \
                 positions past its end.",
                c.max_len
            ),
        }),
        PosEnc::TupeA { .. } | PosEnc::TupeR { .. } => Ok(PositionEncodings {
            maps: vec![table_map(saved, TUPE_TABLE, "absolute table", len).await?],
            note: format!(
                "{name}: this table never enters the residual stream; its layer-normed rows go through U_Q and U_K \
                 into a positional attention term per head (the TUPE tab shows it)."
            ),
        }),
        PosEnc::Sinusoidal { every_block } => Ok(PositionEncodings {
            maps: computed(saved, len).await?,
            note: format!(
                "{name}: the fixed sin/cos table of Vaswani et al., added to the {}; any length.",
                if every_block {
                    "input of every block"
                } else {
                    "token embeddings"
                }
            ),
        }),
        PosEnc::Floater(f) => Ok(PositionEncodings {
            maps: computed(saved, len).await?,
            note: match f.form {
                FloaterForm::Additive => format!(
                    "{name}: solutions of the trained ODE dp/dt = h(t, p) at t = i·{}, from each block's own \
                     initial value; solved live for any length.",
                    f.delta
                ),
                FloaterForm::Bias => format!(
                    "{name}: the sinusoidal table at the input; every block's q, k and v biases are one shared \
                     ODE's solution from learned b(0) at t = i·{}; solved live for any length.",
                    f.delta
                ),
            },
        }),
    }
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

/// Builds `posenc::build` alone for `len` positions, runs it, and reads every term it adds to
/// the residual stream or to the q|k|v projections.
async fn computed(saved: &SavedModel, len: usize) -> Result<Vec<EncodingMap>> {
    let c = saved.model.config();
    let d = c.d_model;
    let mut g = Graph::new();
    let terms = posenc::build(&mut g, &c.posenc, c.dims(), len)?;
    // A table added to every block is one tensor, shown once.
    let mut wanted: Vec<(String, TensorId)> = Vec::new();
    if let Some(t) = terms.at_input {
        wanted.push(("input".into(), t));
    }
    for (i, &t) in terms.at_block.iter().enumerate() {
        if !wanted.iter().any(|&(_, w)| w == t) {
            let label = if terms.at_block.iter().all(|&b| b == t) {
                "every block".to_string()
            } else {
                format!("block {i}")
            };
            wanted.push((label, t));
        }
    }
    let qkv_from = wanted.len();
    wanted.extend(
        terms
            .qkv_bias
            .iter()
            .enumerate()
            .map(|(i, &t)| (format!("block {i}"), t)),
    );
    let outputs: Vec<TensorId> = wanted.iter().map(|&(_, t)| t).collect();
    let exec = Executor::new(&g, &outputs, &saved.params)?;
    for (t, values) in &terms.constants {
        match values {
            Constant::F32(v) => exec.set_f32(*t, v)?,
            Constant::I32(v) => exec.set_i32(*t, v)?,
        }
    }
    exec.run()?;
    exec.check().await?;
    let mut maps = Vec::new();
    for (k, (label, t)) in wanted.into_iter().enumerate() {
        let values = exec.read(t).await?;
        if k < qkv_from {
            maps.push(EncodingMap {
                label,
                positions: len,
                dims: d,
                values,
                valid_positions: len,
            });
        } else {
            // `[L, 3D]`: the q, k and v biases side by side.
            for (part, which) in ["q", "k", "v"].into_iter().enumerate() {
                let values = values
                    .chunks(3 * d)
                    .flat_map(|row| &row[part * d..(part + 1) * d])
                    .copied()
                    .collect();
                maps.push(EncodingMap {
                    label: format!("{label}: {which} bias"),
                    positions: len,
                    dims: d,
                    values,
                    valid_positions: len,
                });
            }
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
