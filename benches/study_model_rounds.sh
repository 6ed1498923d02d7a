#!/usr/bin/env bash
# The Chomsky studies' model side by side in several builds, taking turns: each round, each build
# trains the published config of chomsky_reverse_string's sinusoidal seed 0 for 60 steps (its
# tokens/s), then runs 2 steps and 2 evaluation batches at 500 input symbols (the run's wall
# seconds). One thread by default, as each run of a study with --jobs 2 has. Then says whether the
# builds' metrics logs agree line for line (the losses, gradient norms and evaluation results; the
# speeds left out), the check that a kernel change kept the same bits.
#   bash benches/study_model_rounds.sh BUILD_A BUILD_B [...]   (ROUNDS: default 3; THREADS: default 1)
# Run it with nothing else running, and record the machine and load it prints.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 POSFLOW_BINARY POSFLOW_BINARY [...]" >&2; exit 2; }
rounds=${ROUNDS:-3}
export RAYON_NUM_THREADS=${THREADS:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 benches/study_run_config.py chomsky_reverse_string sinusoidal \
    train.steps=60 train.eval_every=100000 'train.eval_lengths=[]' > "$work/train.toml"
python3 benches/study_run_config.py chomsky_reverse_string sinusoidal \
    train.steps=2 train.eval_every=100000 'train.eval_lengths=[500]' train.eval_batches=2 > "$work/eval.toml"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) threads; load $(cut -d' ' -f1-3 /proc/loadavg); $RAYON_NUM_THREADS thread(s)"
for round in $(seq "$rounds"); do
    for i in $(seq $#); do
        bin=$(realpath "${!i}")
        tokens=$(cd "$work" && "$bin" --device cpu train --config train.toml --out "t$i.safetensors" \
            --metrics "t$i.jsonl" --sample-chars 0 2>&1 | grep -o '[0-9]* tokens/s' | tail -1)
        start=$(date +%s.%N)
        (cd "$work" && "$bin" --device cpu train --config eval.toml --out "e$i.safetensors" \
            --metrics "e$i.jsonl" --sample-chars 0 > /dev/null 2>&1)
        end=$(date +%s.%N)
        printf 'round %s, %s: training %s, evaluation run %.2f s\n' "$round" "${!i}" "$tokens" "$(echo "$end - $start" | bc)"
    done
done
# The logs without their speeds: the same bits give the same lines.
results() { sed -E 's/"(tokens_per_s|secs)":[^,}]*,?//g' "$1"; }
for i in $(seq 2 $#); do
    for log in t e; do
        if cmp -s <(results "$work/${log}1.jsonl") <(results "$work/$log$i.jsonl"); then same="the same"; else same="DIFFERENT"; fi
        echo "metrics, $([ $log = t ] && echo training || echo evaluation): ${!i} against $1: $same"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
