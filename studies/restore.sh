#!/usr/bin/env bash
# Puts the run results published in docs/studies/<name>/runs/ back under runs/studies/<name>/runs/,
# so that `posflow study studies/<name>.toml` (with --replicate, if it was) finds those runs done
# and trains only what is missing. A result already there is kept.
#   bash studies/restore.sh [NAME...]     (default: every published study)
set -euo pipefail
cd "$(dirname "$0")/.."
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
    restored=0
    while IFS= read -r result; do
        run="${result#"$src/"}"
        target="runs/studies/$name/runs/$run"
        if [ ! -f "$target" ]; then
            mkdir -p "$(dirname "$target")"
            cp "$result" "$target"
            restored=$((restored + 1))
        fi
    done < <(find "$src" -name result.json | sort)
    echo "restored $name ($restored run results)"
done
