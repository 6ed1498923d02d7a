#!/usr/bin/env bash
# Copies the reports of finished studies (study.md, study.json, the SVG pictures) from
# runs/studies/<name>/ into docs/studies/<name>/, where the README links them.
#   bash studies/publish.sh [RUNS_DIR] [NAME...]     (default: runs/studies, every study there)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-runs/studies}"
shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for dir in "$runs"/*/; do names+=("$(basename "$dir")"); done
fi
for name in "${names[@]}"; do
    src="$runs/$name"
    if [ ! -f "$src/study.md" ]; then
        echo "skip $name: no $src/study.md (run: posflow study studies/$name.toml)" >&2
        continue
    fi
    mkdir -p "docs/studies/$name"
    cp "$src/study.md" "$src/study.json" "$src"/*.svg "docs/studies/$name/"
    echo "published $name"
done
