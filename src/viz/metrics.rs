//! The loss-curve view: training loss per step and validation loss per length bin over the steps,
//! from one or more metrics logs (the JSON lines `posflow train` writes).

use eframe::egui;
use egui_plot::{Legend, Line, Plot, PlotPoints};

use super::State;
use crate::error::{Error, Result};
use crate::train::Record;

/// The records of a metrics log's text; a line that is not a record is an error naming it.
pub fn parse_metrics(text: &str) -> Result<Vec<Record>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|e| {
                let shown: String = line.chars().take(60).collect();
                Error::Input(format!(
                    "metrics log line {}: {e} (the line reads `{shown}`)",
                    i + 1
                ))
            })
        })
        .collect()
}

/// The training loss of every step, `[step, loss]`.
pub fn train_curve(records: &[Record]) -> Vec<[f64; 2]> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Train { step, loss, .. } => Some([*step as f64, f64::from(*loss)]),
            Record::Eval { .. } => None,
        })
        .collect()
}

/// The validation loss of each length bin over the steps, bins in the order they first appear.
pub fn eval_curves(records: &[Record]) -> Vec<(String, Vec<[f64; 2]>)> {
    let mut curves: Vec<(String, Vec<[f64; 2]>)> = Vec::new();
    for r in records {
        if let Record::Eval { step, bin, loss, .. } = r {
            let point = [*step as f64, f64::from(*loss)];
            match curves.iter_mut().find(|(b, _)| b == bin) {
                Some((_, points)) => points.push(point),
                None => curves.push((bin.clone(), vec![point])),
            }
        }
    }
    curves
}

pub(crate) fn show(ui: &mut egui::Ui, s: &mut State) {
    if s.logs.is_empty() {
        ui.label("Load a metrics log (posflow viz --metrics runs/NAME.jsonl) to see its curves.");
        return;
    }
    let height = ((ui.available_height() - 60.0) / 2.0).clamp(180.0, 420.0);
    let several = s.logs.len() > 1;
    let name = |log: &str, what: &str| {
        if several {
            format!("{log}: {what}")
        } else {
            what.to_string()
        }
    };
    ui.strong("Training loss (nats per token)");
    Plot::new("posflow.metrics.train")
        .height(height)
        .legend(Legend::default())
        .x_axis_label("step")
        .y_axis_label("loss")
        .show(ui, |plot| {
            for (log, records) in &s.logs {
                plot.line(Line::new(
                    name(log, "train"),
                    PlotPoints::from(train_curve(records)),
                ));
            }
        });
    ui.strong("Validation loss per sequence length");
    Plot::new("posflow.metrics.eval")
        .height(height)
        .legend(Legend::default())
        .x_axis_label("step")
        .y_axis_label("loss")
        .show(ui, |plot| {
            for (log, records) in &s.logs {
                for (bin, points) in eval_curves(records) {
                    plot.line(Line::new(
                        name(log, &format!("length {bin}")),
                        PlotPoints::from(points),
                    ));
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"{"kind":"train","step":0,"loss":4.5,"lr":0.001,"grad_norm":1.0,"tokens_per_s":100.0}
{"kind":"train","step":1,"loss":4.0,"lr":0.001,"grad_norm":1.0,"tokens_per_s":100.0}

{"kind":"eval","step":2,"bin":"33-64","loss":3.5,"accuracy":0.2,"tokens":64}
{"kind":"eval","step":2,"bin":"65-128","loss":3.75,"accuracy":0.2,"tokens":64}
{"kind":"eval","step":4,"bin":"33-64","loss":3.25,"accuracy":0.3,"tokens":64}
"#;

    #[test]
    fn a_log_splits_into_the_training_curve_and_one_curve_per_bin() {
        let records = parse_metrics(LOG).unwrap();
        assert_eq!(records.len(), 5);
        assert_eq!(train_curve(&records), [[0.0, 4.5], [1.0, 4.0]]);
        let eval = eval_curves(&records);
        assert_eq!(eval.len(), 2);
        assert_eq!(eval[0], ("33-64".to_string(), vec![[2.0, 3.5], [4.0, 3.25]]));
        assert_eq!(eval[1], ("65-128".to_string(), vec![[2.0, 3.75]]));
    }
}
