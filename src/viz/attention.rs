//! The attention view: for a text the user types, every head of a chosen layer as a query × key
//! heatmap with the tokens on both axes (hover for the probability).

use eframe::egui;

use super::colormap::{Colormap, legend};
use super::heatmap::Heatmap;
use super::{Job, LoadedCheckpoint, State, active, show_result};
use crate::error::Result;
use crate::model::probe::{AttentionMaps, attention_maps};

/// The view's controls.
pub struct Settings {
    pub text: String,
    pub layer: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            text: "Call me Ishmael.".into(),
            layer: 0,
        }
    }
}

/// The probabilities of one text and the labels of its tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionView {
    pub tokens: Vec<String>,
    pub maps: AttentionMaps,
    /// Set when the text was cut to the model's longest sequence.
    pub truncated_from: Option<usize>,
}

/// Every layer's attention probabilities on `text` (after `<bos>` where the model expects one),
/// cut to the model's table length where it has one.
pub async fn attention_view(loaded: &LoadedCheckpoint, text: &str) -> Result<AttentionView> {
    let mut ids = loaded.encode(text)?;
    let full = ids.len();
    let truncated_from = loaded.length_limit().filter(|&limit| full > limit).map(|limit| {
        ids.truncate(limit);
        full
    });
    let maps = attention_maps(&loaded.saved.model, &loaded.saved.params, &ids).await?;
    Ok(AttentionView {
        tokens: ids.iter().map(|&id| loaded.token_label(id)).collect(),
        maps,
        truncated_from,
    })
}

pub(crate) fn show(ui: &mut egui::Ui, s: &mut State, jobs: &mut Vec<Job>) {
    let Some((index, checkpoint)) = active(ui, s) else {
        return;
    };
    ui.horizontal(|ui| {
        let label = ui.label("text");
        ui.add(egui::TextEdit::singleline(&mut s.attention.text).desired_width(420.0))
            .labelled_by(label.id);
    });
    let text = s.attention.text.clone();
    if s.attention_maps.request((index, text.clone())) {
        jobs.push(Job::Attention {
            checkpoint: index,
            text,
        });
    }
    let layers = checkpoint.saved.model.config().layers;
    s.attention.layer = s.attention.layer.min(layers - 1);
    ui.horizontal(|ui| {
        ui.label("layer");
        for layer in 0..layers {
            ui.selectable_value(&mut s.attention.layer, layer, layer.to_string());
        }
        ui.weak(format!("{}: {}", checkpoint.name, checkpoint.describe()));
    });
    let layer = s.attention.layer;
    show_result(ui, s.attention_maps.result(), |ui, view| {
        if let Some(full) = view.truncated_from {
            ui.weak(format!(
                "The text has {full} tokens; the model's position table has {}, so only those are shown.",
                view.maps.keys
            ));
        }
        let colormap = Colormap::Sequential { max: 1.0 };
        legend(ui, &colormap, "attention probability (each row sums to 1)");
        let heads = view.maps.heads;
        // Up to four heads side by side, more in two rows; square maps that fit the view.
        let per_row = if heads <= 4 { heads } else { heads.div_ceil(2) };
        let rows = heads.div_ceil(per_row) as f32;
        let side = (ui.available_width() / per_row as f32 - 16.0)
            .min((ui.available_height() - 40.0) / rows - 40.0)
            .clamp(200.0, 560.0);
        for row in 0..heads.div_ceil(per_row) {
            ui.horizontal_top(|ui| {
                for head in row * per_row..((row + 1) * per_row).min(heads) {
                    ui.vertical(|ui| {
                        ui.strong(format!("layer {layer}, head {head}"));
                        Heatmap {
                            id: format!("attention {} {layer} {head}", checkpoint.name),
                            values: view.maps.head(layer, head),
                            rows: view.maps.queries,
                            cols: view.maps.keys,
                            colormap,
                            row_title: "query",
                            col_title: "key",
                            row_labels: Some(&view.tokens),
                            col_labels: Some(&view.tokens),
                            valid_rows: view.maps.queries,
                            row_mark: None,
                        }
                        .show(ui, egui::vec2(side, side));
                    });
                }
            });
        }
    });
}
