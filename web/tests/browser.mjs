// What the page's browser scripts share (e2e.mjs, bench.mjs): headless Chromium with or without
// WebGPU, a static server for web/dist, and waiting for the page to start.
//
// Environment: CHROMIUM (default /usr/bin/chromium).

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import { chromium } from 'playwright-core';

const COMMON_FLAGS = [
  '--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync',
];
// All four, so that the viewer's WebGPU canvas renders too.
export const WEBGPU_FLAGS = [
  '--enable-unsafe-webgpu', '--use-vulkan=swiftshader', '--enable-features=Vulkan', '--use-angle=vulkan',
];
export const NO_WEBGPU_FLAGS = ['--disable-features=WebGPU'];

/// Headless Chromium with `flags` (WEBGPU_FLAGS or NO_WEBGPU_FLAGS).
export function launch(flags) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: [...COMMON_FLAGS, ...flags],
  });
}

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm',
  '.safetensors': 'application/octet-stream',
};

/// Serves `folder` on 127.0.0.1 at a free port; resolves with the server.
export function serve(folder) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://localhost');
    const file = path.join(folder, decodeURIComponent(url.pathname === '/' ? '/index.html' : url.pathname));
    if (!file.startsWith(folder + path.sep) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/// Waits until the page's engine is ready or has failed to start (`poll`: waitForFunction's
/// polling option); resolves with `window.posflow.status()`.
export async function startedStatus(page, poll) {
  await page.waitForFunction(() => {
    const s = window.posflow?.status();
    return s && (s.ready || s.error);
  }, undefined, poll);
  return page.evaluate(() => window.posflow.status());
}
