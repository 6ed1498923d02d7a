#!/usr/bin/env python3
"""Prints the run config of one published study run as TOML, with settings replaced, for
`posflow train --config`: the exact model and data a study trained, to profile or time.

    python3 benches/study_run_config.py STUDY VARIANT [--seed N] [KEY=JSON ...]

KEY is dotted (`train.steps=30`, `train.eval_lengths=[500]`); JSON null removes the setting.
The run's checkpoint and metrics paths are left out (`posflow train --out` names them), and its
vocabulary where the data set it.
"""

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items() if v is not None) + " }"
    raise ValueError(f"no TOML for {value!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study")
    parser.add_argument("variant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("settings", nargs="*", metavar="KEY=JSON")
    args = parser.parse_args()
    runs = ROOT / "docs" / "studies" / args.study / "runs.jsonl.gz"
    if not runs.is_file():
        sys.exit(f"no published runs for study `{args.study}` ({runs})")
    with gzip.open(runs, "rt") as f:
        found = [r for r in map(json.loads, f) if r["variant"] == args.variant and r["seed"] == args.seed]
    if not found:
        sys.exit(f"{args.study} has no run of variant `{args.variant}` with seed {args.seed}")
    run = found[0]["run"]
    for key in ("checkpoint", "metrics"):
        run["train"].pop(key, None)
    # Written 0 where the data set it.
    if run["model"].get("vocab") == 0:
        del run["model"]["vocab"]
    for setting in args.settings:
        key, _, value = setting.partition("=")
        *path, last = key.split(".")
        table = run
        for part in path:
            table = table.setdefault(part, {})
        parsed = json.loads(value)
        if parsed is None:
            table.pop(last, None)
        else:
            table[last] = parsed
    print(f"# {args.study}, variant {args.variant}, seed {args.seed}, from its published run")
    for section, values in run.items():
        print(f"\n[{section}]")
        for k, v in values.items():
            if v is not None:
                print(f"{k} = {toml_value(v)}")


if __name__ == "__main__":
    main()
