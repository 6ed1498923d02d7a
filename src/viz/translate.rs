//! The translate view: a seq2seq checkpoint decodes a typed source (greedy or beam search), and
//! every head of a chosen layer shows where the decoder looked while it produced the output:
//! cross-attention as output tokens × source tokens, or either side's self-attention.

use eframe::egui;

use super::colormap::{Colormap, legend};
use super::heatmap::Heatmap;
use super::{Job, LoadedCheckpoint, State, active, show_result};
use crate::data::SPECIAL_TOKENS;
use crate::error::{Error, Result};
use crate::inference::{DecodeOptions, MAX_BEAM};
use crate::model::probe::{AttentionMaps, Seq2SeqAttention, seq2seq_attention_maps};

/// Which attention the heatmaps show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// The decoder's attention to the source.
    Cross,
    Encoder,
    Decoder,
}

impl Attention {
    const ALL: [Attention; 3] = [Attention::Cross, Attention::Encoder, Attention::Decoder];

    fn title(self) -> &'static str {
        match self {
            Attention::Cross => "cross-attention (output × source)",
            Attention::Encoder => "encoder self-attention",
            Attention::Decoder => "decoder self-attention",
        }
    }
}

/// The view's controls.
pub struct Settings {
    pub source: String,
    /// Hypotheses kept (1 = greedy).
    pub beam: usize,
    pub attention: Attention,
    pub layer: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            source: "posflow".into(),
            beam: 4,
            attention: Attention::Cross,
            layer: 0,
        }
    }
}

/// A decoded source and the model's attention while producing it.
#[derive(Clone, Debug, PartialEq)]
pub struct Translation {
    /// The output as text (a dictionary model's phonemes separated by spaces).
    pub output: String,
    /// The beam's score: mean log-probability per token with the default length penalty.
    pub score: f32,
    /// The source's tokens (column labels).
    pub source_tokens: Vec<String>,
    /// The decoder's inputs: `<bos>` and the output tokens.
    pub decoder_inputs: Vec<String>,
    /// What each decoder position produced: the output tokens and `<eos>`.
    pub produced: Vec<String>,
    /// `None` when the model produced nothing (it ended at once): no target positions to show.
    pub attention: Option<Seq2SeqAttention>,
}

/// Decodes `source` with `beam` hypotheses and probes the attention on (source, output).
pub async fn translate(loaded: &LoadedCheckpoint, source: &str, beam: usize) -> Result<Translation> {
    let (Some(decoder), Some(pairs)) = (&loaded.decoder, loaded.pair_tokenizer()) else {
        return Err(Error::Input(format!(
            "{} is not a seq2seq model: the Prompt tab continues a language model's text",
            loaded.name
        )));
    };
    if source.trim().is_empty() {
        return Err(Error::Input(
            "type a source: the model needs at least one token".into(),
        ));
    }
    let ids = loaded.encode(source)?;
    if let Some(limit) = loaded.length_limit().filter(|&limit| ids.len() > limit) {
        return Err(Error::Input(format!(
            "the source has {} tokens; the model's position table holds {limit}",
            ids.len()
        )));
    }
    let options = DecodeOptions {
        beam: beam.clamp(1, MAX_BEAM),
        ..DecodeOptions::default()
    };
    let best = decoder
        .decode(std::slice::from_ref(&ids), &options)
        .await?
        .pop()
        .ok_or_else(|| Error::Input("decoding returned no hypothesis".into()))?;
    let label = |id: &i32| loaded.token_label(*id);
    let eos = SPECIAL_TOKENS[crate::data::EOS as usize].to_string();
    let bos = SPECIAL_TOKENS[crate::data::BOS as usize].to_string();
    let attention = if best.tokens.is_empty() {
        None
    } else {
        let model = &loaded.saved.model;
        Some(seq2seq_attention_maps(model, &loaded.saved.params, &ids, &best.tokens).await?)
    };
    Ok(Translation {
        output: pairs.decode_target(&best.tokens)?,
        score: best.score,
        source_tokens: ids.iter().map(label).collect(),
        decoder_inputs: std::iter::once(bos)
            .chain(best.tokens.iter().map(label))
            .collect(),
        produced: best
            .tokens
            .iter()
            .map(label)
            .chain(std::iter::once(eos))
            .collect(),
        attention,
    })
}

/// The job for the typed source of `checkpoint`, unless it is already done or running (or there
/// is no such checkpoint).
pub(crate) fn request(s: &mut State, checkpoint: usize) -> Option<Job> {
    if checkpoint >= s.checkpoints.len() {
        return None;
    }
    let (source, beam) = (s.translate.source.clone(), s.translate.beam);
    s.translation
        .request((checkpoint, source.clone(), beam))
        .then_some(Job::Translation {
            checkpoint,
            source,
            beam,
        })
}

pub(crate) fn show(ui: &mut egui::Ui, s: &mut State, jobs: &mut Vec<Job>) {
    let Some((index, checkpoint)) = active(ui, s) else {
        return;
    };
    let Some(decoder_layers) = checkpoint.saved.model.config().decoder_dims().map(|d| d.layers) else {
        ui.label(format!(
            "{} is not a seq2seq model. Load one trained on a pair task (configs/cmudict_seq2seq.toml) to \
             translate with it; a language model's text is continued in the Prompt tab.",
            checkpoint.name
        ));
        return;
    };
    ui.horizontal(|ui| {
        let label = ui.label("source");
        ui.add(egui::TextEdit::singleline(&mut s.translate.source).desired_width(320.0))
            .labelled_by(label.id);
        ui.label("beam");
        for beam in [1, 2, 4, 8] {
            ui.selectable_value(&mut s.translate.beam, beam, beam.to_string())
                .on_hover_text(if beam == 1 {
                    "greedy decoding"
                } else {
                    "hypotheses kept at each step"
                });
        }
    });
    // On its own line, wrapped: a long description must not widen the view past the window.
    ui.add(
        egui::Label::new(
            egui::RichText::new(format!("{}: {}", checkpoint.name, checkpoint.describe())).weak(),
        )
        .wrap(),
    );
    jobs.extend(request(s, index));
    let layers = match s.translate.attention {
        Attention::Encoder => checkpoint.saved.model.config().layers,
        Attention::Cross | Attention::Decoder => decoder_layers,
    };
    ui.horizontal(|ui| {
        for which in Attention::ALL {
            ui.selectable_value(&mut s.translate.attention, which, which.title());
        }
    });
    s.translate.layer = s.translate.layer.min(layers - 1);
    ui.horizontal(|ui| {
        ui.label("layer");
        for layer in 0..layers {
            ui.selectable_value(&mut s.translate.layer, layer, layer.to_string());
        }
    });
    let (which, layer) = (s.translate.attention, s.translate.layer);
    show_result(ui, s.translation.result(), |ui, t| {
        ui.horizontal(|ui| {
            ui.label("output");
            ui.monospace(if t.output.is_empty() {
                "(nothing)"
            } else {
                &t.output
            });
            ui.weak(format!("score {:.3} (mean log-probability per token)", t.score));
        });
        let Some(attention) = &t.attention else {
            ui.weak("The model ended the output at once: there are no output positions to show.");
            return;
        };
        let (maps, rows, cols, row_title, col_title): (&AttentionMaps, &[String], &[String], _, _) =
            match which {
                Attention::Cross => (
                    &attention.cross,
                    &t.produced,
                    &t.source_tokens,
                    "output",
                    "source",
                ),
                Attention::Encoder => (
                    &attention.encoder,
                    &t.source_tokens,
                    &t.source_tokens,
                    "query",
                    "key",
                ),
                Attention::Decoder => (
                    &attention.decoder,
                    &t.decoder_inputs,
                    &t.decoder_inputs,
                    "decoder input",
                    "key",
                ),
            };
        let colormap = Colormap::Sequential { max: 1.0 };
        legend(ui, &colormap, "attention probability (each row sums to 1)");
        let heads = maps.heads;
        let per_row = if heads <= 4 { heads } else { heads.div_ceil(2) };
        let grid_rows = heads.div_ceil(per_row) as f32;
        // Cells about square: the map's aspect follows its rows and columns.
        let width = (ui.available_width() / per_row as f32 - 16.0).clamp(200.0, 560.0);
        let aspect = (maps.queries as f32 / maps.keys as f32).clamp(0.25, 4.0);
        let height = (width * aspect)
            .min((ui.available_height() - 40.0) / grid_rows - 40.0)
            .max(160.0);
        for row in 0..heads.div_ceil(per_row) {
            ui.horizontal_top(|ui| {
                for head in row * per_row..((row + 1) * per_row).min(heads) {
                    ui.vertical(|ui| {
                        ui.strong(format!("layer {layer}, head {head}"));
                        Heatmap {
                            id: format!("translate {} {which:?} {layer} {head}", checkpoint.name),
                            values: maps.head(layer, head),
                            rows: maps.queries,
                            cols: maps.keys,
                            colormap,
                            row_title,
                            col_title,
                            row_labels: Some(rows),
                            col_labels: Some(cols),
                            valid_rows: maps.queries,
                            row_mark: None,
                        }
                        .show(ui, egui::vec2(width, height));
                    });
                }
            });
        }
    });
}
