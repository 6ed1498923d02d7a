// The demo page: starts posflow (WebGPU, or the CPU in wasm), mounts posflow's egui viewer (the
// views of native `posflow viz`) on the canvas #viewer with the same backend, loads the shipped
// checkpoint into both, wires the file input, and exposes `window.posflow`:
//
//   posflow.status()                 → {ready, backend: "webgpu"|"cpu", device, fallback,
//                                       model, threads, error, timings}
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
//   posflow.setCompare(query)        → the Compare tab's settings from a link's query (task, enc,
//                                       seeds, train, test, preset), the tab opened; throws on an
//                                       unknown key or value
//   posflow.compareQuery()           → the Compare tab's settings as a query (kept in the URL)
//   posflow.startCompare(), posflow.stopCompare() → Start and Stop (start throws the refusal)
//   posflow.compareStatus()          → {stepsDone, stepsTotal, runsDone, runsTotal, running, done,
//                                       seconds, wallSeconds, verdicts: [{name, verdict}], error,
//                                       refusal}
//   posflow.compareStudy()           → the study file that reproduces the comparison natively
//   posflow.compareResults()         → the finished runs, as posflow study's result.json files
//   posflow.downloadStudy()          → hands the study file to the browser (the tab's Download study)
//   posflow.downloads                → every file the page handed the browser: [{name, size}]
//   posflow.benchTrain(variant, steps, warmup, profile) → Promise<{medianMs, meanMs, bestMs,
//                                       tokensPerSecond, …, profile}>: `posflow bench train`'s step
//                                       timed in the page (web/tests/bench.mjs; the CPU one holds
//                                       the page); with profile, its time per op kind on the CPU
//
// The Compare tab's settings live in the page's URL (?task=…&enc=…&seeds=…&train=…&test=…&preset=…
// beside ?backend=): a link opens the tab with them.

// Served cross-origin isolated (the COOP and COEP headers of web/serve.mjs; web/README.md), a page
// that will run on the CPU loads the threaded build, whose CPU products are shared with helper
// Workers, one per core beyond the page's own; otherwise, or with ?threads=1, the single-thread
// build. Threads help only the CPU backend, so a page bound for a hardware WebGPU adapter keeps
// the build its GPU path is tested on.
async function wantsThreads() {
  const params = new URLSearchParams(location.search);
  if (!self.crossOriginIsolated || navigator.hardwareConcurrency < 2 || params.get('threads') === '1') {
    return false;
  }
  const backend = params.get('backend') ?? 'auto';
  if (backend === 'cpu' || !navigator.gpu) return true;
  const adapter = await navigator.gpu.requestAdapter().catch(() => null);
  // `auto` passes a software adapter over for the CPU backend (session.rs).
  return !adapter || (backend === 'auto' && (adapter.info?.isFallbackAdapter ?? adapter.isFallbackAdapter) === true);
}
let wasm;

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

// The URL keys that belong to the Compare tab's settings.
const COMPARE_KEYS = ['task', 'enc', 'seeds', 'train', 'test', 'preset'];

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

// An encoding's name, with FLOATER's form and Δ: the paper text's additive form and the authors'
// compatible one extrapolate differently, so the page says which a model has.
function describePosenc(posenc) {
  if (posenc.type !== 'floater') return posenc.type;
  const form = posenc.form === 'additive' ? "the paper text's additive form" : "the authors' compatible form";
  return `FLOATER (${form}, Δ ${posenc.delta})`;
}

function showStatus() {
  const m = state.model;
  const backend = state.backend === 'webgpu' ? `WebGPU (${state.device})` : 'the CPU in WebAssembly';
  const layers = m?.kind === 'seq2seq'
    ? `seq2seq, ${m.layers} encoder + ${m.decoder_layers} decoder layers`
    : `${m?.layers} layers`;
  const model = m
    ? ` · ${m.name}: ${layers}, d_model ${m.d_model}, ${m.heads} heads, ` +
      `${m.parameters.toLocaleString('en')} parameters, position encoding ${describePosenc(m.posenc)}`
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
    // `threads`: the CPU products' (the page's and its helpers'), read live: a helper counts
    // itself once it runs, just after it says it has started.
    return { ...structuredClone(state), threads: wasm?.productThreads() ?? 1 };
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
  setCompare(query) {
    wasm.setCompare(query);
  },
  compareQuery() {
    return wasm.compareQuery();
  },
  startCompare() {
    wasm.startCompare();
  },
  stopCompare() {
    wasm.stopCompare();
  },
  compareStatus() {
    return wasm.compareStatus();
  },
  compareStudy() {
    return wasm.compareStudy();
  },
  compareResults() {
    return wasm.compareResults();
  },
  downloadStudy() {
    wasm.downloadStudy();
  },
  benchTrain(variant = 'learned', steps = 10, warmup = 2, profile = false) {
    return serial(() => wasm.benchTrain(variant, steps, warmup, profile));
  },
  downloads: [],
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

// Hands the files the viewer offers (the Compare tab's Download buttons) to the browser.
function saveDownloads() {
  for (const { name, bytes } of wasm.takeDownloads()) {
    const url = URL.createObjectURL(new Blob([bytes]));
    const link = document.createElement('a');
    link.href = url;
    link.download = name;
    link.click();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
    api.downloads.push({ name, size: bytes.length });
  }
}

// Keeps the Compare tab's settings in the URL while that tab is open, so a link reproduces them.
function keepCompareInUrl() {
  if (wasm.viewerStatus().view !== 'compare') return;
  const params = new URLSearchParams(location.search);
  const compare = new URLSearchParams(wasm.compareQuery());
  let changed = false;
  for (const key of COMPARE_KEYS) {
    if (params.get(key) !== compare.get(key)) {
      params.set(key, compare.get(key));
      changed = true;
    }
  }
  if (changed) history.replaceState(null, '', `${location.pathname}?${params}`);
}

// The Compare tab's settings of the page's URL, if it has any.
function compareFromUrl() {
  const params = new URLSearchParams(location.search);
  // Decoded values joined as they are: the query keeps its commas (`enc=a,b`).
  const pairs = COMPARE_KEYS.filter((key) => params.has(key)).map((key) => `${key}=${params.get(key)}`);
  return pairs.length > 0 ? pairs.join('&') : null;
}

// Starts the threaded build's helper Workers; resolves once each runs the wasm.
async function startHelpers(pkg) {
  const [module, memory] = wasm.threadHandles();
  const count = Math.min(navigator.hardwareConcurrency - 1, wasm.maxHelpers());
  await Promise.all(Array.from({ length: count }, () => new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./helper.js', import.meta.url), { type: 'module' });
    worker.onmessage = resolve;
    worker.onerror = (e) => reject(new Error(`a helper thread did not start: ${e.message}`));
    worker.postMessage({ pkg, module, memory });
  })));
}

async function boot() {
  const threaded = await wantsThreads();
  const pkg = threaded ? './pkg-threads/posflow_web.js' : './pkg/posflow_web.js';
  // Set only once initialised: status() calls into it.
  const loaded = await import(pkg);
  await loaded.default();
  wasm = loaded;
  if (threaded) {
    try {
      await startHelpers(pkg);
    } catch (e) {
      showError(`Running on one thread: ${e.message ?? e}`);
    }
  }
  // ?backend=auto (default: a hardware WebGPU adapter, else the CPU), webgpu or cpu.
  const choice = new URLSearchParams(location.search).get('backend') ?? 'auto';
  const started = await wasm.start(choice, Boolean(navigator.gpu));
  Object.assign(state, started);
  const warnings = [];
  if (started.notice) warnings.push(`${started.notice}.`);
  if (started.fallback) warnings.push(`Running on the CPU in WebAssembly (same results): ${started.fallback}.`);
  if (warnings.length > 0) {
    $('backend-warning').hidden = false;
    $('backend-warning').textContent = warnings.join(' ');
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
  const compare = compareFromUrl();
  if (compare !== null) {
    try {
      api.setCompare(compare);
    } catch (e) {
      showError(`The link's comparison settings: ${e.message ?? e}`);
    }
  }
  setInterval(() => {
    saveDownloads();
    keepCompareInUrl();
  }, 250);

  $('checkpoint-file').disabled = false;
  state.timings.ready = performance.now();
  state.ready = true;
}

boot().catch((e) => {
  showError(`posflow could not start: ${e.message ?? e}`);
  $('status').textContent = 'Not running.';
});
