// The demo page: starts posflow (WebGPU, or the CPU in wasm), loads the shipped checkpoint,
// wires the prompt, the file input and the heatmap, and exposes `window.posflow`:
//
//   posflow.status()                 → {ready, backend: "webgpu"|"cpu", device, fallback,
//                                       model, error, timings}
//   posflow.complete(prompt, chars)  → Promise<string>  prompt + greedy continuation
//   posflow.probabilities(prompt)    → Promise<{char: p}> the next character's distribution
//   posflow.loadCheckpoint(bytes, name?) → Promise<model info>; rejects on a bad file
//   posflow.positionEncodings()      → Promise<{positions, panels: [{label, dims, values}]}>

import init, * as wasm from './pkg/posflow_web.js';
import { drawHeatmap } from './heatmap.js';

const CHECKPOINT = 'assets/web_demo.safetensors';
const COMPLETION_CHARS = 80;
const SHOWN_PROBABILITIES = 10;

const $ = (id) => document.getElementById(id);

const state = {
  ready: false,
  backend: null,
  device: null,
  fallback: null,
  model: null,
  error: null,
  // Milliseconds since navigation start.
  timings: { ready: null, firstCompletion: null },
};

// The wasm side feeds, runs and reads one executor per call: calls must not overlap.
let queue = Promise.resolve();
function serial(task) {
  const run = queue.then(task);
  queue = run.catch(() => {});
  return run;
}

function showError(error) {
  const text = error ? String(error.message ?? error) : null;
  state.error = text;
  $('error').hidden = !text;
  $('error').textContent = text ?? '';
}

function showStatus() {
  const m = state.model;
  const backend = state.backend === 'webgpu' ? `WebGPU (${state.device})` : 'the CPU in WebAssembly';
  const model = m
    ? ` · ${m.name}: ${m.layers} layers, d_model ${m.d_model}, ${m.heads} heads, ` +
      `${m.parameters.toLocaleString('en')} parameters, position encoding ${m.posenc.type}`
    : '';
  $('status').textContent = `Running on ${backend}${model}`;
}

function showCompletion(prompt, text) {
  const out = $('completion');
  out.replaceChildren();
  const bold = document.createElement('b');
  bold.textContent = prompt;
  out.append(bold, text.slice(prompt.length));
}

function showProbabilities(probs) {
  const top = Object.entries(probs)
    .sort((a, b) => b[1] - a[1])
    .slice(0, SHOWN_PROBABILITIES);
  const items = top.map(([char, p]) => {
    const li = document.createElement('li');
    const name = document.createElement('span');
    name.textContent = JSON.stringify(char);
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.style.width = `${(100 * p).toFixed(1)}%`;
    const value = document.createElement('span');
    value.className = 'p';
    value.textContent = p.toFixed(3);
    li.append(name, bar, value);
    return li;
  });
  $('probabilities').replaceChildren(...items);
}

const api = {
  status() {
    return structuredClone(state);
  },
  async complete(prompt, chars = COMPLETION_CHARS) {
    const text = await serial(() => wasm.complete(prompt, chars));
    state.timings.firstCompletion ??= performance.now();
    return text;
  },
  probabilities(prompt) {
    return serial(() => wasm.probabilities(prompt));
  },
  async loadCheckpoint(bytes, name = 'checkpoint') {
    const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const info = await serial(() => wasm.loadCheckpoint(data, name));
    state.model = info;
    showStatus();
    await redrawPositions();
    return info;
  },
  positionEncodings() {
    return serial(() => wasm.positionEncodings());
  },
};
window.posflow = api;

async function redrawPositions() {
  const encodings = await api.positionEncodings();
  const scale = drawHeatmap($('positions'), encodings);
  $('positions-caption').textContent = encodings.panels.length
    ? `(what each block adds to its input; colour ends at ±${scale.toFixed(2)})`
    : '';
}

// Completes the prompt box's text and shows the next-character distribution.
async function run() {
  const prompt = $('prompt').value;
  try {
    const [text, probs] = await Promise.all([api.complete(prompt), api.probabilities(prompt)]);
    showCompletion(prompt, text);
    showProbabilities(probs);
    showError(null);
  } catch (e) {
    showError(e);
  }
}

async function loadFile(file) {
  try {
    await api.loadCheckpoint(new Uint8Array(await file.arrayBuffer()), file.name);
    showError(null);
    await run();
  } catch (e) {
    showError(`Could not load ${file.name}: ${e.message ?? e}`);
  }
}

async function boot() {
  await init();
  const webgpu = Boolean(navigator.gpu);
  const started = await wasm.start(webgpu);
  Object.assign(state, started);
  if (started.fallback) {
    $('backend-warning').hidden = false;
    $('backend-warning').textContent =
      'WebGPU is not available in this browser: running on the CPU in WebAssembly instead ' +
      '(slower, same results).';
    $('backend-warning').title = started.fallback;
  }
  const response = await fetch(CHECKPOINT);
  if (!response.ok) throw new Error(`${CHECKPOINT}: HTTP ${response.status}`);
  await api.loadCheckpoint(await response.arrayBuffer(), 'web_demo.safetensors');
  $('prompt-form').addEventListener('submit', (event) => {
    event.preventDefault();
    run();
  });
  $('checkpoint-file').addEventListener('change', (event) => {
    const [file] = event.target.files;
    if (file) loadFile(file);
    event.target.value = '';
  });
  await run();
  for (const id of ['prompt', 'complete-button', 'checkpoint-file']) $(id).disabled = false;
  state.timings.ready = performance.now();
  state.ready = true;
}

boot().catch((e) => {
  showError(`posflow could not start: ${e.message ?? e}`);
  $('status').textContent = 'Not running.';
});
