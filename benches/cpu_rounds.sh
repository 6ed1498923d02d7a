#!/usr/bin/env bash
# The CPU step against PyTorch's, and against posflow's own step before a change, taking turns:
#
#   benches/cpu_rounds.sh [AFTER [BEFORE]]
#
# Each of ROUNDS rounds (default 3) runs, in turn: `AFTER bench train --device cpu` (the peers'
# step; default $CARGO_TARGET_DIR/release/posflow), BEFORE's (when given), PyTorch's
# (../shared/peers/torch_train.py, PYTHON with torch, the same model and step), then
# `bench train --variants sinusoidal,floater_every_step` with each binary (FLOATER_BEFORE names
# that variant for a BEFORE built before it had the name: `floater`); so a change in the machine's load
# falls on all alike (BENCHMARKS.md quotes ratios within a round and medians over rounds). STEPS
# timed steps after 3 warmups (default 10; FLOATER's 5); THREADS (default 2) for every engine;
# FLOATER=0 leaves the FLOATER rows out. TORCH_AVX2=1 adds PyTorch held to its AVX2 paths
# (ATen, MKL and oneDNN) each round: beside a posflow built without the `avx512` feature
# (`cargo build --release --no-default-features --features cli`), what an AVX-512 CPU measures
# of an AVX2-only machine's code.
# Prints the CPU, whether it has AVX-512 and the load before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
after=${1:-${CARGO_TARGET_DIR:-target}/release/posflow}
before=${2:-}
rounds=${ROUNDS:-3}
steps=${STEPS:-10}
threads=${THREADS:-2}
py=${PYTHON:-python3}
peers=${PEERS:-../shared/peers}
floater=${FLOATER:-1}
torch_avx2=${TORCH_AVX2:-0}
for bin in "$after" $before; do
    [ -x "$bin" ] || { echo "no posflow binary at $bin (cargo build --release)" >&2; exit 1; }
done
[ -f "$peers/torch_train.py" ] || { echo "no $peers/torch_train.py (set PEERS)" >&2; exit 1; }

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
avx512=$(grep -q avx512f /proc/cpuinfo && echo "AVX-512" || echo "AVX2, no AVX-512")
echo "machine: $cpu, $(nproc) threads, $avx512; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$rounds rounds, $steps timed steps after 3 warmups, $threads threads"

step() { # binary, extra args: the median ms of each row
    RAYON_NUM_THREADS=$threads "$1" bench train --device cpu --steps "${3:-$steps}" --warmup 3 $2 |
        awk '$1 ~ /^(learned|sinusoidal|floater)$/ { printf "%s %s ms  ", $1, $4 }'
}

torch_step() { # environment settings for PyTorch: its median and least ms
    env "$@" "$py" "$peers/torch_train.py" --threads "$threads" --warmup 3 --steps "$steps" 2>&1 |
        tail -n 1 | grep -o 'ms_step=[0-9.]* ms_min=[0-9.]*'
}

for round in $(seq "$rounds"); do
    echo "round $round (load $(cut -d' ' -f1 /proc/loadavg))"
    echo "  posflow after:  $(step "$after" "")"
    [ -n "$before" ] && echo "  posflow before: $(step "$before" "")"
    echo "  pytorch:        $(torch_step)"
    [ "$torch_avx2" = 1 ] &&
        echo "  pytorch AVX2:   $(torch_step ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 DNNL_MAX_CPU_ISA=AVX2)"
    [ "$floater" = 0 ] && continue
    echo "  FLOATER after:  $(step "$after" "--variants sinusoidal,floater_every_step" 5)"
    [ -n "$before" ] &&
        echo "  FLOATER before: $(step "$before" "--variants sinusoidal,${FLOATER_BEFORE:-floater_every_step}" 5)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
