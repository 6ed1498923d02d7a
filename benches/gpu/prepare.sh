#!/usr/bin/env bash
# Run here, before a session's first call of the `device` tool: builds what the GPU-targets table
# needs and puts it where the calls carry it from (`.gpu/`, `.gl/`, both git-ignored locally).
#
#   bash benches/gpu/prepare.sh          everything
#   bash benches/gpu/prepare.sh bench    the benchmarks' part only (minutes sooner: the first call
#                                        can start while `prepare.sh tests` builds the rest)
#
# A call carries at most 64 MiB with the tree, so the work is split: one call for the
# benchmarks, one per part of the test binaries, back to back (a machine stays warm 30 s):
#   run(command="bash benches/gpu/table.sh bench", carry=[".gl", ".gpu/bench"], timeout_s=420)
#   run(command="bash benches/gpu/table.sh tests", carry=[".gl", ".gpu/tests-1"], timeout_s=300)
#   run(command="bash benches/gpu/table.sh tests", carry=[".gl", ".gpu/tests-2"], timeout_s=300)
#   ... (as many parts as this script reports)
#   run(command="bash benches/gpu/table.sh study", carry=[".gl", ".gpu/bench"], timeout_s=240)
#       (the GPU-sized study's pace at 8, 16 and 32 jobs, before running it in pieces)
#   run(command="STUDY_JOBS=8 bash benches/gpu/table.sh study-run", carry=[".gl", ".gpu/bench"], timeout_s=540)
#       (the study itself, resumed from its published results; untar what comes back into
#       runs/studies/chomsky_gpu and publish it: table.sh says how)
# A session has 15 minutes of device time, the machine's start (a minute or more) and its idle
# waits counted in: the H200 in session 50 took 231 s for `bench` and ~150 s for three test
# calls, 722 s of 900 in all with one study call of 290 s. So: `bench` first, the tests next,
# the study calls only with what is left (`study-run` with STUDY_SECONDS and timeout_s under
# it; the whole GPU-sized study is ~4.4 h of the card at 8 jobs: it runs lease by lease,
# resumed); give the machine back after the last call.
# Then copy the numbers from each call's table.log into BENCHMARKS.md. The tracked tree (~28 MB)
# travels whole with every call; the parts fill what is left of the 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
peers=${PEERS:-$root/../shared/peers}
tree=$(git ls-files -z | xargs -0 stat -c %s | awk '{ s += $1 } END { print s }')
part_limit=$((60 * 1024 * 1024 - tree))
what=${1:-all}
case $what in
all | bench | tests) ;;
*) echo "prepare.sh: say all, bench or tests, not '$what'" >&2 && exit 1 ;;
esac
target=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

for dir in /.gpu/ /.gl/; do
    grep -qxF "$dir" .git/info/exclude 2>/dev/null || echo "$dir" >>.git/info/exclude
done

# The Vulkan loader (the device machine has NVIDIA's driver but no loader): the device README's
# recipe, once per checkout.
if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1; then
    mkdir -p .gl /tmp/amd64/partial
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    apt-get $o update -qq
    (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi

if [ "$what" != tests ]; then
    rm -rf .gpu/bench && mkdir -p .gpu/bench
    cargo build --release --bin posflow
    strip -o .gpu/bench/posflow "$target/release/posflow"
    xz -9 -T0 .gpu/bench/posflow
    cp "$peers/torch_train.py" .gpu/bench/
    # posflow_torch and the one wheel it needs that a CUDA machine's PyTorch may lack (safetensors;
    # torchdiffeq, for FLOATER only, needs SciPy: too large to carry, so the card runs T5's model).
    mkdir -p .gpu/bench/python .gpu/bench/wheels
    cp -r python/posflow_torch .gpu/bench/python/
    rm -rf .gpu/bench/python/posflow_torch/__pycache__
    python3 -m pip download --no-deps -q -d .gpu/bench/wheels safetensors
fi
[ "$what" = bench ] && { du -sh .gl .gpu/bench; exit 0; }
rm -rf .gpu/tests-* && mkdir -p .gpu/all

# The test binaries (unit and integration) as `cargo test` runs them, and the CLI binary the
# CLI tests run. Tests find committed files and that binary by paths baked in at build time:
# table.sh puts the tree and the binary there.
cargo build --bin posflow
cargo test --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])' |
    while read -r exe; do
        # The fuzz tests never open a GPU: CI's alone.
        case $(basename "$exe") in fuzz-*) continue ;; esac
        strip -o ".gpu/all/$(basename "$exe")" "$exe"
    done
xz -9 -T0 .gpu/all/*
strip -o .gpu/posflow-debug "$target/debug/posflow"
xz -9 -T0 .gpu/posflow-debug
# The tree's path, and the CLI binary's, as the test binaries have them.
printf '%s\n%s\n' "$root" "$target/debug/posflow" >.gpu/source_root

# Parts of at most part_limit bytes (with .gl: the Vulkan loader travels with each), each with the
# CLI binary and the build path.
part_limit=$((part_limit - $(du -sb .gl | cut -f1)))
part=0
used=$part_limit
extra=$(($(stat -c %s .gpu/posflow-debug.xz) + 4096))
for f in $(ls -S .gpu/all/*.xz); do
    size=$(stat -c %s "$f")
    if [ $((used + size)) -gt $part_limit ]; then
        part=$((part + 1))
        mkdir -p ".gpu/tests-$part"
        cp .gpu/posflow-debug.xz .gpu/source_root ".gpu/tests-$part/"
        used=$extra
    fi
    mv "$f" ".gpu/tests-$part/"
    used=$((used + size))
done
rm -rf .gpu/all .gpu/posflow-debug.xz .gpu/source_root
du -sh .gl .gpu/*
echo "test parts: $part (one call each)"
