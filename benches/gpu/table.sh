#!/usr/bin/env bash
# Run on a lent GPU machine (see prepare.sh for the calls):
#   table.sh bench   the GPU-targets issue's table: the peers' step (every variant) and the
#                    large shape's, square products, posflow and PyTorch eager CUDA alternating
#                    in one command, torch.compile beside them, and the profile
#   table.sh tests   every test binary in the carried .gpu/tests-* parts, POSFLOW_REQUIRE_GPU=1
#   table.sh study   the GPU-sized study's pace (studies/chomsky_gpu.toml) at 8, 16 and 32 jobs
#                    (STUDY_JOBS; 8 made 8.5 steps/s a run on an H200: does the card take more?),
#                    STUDY_SECONDS (default 60) each: steps/s per run and in all, from the runs'
#                    metrics (carry .gpu/bench, as for bench)
#   table.sh study-run   the GPU-sized study itself, resumed from the run results kept in
#                    docs/pending/chomsky_gpu/runs.jsonl.gz, for STUDY_SECONDS (default 480) at STUDY_JOBS
#                    (default 8) jobs (STUDY names another study of studies/); every finished run's
#                    result.json comes back in
#                    $OUT/chomsky_gpu-results.tar.gz (carry .gpu/bench). Here: untar it into
#                    runs/studies/chomsky_gpu, `bash studies/publish.sh --pending runs/studies chomsky_gpu`,
#                    commit; the next lease goes on from there (the study is ~4.4 h at 8 jobs).
# Everything goes to $OUT/table.log (and stdout), a failed test binary's output to
# $OUT/failures.log (a call returns at most 8 files). On a machine without a GPU,
# TORCH_DEVICE=cpu PYTHON=<a python with torch> STEPS=1 SIZES=256 BIG_SIZES=256 tries it on a
# software adapter.
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:?say bench or tests}
OUT=${OUT:-/tmp/gpu-table}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/table.log") 2>&1

if ! ldconfig -p | grep -q libvulkan; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=$(mktemp -d)
torch_device=${TORCH_DEVICE:-cuda}
py=${PYTHON:-python3}
steps=${STEPS:-20}
sizes=${SIZES:-1024,2048,4096}
big=${BIG_SIZES:-2048,4096}
say() { printf '\n== %s (%s, load %s)\n' "$1" "$(date -u +%H:%M:%S)" "$(cut -d' ' -f1-3 /proc/loadavg)"; }

say "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv 2>/dev/null || true

if [ "$what" = study ]; then
    posflow=/tmp/posflow-release
    xz -dc .gpu/bench/posflow.xz >$posflow && chmod +x $posflow
    seconds=${STUDY_SECONDS:-60}
    for jobs in ${STUDY_JOBS:-8 16 32}; do
        say "chomsky_gpu, --jobs $jobs, $seconds s"
        out=/tmp/study-pace-$jobs
        rm -rf "$out"
        timeout "$seconds" $posflow --device gpu study studies/chomsky_gpu.toml --jobs "$jobs" \
            --out "$out" >/dev/null 2>&1
        # Each run's steps from its metrics log, over the whole window (start-up included).
        python3 - "$out" "$seconds" <<'PY'
import glob, json, sys
out, seconds = sys.argv[1], float(sys.argv[2])
steps = []
for f in sorted(glob.glob(f"{out}/runs/*/*/metrics.jsonl")):
    rows = [json.loads(l) for l in open(f)]
    steps.append(sum(1 for r in rows if r.get("kind") == "train"))
if not steps:
    print("no run wrote metrics")
else:
    print(f"{len(steps)} runs, steps each {steps}: {sum(steps) / seconds:.1f} steps/s in all, "
          f"{sum(steps) / len(steps) / seconds:.1f} per run (over the whole {seconds:.0f} s, start-up included)")
PY
    done
    say "done"
    exit 0
fi

if [ "$what" = study-run ]; then
    posflow=/tmp/posflow-release
    xz -dc .gpu/bench/posflow.xz >$posflow && chmod +x $posflow
    name=${STUDY:-chomsky_gpu}
    seconds=${STUDY_SECONDS:-480}
    jobs=${STUDY_JOBS:-8}
    POSFLOW=$posflow bash studies/restore.sh --pending $name || true
    say "$name, --jobs $jobs, $seconds s, resumed"
    timeout "$seconds" $posflow --device gpu study studies/$name.toml --replicate --jobs "$jobs" \
        >"$OUT/study.log" 2>&1
    echo "study exit status $? (124: the window ended first; its finished runs are kept)"
    grep -E "already done|: done in" "$OUT/study.log" | tail -n 40
    if [ -d runs/studies/$name/runs ]; then
        (cd runs/studies/$name && find runs -name result.json | sort | tar czf "$OUT/$name-results.tar.gz" -T -)
        echo "$(tar tzf "$OUT/$name-results.tar.gz" | wc -l) run results in $name-results.tar.gz"
    fi
    say "done"
    exit 0
fi

if [ "$what" = bench ]; then
    posflow=/tmp/posflow-release
    xz -dc .gpu/bench/posflow.xz >$posflow && chmod +x $posflow
    $posflow devices 2>&1 | head -5
    "$py" -c 'import torch; print("torch", torch.__version__)'
    export PYTHONPATH=.gpu/bench
    torch_shapes="$py benches/gpu/torch_shapes.py --device $torch_device"
    # The peers' step: posflow's variants and PyTorch alternating, two rounds.
    for round in 1 2; do
        say "train, round $round: posflow"
        $posflow --device gpu bench train --steps "$steps" --warmup 3 \
            --variants learned,sinusoidal,floater_every_step,floater,floater_backprop,tupe_a,rk4
        say "train, round $round: posflow with the ops' own kernels (not tuned)"
        POSFLOW_TUNE=0 $posflow --device gpu bench train --steps "$steps" --warmup 3 \
            --variants learned,sinusoidal
        say "train, round $round: PyTorch eager ($torch_device)"
        $torch_shapes --shape peers --steps "$steps" --warmup 3
    done
    say "train: posflow without subgroup operations"
    POSFLOW_SUBGROUPS=0 $posflow --device gpu bench train --steps "$steps" --warmup 3 \
        --variants learned,sinusoidal,floater_every_step,floater_backprop
    # The large shape (d 512, 8 layers, batch 32 x 256), where the products dominate.
    for round in 1 2; do
        say "train large, round $round: posflow"
        $posflow --device gpu bench train --shape large --steps "$steps" --warmup 3 \
            --variants learned,sinusoidal
        say "train large, round $round: PyTorch eager ($torch_device)"
        $torch_shapes --shape large --steps "$steps" --warmup 3
    done
    # torch.compile once per shape: its compilation takes the warm-up steps.
    say "train: PyTorch torch.compile ($torch_device), peers' shape"
    $torch_shapes --shape peers --compile --steps "$steps" --warmup 3
    say "train large: PyTorch torch.compile ($torch_device)"
    $torch_shapes --shape large --compile --steps "$steps" --warmup 3
    say "where the step goes (GPU timestamps)"
    POSFLOW_PROFILE=1 $posflow --device gpu bench train --steps "$steps" --warmup 2
    say "where the step goes without subgroup operations"
    POSFLOW_SUBGROUPS=0 POSFLOW_PROFILE=1 $posflow --device gpu bench train --steps "$steps" --warmup 2
    for round in 1 2; do
        say "matmul, round $round: posflow"
        $posflow --device gpu bench matmul --sizes "$sizes" --repeats 20
        say "matmul, round $round: posflow with the op's own kernels (not tuned)"
        POSFLOW_TUNE=0 $posflow --device gpu bench matmul --sizes "$sizes" --repeats 20
        say "matmul, round $round: PyTorch ($torch_device)"
        "$py" .gpu/bench/torch_train.py --device "$torch_device" --matmul --sizes "$sizes" --runs 20
    done
    # Every kernel the shader has at the sizes where the 40% target is (prefetching ones included).
    say "matmul, every kernel: posflow"
    $posflow --device gpu bench matmul --kernels --sizes "$big" --repeats 5
    # posflow_torch on the card (issue 44): the NCCL path (torchrun, one process) against
    # posflow's own GPU training of the same run, 20 steps each, tokens/s from their metrics logs.
    say "posflow_torch (NCCL) against posflow train, configs/moby_dick.toml, 20 steps"
    "$py" -c 'import safetensors' 2>/dev/null || "$py" -m pip install -q --no-index --no-deps .gpu/bench/wheels/*.whl
    rm -rf /tmp/torch-path && mkdir -p /tmp/torch-path
    sed -e 's/^eval_every = .*/eval_every = 0/' -e 's/^eval_lengths = .*/eval_lengths = []/' \
        configs/moby_dick.toml >/tmp/torch-path/run.toml
    $posflow --device gpu train --config /tmp/torch-path/run.toml --steps 20 --sample-chars 0 \
        --out /tmp/torch-path/posflow.safetensors --metrics /tmp/torch-path/posflow.jsonl | tail -1
    POSFLOW_BIN=$posflow PYTHONPATH=.gpu/bench/python "$py" -m torch.distributed.run --standalone \
        --nproc_per_node=1 -m posflow_torch.train --config /tmp/torch-path/run.toml --steps 20 \
        --out /tmp/torch-path/torch.safetensors --metrics /tmp/torch-path/torch.jsonl | tail -1
    "$py" - <<'PY'
import json, statistics
for name in ("posflow", "torch"):
    rows = [json.loads(l) for l in open(f"/tmp/torch-path/{name}.jsonl")]
    speeds = [r["tokens_per_s"] for r in rows if r["kind"] == "train"][3:]
    last = [r["loss"] for r in rows if r["kind"] == "train"][-1]
    print(f"{name}: median {statistics.median(speeds):.0f} tokens/s over steps 3-19, last loss {last:.4f}")
PY
    say "done"
    exit 0
fi

# Tests: where the binaries were built, they read the tree and run target/debug/posflow.
failed=0
for part in .gpu/tests-*; do
    built_in=$(sed -n 1p "$part/source_root")
    cli=$(sed -n 2p "$part/source_root")
    if [ "$built_in" != "$(pwd)" ] && [ ! -e "$built_in" ]; then
        mkdir -p "$(dirname "$built_in")" && ln -sfn "$(pwd)" "$built_in"
    fi
    mkdir -p "$(dirname "$cli")"
    xz -dc "$part/posflow-debug.xz" >"$cli" && chmod +x "$cli"
    for t in "$part"/*.xz; do
        name=$(basename "$t" .xz)
        [ "$name" = posflow-debug ] && continue
        xz -dc "$t" >"/tmp/$name" && chmod +x "/tmp/$name"
        say "tests: $name"
        if ! POSFLOW_REQUIRE_GPU=1 POSFLOW_REQUIRE_SUBGROUPS=1 "/tmp/$name" --test-threads 16 >"/tmp/$name.log" 2>&1; then
            echo "FAILED: $name (its output: failures.log)"
            { echo "== $name"; cat "/tmp/$name.log"; } >>"$OUT/failures.log"
            failed=1
        fi
        grep -h '^test result' "/tmp/$name.log"
    done
done
say "tests done (failed: $failed)"
