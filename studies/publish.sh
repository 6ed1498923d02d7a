#!/usr/bin/env bash
# Copies the reports of finished studies (study.md, study.json, the SVG pictures) from
# runs/studies/<name>/ into docs/studies/<name>/, where the README links them, with every run's
# result.json (its config and numbers, not its checkpoint) under docs/studies/<name>/runs/, so
# that a later session can restore them (studies/restore.sh) and resume or replicate the study
# without training those runs again. A study still running (no study.md yet) has only its finished
# runs' results kept, so that a session cut off mid-study loses none of them.
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
    finished=false
    if [ -f "$src/study.md" ]; then
        finished=true
        mkdir -p "docs/studies/$name"
        cp "$src/study.md" "$src/study.json" "$src"/*.svg "docs/studies/$name/"
    fi
    results=0
    if [ -d "$src/runs" ]; then
        while IFS= read -r result; do
            run="${result#"$src/runs/"}"
            mkdir -p "docs/studies/$name/runs/$(dirname "$run")"
            cp "$result" "docs/studies/$name/runs/$run"
            results=$((results + 1))
        done < <(find "$src/runs" -name result.json | sort)
    fi
    if $finished; then
        echo "published $name ($results run results)"
    elif [ "$results" -gt 0 ]; then
        echo "kept $name's $results finished run results (no report yet: the study has not finished)"
    else
        echo "skip $name: no report and no finished run in $src (run: posflow study studies/$name.toml)" >&2
    fi
done
