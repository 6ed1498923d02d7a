// The demo page: starts posflow (WebGPU, or the CPU in wasm), mounts posflow's egui viewer (the
// views of native `posflow viz`) on the canvas #viewer with the same backend, loads the shipped
// checkpoint into both, wires the file input, and exposes `window.posflow`:
//
//   posflow.status()                 → {ready, backend: "webgpu"|"cpu", device, fallback,
//                                       model, error, timings}
//   posflow.complete(prompt, chars)  → Promise<string>  prompt + greedy continuation
//   posflow.translate(source, beam)  → Promise<{output, score}> a seq2seq model's beam search
//   posflow.probabilities(prompt)    → Promise<{char: p}> the next character's distribution
//   posflow.loadCheckpoint(bytes, name?) → Promise<model info>; rejects on a bad file
//   posflow.loadShipped(name)        → Promise<model info>: 'web_demo' (the language model, FLOATER),
//                                       'web_demo_rope', 'web_demo_alibi' (the same with RoPE, ALiBi)
//                                       or 'cmudict_seq2seq' (spelling → pronunciation)
//   posflow.selectView(name)         → selects the viewer's tab: position_encodings, attention,
//                                       tupe, metrics, prompt or translate
//   posflow.setPrompt(prompt)        → sets the viewer's prompt and completes it
//   posflow.setSource(source, beam)  → sets the translate view's source and decodes it
//   posflow.viewerStatus()           → {status, view, checkpoints, errors, prompt,
//                                       completedPrompt, promptField, encodingsSums, translation}
//   posflow.lastCompletion()         → the viewer's latest completion (prompt included) or null
//   posflow.fineTune(text, steps)    → starts fine-tuning the viewer's position encoder (its
//                                       heatmap follows); throws on a text the model cannot learn
//   posflow.fineTuneStatus()         → {stepsDone, stepsTotal, running, losses, error}
//   posflow.stopFineTune(), posflow.resetFineTune() → stop; stop and restore the loaded values

import init, * as wasm from './pkg/posflow_web.js';

// The checkpoints the page ships; the first is loaded at start.
const SHIPPED = {
  web_demo: 'assets/web_demo.safetensors',
  web_demo_rope: 'assets/web_demo_rope.safetensors',
  web_demo_alibi: 'assets/web_demo_alibi.safetensors',
  cmudict_seq2seq: 'assets/cmudict_seq2seq.safetensors',
};
const COMPLETION_CHARS = 80;
const BEAM = 4;

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

// The session feeds, runs and reads one executor per call: calls must not overlap.
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
  const layers = m?.kind === 'seq2seq'
    ? `seq2seq, ${m.layers} encoder + ${m.decoder_layers} decoder layers`
    : `${m?.layers} layers`;
  const model = m
    ? ` · ${m.name}: ${layers}, d_model ${m.d_model}, ${m.heads} heads, ` +
      `${m.parameters.toLocaleString('en')} parameters, position encoding ${m.posenc.type}`
    : '';
  $('status').textContent = `Running on ${backend}${model}`;
}

// Resolves with the viewer's completion once it has one (the viewer computes it in the background).
function viewerCompletion() {
  return new Promise((resolve) => {
    const poll = () => {
      const text = wasm.lastCompletion();
      if (text !== undefined && text !== null) resolve(text);
      else setTimeout(poll, 20);
    };
    poll();
  });
}

const api = {
  status() {
    return structuredClone(state);
  },
  complete(prompt, chars = COMPLETION_CHARS) {
    return serial(() => wasm.complete(prompt, chars));
  },
  probabilities(prompt) {
    return serial(() => wasm.probabilities(prompt));
  },
  translate(source, beam = BEAM) {
    return serial(() => wasm.translate(source, beam));
  },
  async loadCheckpoint(bytes, name = 'checkpoint') {
    const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const info = await serial(() => wasm.loadCheckpoint(data, name));
    state.model = info;
    showStatus();
    return info;
  },
  async loadShipped(name) {
    const path = SHIPPED[name];
    if (!path) throw new Error(`no shipped checkpoint is called ${name}: ${Object.keys(SHIPPED).join(', ')}`);
    const response = await fetch(path);
    if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
    return api.loadCheckpoint(await response.arrayBuffer(), `${name}.safetensors`);
  },
  selectView(name) {
    wasm.selectView(name);
  },
  setPrompt(prompt) {
    wasm.setPrompt(prompt);
  },
  setSource(source, beam = BEAM) {
    wasm.setSource(source, beam);
  },
  viewerStatus() {
    return wasm.viewerStatus();
  },
  lastCompletion() {
    return wasm.lastCompletion() ?? null;
  },
  fineTune(text, steps) {
    wasm.fineTune(text, steps);
  },
  fineTuneStatus() {
    return wasm.fineTuneStatus();
  },
  stopFineTune() {
    wasm.stopFineTune();
  },
  resetFineTune() {
    wasm.resetFineTune();
  },
};
window.posflow = api;

async function loadFile(file) {
  try {
    await api.loadCheckpoint(new Uint8Array(await file.arrayBuffer()), file.name);
    showError(null);
  } catch (e) {
    showError(`Could not load ${file.name}: ${e.message ?? e}`);
  }
}

async function boot() {
  await init();
  // ?backend=auto (default: a hardware WebGPU adapter, else the CPU), webgpu or cpu.
  const choice = new URLSearchParams(location.search).get('backend') ?? 'auto';
  const started = await wasm.start(choice, Boolean(navigator.gpu));
  Object.assign(state, started);
  if (started.fallback) {
    $('backend-warning').hidden = false;
    $('backend-warning').textContent =
      `Running on the CPU in WebAssembly (same results): ${started.fallback}.`;
  }
  await wasm.mountViewer($('viewer'));
  api.selectView('prompt');
  await api.loadShipped('web_demo');
  for (const button of document.querySelectorAll('button[data-shipped]')) {
    button.addEventListener('click', async () => {
      try {
        await api.loadShipped(button.dataset.shipped);
        showError(null);
      } catch (e) {
        showError(`Could not load ${button.dataset.shipped}: ${e.message ?? e}`);
      }
    });
    button.disabled = false;
  }
  $('checkpoint-file').addEventListener('change', (event) => {
    const [file] = event.target.files;
    if (file) loadFile(file);
    event.target.value = '';
  });
  await viewerCompletion();
  state.timings.firstCompletion = performance.now();
  $('checkpoint-file').disabled = false;
  state.timings.ready = performance.now();
  state.ready = true;
}

boot().catch((e) => {
  showError(`posflow could not start: ${e.message ?? e}`);
  $('status').textContent = 'Not running.';
});
