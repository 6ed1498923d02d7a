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
use crate::model::posenc::{self, Constant, PositionTerms};
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

/// ALiBi's bias for distances 0..len, one column per head.
fn alibi_map(heads: usize, len: usize) -> EncodingMap {
    let slopes = &crate::model::posenc::alibi_slopes(heads);
    EncodingMap {
        label: "logit bias by distance (per head)".into(),
        positions: len,
        dims: heads,
        values: (0..len)
            .flat_map(move |d| slopes.iter().map(move |m| (-m * d as f64) as f32))
            .collect(),
        valid_positions: len,
    }
}

/// RoPE's table for `len` positions: the cosines of each pair's angles, then their sines.
fn rope_map(head_dim: usize, base: f64, len: usize) -> EncodingMap {
    EncodingMap {
        label: "rotation angles (cos | sin)".into(),
        positions: len,
        dims: head_dim,
        values: crate::ops::rope::rope_table(len, head_dim, base),
        valid_positions: len,
    }
}

/// The encodings of `model` for `len` positions: computed by the model's position-encoding graph
/// (sinusoidal, FLOATER), read from its table (learned, TUPE), or only described (none, T5).
pub async fn position_encodings(loaded: &LoadedCheckpoint, len: usize) -> Result<PositionEncodings> {
    let saved = &loaded.saved;
    let c = saved.model.config();
    if c.decoder_dims().is_some() {
        return seq2seq_encodings(saved, len).await;
    }
    let name = super::posenc_name(&c.posenc);
    match c.posenc {
        PosEnc::None => Ok(PositionEncodings {
            maps: Vec::new(),
            note: "No position encoding: only the causal mask tells the model where a token is.".into(),
        }),
        PosEnc::Relative {
            buckets,
            max_distance,
            learned_absolute: false,
        } => Ok(PositionEncodings {
            maps: Vec::new(),
            note: format!(
                "T5 relative position bias: nothing is added to the tokens; every layer's attention logits get a \
                 trained bias per head for the bucket of the offset j - i ({buckets} buckets, log-spaced up to \
                 {max_distance}). It has no absolute table to draw."
            ),
        }),
        PosEnc::Relative {
            buckets,
            max_distance,
            learned_absolute: true,
        } => Ok(PositionEncodings {
            maps: vec![table_map(saved, LEARNED_TABLE, "input", len).await?],
            note: format!(
                "{name}: a trained [max_len = {}, d] table added to the token embeddings (drawn), and T5's \
                 relative bias in every layer's attention logits ({buckets} buckets up to {max_distance}).",
                c.max_len
            ),
        }),
        PosEnc::Rope { base } => Ok(PositionEncodings {
            maps: vec![rope_map(c.head_dim(), base, len)],
            note: format!(
                "{name}: nothing is added to the tokens; every layer turns each pair (2i, 2i+1) of a head's \
                 query and key by the angle l·θ_i, θ_i = {base}^(-2i/{dh}), so attention sees only offsets. \
                 Drawn: cos(l·θ_i) for the {half} frequencies, then sin(l·θ_i); fast pairs on the left, \
                 slow ones on the right. Any length.",
                dh = c.head_dim(),
                half = c.head_dim() / 2,
            ),
        }),
        PosEnc::Alibi => Ok(PositionEncodings {
            maps: vec![alibi_map(c.heads, len)],
            note: format!(
                "{name}: nothing is added to the tokens; every layer's attention logit of query i and key j gets \
                 -m_h·|i - j|, a fixed slope per head (m_h = {}, ...). Drawn: that bias by distance (rows) for \
                 each head (columns). Any length.",
                crate::model::posenc::alibi_slopes(c.heads)
                    .iter()
                    .take(3)
                    .map(|m| format!("{m:.4}"))
                    .collect::<Vec<_>>()
                    .join(", ")
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

/// A seq2seq model's encodings: each side has its own (parameters under `encoder.` and
/// `decoder.`), and FLOATER's compatible form adds a third flow over source positions for the
/// cross-attention keys and values, as the authors' translation model does.
async fn seq2seq_encodings(saved: &SavedModel, len: usize) -> Result<PositionEncodings> {
    let c = saved.model.config();
    let name = super::posenc_name(&c.posenc);
    let tables = async |table: &str, label: &str| -> Result<Vec<EncodingMap>> {
        Ok(vec![
            table_map(
                saved,
                &format!("encoder.{table}"),
                &format!("encoder: {label}"),
                len,
            )
            .await?,
            table_map(
                saved,
                &format!("decoder.{table}"),
                &format!("decoder: {label}"),
                len,
            )
            .await?,
        ])
    };
    let (maps, note) = match c.posenc {
        PosEnc::None | PosEnc::Rope { .. } | PosEnc::Alibi => (
            Vec::new(),
            "No position encoding: the encoder reads its source as a bag of tokens; the decoder has only its \
             causal mask."
                .to_string(),
        ),
        PosEnc::Relative {
            buckets,
            max_distance,
            learned_absolute,
        } => (
            if learned_absolute {
                tables(LEARNED_TABLE, "input").await?
            } else {
                Vec::new()
            },
            format!(
                "T5 relative position bias on both sides: a trained bias per head for the bucket of j - i \
                 ({buckets} buckets up to {max_distance}); the encoder's buckets tell left from right, the \
                 decoder's look back only. Cross-attention has none.{}",
                if learned_absolute {
                    " Each side also adds its own trained absolute table (drawn) to its token embeddings."
                } else {
                    " No absolute table to draw."
                }
            ),
        ),
        PosEnc::Learned => (
            tables(LEARNED_TABLE, "input").await?,
            format!(
                "{name}: each side has its own trained [max_len = {}, d] table added to its token embeddings.",
                c.max_len
            ),
        ),
        PosEnc::TupeA { .. } | PosEnc::TupeR { .. } => (
            tables(TUPE_TABLE, "absolute table").await?,
            format!(
                "{name}: in both self-attentions, each side with its own table (never added to the residual \
                 stream); cross-attention has no positional term."
            ),
        ),
        PosEnc::Sinusoidal { .. } => (
            computed_both_sides(saved, len).await?,
            format!("{name}: the same fixed sin/cos table on both sides; any length."),
        ),
        PosEnc::Floater(f) => (
            computed_both_sides(saved, len).await?,
            match f.form {
                FloaterForm::Additive => format!(
                    "{name}: each side's own ODE solution at t = i·{} added before its blocks; any length.",
                    f.delta
                ),
                FloaterForm::Bias => format!(
                    "{name}, as the authors' translation model: sinusoidal tables at both inputs; one flow for \
                     the encoder's q/k/v biases, one over target positions for the decoder's q/k/v and \
                     cross-attention q biases, one over source positions for the cross-attention k/v biases \
                     (t = i·{}). Pick a map above; solved live for any length.",
                    f.delta
                ),
            },
        ),
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
    wanted.extend(terms.qkv_bias.iter().enumerate().map(|(i, &tensor)| Wanted {
        label: format!("{side}block {i}:"),
        tensor,
        parts: &["q bias", "k bias", "v bias"],
    }));
}

/// Builds `posenc::build` alone for `len` positions, runs it, and reads every term it adds to
/// the residual stream or to the q|k|v projections.
async fn computed(saved: &SavedModel, len: usize) -> Result<Vec<EncodingMap>> {
    let c = saved.model.config();
    let mut g = Graph::new();
    let terms = posenc::build(&mut g, &c.posenc, c.dims(), len)?;
    let mut wanted = Vec::new();
    wanted_terms(&terms, "", &mut wanted);
    read_maps(saved, &g, &terms.constants, wanted, len).await
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
    let encoder_terms = g.with_param_prefix("encoder.", |g| posenc::build(g, &c.posenc, c.dims(), len))?;
    let (decoder_terms, cross_q) =
        g.with_param_prefix("decoder.", |g| posenc::build_decoder(g, &c.posenc, decoder, len))?;
    let cross_kv = g.with_param_prefix("decoder.", |g| {
        g.with_param_prefix("cross.", |g| posenc::build_cross_kv(g, &c.posenc, decoder, len))
    })?;
    let mut wanted = Vec::new();
    wanted_terms(&encoder_terms, "encoder: ", &mut wanted);
    wanted_terms(&decoder_terms, "decoder: ", &mut wanted);
    wanted.extend(cross_q.iter().enumerate().map(|(i, &tensor)| Wanted {
        label: format!("decoder: block {i}: cross-attention q bias"),
        tensor,
        parts: &[],
    }));
    wanted.extend(cross_kv.iter().enumerate().map(|(i, &tensor)| Wanted {
        label: format!("source positions: block {i}: cross-attention"),
        tensor,
        parts: &["k bias", "v bias"],
    }));
    let mut constants = encoder_terms.constants;
    constants.extend(decoder_terms.constants);
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
