// Position encodings as heatmaps on a 2D canvas: one panel per additive term (FLOATER: one
// per block), positions across, dimensions down, on a diverging colormap centred at 0.

const BACKGROUND = '#ffffff';
const INK = '#1d1d1f';
const PAD = 28;
const GAP = 16;
const LEGEND = 34;

// ColorBrewer RdBu, negative (blue) to positive (red).
const STOPS = [
  [33, 102, 172], [103, 169, 207], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [239, 138, 98], [178, 24, 43],
];

function color(t) {
  // t in [-1, 1]
  const x = (Math.max(-1, Math.min(1, t)) + 1) / 2 * (STOPS.length - 1);
  const i = Math.min(Math.floor(x), STOPS.length - 2);
  const f = x - i;
  return STOPS[i].map((a, k) => Math.round(a + (STOPS[i + 1][k] - a) * f));
}

function panelImage(panel, positions, scale) {
  const image = new ImageData(positions, panel.dims);
  for (let p = 0; p < positions; p++) {
    for (let d = 0; d < panel.dims; d++) {
      const [r, g, b] = color(panel.values[p * panel.dims + d] / scale);
      const o = (d * positions + p) * 4;
      image.data[o] = r;
      image.data[o + 1] = g;
      image.data[o + 2] = b;
      image.data[o + 3] = 255;
    }
  }
  const bitmap = document.createElement('canvas');
  bitmap.width = positions;
  bitmap.height = panel.dims;
  bitmap.getContext('2d').putImageData(image, 0, 0);
  return bitmap;
}

function message(ctx, canvas, text) {
  ctx.fillStyle = INK;
  ctx.font = '14px system-ui, sans-serif';
  ctx.textAlign = 'center';
  ctx.fillText(text, canvas.width / 2, canvas.height / 2);
}

// Draws `encodings` ({positions, panels: [{label, dims, values}]}) on `canvas`; returns the
// largest |value|, which the colormap's ends stand for.
export function drawHeatmap(canvas, encodings) {
  const ctx = canvas.getContext('2d');
  ctx.fillStyle = BACKGROUND;
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  const { positions, panels } = encodings;
  if (panels.length === 0) {
    message(ctx, canvas, 'This model adds no position table (its encoding biases attention).');
    return 0;
  }
  let scale = 0;
  for (const panel of panels) {
    for (const v of panel.values) scale = Math.max(scale, Math.abs(v));
  }
  scale = scale || 1;
  const width = (canvas.width - 2 * PAD - GAP * (panels.length - 1)) / panels.length;
  const height = canvas.height - PAD - LEGEND - 8;
  ctx.imageSmoothingEnabled = false;
  ctx.font = '12px system-ui, sans-serif';
  ctx.textAlign = 'left';
  panels.forEach((panel, i) => {
    const x = PAD + i * (width + GAP);
    ctx.fillStyle = INK;
    ctx.fillText(`${panel.label} — ${positions} positions × ${panel.dims} dims`, x, PAD - 8);
    ctx.drawImage(panelImage(panel, positions, scale), x, PAD, width, height);
  });
  // The colormap's legend.
  const y = canvas.height - LEGEND + 4;
  const legendWidth = 240;
  const x0 = (canvas.width - legendWidth) / 2;
  for (let k = 0; k < legendWidth; k++) {
    const [r, g, b] = color((k / (legendWidth - 1)) * 2 - 1);
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect(x0 + k, y, 1, 10);
  }
  ctx.fillStyle = INK;
  ctx.textAlign = 'right';
  ctx.fillText(`−${scale.toFixed(2)}`, x0 - 6, y + 10);
  ctx.textAlign = 'left';
  ctx.fillText(`+${scale.toFixed(2)}`, x0 + legendWidth + 6, y + 10);
  return scale;
}
