//! The prompt view: a greedy completion of the typed text by the active checkpoint, and the
//! model's probabilities for the character right after the prompt, as bars.

use eframe::egui::{self, Align2, FontId, Rect, Sense, pos2, vec2};
use rand::SeedableRng;

use super::colormap::Colormap;
use super::{Job, LoadedCheckpoint, State, active, show_result};
use crate::error::{Error, Result};

/// How many of the likeliest next characters get a bar.
const BARS: usize = 12;

/// The view's controls.
pub struct Settings {
    pub text: String,
    /// Characters to generate.
    pub chars: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            text: "Call me Ishmael. ".into(),
            chars: 80,
        }
    }
}

/// What the model made of a prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The greedy continuation, without the prompt.
    pub text: String,
    /// The likeliest next characters after the prompt and their probabilities, likeliest first.
    pub next: Vec<(String, f32)>,
}

/// Greedy (temperature 0) continuation of `prompt` by `chars` characters, and the distribution
/// of the first one.
pub async fn complete(loaded: &LoadedCheckpoint, prompt: &str, chars: usize) -> Result<Completion> {
    let generator = loaded.generator.as_ref().ok_or_else(|| {
        Error::Input(if loaded.decoder.is_some() {
            format!(
                "{} is a seq2seq model: it translates a source (the Translate tab) rather than continue text",
                loaded.name
            )
        } else {
            format!(
                "{} is an encoder (a classifier): it does not generate text",
                loaded.name
            )
        })
    })?;
    let context = loaded.encode(prompt)?;
    if context.is_empty() {
        return Err(Error::Input(
            "type a prompt: the model needs at least one character".into(),
        ));
    }
    // Temperature 0 never draws from the generator, so any seed gives the same text.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let text = generator.complete(prompt, chars, 0.0, &mut rng).await?;
    let probs = generator.next_probabilities(&context).await?;
    let mut next: Vec<(String, f32)> = probs
        .iter()
        .enumerate()
        .map(|(id, &p)| (loaded.token_label(id as i32), p))
        .collect();
    next.sort_by(|a, b| b.1.total_cmp(&a.1));
    next.truncate(BARS);
    Ok(Completion { text, next })
}

/// The job for the current prompt of the active checkpoint, unless it is already done or running.
pub(crate) fn request(s: &mut State) -> Option<Job> {
    let checkpoint = s.active;
    if checkpoint >= s.checkpoints.len() {
        return None;
    }
    let (prompt, chars) = (s.prompt.text.clone(), s.prompt.chars);
    s.completion
        .request((checkpoint, prompt.clone(), chars))
        .then_some(Job::Completion {
            checkpoint,
            prompt,
            chars,
        })
}

pub(crate) fn show(ui: &mut egui::Ui, s: &mut State, jobs: &mut Vec<Job>) {
    let Some((_, checkpoint)) = active(ui, s) else {
        return;
    };
    ui.weak(format!("{}: {}", checkpoint.name, checkpoint.describe()));
    let mut submit = s.completion.key.is_none();
    ui.horizontal(|ui| {
        let label = ui.label("prompt");
        let edit = ui
            .add(egui::TextEdit::singleline(&mut s.prompt.text).desired_width(420.0))
            .labelled_by(label.id);
        s.prompt_field = Some(edit.rect);
        submit |= edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        ui.add(egui::Slider::new(&mut s.prompt.chars, 1..=400).text("characters"));
        submit |= ui.button("Complete").clicked();
    });
    if submit {
        jobs.extend(request(s));
    }
    show_result(ui, s.completion.result(), |ui, completion| {
        let (prompt, _) = s
            .completion
            .key
            .as_ref()
            .map_or(("", 0), |(_, p, n)| (p.as_str(), *n));
        egui::Frame::group(ui.style()).show(ui, |ui| {
            ui.horizontal_wrapped(|ui| {
                ui.spacing_mut().item_spacing.x = 0.0;
                ui.label(egui::RichText::new(prompt).monospace().strong());
                ui.label(
                    egui::RichText::new(&completion.text)
                        .monospace()
                        .color(ui.visuals().hyperlink_color),
                );
            });
        });
        ui.add_space(8.0);
        ui.strong("Next character after the prompt");
        bars(ui, &completion.next);
    });
}

/// One horizontal bar per character, its length the probability.
fn bars(ui: &mut egui::Ui, next: &[(String, f32)]) {
    let colormap = Colormap::Sequential { max: 1.0 };
    let row = 22.0;
    let width = ui.available_width().min(560.0);
    let (rect, _) = ui.allocate_exact_size(vec2(width, row * next.len() as f32), Sense::hover());
    let painter = ui.painter_at(rect);
    let text = ui.visuals().text_color();
    let label_width = 40.0;
    // The likeliest character gets the full width, so that small probabilities still differ.
    let longest = next.first().map_or(1.0, |(_, p)| p.max(1e-6));
    let bar_room = (width - label_width - 60.0) / longest;
    for (k, (label, p)) in next.iter().enumerate() {
        let top = rect.top() + k as f32 * row;
        painter.text(
            pos2(rect.left() + label_width - 6.0, top + row / 2.0),
            Align2::RIGHT_CENTER,
            format!("'{label}'"),
            FontId::monospace(13.0),
            text,
        );
        let bar = Rect::from_min_size(
            pos2(rect.left() + label_width, top + 3.0),
            vec2((bar_room * p).max(1.0), row - 6.0),
        );
        // The probability colormap's colour at the bar's value, but never too pale to see.
        painter.rect_filled(bar, 2.0, colormap.color(p.max(0.35)));
        painter.text(
            pos2(bar.right() + 6.0, top + row / 2.0),
            Align2::LEFT_CENTER,
            format!("{:.1}%", p * 100.0),
            FontId::proportional(12.0),
            text,
        );
    }
}
