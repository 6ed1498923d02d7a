#!/usr/bin/env bash
# Builds the demo site into web/dist/ (serve that folder over HTTP: `node web/serve.mjs` serves
# it cross-origin isolated, so that the page runs its threaded build; any static server, e.g.
# `python3 -m http.server -d web/dist`, gives the single-thread one): the posflow-web crate for
# wasm32 twice (single-thread, and threaded), its JS bindings (wasm-bindgen --target web), the
# wasm optimised by npm's binaryen (Debian's wasm-opt 108 writes broken wasm), then the page and
# the shipped checkpoints.
#
# Needs: rustup target wasm32-unknown-unknown and component rust-src (the threaded build),
# wasm-bindgen-cli 0.2.130 on PATH (the version of the wasm-bindgen crate), node/npm (`npm ci`
# here installs binaryen). .ci/web.sh installs all.
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

rm -rf "$dist"
mkdir -p "$dist/assets"

# The wasm in `target_dir` built with `rustflags`, bound by wasm-bindgen into $dist/`pkg`, then
# optimised with the features it was built with (`opt_features`, beside those Rust's wasm32 target
# emits by default). No debug info in the wasm: the root profile keeps some for native profiling.
build_wasm() {
    local pkg=$1 target_dir=$2 rustflags=$3 opt_features=$4
    shift 4
    CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$rustflags" \
        cargo build --release --target wasm32-unknown-unknown --target-dir "$target_dir" \
        --manifest-path "$root/Cargo.toml" -p posflow-web "$@"
    wasm-bindgen --target web --no-typescript --out-dir "$dist/$pkg" \
        "$target_dir/wasm32-unknown-unknown/release/posflow_web.wasm"
    local bound=$dist/$pkg/posflow_web_bg.wasm
    local before
    before=$(stat -c %s "$bound")
    # shellcheck disable=SC2086 # one flag per feature
    "$web/node_modules/.bin/wasm-opt" -O $opt_features \
        --enable-bulk-memory --enable-mutable-globals --enable-nontrapping-float-to-int \
        --enable-sign-ext --enable-reference-types --enable-multivalue \
        "$bound" -o "$bound.opt"
    mv "$bound.opt" "$bound"
    echo "$pkg: wasm $before bytes from wasm-bindgen, $(stat -c %s "$bound") after wasm-opt -O"
}

# SIMD128 (in every browser that has WebGPU): the CPU step in the page is several times faster
# with it (BENCHMARKS.md, "The step in the page").
build_wasm pkg "$target" "-C target-feature=+simd128" --enable-simd

# The threaded build, which main.js loads when the page is served cross-origin isolated: the
# standard library rebuilt with atomics (`-Z build-std`, which needs the rust-src component; a
# stable toolchain takes it with RUSTC_BOOTSTRAP=1), the memory shared and imported so that helper
# Workers can run the same wasm on it (up to 4 GiB, wasm32's limit), and the exports
# wasm-bindgen needs to give each thread its own stack and thread-locals. Its own target dir: the
# flags differ from the single-thread build's.
threads_flags="-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128"
for arg in --shared-memory --max-memory=4294967296 --import-memory --export=__wasm_init_tls \
    --export=__tls_size --export=__tls_align --export=__tls_base; do
    threads_flags+=" -C link-arg=$arg"
done
RUSTC_BOOTSTRAP=1 build_wasm pkg-threads "$target/threads" "$threads_flags" "--enable-simd --enable-threads" \
    -Z build-std=panic_abort,std

cp "$web/index.html" "$web/main.js" "$web/helper.js" "$web/style.css" "$dist/"
cp "$web/assets/"*.safetensors "$dist/assets/"
echo "built $dist"
