#!/usr/bin/env bash
# A device call carries the tracked tree with it, at most 64 MiB with what it names in `carry`;
# the published studies are most of the tree (92 MB of 106 on 2026-12-02) and no call reads them
# but `table.sh study-run`, which reads the GPU-sized study's own. So, here, around the calls:
#   bash benches/gpu/aside.sh        moves docs/studies out of the checkout (beside it), keeping
#                                    docs/studies/chomsky_gpu, and prints what will travel
#   bash benches/gpu/aside.sh back   puts them back (should that fail: git checkout -- docs/studies)
set -euo pipefail
cd "$(dirname "$0")/../.."
aside=$(cd .. && pwd)/posflow-studies-aside
keep=chomsky_gpu
case ${1:-out} in
out)
    [ -e "$aside" ] && { echo "aside.sh: $aside is there already: 'aside.sh back' first" >&2; exit 1; }
    mkdir -p "$aside"
    for study in docs/studies/*; do
        [ "$(basename "$study")" = $keep ] || mv "$study" "$aside/"
    done
    echo "docs/studies moved to $aside; the tracked tree that travels now:"
    git ls-files | python3 -c 'import os, sys
s = sum(os.path.getsize(p) for p in sys.stdin.read().splitlines() if os.path.isfile(p))
print(f"{s / 2**20:.1f} MiB (with carry, at most 64)")'
    ;;
back)
    [ -d "$aside" ] || { echo "aside.sh: nothing at $aside to put back" >&2; exit 1; }
    # Nothing aside (only the kept study was there) is no error.
    find "$aside" -mindepth 1 -maxdepth 1 -exec mv -t docs/studies/ {} +
    rmdir "$aside"
    git status --short docs/studies | head -5
    echo "docs/studies back"
    ;;
*) echo "aside.sh: say nothing (move aside) or back, not '$1'" >&2 && exit 1 ;;
esac
