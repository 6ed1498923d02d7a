#!/usr/bin/env bash
# Builds the demo site into web/dist/ (serve that folder over HTTP, e.g.
# `python3 -m http.server -d web/dist`): the posflow-web crate for wasm32, its JS bindings
# (wasm-bindgen --target web), the wasm optimised by npm's binaryen (Debian's wasm-opt 108 writes
# broken wasm), then the page and the shipped checkpoint.
#
# Needs: rustup target wasm32-unknown-unknown, wasm-bindgen-cli 0.2.130 on PATH (the version of
# the wasm-bindgen crate), node/npm (`npm ci` here installs binaryen). .ci/web.sh installs all.
set -euo pipefail
web=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$web")
target=${CARGO_TARGET_DIR:-$root/target}
dist=$web/dist

want=0.2.130
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')
if [ "$have" != "$want" ]; then
    echo "wasm-bindgen $want is needed (found: ${have:-none}): cargo install wasm-bindgen-cli --version =$want" >&2
    exit 1
fi
[ -x "$web/node_modules/.bin/wasm-opt" ] || (cd "$web" && npm ci --no-audit --no-fund)

# No debug info in the wasm: the root profile keeps some for native profiling. SIMD128 (in every
# browser that has WebGPU): the CPU step in the page is several times faster with it
# (BENCHMARKS.md, "The step in the page").
CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128" \
    cargo build --release --target wasm32-unknown-unknown \
    --manifest-path "$root/Cargo.toml" -p posflow-web
wasm=$target/wasm32-unknown-unknown/release/posflow_web.wasm

rm -rf "$dist"
mkdir -p "$dist/pkg" "$dist/assets"
wasm-bindgen --target web --no-typescript --out-dir "$dist/pkg" "$wasm"
bound=$dist/pkg/posflow_web_bg.wasm
before=$(stat -c %s "$bound")
# The features Rust's wasm32-unknown-unknown target emits by default, and SIMD128.
"$web/node_modules/.bin/wasm-opt" -O --enable-simd \
    --enable-bulk-memory --enable-mutable-globals --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-reference-types --enable-multivalue \
    "$bound" -o "$bound.opt"
mv "$bound.opt" "$bound"
after=$(stat -c %s "$bound")

cp "$web/index.html" "$web/main.js" "$web/style.css" "$dist/"
cp "$web/assets/"*.safetensors "$dist/assets/"
echo "built $dist: wasm $before bytes from wasm-bindgen, $after after wasm-opt -O"
