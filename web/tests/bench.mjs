// The page's speed beside native posflow's on this machine (BENCHMARKS.md, "In the browser").
//
//   node web/tests/bench.mjs     (after web/build.sh and `cargo build --release`)
//
// 1. `posflow bench train`'s step (the peers' step: 4 layers, d 128, batch 16 × 128) timed in the
//    page on the CPU in wasm (`posflow.benchTrain`) — its threaded build (served cross-origin
//    isolated: the products shared with a helper Worker per core beyond the page's) and its
//    single-thread build — against the native CPU backend on one thread (RAYON_NUM_THREADS=1) and
//    on every thread, taking turns for ROUNDS rounds so that a change in the machine's load falls
//    on all four alike. The other parts run on the threaded build.
// 2. The same step in the page on WebGPU through SwiftShader (a few steps: it is slow).
// 3. The Compare tab's fast preset with its default settings (even pairs, the sinusoidal table
//    standard and randomized, 3 seeds): wall time from Start to the verdicts on the CPU in wasm,
//    and the downloaded study's `posflow study --jobs 1` natively.
//
// Prints the machine (CPU, whether it has AVX-512, load before and after) and a table per part.
// Environment: POSFLOW_BIN (default $CARGO_TARGET_DIR/release/posflow), DIST (the built site;
// default web/dist), ROUNDS (default 3), STEPS (timed steps per turn, default 10), VARIANT (the
// step's `bench train` variant, default learned: the peers' step), SKIP (parts to
// leave out, comma-separated: step, swiftshader, fast), PROFILE=1 (also the page's step per op
// kind beside native `POSFLOW_PROFILE=1` on one thread), SCREENSHOTS (a folder: the finished fast preset's
// page is saved there as compare_fast.png), CHROMIUM.

import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { NO_WEBGPU_FLAGS, WEBGPU_FLAGS, launch, serve, startedStatus } from './browser.mjs';

const web = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const root = path.dirname(web);
const dist = path.resolve(process.env.DIST ?? path.join(web, 'dist'));
const posflowBin =
  process.env.POSFLOW_BIN ??
  path.join(process.env.CARGO_TARGET_DIR ?? path.join(root, 'target'), 'release', 'posflow');
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const STEPS = Number(process.env.STEPS ?? 10);
const WARMUP = 2;
const SWIFTSHADER_STEPS = 3;
const VARIANT = process.env.VARIANT ?? 'learned';
const SKIP = new Set((process.env.SKIP ?? '').split(',').filter(Boolean));
const TIMEOUT = 1_800_000;
const POLL = { polling: 500 };

function machine() {
  const info = fs.readFileSync('/proc/cpuinfo', 'utf8');
  const model = info.match(/^model name\s*:\s*(.*)$/m)?.[1] ?? os.cpus()[0]?.model ?? 'unknown CPU';
  const avx512 = /^flags\s*:.*\bavx512f\b/m.test(info);
  return `${model}, ${os.cpus().length} threads, ${avx512 ? 'AVX-512' : 'AVX2, no AVX-512'}`;
}

const load = () => os.loadavg()[0].toFixed(2);

// Native `posflow bench train` of the page's step with `vars` added to the environment: its
// stdout and stderr.
function nativeBench(vars) {
  const result = spawnSync(
    posflowBin,
    ['bench', 'train', '--device', 'cpu', '--variants', VARIANT, '--steps', String(STEPS), '--warmup', String(WARMUP)],
    { encoding: 'utf8', env: { ...process.env, ...vars } },
  );
  assert.equal(result.status, 0, `posflow bench train failed:\n${result.stderr}`);
  return result;
}

// The native step's median ms (`posflow bench train` prints a row per variant).
function nativeStep(threads) {
  const out = nativeBench(threads ? { RAYON_NUM_THREADS: String(threads) } : {}).stdout;
  const row = out.split('\n').find((l) => l.startsWith(`${VARIANT} `));
  assert.ok(row, `no row in posflow bench train's output:\n${out}`);
  // variant, parameters, mean ms, median ms, best ms, …
  return Number(row.trim().split(/\s+/)[3]);
}

async function openPage(url, flags, backend, viewport = { width: 1280, height: 1000 }) {
  const browser = await launch(flags);
  const page = await browser.newPage({ viewport });
  page.setDefaultTimeout(TIMEOUT);
  await page.goto(url);
  const status = await startedStatus(page, POLL);
  assert.equal(status.error, null, `the page failed to start: ${status.error}`);
  assert.equal(status.backend, backend, JSON.stringify(status));
  return { browser, page, device: status.device };
}

const pageStep = (page, steps, profile = false) =>
  page.evaluate(([v, s, w, p]) => window.posflow.benchTrain(v, s, w, p), [VARIANT, steps, WARMUP, profile]);

// Where the page's step goes beside the native one-thread step's, per op kind (PROFILE=1).
async function profileInThePage(url) {
  const { browser, page } = await openPage(url, NO_WEBGPU_FLAGS, 'cpu');
  let row;
  try {
    row = await pageStep(page, STEPS, true);
  } finally {
    await browser.close();
  }
  assert.ok(row.profile && row.profile.length > 0, 'the page returned no profile');
  const native = new Map();
  const { stderr } = nativeBench({ RAYON_NUM_THREADS: '1', POSFLOW_PROFILE: '1' });
  // The profile's rows on stderr: op, calls per run, ms per run, share.
  for (const line of stderr.split('\n')) {
    const m = line.match(/^(\w+)\s+(\d+)\s+([\d.]+)\s+[\d.]+%$/);
    if (m) native.set(m[1], Number(m[3]));
  }
  const total = row.profile.reduce((t, op) => t + op.msPerStep, 0);
  console.log(`\nwhere the page's step goes (CPU in wasm, ${STEPS} steps after ${WARMUP} warmups; native on 1 thread beside it; load ${load()})`);
  console.log('| op | page, ms/step | share | native 1 thread, ms/step | page / native |');
  console.log('|---|---|---|---|---|');
  for (const op of [...row.profile].sort((a, b) => b.msPerStep - a.msPerStep)) {
    const n = native.get(op.op);
    const ratio = n ? `${(op.msPerStep / n).toFixed(2)}×` : '—';
    console.log(`| ${op.op} | ${op.msPerStep.toFixed(2)} | ${((100 * op.msPerStep) / total).toFixed(1)}% | ${n ? n.toFixed(2) : '—'} | ${ratio} |`);
  }
  const nativeTotal = [...native.values()].reduce((t, v) => t + v, 0);
  console.log(`| all ops | ${total.toFixed(1)} | | ${nativeTotal.toFixed(1)} | ${(total / nativeTotal).toFixed(2)}× |`);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// The page's step on its threaded build (served cross-origin isolated: `url`) and on its
// single-thread build (`plainUrl`), beside native on one thread and on every thread, each round
// taking all four in turn.
async function stepInThePage(url, plainUrl) {
  const threaded = await openPage(url, NO_WEBGPU_FLAGS, 'cpu');
  const single = await openPage(plainUrl, NO_WEBGPU_FLAGS, 'cpu');
  const threads = await threaded.page.evaluate(() => window.posflow.status().threads);
  const rows = [];
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      const one = nativeStep(1);
      const wasm = (await pageStep(threaded.page, STEPS)).medianMs;
      const wasm1 = (await pageStep(single.page, STEPS)).medianMs;
      const all = nativeStep(null);
      rows.push({ round, wasm, wasm1, one, all, load: load() });
      console.log(`round ${round}: page ${wasm.toFixed(1)} ms on ${threads} threads, ${wasm1.toFixed(1)} ms on 1, native 1 thread ${one.toFixed(1)} ms, native all ${all.toFixed(1)} ms (load ${load()})`);
    }
  } finally {
    await threaded.browser.close();
    await single.browser.close();
  }
  console.log(`\n| round | page, ${threads} threads (ms) | page, 1 thread (ms) | native, 1 thread (ms) | native, every thread (ms) | page ${threads} threads / native 1 | page 1 thread / native 1 | load |`);
  console.log('|---|---|---|---|---|---|---|---|');
  const ratio = (x, y) => `${(x / y).toFixed(2)}×`;
  for (const r of rows) {
    console.log(`| ${r.round} | ${r.wasm.toFixed(1)} | ${r.wasm1.toFixed(1)} | ${r.one.toFixed(1)} | ${r.all.toFixed(1)} | ${ratio(r.wasm, r.one)} | ${ratio(r.wasm1, r.one)} | ${r.load} |`);
  }
  const [w, w1, o, a] = ['wasm', 'wasm1', 'one', 'all'].map((k) => median(rows.map((r) => r[k])));
  console.log(`| median | ${w.toFixed(1)} | ${w1.toFixed(1)} | ${o.toFixed(1)} | ${a.toFixed(1)} | ${ratio(w, o)} | ${ratio(w1, o)} | |`);
}

async function stepOnSwiftShader(url) {
  const { browser, page, device } = await openPage(`${url}?backend=webgpu`, WEBGPU_FLAGS, 'webgpu');
  try {
    const row = await pageStep(page, SWIFTSHADER_STEPS);
    console.log(`\nWebGPU in the page (${device}): median ${row.medianMs.toFixed(0)} ms, best ${row.bestMs.toFixed(0)} ms over ${SWIFTSHADER_STEPS} steps (loss ${row.firstLoss.toFixed(3)} → ${row.lastLoss.toFixed(3)})`);
  } finally {
    await browser.close();
  }
}

async function fastPreset(url) {
  // A laptop's window: the verdicts must be in view at the end without scrolling in the canvas.
  const { browser, page } = await openPage(url, NO_WEBGPU_FLAGS, 'cpu', { width: 1280, height: 800 });
  let toml;
  try {
    // The tab's defaults are the fast preset's question.
    const query = await page.evaluate(() => window.posflow.compareQuery());
    assert.match(query, /preset=fast/);
    const started = Date.now();
    await page.evaluate(() => window.posflow.startCompare());
    await page.waitForFunction(() => {
      const s = window.posflow.compareStatus();
      return s.done || s.error || !s.running;
    }, undefined, POLL);
    const wall = (Date.now() - started) / 1000;
    const status = await page.evaluate(() => window.posflow.compareStatus());
    assert.equal(status.error, null, status.error);
    assert.ok(status.done, JSON.stringify(status));
    console.log(`\nfast preset in the page (${query}): ${status.runsDone} runs, ${status.stepsDone} steps, ${wall.toFixed(1)} s wall, ${status.seconds.toFixed(1)} s of it training (load ${load()})`);
    console.log(`verdicts: ${status.verdicts.map((v) => `${v.name}: ${v.verdict}`).join('; ')}`);
    if (process.env.SCREENSHOTS) {
      // The finished comparison as a visitor sees it (the README's picture), unscrolled: the
      // verdicts are at the top of the tab.
      await page.evaluate(() => window.posflow.selectView('compare'));
      await page.waitForTimeout(1500);
      const canvas = page.locator('#viewer');
      const file = path.join(process.env.SCREENSHOTS, 'compare_fast.png');
      await canvas.screenshot({ path: file });
      console.log(`screenshot: ${file}`);
    }
    toml = await page.evaluate(() => window.posflow.compareStudy());
  } finally {
    await browser.close();
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'posflow-bench-fast-'));
  const file = path.join(dir, 'compare.toml');
  fs.writeFileSync(file, toml);
  const started = Date.now();
  execFileSync(posflowBin, ['--device', 'cpu', 'study', file, '--out', path.join(dir, 'out'), '--jobs', '1'], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  console.log(`the same study natively (posflow study --jobs 1, every thread): ${((Date.now() - started) / 1000).toFixed(1)} s wall`);
  fs.rmSync(dir, { recursive: true });
}

async function main() {
  assert.ok(fs.existsSync(path.join(dist, 'pkg', 'posflow_web_bg.wasm')), `${dist} has no wasm: run web/build.sh`);
  assert.ok(fs.existsSync(posflowBin), `${posflowBin} is missing: cargo build --release (or set POSFLOW_BIN)`);
  console.log(`machine: ${machine()}; load ${load()}`);
  console.log(`site: ${dist} (wasm ${fs.statSync(path.join(dist, 'pkg', 'posflow_web_bg.wasm')).size} bytes); native: ${posflowBin}`);
  console.log(`${ROUNDS} rounds of ${STEPS} timed steps of \`${VARIANT}\` after ${WARMUP} warmup steps\n`);
  // Cross-origin isolated (the threaded build), and without the headers (the single-thread one).
  const server = await serve(dist);
  const plainServer = await serve(dist, { isolated: false });
  const url = `http://127.0.0.1:${server.address().port}/`;
  try {
    if (!SKIP.has('step')) await stepInThePage(url, `http://127.0.0.1:${plainServer.address().port}/`);
    if (process.env.PROFILE === '1') await profileInThePage(url);
    if (!SKIP.has('swiftshader')) await stepOnSwiftShader(url);
    if (!SKIP.has('fast')) await fastPreset(url);
  } finally {
    server.close();
    plainServer.close();
  }
  console.log(`\nload after: ${load()}`);
}

main().catch((e) => {
  console.error(`\nweb bench FAILED: ${e.stack ?? e}`);
  process.exit(1);
});
