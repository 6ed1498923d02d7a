#!/usr/bin/env bash
# An encoding is a file and a line: in a copy of the tree, this adds a throwaway one
# (tests/tools/throwaway_encoding.rs as src/model/posenc/ramp.rs, its `mod` line and its registry
# line, nothing else) and runs the library's tests that take every registered encoding or form —
# the registry's and posenc's, the seq2seq model's and decoding's (each form trained a step on the
# CPU and the GPU, decoded step by step), `bench train`'s variants — with it among them.
#   bash tests/tools/throwaway_encoding.sh     (CI runs it; CARGO_TARGET_DIR is shared)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
git ls-files -z | xargs -0 cp --parents -t "$copy"
cp tests/tools/throwaway_encoding.rs "$copy/src/model/posenc/ramp.rs"
cd "$copy"
sed -i 's/^mod none;$/mod none;\nmod ramp;/' src/model/posenc/mod.rs
sed -i 's|^    Alibi = "alibi" => alibi::Alibi,$|&\n    Ramp = "ramp" => super::ramp::Ramp,|' src/model/posenc/registry.rs
echo "the tree's changes besides the new file:"
diff "$root/src/model/posenc/mod.rs" src/model/posenc/mod.rs || true
diff "$root/src/model/posenc/registry.rs" src/model/posenc/registry.rs || true
[ "$(grep -c 'Ramp = "ramp"' src/model/posenc/registry.rs)" = 1 ] || { echo "the registry line was not added" >&2; exit 1; }
cargo test --lib --quiet -- posenc:: model::seq2seq:: inference::decode_tests bench:: 2>&1 | tail -5
