// What the page's browser scripts share (e2e.mjs, bench.mjs): headless Chromium with or without
// WebGPU, the static server for web/dist (../serve.mjs), and waiting for the page to start.
//
// Environment: CHROMIUM (default /usr/bin/chromium).

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

export { serve } from '../serve.mjs';

/// Waits until the page's engine is ready or has failed to start (`poll`: waitForFunction's
/// polling option); resolves with `window.posflow.status()`.
export async function startedStatus(page, poll) {
  await page.waitForFunction(() => {
    const s = window.posflow?.status();
    return s && (s.ready || s.error);
  }, undefined, poll);
  return page.evaluate(() => window.posflow.status());
}
