// A static server for the built site: `node web/serve.mjs [port]` serves web/dist on
// 127.0.0.1 (default port 8000) cross-origin isolated — every response with
// `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`, the
// headers a browser needs before it shares memory between threads — so that the page runs its
// threaded build. Any other static server works too, with the single-thread build unless it sends
// both headers. The browser tests (tests/browser.mjs) serve the site with this.

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm',
  '.safetensors': 'application/octet-stream',
};

const ISOLATION = {
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-embedder-policy': 'require-corp',
};

/// Serves `folder` on 127.0.0.1 at `port` (0: a free one), cross-origin isolated unless
/// `isolated` is false; resolves with the server.
export function serve(folder, { port = 0, isolated = true } = {}) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://localhost');
    const file = path.join(folder, decodeURIComponent(url.pathname === '/' ? '/index.html' : url.pathname));
    if (!file.startsWith(folder + path.sep) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, {
      'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream',
      ...(isolated ? ISOLATION : {}),
    });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const dist = path.join(path.dirname(fileURLToPath(import.meta.url)), 'dist');
  if (!fs.existsSync(path.join(dist, 'index.html'))) {
    console.error(`${dist} has no site: build it first with web/build.sh`);
    process.exit(1);
  }
  const port = Number(process.argv[2] ?? 8000);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`${process.argv[2]} is not a port: give a number from 0 to 65535`);
    process.exit(1);
  }
  const server = await serve(dist, { port });
  console.log(`serving ${dist} at http://127.0.0.1:${server.address().port}/ (cross-origin isolated: the threaded build)`);
}
