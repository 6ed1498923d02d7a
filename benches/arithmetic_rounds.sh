#!/usr/bin/env bash
# The portable arithmetic's CPU step beside the native one's, taking turns:
#
#   benches/arithmetic_rounds.sh [POSFLOW]
#
# Each of ROUNDS rounds (default 3) times `bench train` in the native and then the portable
# arithmetic on each shape of SHAPES (default "study peers": the studies' Chomsky model with the
# sinusoidal table, then the peers' step), so that a change in the machine's load falls on both
# alike; BENCHMARKS.md quotes the ratio within a round and its median over rounds. STEPS timed
# steps after 3 warmups (default 20), THREADS (default 2). Prints the CPU, whether it has AVX-512
# and the load before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${CARGO_TARGET_DIR:-target}/release/posflow}
rounds=${ROUNDS:-3}
steps=${STEPS:-20}
threads=${THREADS:-2}
shapes=${SHAPES:-study peers}
[ -x "$bin" ] || { echo "no posflow binary at $bin (cargo build --release)" >&2; exit 1; }

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
avx512=$(grep -q avx512f /proc/cpuinfo && echo "AVX-512" || echo "AVX2, no AVX-512")
echo "machine: $cpu, $(nproc) threads, $avx512; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$rounds rounds, $steps timed steps after 3 warmups, $threads threads"

step() { # shape, arithmetic: the median ms of the step
    local variant=learned
    [ "$1" = study ] && variant=sinusoidal
    RAYON_NUM_THREADS=$threads "$bin" --device cpu bench train --shape "$1" --arithmetic "$2" \
        --variants "$variant" --steps "$steps" --warmup 3 |
        awk -v v="$variant" '$1 == v { print $4 }'
}

for round in $(seq "$rounds"); do
    echo "round $round (load $(cut -d' ' -f1 /proc/loadavg))"
    for shape in $shapes; do
        native=$(step "$shape" native)
        portable=$(step "$shape" portable)
        echo "  $shape: native $native ms, portable $portable ms, portable/native $(awk -v a="$portable" -v b="$native" 'BEGIN { printf "%.3f", a / b }')"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
