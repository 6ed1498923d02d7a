#!/usr/bin/env bash
# Publishes studies: every finished run's result.json under RUNS_DIR/<name>/runs/ goes into
# docs/studies/<name>/runs.jsonl.gz (one gzip file of compact lines, `posflow results --pack`),
# and `posflow results` then rewrites every published report, docs/results/ and the README's
# results block from the published runs. With --pending, a study still running (or re-running
# under a file in studies/pending/) keeps its finished runs in docs/pending/<name>/ instead, where
# `posflow results` does not read them, so that a session cut off mid-study loses none.
#   bash studies/publish.sh [--pending] [RUNS_DIR] [NAME...]    (default: runs/studies, every study there)
# POSFLOW names the binary (default: cargo run --release).
set -euo pipefail
cd "$(dirname "$0")/.."
posflow() {
    if [ -n "${POSFLOW:-}" ]; then "$POSFLOW" "$@"; else cargo run --release --quiet --bin posflow -- "$@"; fi
}
dest_root=docs/studies
if [ "${1:-}" = "--pending" ]; then
    dest_root=docs/pending
    shift
fi
runs="${1:-runs/studies}"
shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for dir in "$runs"/*/; do names+=("$(basename "$dir")"); done
fi
published=0
for name in "${names[@]}"; do
    src="$runs/$name"
    if [ ! -d "$src/runs" ]; then
        echo "skip $name: no finished run in $src (run: posflow study studies/$name.toml --out $src)" >&2
        continue
    fi
    posflow results --pack "$src"
    mkdir -p "$dest_root/$name"
    cp "$src/runs.jsonl.gz" "$dest_root/$name/"
    echo "published $name's runs into $dest_root/$name/runs.jsonl.gz"
    published=$((published + 1))
done
if [ "$dest_root" = docs/studies ] && [ "$published" -gt 0 ]; then
    posflow results
fi
