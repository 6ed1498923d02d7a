#!/usr/bin/env bash
# CI for the browser demo (web/): installs what it needs, lints the web crate, builds the site
# with web/build.sh and runs the end-to-end test in headless Chromium (WebGPU on SwiftShader, then
# the CPU backend in wasm), against native `posflow sample` on the same checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase says how long this script has taken so far (a cold run installs and builds here).
phase() { echo "== [web: $((SECONDS / 60)) min $((SECONDS % 60)) s] $*"; }

phase "install: chromium, node, wasm-bindgen-cli, npm packages"
export DEBIAN_FRONTEND=noninteractive
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v node >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target add wasm32-unknown-unknown >/dev/null
# The page's threaded build rebuilds the standard library with atomics (web/build.sh).
rustup component add rust-src >/dev/null
# The CLI must match the wasm-bindgen crate exactly; its lockfile wants a crate version the
# registry lacks, hence no --locked. A debug build: it installs in 72 s instead of 156 s here and
# writes the same bytes (measured on the page's wasm: 7 s instead of 1.3 s a build).
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != 0.2.130 ]; then
    cargo install wasm-bindgen-cli --version =0.2.130 --debug
fi
(cd web && npm ci --no-audit --no-fund)

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/posflow-target}"

phase "fmt, clippy (posflow-web on wasm32)"
cargo fmt --check
# With SIMD128, as web/build.sh builds it (the page's products are SIMD128 code).
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128" \
    cargo clippy --target wasm32-unknown-unknown -p posflow-web -- -D warnings

phase "build the site"
web/build.sh

phase "native posflow, for the expected values"
cargo build --bin posflow
export POSFLOW_BIN="$CARGO_TARGET_DIR/debug/posflow"

phase "e2e in headless Chromium"
node web/tests/e2e.mjs
phase "done"
