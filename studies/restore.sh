#!/usr/bin/env bash
# Puts the run results published in docs/studies/<name>/runs.jsonl.gz back under
# runs/studies/<name>/runs/, so that `posflow study studies/<name>.toml` (with --replicate, if it
# was) finds those runs done and trains only what is missing. A result already there is kept.
# With --pending, from docs/pending/<name>/ (a study re-running under studies/pending/<name>.toml).
#   bash studies/restore.sh [--pending] [NAME...]     (default: every published study)
#
# With --from OTHER, NAME's runs are taken from OTHER's published results instead: every run of a
# variant both files name (or of the VARIANTs given), for the seeds OTHER has. Studies share runs
# this way where one repeats another's variants (chomsky_floater_horizon repeats
# chomsky_bucket_sort's three, each relative file its absolute file's randomized RoPE). Nothing is
# taken on trust: `posflow study` counts a result done only when its config equals the run it plans
# (outputs aside) and its variant's name matches, and trains again any other ("its result.json was
# made with another config"). Take only runs the binary at hand repeats bit for bit: a result made
# on a CPU of the other kind (AVX-512 or AVX2: gemm sums a product in another order) has the same
# config and other bits.
#   bash studies/restore.sh --from OTHER NAME [VARIANT...]
# POSFLOW names the binary (default: cargo run --release).
set -euo pipefail
cd "$(dirname "$0")/.."
posflow() {
    if [ -n "${POSFLOW:-}" ]; then "$POSFLOW" "$@"; else cargo run --release --quiet --bin posflow -- "$@"; fi
}

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
    if [ ! -f "docs/studies/$other/runs.jsonl.gz" ]; then
        echo "no published run results in docs/studies/$other/runs.jsonl.gz" >&2
        exit 2
    fi
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    cp "docs/studies/$other/runs.jsonl.gz" "$scratch/"
    posflow results --unpack "$scratch" >/dev/null
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
        src="$scratch/runs/$variant"
        [ -d "$src" ] || continue
        n=$(copy_results "$src" "runs/studies/$name/runs/$variant")
        echo "  $variant: $n run results from $other"
        total=$((total + n))
    done
    echo "restored $name ($total run results from $other; posflow study checks each one's config)"
    exit 0
fi

src_root=docs/studies
if [ "${1:-}" = "--pending" ]; then
    src_root=docs/pending
    shift
fi
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for dir in "$src_root"/*/; do names+=("$(basename "$dir")"); done
fi
for name in "${names[@]}"; do
    archive="$src_root/$name/runs.jsonl.gz"
    if [ ! -f "$archive" ]; then
        echo "skip $name: no published run results in $archive" >&2
        continue
    fi
    mkdir -p "runs/studies/$name"
    cp "$archive" "runs/studies/$name/"
    echo "restored $name: $(posflow results --unpack "runs/studies/$name")"
done
