// The demo page in headless Chromium, end to end, against native posflow on the same checkpoint.
//
//   node web/tests/e2e.mjs      (after web/build.sh; .ci/web.sh does both)
//
// Serves web/dist on 127.0.0.1 — cross-origin isolated for the CPU runs (the threaded build; one
// check compares it with the single-thread build), without the headers for WebGPU's — and runs
// the page twice: with WebGPU (SwiftShader, forced with
// ?backend=webgpu: by default the page passes a software adapter over, checked too) and with
// WebGPU disabled (the CPU backend in wasm, the viewer drawn with WebGL2). Each run checks that
// the egui viewer's canvas shows the position-encoding heatmaps (pixels of a screenshot), types a
// prompt with real key presses into the viewer's prompt field and checks its greedy completion
// against `posflow sample` (native, CPU backend), fine-tunes the position encoder in the viewer
// (the heatmap must change, and come back on reset), checks the `window.posflow` hook's completion
// and next-character distribution, that a broken and an unrelated checkpoint file give an
// error while the page keeps working, and that the shipped seq2seq model (spelling →
// pronunciation) decodes in the page — the hook and the viewer's translate tab — exactly as
// native `posflow translate` does. Any failed check exits non-zero.
//
// Environment: POSFLOW_BIN (the native CLI; default target/debug/posflow or
// $CARGO_TARGET_DIR/debug/posflow), CHROMIUM (default /usr/bin/chromium), SCREENSHOTS (a folder
// for a screenshot of each run).

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { NO_WEBGPU_FLAGS, WEBGPU_FLAGS, launch, serve, startedStatus } from './browser.mjs';
import { decodePng } from './png.mjs';

const web = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const root = path.dirname(web);
const dist = path.join(web, 'dist');
const checkpoint = path.join(web, 'assets', 'web_demo.safetensors');
const seq2seqCheckpoint = path.join(web, 'assets', 'cmudict_seq2seq.safetensors');
const posflowBin =
  process.env.POSFLOW_BIN ??
  path.join(process.env.CARGO_TARGET_DIR ?? path.join(root, 'target'), 'debug', 'posflow');

const PROMPT = 'Call me Ishmael. Some years ago';
const CHARS = 80; // what the page's prompt box completes (main.js COMPLETION_CHARS)
const SHORT = 10; // characters, where a check only needs the page to still work
const TOLERANCE = 1e-4;
// Words the seq2seq model decodes (beam 4, main.js BEAM): the viewer's default source, a short
// and a long word.
const SOURCES = ['posflow', 'hello', 'extraordinarily'];
const BEAM = 4;
// The shipped language models with RoPE and with ALiBi, and their position encodings' types.
const ROPE_ALIBI = [['web_demo_rope', 'rope'], ['web_demo_alibi', 'alibi']];
const TIMEOUT = 360_000; // SwiftShader compiles every pipeline on the first run, slowly
// Polling by timer, not Playwright's default requestAnimationFrame: a predicate run in every
// frame next to the viewer's own frames starved the WebGPU readbacks (the page never got ready).
const POLL = { polling: 200 };
// Red or blue pixels in a screenshot of the viewer's canvas that only its heatmaps give (the
// prompt view has about 1,200, the position-encoding view of the shipped model 13,000).
const MIN_COLOURED = 5000;
// Fine-tuning the position encoder: a text of the model's own characters, a few steps, and how
// many of the canvas's pixels must change (the heatmaps, beside the progress bar and loss curve).
const FINE_TUNE_TEXT =
  'Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my ' +
  'purse, and nothing particular to interest me on shore, I thought I would sail about a little.';
const FINE_TUNE_STEPS = 5;
const MIN_CHANGED = 2000;

// ---- native posflow: the expected values ----

function nativeSample(extra, from = checkpoint) {
  const out = execFileSync(
    posflowBin,
    ['--device', 'cpu', 'sample', '--checkpoint', from, '--prompt', PROMPT, ...extra],
    { encoding: 'utf8' },
  );
  // The first line names the device ("device: cpu (2 threads)"); the rest ends with a newline.
  assert.match(out, /^device: /, `unexpected output of posflow sample: ${out}`);
  return out.slice(out.indexOf('\n') + 1).replace(/\n$/, '');
}

// `posflow translate --beam 4 --scores` of every source: {source: {output, score}}.
function nativeTranslations() {
  const sources = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'posflow-e2e-')), 'sources.txt');
  fs.writeFileSync(sources, `${SOURCES.join('\n')}\n`);
  const out = execFileSync(
    posflowBin,
    ['--device', 'cpu', 'translate', '--checkpoint', seq2seqCheckpoint, '--beam', String(BEAM), '--scores',
      '--file', sources],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] },
  );
  const lines = out.trimEnd().split('\n');
  assert.equal(lines.length, SOURCES.length, `unexpected output of posflow translate: ${out}`);
  return Object.fromEntries(lines.map((line, i) => {
    const [output, score] = line.split('\t');
    return [SOURCES[i], { output, score: Number(score) }];
  }));
}

// Pixels of a PNG screenshot that differ from its commonest colour (the background), and those
// clearly red or blue (a diverging colormap's ends).
function canvasPixels(png) {
  const { width, height, rgba } = decodePng(png);
  const counts = new Map();
  let coloured = 0;
  for (let i = 0; i < rgba.length; i += 4) {
    const colour = rgba.readUInt32BE(i);
    counts.set(colour, (counts.get(colour) ?? 0) + 1);
    if (Math.abs(rgba[i] - rgba[i + 2]) > 40) coloured++;
  }
  const background = Math.max(...counts.values());
  return { drawn: width * height - background, total: width * height, coloured };
}

// Pixels that differ between two screenshots of the same size.
function pixelsChanged(a, b) {
  const [x, y] = [decodePng(a), decodePng(b)];
  assert.equal(x.rgba.length, y.rgba.length, 'screenshots of different sizes');
  let changed = 0;
  for (let i = 0; i < x.rgba.length; i += 4) {
    if (x.rgba.readUInt32BE(i) !== y.rgba.readUInt32BE(i)) changed++;
  }
  return changed;
}

// ---- one browser run ----

async function checkPage({ name, flags, backend, url, expected, files }) {
  console.log(`\n== ${name}: expecting backend ${backend}`);
  const browser = await launch(flags);
  const problems = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    page.setDefaultTimeout(TIMEOUT);
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));

    const started = Date.now();
    await page.goto(url);
    const status = await startedStatus(page, POLL);
    assert.equal(status.error, null, `the page reported an error while starting: ${status.error}`);
    assert.equal(status.ready, true);
    assert.equal(status.backend, backend, `backend: ${JSON.stringify(status)}`);
    console.log(`device: ${status.device}`);
    console.log(`model: ${JSON.stringify(status.model)}`);
    console.log(
      `load → first completion: ${status.timings.firstCompletion.toFixed(0)} ms after navigation ` +
        `(ready at ${status.timings.ready.toFixed(0)} ms; ${Date.now() - started} ms wall in the test)`,
    );
    const warning = page.locator('#backend-warning');
    if (backend === 'cpu') {
      assert.ok(await warning.isVisible(), 'the page does not say that WebGPU is missing');
      console.log(`warning shown: ${await warning.textContent()}`);
    } else {
      assert.ok(!(await warning.isVisible()), 'a WebGPU page shows the CPU warning');
    }

    // The viewer renders: the position-encoding view's heatmaps cover much of the canvas, in
    // red and blue (a canvas with only text and widgets is mostly its panel colour and grey).
    // Screenshots only once the viewer is idle, and seldom: frequent ones starve its readbacks.
    await page.evaluate(() => window.posflow.selectView('position_encodings'));
    const canvas = page.locator('#viewer');
    let drawn;
    for (let attempt = 1; ; attempt++) {
      await page.waitForTimeout(2000);
      await page.waitForFunction(() => window.posflow.viewerStatus().status === 'ready', undefined, POLL);
      drawn = canvasPixels(await canvas.screenshot());
      if (drawn.drawn >= 0.25 * drawn.total && drawn.coloured >= MIN_COLOURED) break;
      assert.ok(attempt < 10, `the viewer's canvas shows no heatmap: ${JSON.stringify(drawn)}`);
    }
    const viewer = await page.evaluate(() => window.posflow.viewerStatus());
    assert.equal(viewer.view, 'position_encodings');
    assert.deepEqual(viewer.checkpoints, ['web_demo.safetensors']);
    console.log(
      `viewer (position encodings): ${drawn.drawn} of ${drawn.total} pixels off the background, ` +
        `${drawn.coloured} red or blue`,
    );

    // Fine-tuning the position encoder in the viewer: a text the model cannot learn is refused
    // with a reason; a few steps change the heatmaps (their values and the canvas's pixels), and
    // Reset brings back exactly the loaded encodings (the typed completion below checks the model).
    await assert.rejects(
      page.evaluate(() => window.posflow.fineTune('\u{1F600}'.repeat(100), 3)),
      /never saw/,
      'fine-tuning on characters the model never saw is refused with a reason',
    );
    const before = await page.evaluate(() => window.posflow.viewerStatus().encodingsSums[0]);
    assert.ok(before > 0, `no encodings shown before fine-tuning: ${before}`);
    const beforePng = await canvas.screenshot();
    const tuneStart = Date.now();
    await page.evaluate(([text, n]) => window.posflow.fineTune(text, n), [FINE_TUNE_TEXT, FINE_TUNE_STEPS]);
    await page.waitForFunction(
      (n) => {
        const f = window.posflow.fineTuneStatus();
        return f.error !== null || (f.stepsDone === n && !f.running);
      },
      FINE_TUNE_STEPS,
      POLL,
    );
    const tuned = await page.evaluate(() => window.posflow.fineTuneStatus());
    assert.equal(tuned.error, null, `fine-tuning failed: ${tuned.error}`);
    assert.equal(tuned.losses.length, FINE_TUNE_STEPS);
    assert.ok(tuned.losses.every(Number.isFinite), `losses: ${tuned.losses}`);
    await page.waitForFunction(
      (b) => window.posflow.viewerStatus().status === 'ready' && window.posflow.viewerStatus().encodingsSums[0] !== b,
      before,
      POLL,
    );
    await page.waitForTimeout(1000);
    const changedPixels = pixelsChanged(beforePng, await canvas.screenshot());
    assert.ok(changedPixels >= MIN_CHANGED, `fine-tuning changed only ${changedPixels} pixels of the canvas`);
    const after = await page.evaluate(() => window.posflow.viewerStatus().encodingsSums[0]);
    console.log(
      `fine-tuned ${FINE_TUNE_STEPS} steps in ${Date.now() - tuneStart} ms: loss ` +
        `${tuned.losses[0].toFixed(3)} → ${tuned.losses.at(-1).toFixed(3)}, Σ|encodings| ` +
        `${before.toFixed(3)} → ${after.toFixed(3)}, ${changedPixels} pixels changed`,
    );
    if (process.env.SCREENSHOTS) {
      fs.mkdirSync(process.env.SCREENSHOTS, { recursive: true });
      await page.screenshot({ path: path.join(process.env.SCREENSHOTS, `${name}-finetuned.png`), fullPage: true });
    }
    await page.evaluate(() => window.posflow.resetFineTune());
    await page.waitForFunction(
      (b) => window.posflow.viewerStatus().status === 'ready' && window.posflow.viewerStatus().encodingsSums[0] === b,
      before,
      POLL,
    );
    console.log('reset: the heatmaps show the loaded encodings again');

    // The viewer's prompt field, clicked and typed into key by key, then Enter.
    await page.evaluate(() => window.posflow.selectView('prompt'));
    await page.waitForFunction(() => window.posflow.viewerStatus().promptField !== null, undefined, POLL);
    const field = await page.evaluate(() => window.posflow.viewerStatus().promptField);
    await canvas.scrollIntoViewIfNeeded();
    const box = await canvas.boundingBox();
    await page.mouse.click(box.x + field.x + field.width / 2, box.y + field.y + field.height / 2);
    await page.keyboard.press('Control+A');
    await page.keyboard.press('Backspace');
    await page.keyboard.type(PROMPT, { delay: 5 });
    await page.keyboard.press('Enter');
    await page.waitForFunction(
      (prompt) => window.posflow.viewerStatus().completedPrompt === prompt,
      PROMPT,
      POLL,
    );
    const shown = await page.evaluate(() => window.posflow.lastCompletion());
    assert.ok(shown.length > PROMPT.length, `the completion is empty: ${JSON.stringify(shown)}`);
    assert.equal(shown, expected.completion, 'the viewer\'s completion differs from native posflow\'s');
    console.log(`typed into the viewer's prompt → ${JSON.stringify(shown)} (= native)`);

    // The hook.
    const timed = await page.evaluate(async ([p, n]) => {
      const start = performance.now();
      const text = await window.posflow.complete(p, n);
      return { text, ms: performance.now() - start };
    }, [PROMPT, CHARS]);
    assert.equal(timed.text, expected.completion, 'posflow.complete differs from native posflow');
    console.log(`posflow.complete of ${CHARS} characters: ${timed.ms.toFixed(0)} ms`);
    const probs = await page.evaluate((p) => window.posflow.probabilities(p), PROMPT);
    assert.deepEqual(Object.keys(probs).sort(), Object.keys(expected.probabilities).sort(), 'vocabularies');
    let worst = 0;
    for (const [char, p] of Object.entries(expected.probabilities)) {
      worst = Math.max(worst, Math.abs(probs[char] - p));
    }
    console.log(`next-character distribution: max |wasm − native| = ${worst.toExponential(2)}`);
    assert.ok(worst <= TOLERANCE, `the distributions differ by ${worst} > ${TOLERANCE}`);
    const sum = Object.values(probs).reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(sum - 1) < 1e-4, `probabilities sum to ${sum}`);

    // Bad files through the file input: an error shows, the model stays in the session and the
    // viewer, completion still works.
    for (const file of files.bad) {
      await page.setInputFiles('#checkpoint-file', file);
      const error = page.locator('#error');
      await error.waitFor({ state: 'visible' });
      const message = await error.textContent();
      assert.ok(message.includes(file.name), `the error does not name ${file.name}: ${message}`);
      console.log(`${file.name} → error: ${message}`);
      const after = await page.evaluate(() => window.posflow.status());
      assert.equal(after.model.name, 'web_demo.safetensors', 'a bad file replaced the model');
      const viewerAfter = await page.evaluate(() => window.posflow.viewerStatus());
      assert.deepEqual(viewerAfter.checkpoints, ['web_demo.safetensors'], 'a bad file reached the viewer');
      // Greedy: a shorter completion is a prefix of the longer one.
      const again = await page.evaluate(([p, n]) => window.posflow.complete(p, n), [PROMPT, SHORT]);
      assert.equal(again, expected.completion.slice(0, PROMPT.length + SHORT), `completion after ${file.name}`);
    }
    await assert.rejects(
      page.evaluate(() => window.posflow.loadCheckpoint(new Uint8Array([1, 2, 3]), 'three bytes')),
      /three bytes/,
      'posflow.loadCheckpoint of garbage rejects with a message naming it',
    );

    // A good file of the user's own: it replaces the session's model, becomes the viewer's active
    // checkpoint, the error goes, and the viewer completes the typed prompt again with it.
    await page.setInputFiles('#checkpoint-file', files.good);
    await page.waitForFunction(
      (name) => window.posflow.status().model.name === name,
      files.good.name,
      POLL,
    );
    await page.locator('#error').waitFor({ state: 'hidden' });
    assert.deepEqual(
      (await page.evaluate(() => window.posflow.viewerStatus())).checkpoints,
      ['web_demo.safetensors', files.good.name],
    );
    await page.waitForFunction(() => window.posflow.lastCompletion() !== null, undefined, POLL);
    assert.equal(await page.evaluate(() => window.posflow.lastCompletion()), expected.completion);
    console.log(`${files.good.name} loaded through the file input; the viewer completes the same`);

    if (process.env.SCREENSHOTS) {
      fs.mkdirSync(process.env.SCREENSHOTS, { recursive: true });
      await page.screenshot({ path: path.join(process.env.SCREENSHOTS, `${name}.png`), fullPage: true });
    }

    // The shipped seq2seq model: loading it opens the viewer's translate tab, which decodes its
    // source; the hook and the tab give native `posflow translate`'s outputs and scores.
    const info = await page.evaluate(() => window.posflow.loadShipped('cmudict_seq2seq'));
    assert.equal(info.kind, 'seq2seq', `model info: ${JSON.stringify(info)}`);
    await page.waitForFunction(
      (s) => window.posflow.viewerStatus().translation?.source === s,
      SOURCES[0],
      POLL,
    );
    let shownTranslation = await page.evaluate(() => window.posflow.viewerStatus());
    assert.equal(shownTranslation.view, 'translate');
    assert.equal(shownTranslation.translation.output, expected.translations[SOURCES[0]].output);
    for (const source of SOURCES) {
      const timedTranslation = await page.evaluate(async ([s, b]) => {
        const start = performance.now();
        const found = await window.posflow.translate(s, b);
        return { ...found, ms: performance.now() - start };
      }, [source, BEAM]);
      const want = expected.translations[source];
      assert.equal(timedTranslation.output, want.output, `posflow.translate(${source}) differs from native`);
      assert.ok(Math.abs(timedTranslation.score - want.score) < 1e-3, `score ${timedTranslation.score} vs ${want.score}`);
      console.log(`posflow.translate(${source}) → ${timedTranslation.output} (= native, ${timedTranslation.ms.toFixed(0)} ms)`);
    }
    await page.evaluate(([s, b]) => window.posflow.setSource(s, b), [SOURCES[2], BEAM]);
    await page.waitForFunction(
      (s) => window.posflow.viewerStatus().translation?.source === s && window.posflow.viewerStatus().status === 'ready',
      SOURCES[2],
      POLL,
    );
    shownTranslation = await page.evaluate(() => window.posflow.viewerStatus().translation);
    assert.equal(shownTranslation.output, expected.translations[SOURCES[2]].output, 'the translate tab differs');
    await page.waitForTimeout(1000);
    const attention = canvasPixels(await canvas.screenshot());
    assert.ok(attention.drawn >= 0.1 * attention.total, `the translate tab draws no maps: ${JSON.stringify(attention)}`);
    console.log(`translate tab: ${SOURCES[2]} → ${shownTranslation.output}; ${attention.drawn} pixels drawn`);
    if (process.env.SCREENSHOTS) {
      await page.screenshot({ path: path.join(process.env.SCREENSHOTS, `${name}-translate.png`), fullPage: true });
    }
    await assert.rejects(
      page.evaluate(() => window.posflow.complete('hello', 5)),
      /seq2seq model/,
      'completing a prompt with a seq2seq model is refused with the reason',
    );
    await assert.rejects(
      page.evaluate(() => window.posflow.translate('h3llo', 1)),
      /unknown character '3'/,
      'a character the model never saw is refused naming it',
    );
    // The language models with RoPE and ALiBi: each loads, completes as native posflow does, and
    // its position-encoding tab draws (RoPE's rotation angles, ALiBi's bias by distance).
    for (const [shipped, type] of ROPE_ALIBI) {
      const loaded = await page.evaluate((n) => window.posflow.loadShipped(n), shipped);
      assert.equal(loaded.posenc.type, type, `model info: ${JSON.stringify(loaded)}`);
      const text = await page.evaluate(([p, n]) => window.posflow.complete(p, n), [PROMPT, SHORT]);
      assert.equal(text, expected.shipped[shipped], `${shipped}: posflow.complete differs from native`);
      await page.evaluate(() => window.posflow.selectView('position_encodings'));
      await page.waitForFunction(() => window.posflow.viewerStatus().status === 'ready', undefined, POLL);
      await page.waitForTimeout(1000);
      const maps = canvasPixels(await canvas.screenshot());
      assert.ok(maps.coloured >= MIN_COLOURED, `${shipped}: the encodings tab draws no map: ${JSON.stringify(maps)}`);
      console.log(`${shipped}: posenc ${type}, completes ${JSON.stringify(text)} (= native), ${maps.coloured} coloured pixels`);
      if (process.env.SCREENSHOTS) {
        await page.screenshot({ path: path.join(process.env.SCREENSHOTS, `${name}-${shipped}.png`), fullPage: true });
      }
    }
    assert.deepEqual(problems, [], 'errors in the browser console');
    console.log(`== ${name}: all checks passed`);
  } finally {
    await browser.close();
    if (problems.length) console.log(problems.join('\n'));
  }
}

// ---- the Compare tab ----

// Two encodings × two seeds of the tiny preset: seconds.
const COMPARE_QUERY = 'task=even_pairs&enc=rope,rope_rand&seeds=2&train=10&test=11-40&preset=tiny';
// The same with the fast preset's runs of 4,000 steps, where any drift between the page
// and native posflow would have grown: for the CPU in wasm, whose numbers must be native ones to
// the bit (both in the portable arithmetic).
const COMPARE_QUERY_FAST = COMPARE_QUERY.replace('preset=tiny', 'preset=fast');
// How far WebGPU's numbers may be from native posflow's on the same study file: the GPU sums in
// its own order, which the tab says.
const COMPARE_TOLERANCE = 1e-3;
// Settings the tab must refuse, each with (part of) its reason.
const COMPARE_REFUSALS = [
  ['enc=', 'choose at least one encoding'],
  ['seeds=0', 'seeds must be 1 to 5, got 0'],
  ['train=10&test=10-40', 'the test lengths must be longer than the training length'],
  ['test=15-30', 'no length bin past the training length lies wholly in the test lengths'],
  ['test=11-500', 'test lengths up to 160 fit'],
];
const COMPARE_BAD_LINKS = [['task=sorting', 'unknown task `sorting`']];

// `posflow study` of the page's study file, natively on the CPU: every run's result.json.
function nativeStudy(toml) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'posflow-e2e-compare-'));
  const file = path.join(dir, 'compare.toml');
  fs.writeFileSync(file, toml);
  execFileSync(posflowBin, ['--device', 'cpu', 'study', file, '--out', path.join(dir, 'out')], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const runs = path.join(dir, 'out', 'runs');
  const results = [];
  for (const variant of fs.readdirSync(runs)) {
    for (const seed of fs.readdirSync(path.join(runs, variant))) {
      results.push(JSON.parse(fs.readFileSync(path.join(runs, variant, seed, 'result.json'), 'utf8')));
    }
  }
  return results;
}

// The largest difference between the page's runs and native ones: training losses and every
// evaluated loss and accuracy. A training loss is an f32, which the page hands over widened to a
// double and result.json writes as its shortest decimal: both are read back as f32 (Math.fround)
// to compare; the evaluated numbers are doubles on both sides.
function largestDifference(page, native) {
  assert.equal(page.length, native.length, 'the page and posflow study ran different numbers of runs');
  let largest = 0;
  let identical = true;
  for (const p of page) {
    const n = native.find((r) => r.variant === p.variant && r.seed === p.seed);
    assert.ok(n, `posflow study has no run ${p.variant}/seed${p.seed}`);
    const pairs = p.train_loss.map((x, i) => [x, n.train_loss[i]]);
    assert.equal(p.evals.length, n.evals.length, `${p.variant}/seed${p.seed}: evaluations`);
    p.evals.forEach((e, i) => {
      assert.equal(e.step, n.evals[i].step);
      e.bins.forEach((b, j) => {
        const m = n.evals[i].bins[j];
        assert.equal(b.bin, m.bin);
        pairs.push([b.loss, m.loss], [b.accuracy, m.accuracy]);
      });
    });
    pairs.forEach(([wide, written], i) => {
      const f32 = i < p.train_loss.length;
      const [a, b] = f32 ? [Math.fround(wide), Math.fround(written)] : [wide, written];
      if (identical && a !== b) {
        const where = i < p.train_loss.length ? `training loss at step ${i}` : `evaluated number ${i - p.train_loss.length}`;
        console.log(`first difference: ${p.variant}/seed${p.seed}, ${where}: page ${a}, native ${b}`);
      }
      identical &&= a === b;
      largest = Math.max(largest, Math.abs(a - b) / Math.max(1, Math.abs(b)));
    });
  }
  return { largest, identical };
}

// `exact`: the page's numbers must be posflow study's bit for bit (the CPU in wasm); otherwise
// within COMPARE_TOLERANCE (WebGPU). `query`: the comparison to train.
async function checkCompare({ name, flags, url, query: compareQuery, exact }) {
  console.log(`\n== Compare tab (${name})`);
  const browser = await launch(flags);
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 }, acceptDownloads: true });
    page.setDefaultTimeout(TIMEOUT);
    const sep = url.includes('?') ? '&' : '?';
    // A link reproduces the settings, and opens the tab.
    await page.goto(`${url}${sep}${COMPARE_QUERY}`);
    await page.waitForFunction(() => window.posflow?.status().ready, undefined, POLL);
    assert.equal(await page.evaluate(() => window.posflow.compareQuery()), COMPARE_QUERY);
    assert.equal((await page.evaluate(() => window.posflow.viewerStatus())).view, 'compare');
    const before = await page.locator('#viewer').screenshot();

    // Bad settings: refused in the page, with the reason.
    for (const [query, reason] of COMPARE_REFUSALS) {
      await page.evaluate((q) => window.posflow.setCompare(q), `${COMPARE_QUERY}&${query}`);
      const status = await page.evaluate(() => window.posflow.compareStatus());
      assert.ok(status.refusal?.includes(reason), `${query}: refusal ${status.refusal}`);
      await assert.rejects(page.evaluate(() => window.posflow.startCompare()), new RegExp(reason.replace(/[`()]/g, '.')));
      console.log(`${query} → refused: ${status.refusal}`);
    }
    for (const [query, reason] of COMPARE_BAD_LINKS) {
      await assert.rejects(page.evaluate((q) => window.posflow.setCompare(q), query), new RegExp(reason.replace(/`/g, '.')));
      console.log(`${query} → ${reason}`);
    }

    // The comparison, trained in the page.
    await page.evaluate((q) => window.posflow.setCompare(q), compareQuery);
    const started = Date.now();
    await page.evaluate(() => window.posflow.startCompare());
    await page.waitForFunction(() => {
      const s = window.posflow.compareStatus();
      return s.done || s.error || !s.running;
    }, undefined, POLL);
    const wall = (Date.now() - started) / 1000;
    const status = await page.evaluate(() => window.posflow.compareStatus());
    assert.equal(status.error, null, `the comparison failed: ${status.error}`);
    assert.ok(status.done, JSON.stringify(status));
    assert.equal(status.runsDone, 4);
    assert.equal(status.verdicts.length, 4, JSON.stringify(status.verdicts));
    // The results rule's verdicts: a tiny run's models are often near chance, which it calls so.
    for (const v of status.verdicts) assert.ok(['holds', 'not shown', 'at chance'].includes(v.verdict), JSON.stringify(v));
    // Apart from them, each encoding's sanity check: did it learn the training lengths?
    assert.deepEqual(status.sanity.map((v) => v.name), ['rope_learns', 'rope_rand_learns']);
    for (const v of status.sanity) assert.ok(['holds', 'not shown'].includes(v.verdict), JSON.stringify(v));
    console.log(`learned the training lengths: ${JSON.stringify(status.sanity)}`);
    // Each claim's bin holds every length in it, with at least 512 sequences a run in all.
    for (const v of [...status.verdicts, ...status.sanity]) assert.ok(v.sequences >= 512, JSON.stringify(v));
    console.log(`comparison: ${status.stepsDone} steps in ${wall.toFixed(1)} s wall (${status.seconds.toFixed(1)} s training); verdicts ${JSON.stringify(status.verdicts)}`);
    assert.match(status.reproduction, exact ? /to the bit/ : /to rounding, not to the bit/);
    console.log(`the tab says: ${status.reproduction}`);

    // The curves, the bands and the verdict table are drawn.
    await page.waitForTimeout(500);
    const after = await page.locator('#viewer').screenshot();
    const drawn = canvasPixels(after);
    const changed = pixelsChanged(before, after);
    console.log(`canvas: ${changed} pixels changed by the comparison, ${drawn.coloured} coloured`);
    assert.ok(changed > 20000, `the comparison drew only ${changed} pixels`);
    assert.ok(drawn.coloured > 2000, `the curves and bands drew only ${drawn.coloured} coloured pixels`);

    // Download study: the browser gets the file, and posflow study of it gives the page's numbers.
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.evaluate(() => window.posflow.downloadStudy()),
    ]);
    assert.equal(download.suggestedFilename(), 'compare_even_pairs.toml');
    const toml = fs.readFileSync(await download.path(), 'utf8');
    assert.equal(toml, await page.evaluate(() => window.posflow.compareStudy()));
    const native = nativeStudy(toml);
    const results = await page.evaluate(() => window.posflow.compareResults());
    const { largest, identical } = largestDifference(results, native);
    console.log(`posflow study of the downloaded file: ${identical ? 'bit for bit the page\'s numbers' : `largest relative difference ${largest.toExponential(2)}`}`);
    if (exact) {
      assert.match(toml, /arithmetic = "portable"/);
      assert.ok(identical, `the page's numbers differ from posflow study's (largest relative difference ${largest})`);
    } else {
      assert.ok(largest <= COMPARE_TOLERANCE, `the page's numbers differ from posflow study's by ${largest}`);
    }
  } finally {
    await browser.close();
  }
}

// Without ?backend=, a software WebGPU adapter (SwiftShader) is passed over for the CPU backend,
// and the page says why; an unknown ?backend= starts as auto, and the page says that too.
async function checkBackendChoice(url, expected) {
  console.log('\n== auto on a software WebGPU adapter: expecting backend cpu');
  const browser = await launch(WEBGPU_FLAGS);
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(TIMEOUT);
    await page.goto(url);
    const status = await startedStatus(page, POLL);
    assert.equal(status.error, null, `the page reported an error: ${status.error}`);
    assert.equal(status.backend, 'cpu', `auto took ${status.backend} on a software adapter`);
    const warning = await page.locator('#backend-warning').textContent();
    assert.match(warning, /software renderer/, `the page does not say why: ${warning}`);
    console.log(`warning shown: ${warning}`);
    const text = await page.evaluate(([p, n]) => window.posflow.complete(p, n), [PROMPT, SHORT]);
    assert.equal(text, expected.completion.slice(0, PROMPT.length + SHORT));

    await page.goto(`${url}?backend=metal`);
    const fallen = await startedStatus(page, POLL);
    assert.equal(fallen.error, null, `?backend=metal stopped the page: ${fallen.error}`);
    assert.equal(fallen.backend, 'cpu', `?backend=metal started ${fallen.backend}, not auto's choice`);
    const notice = await page.locator('#backend-warning').textContent();
    assert.match(notice, /\?backend=metal is not a backend: use auto, webgpu or cpu; the page started as auto/);
    console.log(`?backend=metal → ${notice}`);
  } finally {
    await browser.close();
  }
}

// The threaded build: served cross-origin isolated, the page runs its CPU products on a helper
// Worker per core beyond its own; the same steps on a server without the headers (the
// single-thread build) give the same losses to the bit, since every product's output is summed by
// one thread in the same order whichever thread it is.
async function checkThreads(url, plainUrl) {
  console.log('\n== threads: the threaded build (cross-origin isolated) against the single-thread one');
  const cores = os.cpus().length;
  const browser = await launch(NO_WEBGPU_FLAGS);
  try {
    const steps = async (address, threads) => {
      const page = await browser.newPage();
      page.setDefaultTimeout(TIMEOUT);
      await page.goto(address);
      const status = await startedStatus(page, POLL);
      assert.equal(status.error, null, `the page reported an error: ${status.error}`);
      assert.equal(status.threads, threads, `${address}: ${status.threads} threads`);
      const row = await page.evaluate(() => window.posflow.benchTrain('learned', 2, 0, false));
      await page.close();
      console.log(`${address}: ${status.threads} thread(s), losses ${row.firstLoss} → ${row.lastLoss}`);
      return [row.firstLoss, row.lastLoss];
    };
    const threaded = await steps(url, Math.min(cores, 16));
    const plain = await steps(plainUrl, 1);
    assert.deepEqual(threaded, plain, 'the threaded page trains differently from the single-thread one');
    // ?threads=1 asks an isolated page for the single-thread build.
    assert.deepEqual(await steps(`${url}?threads=1`, 1), plain);
  } finally {
    await browser.close();
  }
}

async function main() {
  for (const file of [path.join(dist, 'index.html'), path.join(dist, 'pkg', 'posflow_web_bg.wasm')]) {
    assert.ok(fs.existsSync(file), `${file} is missing: run web/build.sh first`);
  }
  console.log(`wasm: ${fs.statSync(path.join(dist, 'pkg', 'posflow_web_bg.wasm')).size} bytes (after wasm-opt)`);
  const expected = {
    completion: nativeSample(['--chars', String(CHARS), '--temperature', '0']),
    probabilities: JSON.parse(nativeSample(['--probabilities'])),
    translations: nativeTranslations(),
    shipped: Object.fromEntries(ROPE_ALIBI.map(([shipped]) => [
      shipped,
      nativeSample(['--chars', String(SHORT), '--temperature', '0'], path.join(web, 'assets', `${shipped}.safetensors`)),
    ])),
  };
  console.log(`native translations: ${JSON.stringify(expected.translations)}`);
  console.log(`native completion: ${JSON.stringify(expected.completion)}`);
  const weights = fs.readFileSync(checkpoint);
  // A screenshot of nothing in particular: an unrelated PNG.
  const png = Buffer.from(
    'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
    'base64',
  );
  const files = {
    bad: [
      { name: 'truncated.safetensors', mimeType: 'application/octet-stream', buffer: weights.subarray(0, 4000) },
      { name: 'picture.png', mimeType: 'image/png', buffer: png },
    ],
    good: { name: 'mine.safetensors', mimeType: 'application/octet-stream', buffer: weights },
  };
  // The CPU checks on the threaded build (served cross-origin isolated); the WebGPU ones without
  // the headers: a page bound for WebGPU loads the single-thread build either way (main.js).
  const server = await serve(dist);
  const plainServer = await serve(dist, { isolated: false });
  const url = `http://127.0.0.1:${server.address().port}/`;
  const plainUrl = `http://127.0.0.1:${plainServer.address().port}/`;
  try {
    // POSFLOW_E2E_ONLY=compare runs the Compare tab's checks alone (while working on it).
    if (process.env.POSFLOW_E2E_ONLY === 'compare') {
      await checkCompare({ name: 'the CPU in wasm', flags: NO_WEBGPU_FLAGS, url, query: COMPARE_QUERY_FAST, exact: true });
      await checkCompare({ name: 'WebGPU on SwiftShader', flags: WEBGPU_FLAGS, url: `${plainUrl}?backend=webgpu`, query: COMPARE_QUERY, exact: false });
      console.log('\nweb e2e: the Compare checks passed (POSFLOW_E2E_ONLY=compare)');
      return;
    }
    await checkPage({
      name: 'webgpu', flags: WEBGPU_FLAGS, backend: 'webgpu', url: `${plainUrl}?backend=webgpu`, expected, files,
    });
    await checkBackendChoice(plainUrl, expected);
    await checkThreads(url, plainUrl);
    await checkPage({ name: 'cpu', flags: NO_WEBGPU_FLAGS, backend: 'cpu', url, expected, files });
    await checkCompare({ name: 'the CPU in wasm', flags: NO_WEBGPU_FLAGS, url, query: COMPARE_QUERY_FAST, exact: true });
    await checkCompare({ name: 'WebGPU on SwiftShader', flags: WEBGPU_FLAGS, url: `${plainUrl}?backend=webgpu`, query: COMPARE_QUERY, exact: false });
  } finally {
    server.close();
    plainServer.close();
  }
  console.log('\nweb e2e: all checks passed');
}

main().catch((e) => {
  console.error(`\nweb e2e FAILED: ${e.stack ?? e}`);
  process.exit(1);
});
