//! The length × step picture: each variant's metric per length bin at every evaluation, mean over
//! seeds, as a grid of coloured cells with the value written in each, one panel per variant and
//! one colour scale for all, so that a claim read at the end can be seen against every step
//! before it (a lead that came and went, an extrapolation that got worse while training went on).

use std::path::Path;

use plotters::prelude::*;

use super::claims::Metric;
use super::figure::{Drawn, FONT, seeds};
use super::results::RunResult;
use super::spec::Study;
use super::summary::StudySummary;

/// Width, and the height of one variant's panel; the caption and colour key take `FRAME` more.
const WIDTH: u32 = 900;
const PANEL: u32 = 150;
const FRAME: u32 = 90;

/// One variant's grid: its evaluation steps, and per step and bin the mean over seeds.
struct Grid {
    label: String,
    steps: Vec<usize>,
    /// `cells[step][bin]`, `None` where no seed has the value.
    cells: Vec<Vec<Option<f64>>>,
}

fn grid(label: &str, runs: &[&RunResult], bins: &[String], metric: Metric) -> Grid {
    let steps = RunResult::eval_steps(runs);
    let cells = steps
        .iter()
        .map(|&step| {
            bins.iter()
                .map(|bin| {
                    let values: Vec<f64> = runs
                        .iter()
                        .filter_map(|r| r.bin_at(step, bin))
                        .filter_map(|b| metric.of(b))
                        .collect();
                    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
                })
                .collect()
        })
        .collect();
    Grid {
        label: label.to_string(),
        steps,
        cells,
    }
}

/// A sequential scale from pale yellow (`t` = 0) to dark blue (1), after matplotlib's YlGnBu.
fn shade(t: f64) -> RGBColor {
    const STOPS: [(f64, [f64; 3]); 4] = [
        (0.0, [255.0, 255.0, 204.0]),
        (0.35, [161.0, 218.0, 180.0]),
        (0.7, [65.0, 182.0, 196.0]),
        (1.0, [37.0, 52.0, 148.0]),
    ];
    let t = t.clamp(0.0, 1.0);
    let i = STOPS
        .iter()
        .rposition(|(at, _)| *at <= t)
        .unwrap_or(0)
        .min(STOPS.len() - 2);
    let ((a, ca), (b, cb)) = (STOPS[i], STOPS[i + 1]);
    let f = (t - a) / (b - a);
    let mix = |k: usize| (ca[k] + f * (cb[k] - ca[k])).round() as u8;
    RGBColor(mix(0), mix(1), mix(2))
}

fn value_text(metric: Metric, v: f64) -> String {
    match metric {
        Metric::Loss | Metric::MacroF1 => format!("{v:.2}"),
        Metric::Bleu => format!("{v:.1}"),
        _ => format!("{:.0}%", 100.0 * v),
    }
}

/// Draws `metric` per length bin and evaluation step for every variant into `path`.
pub(super) fn length_by_step(
    path: &Path,
    study: &Study,
    summary: &StudySummary,
    results: &[RunResult],
    metric: Metric,
) -> Drawn {
    let bins = &summary.bins;
    let grids: Vec<Grid> = summary
        .variants
        .iter()
        .map(|v| {
            let runs: Vec<&RunResult> = results.iter().filter(|r| r.variant == v.name).collect();
            grid(&v.label, &runs, bins, metric)
        })
        .collect();
    let values = || {
        grids
            .iter()
            .flat_map(|g| g.cells.iter().flatten().flatten().copied())
    };
    let lo = values().fold(f64::INFINITY, f64::min);
    let hi = values().fold(f64::NEG_INFINITY, f64::max);
    let span = if hi > lo { hi - lo } else { 1.0 };
    // Dark is better: the scale runs towards the better end.
    let t = |v: f64| {
        let t = (v - lo) / span;
        if metric.lower_is_better() { 1.0 - t } else { t }
    };

    let height = FRAME + PANEL * grids.len().max(1) as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(50);
    top.draw(&Text::new(
        format!(
            "{}: {} per length bin at every evaluation (mean over {}; darker is better)",
            study.name,
            metric.name().replace('_', " "),
            seeds(results)
        ),
        (16, 16),
        (FONT, 20),
    ))?;
    let (panels, key) = rest.split_vertically(PANEL * grids.len().max(1) as u32);
    for (grid, area) in grids.iter().zip(panels.split_evenly((grids.len().max(1), 1))) {
        let n_steps = grid.steps.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&area)
            .caption(&grid.label, (FONT, 15))
            .margin_left(16)
            .margin_right(16)
            .x_label_area_size(22)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5f64..n_steps - 0.5, -0.5f64..bins.len() as f64 - 0.5)?;
        let step_label = |x: &f64| {
            let i = x.round();
            match grid.steps.get(i as usize) {
                Some(step) if (x - i).abs() < 1e-6 && i >= 0.0 => format!("step {step}"),
                _ => String::new(),
            }
        };
        let bin_label = |y: &f64| {
            let i = y.round();
            match bins.get(i as usize) {
                Some(bin) if (y - i).abs() < 1e-6 && i >= 0.0 => bin.clone(),
                _ => String::new(),
            }
        };
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(grid.steps.len() + 1)
            .y_labels(bins.len() + 1)
            .x_label_formatter(&step_label)
            .y_label_formatter(&bin_label)
            .label_style((FONT, 12))
            .draw()?;
        for (i, row) in grid.cells.iter().enumerate() {
            for (j, cell) in row.iter().enumerate() {
                let (x, y) = (i as f64, j as f64);
                let corners = [(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)];
                let Some(v) = cell else {
                    chart.draw_series(std::iter::once(Rectangle::new(
                        corners,
                        RGBColor(230, 230, 230).filled(),
                    )))?;
                    continue;
                };
                chart.draw_series(std::iter::once(Rectangle::new(corners, shade(t(*v)).filled())))?;
                let ink = if t(*v) > 0.6 { WHITE } else { BLACK };
                let style = TextStyle::from((FONT, 12).into_font()).color(&ink).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Center,
                    ),
                );
                chart.draw_series(std::iter::once(Text::new(value_text(metric, *v), (x, y), style)))?;
            }
        }
    }
    // The colour key: the scale from the worst value to the best.
    let (worst, best) = if metric.lower_is_better() {
        (hi, lo)
    } else {
        (lo, hi)
    };
    let key_width = 300;
    for k in 0..key_width {
        let t = k as f64 / (key_width - 1) as f64;
        key.draw(&Rectangle::new([(80 + k, 14), (81 + k, 30)], shade(t).filled()))?;
    }
    let small = (FONT, 13).into_font();
    key.draw(&Text::new(value_text(metric, worst), (20, 16), small.clone()))?;
    key.draw(&Text::new(
        value_text(metric, best),
        (90 + key_width, 16),
        small.clone(),
    ))?;
    key.draw(&Text::new("grey: no value", (180 + key_width, 16), small))?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::shade;

    #[test]
    fn the_scale_runs_from_pale_to_dark() {
        assert_eq!(shade(0.0), plotters::style::RGBColor(255, 255, 204));
        assert_eq!(shade(1.0), plotters::style::RGBColor(37, 52, 148));
        let luma = |c: plotters::style::RGBColor| 0.3 * c.0 as f64 + 0.59 * c.1 as f64 + 0.11 * c.2 as f64;
        let steps: Vec<f64> = (0..=10).map(|i| luma(shade(i as f64 / 10.0))).collect();
        assert!(steps.windows(2).all(|w| w[1] < w[0]), "{steps:?}");
    }
}
