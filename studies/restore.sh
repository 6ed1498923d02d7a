#!/usr/bin/env bash
# Puts the run results published in docs/studies/<name>/runs/ back under runs/studies/<name>/runs/,
# so that `posflow study studies/<name>.toml` (with --replicate, if it was) finds those runs done
# and trains only what is missing. A result already there is kept.
#   bash studies/restore.sh [NAME...]     (default: every published study)
#
# With --from OTHER, NAME's runs are taken from OTHER's published results instead: every run of a
# variant both files name (or of the VARIANTs given), for the seeds OTHER has. Studies share runs this way where one repeats
# another's variants (chomsky_floater_horizon repeats chomsky_bucket_sort's three, each relative
# file its absolute file's randomized RoPE). Nothing is taken on trust: `posflow study` counts a
# result done only when its config equals the run it plans (outputs aside) and its variant's name
# matches, and trains again any other ("its result.json was made with another config"). Take
# only runs the binary at hand repeats bit for bit: a result made before a change of summation
# order (FLOATER's CPU solve, session 48) has the same config and other bits, and so has a run
# made on a CPU of the other kind (AVX-512 or AVX2: gemm sums a product in another order;
# BENCHMARKS.md, "The AVX2 paths against PyTorch's").
#   bash studies/restore.sh --from OTHER NAME [VARIANT...]
set -euo pipefail
cd "$(dirname "$0")/.."

# Copies every result.json under $1 to the same place under $2, keeping any already there.
copy_results() {
    local src="$1" dst="$2" copied=0 result run
    while IFS= read -r result; do
        run="${result#"$src/"}"
        if [ ! -f "$dst/$run" ]; then
            mkdir -p "$(dirname "$dst/$run")"
            cp "$result" "$dst/$run"
            copied=$((copied + 1))
        fi
    done < <(find "$src" -name result.json | sort)
    echo "$copied"
}

if [ "${1:-}" = "--from" ]; then
    if [ $# -lt 3 ]; then
        echo "usage: bash studies/restore.sh --from OTHER NAME [VARIANT...]" >&2
        exit 2
    fi
    other="$2" name="$3"
    shift 3
    only=("$@")
    file="studies/$name.toml"
    if [ ! -f "$file" ]; then
        echo "no study file $file" >&2
        exit 2
    fi
    if [ ! -d "docs/studies/$other/runs" ]; then
        echo "no published run results in docs/studies/$other/runs" >&2
        exit 2
    fi
    # The variants' names, as the study file declares them ([[variant]] then name = "...").
    variants=$(awk '/^\[\[variant\]\]/ { v = 1; next } v && /^name *=/ { gsub(/[" ]/, ""); sub(/^name=/, ""); print; v = 0 }' "$file")
    for variant in "${only[@]}"; do
        if ! grep -qx "$variant" <<< "$variants"; then
            echo "$file has no variant $variant" >&2
            exit 2
        fi
    done
    total=0
    for variant in $variants; do
        if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " =~ " $variant " ]]; then
            continue
        fi
        src="docs/studies/$other/runs/$variant"
        [ -d "$src" ] || continue
        n=$(copy_results "$src" "runs/studies/$name/runs/$variant")
        echo "  $variant: $n run results from $other"
        total=$((total + n))
    done
    echo "restored $name ($total run results from $other; posflow study checks each one's config)"
    exit 0
fi

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for dir in docs/studies/*/; do names+=("$(basename "$dir")"); done
fi
for name in "${names[@]}"; do
    src="docs/studies/$name/runs"
    if [ ! -d "$src" ]; then
        echo "skip $name: no published run results in $src" >&2
        continue
    fi
    echo "restored $name ($(copy_results "$src" "runs/studies/$name/runs") run results)"
done
