//! Headless rendering of every view to a PNG file (`posflow viz --export DIR`), through
//! egui_kittest's wgpu renderer: the same UI code as the window, no display needed.

use std::path::{Path, PathBuf};

use eframe::egui;
use eframe::egui_wgpu::{WgpuSetup, WgpuSetupExisting};
use egui_kittest::Harness;
use image::ImageEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};

use super::finetune::DEFAULT_TEXT;
use super::{View, Viewer};
use crate::backend::gpu::for_rendering;
use crate::error::{Error, Result};

/// The size of every exported picture, in points (one pixel each).
pub const SIZE: egui::Vec2 = egui::vec2(1280.0, 860.0);

/// Fine-tuning steps before `position_encodings_finetuned.png`.
const FINE_TUNE_STEPS: usize = 30;

/// Renders each view alone (with its title) to `dir/<view slug>.png` and returns the paths.
/// Jobs run as the frames do ([`super::Spawner::blocking`] finishes them within a frame), so
/// every picture shows computed results. When the active checkpoint's position encoder can
/// learn the fine-tuning section's default text (a Moby Dick model's can), one more picture
/// shows the encodings after a few steps on it; the parameters are put back afterwards.
pub fn export_views(viewer: &Viewer, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Input(format!("{}: {e}", dir.display())))?;
    let mut paths = View::ALL
        .into_iter()
        .map(|view| write_png(&render(viewer, view)?, dir, view.slug()))
        .collect::<Result<Vec<_>>>()?;
    let handle = viewer.handle();
    if handle.start_fine_tune(DEFAULT_TEXT, FINE_TUNE_STEPS).is_ok() {
        // One step per frame, then the frames that draw the last heatmap.
        let image = render_frames(viewer, View::PositionEncodings, FINE_TUNE_STEPS + 4);
        handle.reset_fine_tune();
        let name = format!("{}_finetuned", View::PositionEncodings.slug());
        paths.push(write_png(&image?, dir, &name)?);
    }
    Ok(paths)
}

fn write_png(image: &image::RgbaImage, dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(format!("{name}.png"));
    let bytes = png(image).map_err(|e| Error::Input(format!("encoding {}: {e}", path.display())))?;
    std::fs::write(&path, bytes).map_err(|e| Error::Input(format!("writing {}: {e}", path.display())))?;
    Ok(path)
}

/// The image as a PNG at the best compression: the pictures go into the repository's docs.
fn png(image: &image::RgbaImage) -> image::ImageResult<Vec<u8>> {
    let mut bytes = Vec::new();
    let encoder = PngEncoder::new_with_quality(&mut bytes, CompressionType::Best, FilterType::Adaptive);
    encoder.write_image(
        image,
        image.width(),
        image.height(),
        image::ExtendedColorType::Rgba8,
    )?;
    Ok(bytes)
}

/// One view as an RGBA image of [`SIZE`].
pub fn render(viewer: &Viewer, view: View) -> Result<image::RgbaImage> {
    // A few frames: the first requests the view's jobs, the next show their results (and the
    // textures they upload).
    render_frames(viewer, view, 4)
}

fn render_frames(viewer: &Viewer, view: View, frames: usize) -> Result<image::RgbaImage> {
    let mut harness = Harness::builder()
        .with_size(SIZE)
        .with_pixels_per_point(1.0)
        // A model's vocabulary may hold characters the built-in fonts lack: draw a box for
        // those, as the window does, instead of kittest's default panic.
        .allow_missing_glyphs()
        .wgpu_setup(rendering_setup()?)
        .build_ui(|ui| viewer.show_view(ui, view));
    harness.run_steps(frames);
    harness
        .render()
        .map_err(|e| Error::Device(format!("rendering the {} view: {e}", view.title())))
}

/// posflow's own choice of adapter for egui's renderer (see [`for_rendering`]).
fn rendering_setup() -> Result<WgpuSetup> {
    let (instance, adapter, device, queue) = pollster::block_on(for_rendering())?;
    Ok(WgpuSetup::Existing(WgpuSetupExisting {
        instance,
        adapter,
        device,
        queue,
    }))
}
