//! The colormaps every view shares, and their legends: diverging (blue, white, red) for signed
//! values such as position encodings and attention logits, sequential (white to deep blue) for
//! probabilities.

use eframe::egui::{self, Color32, Rect, Sense, Shape, Stroke, Vec2, pos2};

/// RdBu's ends and middle (ColorBrewer), so that the sign reads at a glance.
const NEGATIVE: Color32 = Color32::from_rgb(33, 102, 172);
const ZERO: Color32 = Color32::from_rgb(247, 247, 247);
const POSITIVE: Color32 = Color32::from_rgb(178, 24, 43);
/// The sequential map runs from white to ColorBrewer's darkest Blues.
const DEEP_BLUE: Color32 = Color32::from_rgb(8, 48, 107);
/// What a value that is not a number shows, distinct from both maps.
pub const MISSING: Color32 = Color32::from_rgb(128, 128, 128);

/// Values to colours over a fixed range; values outside it get the colour of its nearest end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Colormap {
    /// `-limit` blue, 0 white, `+limit` red.
    Diverging { limit: f32 },
    /// 0 white, `max` deep blue.
    Sequential { max: f32 },
}

impl Colormap {
    /// A diverging map symmetric around 0 that spans every finite value (at least ±1e-6, so an
    /// all-zero map stays white instead of dividing by zero).
    pub fn diverging_for(values: &[f32]) -> Self {
        let limit = values
            .iter()
            .filter(|v| v.is_finite())
            .fold(0f32, |m, v| m.max(v.abs()));
        Self::Diverging {
            limit: limit.max(1e-6),
        }
    }

    /// The values at the legend's two ends.
    pub fn range(&self) -> (f32, f32) {
        match *self {
            Self::Diverging { limit } => (-limit, limit),
            Self::Sequential { max } => (0.0, max),
        }
    }

    pub fn color(&self, value: f32) -> Color32 {
        if !value.is_finite() {
            return MISSING;
        }
        match *self {
            Self::Diverging { limit } => {
                let t = (value / limit).clamp(-1.0, 1.0);
                if t < 0.0 {
                    lerp(ZERO, NEGATIVE, -t)
                } else {
                    lerp(ZERO, POSITIVE, t)
                }
            }
            Self::Sequential { max } => lerp(ZERO, DEEP_BLUE, (value / max).clamp(0.0, 1.0)),
        }
    }
}

fn lerp(a: Color32, b: Color32, t: f32) -> Color32 {
    let mix = |x: u8, y: u8| (f32::from(x) + (f32::from(y) - f32::from(x)) * t).round() as u8;
    Color32::from_rgb(mix(a.r(), b.r()), mix(a.g(), b.g()), mix(a.b(), b.b()))
}

/// A number short enough for an axis or a legend.
pub fn format_value(v: f32) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e4 || v.abs() < 1e-2 {
        format!("{v:.2e}")
    } else {
        format!("{v:.3}")
    }
}

/// A horizontal colour bar with the map's two end values and `title` under it.
pub fn legend(ui: &mut egui::Ui, colormap: &Colormap, title: &str) {
    let (low, high) = colormap.range();
    ui.horizontal(|ui| {
        ui.label(format_value(low));
        let (rect, _) = ui.allocate_exact_size(Vec2::new(160.0, 14.0), Sense::hover());
        let steps = 64;
        let width = rect.width() / steps as f32;
        for i in 0..steps {
            let value = low + (high - low) * (i as f32 + 0.5) / steps as f32;
            let x = rect.left() + i as f32 * width;
            let cell = Rect::from_min_max(pos2(x, rect.top()), pos2(x + width + 0.5, rect.bottom()));
            ui.painter().rect_filled(cell, 0.0, colormap.color(value));
        }
        ui.painter().add(Shape::rect_stroke(
            rect,
            0.0,
            Stroke::new(1.0, ui.visuals().weak_text_color()),
            egui::StrokeKind::Outside,
        ));
        ui.label(format_value(high));
        ui.weak(title);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diverging_map_has_blue_white_and_red_at_its_ends_and_middle() {
        let map = Colormap::Diverging { limit: 2.0 };
        assert_eq!(map.color(-2.0), NEGATIVE);
        assert_eq!(map.color(0.0), ZERO);
        assert_eq!(map.color(2.0), POSITIVE);
        // Past the ends: clamped, not wrapped.
        assert_eq!(map.color(-50.0), NEGATIVE);
        assert_eq!(map.color(50.0), POSITIVE);
        // Halfway to the positive end: halfway between white and red in every channel.
        assert_eq!(map.color(1.0), Color32::from_rgb(213, 136, 145));
        assert_eq!(map.color(f32::NAN), MISSING);
        assert_eq!(map.range(), (-2.0, 2.0));
    }

    #[test]
    fn sequential_map_runs_from_white_to_deep_blue() {
        let map = Colormap::Sequential { max: 1.0 };
        assert_eq!(map.range(), (0.0, 1.0));
        assert_eq!(map.color(0.0), ZERO);
        assert_eq!(map.color(1.0), DEEP_BLUE);
        assert_eq!(map.color(-0.5), ZERO);
    }

    #[test]
    fn diverging_for_spans_the_largest_magnitude_and_ignores_non_finite_values() {
        assert_eq!(
            Colormap::diverging_for(&[0.5, -3.0, f32::INFINITY, 1.0]),
            Colormap::Diverging { limit: 3.0 }
        );
        assert_eq!(
            Colormap::diverging_for(&[0.0, 0.0]),
            Colormap::Diverging { limit: 1e-6 }
        );
    }

    #[test]
    fn values_format_short() {
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(-1.23456), "-1.235");
        assert_eq!(format_value(0.001), "1.00e-3");
    }
}
