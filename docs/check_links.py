"""Checks the repository's documentation links: every relative link and picture in README.md,
DESIGN.md, BENCHMARKS.md and docs/**/*.md names a file that exists (an anchor after `#` is not
checked), and the README and the guide (docs/guide/) link nowhere outside the repository.

    python3 docs/check_links.py        (exit 1 listing every broken link; CI runs it)
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def links(path):
    """(line number, target) of every markdown link outside code blocks."""
    in_code = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line.strip()):
            in_code = not in_code
            continue
        if in_code:
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            yield number, target


def main():
    files = [ROOT / "README.md", ROOT / "DESIGN.md", ROOT / "BENCHMARKS.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    own = [ROOT / "README.md"] + sorted((ROOT / "docs" / "guide").rglob("*.md"))
    broken = []
    for path in files:
        for number, target in links(path):
            where = f"{path.relative_to(ROOT)}:{number}"
            if re.match(r"^[a-z]+:", target):
                if path in own:
                    broken.append(f"{where}: {target} is outside the repository")
                continue
            file = target.split("#", 1)[0]
            if file and not (path.parent / file).exists():
                broken.append(f"{where}: {target} does not exist")
    if broken:
        sys.exit("broken links:\n" + "\n".join(broken))
    print(f"every link of {len(files)} documents resolves")


if __name__ == "__main__":
    main()
