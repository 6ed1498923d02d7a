//! The study's pictures, as SVG (no fonts needed; they render on GitHub): training curves and
//! validation loss at every evaluation per variant with a band over the seeds, loss and accuracy
//! per length bin with error bars and the lengths past training shaded, and each metric per length
//! bin at every evaluation (`plot_steps`).

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::claims::Metric;
use super::figure::{Drawn, FONT, compact_svg, seeds};
use super::plot_steps::length_by_step;
use super::results::{RunResult, finite_mean};
use super::spec::{Study, Variant};
use super::spread::Spread;
use super::summary::{StudySummary, bin_start};
use crate::error::{Error, Result};
use crate::math;
use crate::train::LengthUnit;

/// One variant's training curve: (step, mean, min, max) over its seeds.
type Band = Vec<(f64, f64, f64, f64)>;

/// Tableau's ten colours: distinct, and readable by most colour-blind readers.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

const SIZE: (u32, u32) = (900, 560);

/// Up to this many variants the legend sits in the chart; more get rows of their own below it,
/// each `LEGEND_ROW` pixels high.
const LEGEND_INSIDE: usize = 8;
const LEGEND_ROW: u32 = 22;

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Past the palette's ten colours they repeat: those variants get dashed lines and triangle
/// markers, so that no two look alike.
fn dashed(i: usize) -> bool {
    (i / PALETTE.len()) % 2 == 1
}

/// Variant `i`'s line through `points`, labelled `label` in the legend (dashed past ten).
fn draw_line<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    i: usize,
    label: &str,
    points: Vec<(f64, f64)>,
) -> Drawn
where
    DB::ErrorType: 'static,
{
    let c = colour(i);
    if dashed(i) {
        chart
            .draw_series(DashedLineSeries::new(points, 9, 5, c.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| DashedPathElement::new(vec![(x, y), (x + 24, y)], 7, 4, c.stroke_width(3)));
    } else {
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
    }
    Ok(())
}

/// Writes every picture into `out`; returns (file name, caption) of each.
pub fn write_pictures(
    out: &Path,
    study: &Study,
    summary: &StudySummary,
    results: &[RunResult],
) -> Result<Vec<(String, String)>> {
    let mut pictures = Vec::new();
    let mut draw = |file: &str, caption: String, drawn: Drawn| -> Result<()> {
        let path = out.join(file);
        drawn
            .and_then(|()| Ok(compact_svg(&path)?))
            .map_err(|e| Error::Input(format!("picture {}: {e}", path.display())))?;
        pictures.push((file.to_string(), caption));
        Ok(())
    };
    let file = "training_loss.svg";
    draw(
        file,
        "Training loss per step (moving average), mean over seeds with a min–max band".into(),
        training_loss(&out.join(file), study, results),
    )?;
    if let Some(bin) = summary.bins.first() {
        let file = "eval_loss.svg";
        draw(
            file,
            format!(
                "Validation loss at {bin} {} at every evaluation, mean over seeds with a min–max band",
                summary.length_unit.name()
            ),
            eval_loss(&out.join(file), study, results, bin, summary.length_unit),
        )?;
    }
    if !summary.bins.is_empty() {
        for metric in summary.metrics() {
            let file = format!("length_{}.svg", metric.name());
            draw(
                &file,
                format!(
                    "{} per length bin at the end of training, mean ± 1 sd over seeds; shaded: past \
                     the training length",
                    metric.title()
                ),
                per_length(&out.join(&file), study, summary, results, metric),
            )?;
        }
        for metric in summary.metrics() {
            let file = format!("steps_{}.svg", metric.name());
            draw(
                &file,
                format!(
                    "{} per length bin at every evaluation, mean over seeds (a panel per variant)",
                    metric.title()
                ),
                length_by_step(&out.join(&file), study, summary, results, metric),
            )?;
        }
    }
    Ok(pictures)
}

/// The trailing mean over `window` steps, skipping missing (NaN) steps.
fn smoothed(losses: &[f32], window: usize) -> Vec<Option<f64>> {
    (0..losses.len())
        .map(|i| {
            let from = (i + 1).saturating_sub(window);
            finite_mean(&losses[from..=i])
        })
        .collect()
}

/// Along the steps of one variant: (step, mean, min, max) over its seeds' smoothed curves, each
/// run's losses in the widest window any of them has (published runs keep 10-step means, runs
/// trained since every step).
fn band(runs: &[&RunResult], steps: usize) -> Band {
    let window = runs.iter().map(|r| r.train_loss_window).max().unwrap_or(1);
    let curves: Vec<Vec<Option<f64>>> = runs
        .iter()
        .map(|r| smoothed(&r.train_loss_in_windows(window), (steps / 25 / window).max(1)))
        .collect();
    // At most ~250 points a curve (the picture is 900 pixels wide and the curve a moving average
    // over steps/25): every step of a 5,000-step run made the picture 600 KB.
    let windows = steps.div_ceil(window);
    let stride = (windows / 250).max(1);
    (0..windows)
        .filter(|i| i % stride == 0 || i + 1 == windows)
        .filter_map(|i| {
            let values: Vec<f64> = curves
                .iter()
                .filter_map(|c| c.get(i).copied().flatten())
                .collect();
            let spread = Spread::of(&values)?;
            Some((
                ((i + 1) * window).min(steps) as f64,
                spread.mean,
                spread.min,
                spread.max,
            ))
        })
        .collect()
}

/// Each variant's index (its colour), label and the band `of` its runs.
fn variant_bands<'a>(
    study: &'a Study,
    results: &[RunResult],
    of: impl Fn(&[&RunResult], &Variant) -> Band,
) -> Vec<(usize, &'a str, Band)> {
    study
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let runs: Vec<&RunResult> = results.iter().filter(|r| r.variant == v.name).collect();
            (i, v.label(), of(&runs, v))
        })
        .collect()
}

fn training_loss(path: &Path, study: &Study, results: &[RunResult]) -> Drawn {
    let bands = variant_bands(study, results, |runs, v| band(runs, v.run.train.steps));
    let title = format!(
        "{}: training loss (mean of {}, band min–max)",
        study.name,
        seeds(results)
    );
    curves(path, study, &title, "training loss, nats/token", &bands)
}

/// Per evaluation of one variant: (step, mean, min, max) over its seeds' loss in `bin`.
fn eval_band(runs: &[&RunResult], bin: &str) -> Band {
    RunResult::eval_steps(runs)
        .into_iter()
        .filter_map(|step| {
            let values: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.bin_at(step, bin))
                .map(|b| b.loss)
                .filter(|l| l.is_finite())
                .collect();
            let spread = Spread::of(&values)?;
            Some((step as f64, spread.mean, spread.min, spread.max))
        })
        .collect()
}

/// The validation loss in `bin` at every evaluation: how fast each variant gets where.
fn eval_loss(path: &Path, study: &Study, results: &[RunResult], bin: &str, unit: LengthUnit) -> Drawn {
    let bands = variant_bands(study, results, |runs, _| eval_band(runs, bin));
    let title = format!(
        "{}: validation loss at {bin} {} (mean of {}, band min–max)",
        study.name,
        unit.name(),
        seeds(results)
    );
    curves(path, study, &title, "validation loss, nats/token", &bands)
}

/// Draws one line per variant over the steps with its band, on a log axis when the values fall
/// by orders of magnitude.
fn curves(path: &Path, study: &Study, title: &str, y_desc: &str, bands: &[(usize, &str, Band)]) -> Drawn {
    let points = bands.iter().flat_map(|(_, _, b)| b.iter());
    let (lo, hi) = points.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
        (lo.min(p.2), hi.max(p.3))
    });
    let (lo, hi) = if lo.is_finite() && lo > 0.0 {
        (lo * 0.9, hi * 1.1)
    } else {
        (1e-3, 10.0)
    };
    // Losses that fall by orders of magnitude (the copy task's) are drawn on a log axis: log10 of
    // the loss on a linear axis, labelled with the loss itself.
    let log = hi / lo > 20.0;
    let y = |loss: f64| if log { math::log10(loss) } else { loss };
    let steps = study
        .variants
        .iter()
        .map(|v| v.run.train.steps)
        .max()
        .unwrap_or(1) as f64;

    // Many variants' legend would hide the curves: it goes below the chart, in two columns.
    let legend_rows = if bands.len() > LEGEND_INSIDE {
        bands.len().div_ceil(2) as u32
    } else {
        0
    };
    let legend_height = if legend_rows > 0 {
        legend_rows * LEGEND_ROW + 12
    } else {
        0
    };
    let root = SVGBackend::new(path, (SIZE.0, SIZE.1 + legend_height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (upper, lower) = root.split_vertically(SIZE.1);
    let mut chart = ChartBuilder::on(&upper)
        .caption(title, (FONT, 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..steps, y(lo)..y(hi))?;
    let loss_label = |v: &f64| {
        let loss = if log { math::powf(10f64, *v) } else { *v };
        // Three significant digits, however small the loss gets.
        let decimals = (2.0 - math::log10(loss.abs()).floor()).clamp(0.0, 8.0) as usize;
        format!("{loss:.decimals$}")
    };
    let y_desc = if log {
        format!("{y_desc} (log scale)")
    } else {
        y_desc.to_string()
    };
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&loss_label)
        .light_line_style(BLACK.mix(0.03))
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 13))
        .draw()?;
    for (i, label, band) in bands {
        let c = colour(*i);
        let mut outline: Vec<(f64, f64)> = band.iter().map(|p| (p.0, y(p.3))).collect();
        outline.extend(band.iter().rev().map(|p| (p.0, y(p.2))));
        chart.draw_series(std::iter::once(Polygon::new(outline, c.mix(0.18).filled())))?;
        draw_line(
            &mut chart,
            *i,
            label,
            band.iter().map(|p| (p.0, y(p.1))).collect(),
        )?;
    }
    if legend_rows == 0 {
        chart
            .configure_series_labels()
            .label_font((FONT, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    } else {
        let column = (SIZE.0 as i32 - 80) / 2;
        for (k, (i, label, _)) in bands.iter().enumerate() {
            let x = 80 + column * (k % 2) as i32;
            let y = 10 + LEGEND_ROW as i32 * (k / 2) as i32;
            let (c, sample) = (colour(*i), vec![(x, y), (x + 24, y)]);
            if dashed(*i) {
                lower.draw(&DashedPathElement::new(sample, 7, 4, c.stroke_width(3)))?;
            } else {
                lower.draw(&PathElement::new(sample, c.stroke_width(3)))?;
            }
            lower.draw(&Text::new(label.to_string(), (x + 32, y - 8), (FONT, 15)))?;
        }
    }
    root.present()?;
    Ok(())
}

fn per_length(
    path: &Path,
    study: &Study,
    summary: &StudySummary,
    results: &[RunResult],
    metric: Metric,
) -> Drawn {
    let bins = &summary.bins;
    let n = bins.len() as f64;
    let spread = |b: &super::summary::BinSummary| b.get(metric).cloned();
    let hi = summary
        .variants
        .iter()
        .flat_map(|v| v.bins.iter().filter_map(spread))
        .map(|s| s.mean + s.sd)
        .fold(0.0, f64::max);
    let top = match metric {
        // A little room above 100%, so that points there are not cut by the frame.
        Metric::Accuracy | Metric::ExactMatch | Metric::TokenAccuracy | Metric::MacroF1 => 1.04,
        Metric::Bleu => 104.0,
        // Edit distance can pass the reference's length.
        Metric::ErrorRate => (hi * 1.15).max(1.04),
        Metric::Loss if hi > 0.0 => hi * 1.15,
        Metric::Loss => 1.0,
    };
    let (length, unit) = match summary.length_unit {
        LengthUnit::InputSymbols => ("input length", "symbols"),
        LengthUnit::Tokens if metric.is_decoded() => ("source length", "tokens"),
        LengthUnit::Tokens => ("sequence length", "tokens"),
    };
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}: final {} per {length} (mean ± 1 sd over {})",
                study.name,
                metric.name().replace('_', " "),
                seeds(results)
            ),
            (FONT, 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..top)?;

    // Bins whose every length is longer than any training sequence.
    if let Some(len) = summary.train_len
        && let Some(first) = bins.iter().position(|b| bin_start(b) > len)
    {
        let from = first as f64 - 0.5;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(from, 0.0), (n - 0.5, top)],
            RGBColor(120, 120, 120).mix(0.15).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("past the training length ({len} {})", summary.length_unit.name()),
            (from + 0.05, top * 0.97),
            (FONT, 14).into_font().color(&BLACK.mix(0.7)),
        )))?;
    }
    let label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < bins.len() {
            bins[i as usize].clone()
        } else {
            String::new()
        }
    };
    let percent = |y: &f64| format!("{:.0}%", 100.0 * y);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(format!("{length} ({unit}), by bin"))
        .x_labels(bins.len() + 1)
        .x_label_formatter(&label)
        .disable_x_mesh()
        .light_line_style(BLACK.mix(0.03))
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 13));
    match metric {
        Metric::Accuracy => mesh.y_desc("token accuracy").y_label_formatter(&percent),
        Metric::Loss => mesh.y_desc("loss, nats/token"),
        Metric::Bleu => mesh.y_desc("corpus BLEU"),
        Metric::ExactMatch => mesh
            .y_desc("decoded sequences exactly right")
            .y_label_formatter(&percent),
        Metric::TokenAccuracy => mesh.y_desc("decoded token accuracy").y_label_formatter(&percent),
        Metric::ErrorRate => mesh
            .y_desc("edit distance / reference tokens")
            .y_label_formatter(&percent),
        Metric::MacroF1 => mesh.y_desc("macro-F1 (mean over classes)"),
    };
    mesh.draw()?;

    let count = summary.variants.len() as f64;
    for (i, v) in summary.variants.iter().enumerate() {
        let c = colour(i);
        // Side by side within a bin, so that error bars do not hide each other.
        let shift = (i as f64 - (count - 1.0) / 2.0) * (0.3 / count.max(2.0));
        let points: Vec<(f64, f64, f64)> = v
            .bins
            .iter()
            .enumerate()
            .filter_map(|(x, b)| spread(b).map(|s| (x as f64 + shift, s.mean, s.sd)))
            .collect();
        draw_line(
            &mut chart,
            i,
            &v.label,
            points.iter().map(|p| (p.0, p.1)).collect(),
        )?;
        chart.draw_series(points.iter().map(|&(x, mean, sd)| {
            ErrorBar::new_vertical(
                x,
                (mean - sd).max(0.0),
                mean,
                (mean + sd).min(top),
                c.stroke_width(2),
                10,
            )
        }))?;
        if dashed(i) {
            chart.draw_series(
                points
                    .iter()
                    .map(|&(x, mean, _)| TriangleMarker::new((x, mean), 6, c.filled())),
            )?;
        } else {
            chart.draw_series(
                points
                    .iter()
                    .map(|&(x, mean, _)| Circle::new((x, mean), 4, c.filled())),
            )?;
        }
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .position(if metric.lower_is_better() {
            SeriesLabelPosition::UpperLeft
        } else {
            SeriesLabelPosition::LowerLeft
        })
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::smoothed;

    #[test]
    fn the_moving_average_trails_and_skips_missing_steps() {
        let s = smoothed(&[4.0, 2.0, f32::NAN, 6.0], 2);
        assert_eq!(s, vec![Some(4.0), Some(3.0), Some(2.0), Some(6.0)]);
    }
}
