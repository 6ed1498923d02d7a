//! TUPE's content-free positional correlation per head, `(p̂_i U_Q)·(p̂_j U_K) / √(2·Dh)` over the
//! whole table (as TUPE's Figure 5), and the untied `[CLS]` values θ1, θ2 when the model has them.

use eframe::egui;

use super::colormap::{Colormap, format_value, legend};
use super::heatmap::Heatmap;
use super::{Job, State, active, show_result};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::Graph;
use crate::inference::SavedModel;
use crate::model::posenc::{Constant, Encoding, EncodingSource, Positions, TupeA, TupeForm};
use crate::ops::attention::AttentionBias;

/// θ1 and θ2 `[H]` (names from `model/mod.rs`'s parameter table).
const CLS_TO_OTHERS: &str = "posenc.tupe.cls_to_others";
const OTHERS_TO_CLS: &str = "posenc.tupe.others_to_cls";

/// The correlation of every pair of table positions, per head.
#[derive(Clone, Debug, PartialEq)]
pub struct TupeCorrelation {
    pub heads: usize,
    pub len: usize,
    /// `[heads, len, len]`: row i is query position i, column j key position j.
    pub values: Vec<f32>,
    /// θ1 (`[CLS]` to the others) and θ2 (the others to `[CLS]`) per head, with `untie_cls`.
    pub untied: Option<(Vec<f32>, Vec<f32>)>,
}

/// The positional correlation of a TUPE model over its whole table: the position-only attention
/// term of TUPE-A, built by the model's own code for the same parameters (TUPE-R's relative bias
/// and the `[CLS]` reset left out), so it is exactly what the model adds, before those.
pub async fn tupe_correlation(saved: &SavedModel) -> Result<TupeCorrelation> {
    let c = saved.model.config();
    let Some(TupeA { untie_cls, form }) = c.posenc.tupe() else {
        return Err(Error::Input(format!(
            "the positional correlation is TUPE's; this model has {}",
            c.posenc.name()
        )));
    };
    let len = c.max_len;
    // A seq2seq model's is its encoder's (the decoder has a table of its own).
    let prefix = if c.decoder_dims().is_some() {
        "encoder."
    } else {
        ""
    };
    let values = absolute_term(saved, prefix, false, form).await?;
    let untied = match (untie_cls, form) {
        (false, _) => None,
        (true, TupeForm::Paper) => Some((
            saved.params.read(&format!("{prefix}{CLS_TO_OTHERS}")).await?,
            saved.params.read(&format!("{prefix}{OTHERS_TO_CLS}")).await?,
        )),
        // The code's θ1, θ2 are the table's rows 0 and 1 correlated with themselves: the reset
        // term's entries (0, 0) and (1, 0) of each head.
        (true, TupeForm::Code) => {
            let reset = absolute_term(saved, prefix, true, form).await?;
            let entry = |h: usize, i: usize| reset[(h * len + i) * len];
            Some((
                (0..c.heads).map(|h| entry(h, 0)).collect(),
                (0..c.heads).map(|h| entry(h, 1)).collect(),
            ))
        }
    };
    Ok(TupeCorrelation {
        heads: c.heads,
        len,
        values,
        untied,
    })
}

/// TUPE-A's `[H, max_len, max_len]` term of the saved model's parameters (under `prefix`), in
/// `form`, with or without the [CLS] reset.
async fn absolute_term(
    saved: &SavedModel,
    prefix: &str,
    untie_cls: bool,
    form: TupeForm,
) -> Result<Vec<f32>> {
    let c = saved.model.config();
    let absolute_only = TupeA { untie_cls, form };
    let mut g = Graph::new();
    let terms = g.with_param_prefix(prefix, |g| {
        absolute_only.terms(
            g,
            c.dims(),
            Positions::contiguous(c.max_len),
            EncodingSource::Solve,
        )
    })?;
    let Some(AttentionBias::Dense(bias)) = terms.attention.bias else {
        return Err(Error::Graph("TUPE-A built no attention bias".into()));
    };
    let exec = Executor::new(&g, &[bias], &saved.params)?;
    for (t, values) in &terms.inputs.constants {
        match values {
            Constant::F32(v) => exec.set_f32(*t, v)?,
            Constant::I32(v) => exec.set_i32(*t, v)?,
        }
    }
    exec.run()?;
    exec.read(bias).await
}

pub(crate) fn show(ui: &mut egui::Ui, s: &mut State, jobs: &mut Vec<Job>) {
    let Some((index, checkpoint)) = active(ui, s) else {
        return;
    };
    ui.weak(format!("{}: {}", checkpoint.name, checkpoint.describe()));
    let posenc = checkpoint.saved.model.config().posenc;
    if posenc.tupe().is_none() {
        ui.label(format!(
            "This checkpoint has {}. TUPE's positional correlation exists only for TUPE-A and TUPE-R models: \
             select one in the side panel.",
            posenc.name()
        ));
        return;
    }
    let computed = s.tupe.entry(index).or_default();
    if computed.request(()) {
        jobs.push(Job::PositionCorrelation { checkpoint: index });
    }
    show_result(ui, computed.result(), |ui, tupe| {
        ui.label(
            "(LN(p_i) U_Q)·(LN(p_j) U_K) / sqrt(2·Dh): what position i gives position j in every layer's attention \
             logits, from the parameters alone (no tokens). One colour scale for all heads.",
        );
        if let Some((theta1, theta2)) = &tupe.untied {
            ui.label("Untied [CLS]: θ1 replaces row 0 ([CLS] to every position), θ2 column 0 (the others to [CLS]).");
            egui::Grid::new("posflow.tupe.theta")
                .striped(true)
                .show(ui, |ui| {
                    ui.strong("head");
                    ui.strong("θ1");
                    ui.strong("θ2");
                    ui.end_row();
                    for h in 0..tupe.heads {
                        ui.label(h.to_string());
                        ui.monospace(format_value(theta1[h]));
                        ui.monospace(format_value(theta2[h]));
                        ui.end_row();
                    }
                });
        }
        let colormap = Colormap::diverging_for(&tupe.values);
        legend(ui, &colormap, "positional logit");
        let per_row = tupe.heads.min(4);
        let side = ((ui.available_width() / per_row as f32) - 16.0).clamp(180.0, 380.0);
        let size = tupe.len * tupe.len;
        for row in 0..tupe.heads.div_ceil(per_row) {
            ui.horizontal_top(|ui| {
                for head in row * per_row..((row + 1) * per_row).min(tupe.heads) {
                    ui.vertical(|ui| {
                        ui.strong(format!("head {head}"));
                        Heatmap {
                            id: format!("tupe {} {head}", checkpoint.name),
                            values: &tupe.values[head * size..(head + 1) * size],
                            rows: tupe.len,
                            cols: tupe.len,
                            colormap,
                            row_title: "query position",
                            col_title: "key position",
                            row_labels: None,
                            col_labels: None,
                            valid_rows: tupe.len,
                            row_mark: None,
                        }
                        .show(ui, egui::vec2(side, side));
                    });
                }
            });
        }
    });
}
