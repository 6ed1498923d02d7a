#!/usr/bin/env bash
# The studies' models per op on the CPU (`POSFLOW_PROFILE=1`: ms, MFLOP, GFLOP/s and GB/s per op
# kind), each the exact model and data of a published study run (benches/study_run_config.py):
#   1. the Chomsky studies' model training (chomsky_reverse_string, sinusoidal; `bench train
#      --shape study` is the same model at one batch shape),
#   2. its evaluation at 500 input symbols (the papers' longest test length), 4 batches of 32,
#   3. the cmudict seq2seq studies' model training (cmudict_s2l, sinusoidal),
#   4. the Moby Dick studies' model training (extrapolation, sinusoidal) and its evaluation at
#      64-1024 characters.
# A profile table is printed per compiled program when it is dropped, the first run of each left
# out. One thread by default (THREADS), as each run of a study with --jobs 2 on 2 cores. Run it with
# nothing else running: beside even a nice-19 job, fine-grained threads wait on each other (the
# Chomsky step on 2 threads took 47-52 ms beside a study, 21 ms alone). Record the machine and load
# printed first beside the figures.
#   bash benches/profile_studies.sh            (POSFLOW: the binary, default target/release/posflow;
#                                              STEPS: training steps profiled, default 30;
#                                              THREADS: CPU threads, default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
posflow=${POSFLOW:-target/release/posflow}
steps=${STEPS:-30}
export RAYON_NUM_THREADS=${THREADS:-1}
[ -x "$posflow" ] || { echo "$posflow is missing: cargo build --release --bin posflow (or set POSFLOW)" >&2; exit 1; }
posflow=$(realpath "$posflow")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
wide=$(grep -qw avx512f /proc/cpuinfo && echo "AVX-512" || (grep -qw avx2 /proc/cpuinfo && echo "AVX2" || echo "neither AVX2 nor AVX-512"))
echo "machine: $cpu, $(nproc) threads, $wide; load $(cut -d' ' -f1-3 /proc/loadavg); $($posflow --version); profiled on $RAYON_NUM_THREADS thread(s)"

# Trains `config` (written from STUDY VARIANT and the settings after them) with the profile on;
# prints the profile tables and the run's last lines.
profile() {
    local title=$1 study=$2 variant=$3
    shift 3
    echo
    echo "== $title ($study, $variant)"
    python3 benches/study_run_config.py "$study" "$variant" "$@" > "$work/config.toml"
    (cd "$work" && POSFLOW_PROFILE=1 "$posflow" --device cpu train --config config.toml \
        --out model.safetensors --metrics metrics.jsonl --sample-chars 0 2>&1) |
        grep -v '^step ' | grep -v '^saved '
}

profile "1. Chomsky model, training: $steps steps of 32" chomsky_reverse_string sinusoidal \
    "train.steps=$steps" "train.eval_every=100000" "train.eval_lengths=[]"
profile "2. Chomsky model, evaluation at 500 input symbols: the second table" chomsky_reverse_string sinusoidal \
    "train.steps=2" "train.eval_every=100000" "train.eval_lengths=[500]" "train.eval_batches=4"
profile "3. cmudict seq2seq model, training: $steps steps" cmudict_s2l sinusoidal \
    "train.steps=$steps" "train.warmup=0" "train.eval_every=100000"
profile "4. Moby Dick model, training: $steps steps; then its evaluation at 64, 128, 256, 512 and 1024" extrapolation sinusoidal \
    "train.steps=$steps" "train.warmup=0" "train.eval_every=100000"
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
