//! A heatmap widget: a row-major matrix drawn as one texture, with axis titles, tick labels
//! (tokens, or every n-th index), rows past a table's end greyed out and labelled, and the value
//! under the pointer in a tooltip.

use std::hash::{Hash, Hasher};

use eframe::egui::{
    self, Align2, Color32, ColorImage, FontId, Pos2, Rect, Sense, Stroke, TextureHandle, TextureOptions,
    Vec2, pos2, vec2,
};

use super::colormap::{Colormap, format_value};

/// The matrix and how to label it; `show` draws it.
pub struct Heatmap<'a> {
    /// A stable name, unique on the screen (caches the texture).
    pub id: String,
    /// `rows × cols`, row-major.
    pub values: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub colormap: Colormap,
    /// What the rows and the columns are ("position", "dimension", "query", "key").
    pub row_title: &'a str,
    pub col_title: &'a str,
    /// One label per row or column (tokens); numbered ticks when `None`.
    pub row_labels: Option<&'a [String]>,
    pub col_labels: Option<&'a [String]>,
    /// Rows from here on have no value (past a learned table's end): drawn grey, not invented.
    pub valid_rows: usize,
    /// A vertical mark after this many rows, e.g. the training length.
    pub row_mark: Option<(usize, &'a str)>,
}

/// Room left of and under the matrix for tick labels and titles.
const LEFT: f32 = 64.0;
const BOTTOM: f32 = 40.0;

impl Heatmap<'_> {
    /// Draws the map in a `size` box (labels included), rows top to bottom.
    pub fn show(&self, ui: &mut egui::Ui, size: Vec2) -> egui::Response {
        let (outer, response) = ui.allocate_exact_size(size, Sense::hover());
        let plot = Rect::from_min_max(
            pos2(outer.left() + LEFT, outer.top() + 4.0),
            pos2(outer.right() - 4.0, outer.bottom() - BOTTOM),
        );
        if self.rows == 0 || self.cols == 0 || plot.width() <= 0.0 || plot.height() <= 0.0 {
            return response;
        }
        let texture = self.texture(ui);
        let painter = ui.painter_at(outer);
        painter.image(
            texture.id(),
            plot,
            Rect::from_min_max(Pos2::ZERO, pos2(1.0, 1.0)),
            Color32::WHITE,
        );
        let cell = vec2(plot.width() / self.cols as f32, plot.height() / self.rows as f32);
        let text = ui.visuals().text_color();
        let weak = ui.visuals().weak_text_color();
        if self.valid_rows < self.rows {
            let top = plot.top() + self.valid_rows as f32 * cell.y;
            let past = Rect::from_min_max(pos2(plot.left(), top), plot.max);
            painter.text(
                past.center(),
                Align2::CENTER_CENTER,
                format!("no table past position {}", self.valid_rows - 1),
                FontId::proportional(13.0),
                text,
            );
        }
        if let Some((row, label)) = self.row_mark.filter(|&(row, _)| row < self.rows) {
            let y = plot.top() + row as f32 * cell.y;
            painter.line_segment(
                [pos2(plot.left() - 6.0, y), pos2(plot.right(), y)],
                Stroke::new(1.5, Color32::from_rgb(230, 150, 0)),
            );
            painter.text(
                pos2(plot.right() - 2.0, y - 2.0),
                Align2::RIGHT_BOTTOM,
                label,
                FontId::proportional(11.0),
                Color32::from_rgb(230, 150, 0),
            );
        }
        // Tokens are what the reader looks for: larger and brighter than index ticks.
        let (small, tick_color) = if self.row_labels.is_some() {
            (FontId::proportional(12.0), text)
        } else {
            (FontId::proportional(10.0), weak)
        };
        for (i, label) in ticks(self.rows, self.row_labels, cell.y) {
            let y = plot.top() + (i as f32 + 0.5) * cell.y;
            painter.text(
                pos2(plot.left() - 3.0, y),
                Align2::RIGHT_CENTER,
                label,
                small.clone(),
                tick_color,
            );
        }
        for (j, label) in ticks(self.cols, self.col_labels, cell.x) {
            let x = plot.left() + (j as f32 + 0.5) * cell.x;
            painter.text(
                pos2(x, plot.bottom() + 2.0),
                Align2::CENTER_TOP,
                label,
                small.clone(),
                tick_color,
            );
        }
        // Both titles under the map, where no tick label is: rows at the left, columns centred,
        // or right-aligned where a narrow map would make the two overlap.
        let rows_title = painter.text(
            pos2(outer.left() + 2.0, outer.bottom() - 2.0),
            Align2::LEFT_BOTTOM,
            format!("rows: {}", self.row_title),
            FontId::proportional(12.0),
            text,
        );
        let columns = format!("columns: {}", self.col_title);
        let columns_width = painter
            .layout_no_wrap(columns.clone(), FontId::proportional(12.0), text)
            .size()
            .x;
        let (x, align) = if plot.center().x - columns_width / 2.0 > rows_title.right() + 8.0 {
            (plot.center().x, Align2::CENTER_BOTTOM)
        } else {
            (outer.right() - 2.0, Align2::RIGHT_BOTTOM)
        };
        painter.text(
            pos2(x, outer.bottom() - 2.0),
            align,
            columns,
            FontId::proportional(12.0),
            text,
        );
        if let Some(pointer) = response.hover_pos().filter(|p| plot.contains(*p)) {
            let i = (((pointer.y - plot.top()) / cell.y) as usize).min(self.rows - 1);
            let j = (((pointer.x - plot.left()) / cell.x) as usize).min(self.cols - 1);
            let name = |title: &str, labels: Option<&[String]>, k: usize| match labels {
                Some(l) => format!("{title} {k} '{}'", l[k]),
                None => format!("{title} {k}"),
            };
            let value = if i < self.valid_rows {
                format_value(self.values[i * self.cols + j])
            } else {
                "none (past the table's end)".into()
            };
            let tip = format!(
                "{}, {}: {value}",
                name(self.row_title, self.row_labels, i),
                name(self.col_title, self.col_labels, j)
            );
            response.clone().on_hover_text_at_pointer(tip);
        }
        response
    }

    /// The colours as a texture, uploaded again only when the values or the colormap change.
    fn texture(&self, ui: &egui::Ui) -> TextureHandle {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (self.rows, self.cols, self.valid_rows).hash(&mut hasher);
        self.values.iter().for_each(|v| v.to_bits().hash(&mut hasher));
        let (low, high) = self.colormap.range();
        (low.to_bits(), high.to_bits()).hash(&mut hasher);
        let key = hasher.finish();
        let id = egui::Id::unique(("posflow.heatmap", &self.id));
        if let Some((cached, texture)) = ui.data(|d| d.get_temp::<(u64, TextureHandle)>(id))
            && cached == key
        {
            return texture;
        }
        let background = ui.visuals().faint_bg_color;
        let pixels = (0..self.rows * self.cols)
            .map(|k| {
                if k / self.cols < self.valid_rows {
                    self.colormap.color(self.values[k])
                } else {
                    background
                }
            })
            .collect();
        let image = ColorImage::new([self.cols, self.rows], pixels);
        let texture = ui
            .ctx()
            .load_texture(format!("heatmap {}", self.id), image, TextureOptions::NEAREST);
        ui.data_mut(|d| d.insert_temp(id, (key, texture.clone())));
        texture
    }
}

/// The indices to label along an axis of `n` cells `cell` points wide: every one when labels
/// fit, else every k-th (1, 2, 5, 10, 20, 50, ...), with the given labels or the index.
fn ticks(n: usize, labels: Option<&[String]>, cell: f32) -> Vec<(usize, String)> {
    let room = if labels.is_some() { 10.0 } else { 26.0 };
    let every = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
        .into_iter()
        .find(|&k| k as f32 * cell >= room)
        .unwrap_or(n.max(1));
    (0..n)
        .step_by(every)
        .map(|i| (i, labels.map_or_else(|| i.to_string(), |l| l[i].clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::ticks;

    #[test]
    fn ticks_thin_out_when_cells_are_small() {
        assert_eq!(
            ticks(3, None, 40.0),
            [(0, "0".into()), (1, "1".into()), (2, "2".into())]
        );
        let sparse: Vec<usize> = ticks(100, None, 3.0).into_iter().map(|(i, _)| i).collect();
        assert_eq!(sparse, (0..100).step_by(10).collect::<Vec<_>>());
        let labels: Vec<String> = ["a", "b"].map(String::from).to_vec();
        assert_eq!(ticks(2, Some(&labels), 20.0)[1], (1, "b".to_string()));
    }
}
