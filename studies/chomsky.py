#!/usr/bin/env python3
"""Writes studies/chomsky_<task>.toml, one study per Chomsky-hierarchy task, from the settings
below, so that every file shares one protocol and states the same differences from the papers'.
The settings were fixed before any of these studies ran (issue 41); change them here, not in the
files, and say so in the README.

    python3 studies/chomsky.py          (rewrites the files; run from anywhere)
"""

import re
import textwrap
from pathlib import Path

STUDIES = Path(__file__).resolve().parent

# Ruoss et al.'s L: randomized positions are drawn from 0..2048.
RANGE = 2048
# Input lengths 1..N in training (one per batch, uniform), as their curriculum with N = 40.
TRAIN_MAX_LEN = 10
# Evaluation input lengths: five within training, then up to 10x N (their tests reach 12.5x).
EVAL_LENGTHS = [2, 4, 6, 8, 10, 15, 20, 30, 40, 60, 80, 100]
# The band every past-training claim reads: 2-4x the training length.
PAST = "21-40"
TRAINED = "1-10"

# Each task: its level, its answer classes, its steps (batch 32; chosen from one sinusoidal run per
# task before fixing them, 2026-11-28: even_pairs 99.0% on the training lengths after 1,000 steps,
# cycle_navigation 97.9%, bucket_sort 99.8%, stack_manipulation 82.3% (93.0% after 3,000),
# duplicate_string 74.0%, reverse_string 76.5% (90.9% / 85.2% after 2,500 / 3,000);
# parity_check 56-78% (52.6% after 3,000), modular_arithmetic 51.0%, odds_first 67.8% (81.9%
# after 3,000), binary_addition 68.2%, missing_duplicate_string 73.4% after 1,000 steps: not run,
# no budget here learns them), whether its variants are split over two
# files to keep each near 90 minutes on 2 cores (`split`: ALiBi and T5 in chomsky_<task>_relative.toml), its evaluation batches per length
# (a task with one answer symbol per example scores 32 tokens a batch, so it takes more batches), whether
# Delétang et al. report a standard Transformer solving it (>= 90% past training), their best
# standard Transformer score (their Table 2, the max over 5 encodings, 10 seeds and 3 learning rates;
# None where our notes have no number), whether it also runs learned and TUPE-A, and whether its
# claims rest on every length (`every_length`: EVERY_LENGTH's evaluation, fixed 2026-12-07 before
# its runs; bucket_sort's re-run is studies/pending/chomsky_bucket_sort.toml until it is done).

# The evaluation a claim about a band needs: every input length 2-100, 512 sequences each at the
# final evaluation (the papers' count: 16 batches of 32), one batch each during training.
EVERY_LENGTH = dict(eval_lengths=list(range(2, 101)), eval_batches=1, final_eval_batches=16)
EVERY_LENGTH_TEXT = (
    "Its evaluation (fixed 2026-12-07, before its runs): every input length 2-100, so that each "
    "band holds every length in it, with 512 sequences per length at the final evaluation (the "
    "papers' count; 32 per length at the evaluations during training)."
)
TASKS = {
    "even_pairs": dict(level="regular", classes=2, steps=1500, eval_batches=8, solved=True, published=None, tables=True, every_length=True),
    "cycle_navigation": dict(level="regular", classes=5, steps=1500, eval_batches=8, solved=False, published=None, tables=False),
    "stack_manipulation": dict(level="deterministic context-free", classes=3, steps=4000, split=True, eval_batches=2, solved=False, published=57.5, tables=False),
    "reverse_string": dict(level="deterministic context-free", classes=2, steps=4000, split=True, eval_batches=2, solved=False, published=62.3, tables=False),
    "bucket_sort": dict(level="context-sensitive", classes=5, steps=1500, eval_batches=2, solved=True, published=None, tables=True),
    "duplicate_string": dict(level="context-sensitive", classes=2, steps=4000, split=True, eval_batches=2, solved=False, published=52.8, tables=False),
}

# FLOATER's solve is cached as its authors' code caches it (`update_flow_every`, 400 of their
# updates): here every 100 steps, for the standard and the randomized variant alike.
FLOATER = '{ type = "floater", resolve_every = 100 }'

# (name, label, posenc) of each standard encoding; each but "none" also runs randomized.
ENCODINGS = [
    ("sinusoidal", "sinusoidal", '{ type = "sinusoidal" }'),
    ("rope", "RoPE", '{ type = "rope" }'),
    ("alibi", "ALiBi", '{ type = "alibi", left_offset = 0.5 }'),
    ("relative", "T5 relative", '{ type = "relative" }'),
    ("floater", "FLOATER", FLOATER),
]
TABLES = [
    ("learned", "learned table", '{ type = "learned" }'),
    ("tupe_a", "TUPE-A", '{ type = "tupe_a", untie_cls = false }'),
]

HEADER = [
    "{task} ({level}), one of Delétang et al.'s Chomsky-hierarchy tasks, as Ruoss et al. "
    "(\"Randomized Positional Encodings Boost Length Generalization of Transformers\", ACL 2023) "
    "run it: each encoding standard and randomized (a sorted sample of distinct positions of "
    "0..{range}, drawn per batch and again at evaluation), trained on inputs of 1-{n} symbols, "
    "evaluated up to {top}. Written by studies/chomsky.py; settings fixed before running.",
    "Claims: Ruoss et al.'s (each randomized encoding beats its standard version past the "
    "training length; randomized RoPE beats randomized ALiBi), Delétang et al.'s "
    "({solved_text}), and new ones (FLOATER against the sinusoidal table and RoPE, standard and "
    "randomized{tupe_text}). Past the training length means the band {past} (2-4x), read at the "
    "final evaluation; every claim is a one-sided test at the 95% level, replicated on fresh "
    "seeds (--replicate).",
    "The model is theirs as far as posflow sets it (docs/fidelity.md §5): 5 post-LN layers, "
    "d 64, 8 heads, FFN 256 with ReLU, dropout 0.1, attention projections without biases, "
    "embeddings x √d, Adam at a constant 1e-3 with gradients clipped at 1. {protocol} One "
    "learning rate (Delétang et al. take the best of three) and 5 seeds (+5 fresh) whose mean we "
    "report (they report the best of 10); one draw of positions per batch shared by every layer "
    "(their RoPE draws per layer, their relative encodings draw distances); T5's bucketed bias "
    "where they have Transformer-XL's; FLOATER's flow re-solved every 100 steps (its authors' "
    "code: every 400 updates).",
]
CPU_PROTOCOL = (
    "How this differs from their protocol, to fit a 2-core CPU: {steps} steps of batch 32 "
    "(Delétang et al.: 1,000,000 of 128; Ruoss et al.'s demonstration script: 10,000), training lengths 1-{n} (theirs 1-40), "
    "test lengths to {top} (theirs 41-500)."
)
GPU_PROTOCOL = (
    "This file is for a lent GPU: batch 128 (10,000 steps, the length of Ruoss et al.'s demonstration script; Delétang et al. train 1,000,000), training lengths 1-40 and test "
    "lengths to 500. What still differs:"
)


# The relative encodings, in a file of their own when a task is split (with randomized RoPE, which
# a claim compares with randomized ALiBi).
RELATIVE = {"alibi", "alibi_rand", "relative", "relative_rand"}


def variants(tables, part=None):
    """Every variant of a task, or of one part of a split task ("main" or "relative")."""
    out = [("none", "no position encoding", '{ type = "none" }', False)]
    for name, label, posenc in ENCODINGS + (TABLES if tables else []):
        out.append((name, label, posenc, False))
        out.append((f"{name}_rand", f"{label}, randomized", posenc, True))
    if part == "main":
        out = [v for v in out if v[0] not in RELATIVE]
    elif part == "relative":
        out = [v for v in out if v[0] in RELATIVE | {"rope_rand"}]
    return out


def claims(task, spec):
    out = []

    def claim(name, text, kind, **fields):
        out.append((name, text, kind, fields))

    claim(
        "sinusoidal_learns",
        f"the sinusoidal model learns the training lengths: accuracy above 90% on {TRAINED}",
        "bound", metric="accuracy", bin=TRAINED, variant="sinusoidal", bound=0.9, beats=True,
    )
    encodings = [e for e in ENCODINGS] + (TABLES if spec["tables"] else [])
    for name, label, _ in encodings:
        claim(
            f"{name}_randomized_beats_standard",
            f"Ruoss et al.: randomized {label} > {label} in accuracy past the training length ({PAST})",
            "order", metric="accuracy", bin=PAST, order=[f"{name}_rand", name],
        )
    claim(
        "randomizing_helps_on_average",
        f"Ruoss et al.: randomized > standard in accuracy past the training length ({PAST}), on average "
        "over the encodings (their +12.0% over 15 tasks)",
        "gain", metric="accuracy", bin=PAST, pairs=[[f"{name}_rand", name] for name, _, _ in encodings],
    )
    claim(
        "rope_rand_beats_alibi_rand",
        f"Ruoss et al.: randomized RoPE > randomized ALiBi in accuracy past the training length ({PAST})",
        "order", metric="accuracy", bin=PAST, order=["rope_rand", "alibi_rand"],
    )
    for name, label, _ in [("none", "no encoding", None)] + ENCODINGS[:4]:
        if spec["solved"]:
            text = f"Delétang et al.: a standard Transformer solves {task}: {label} above 90% past the training length ({PAST})"
        else:
            text = f"Delétang et al.: a standard Transformer does not solve {task}: {label} below 90% past the training length ({PAST})"
        claim(
            f"{name}_{'solves' if spec['solved'] else 'does_not_solve'}",
            text, "bound", metric="accuracy", bin=PAST, variant=name, bound=0.9, beats=spec["solved"],
        )
    for suffix, how in [("", ""), ("_rand", "randomized ")]:
        for other, label in [("sinusoidal", "sinusoidal"), ("rope", "RoPE")]:
            claim(
                f"floater{suffix}_beats_{other}{suffix}",
                f"new: {how}FLOATER > {how}{label} in accuracy past the training length ({PAST})",
                "order", metric="accuracy", bin=PAST, order=[f"floater{suffix}", f"{other}{suffix}"],
            )
        if spec["tables"]:
            claim(
                f"tupe_a{suffix}_beats_learned{suffix}",
                f"new: {how}TUPE-A > {how}learned table in accuracy past the training length ({PAST})",
                "order", metric="accuracy", bin=PAST, order=[f"tupe_a{suffix}", f"learned{suffix}"],
            )
    return out


def value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    return repr(v)


# The GPU-sized study (a lent GPU): the paper's steps, batch, training and test lengths, on one
# task. Its band 2-4x past training is 81-160.
GPU = dict(
    task="reverse_string", steps=10_000, batch=128, train_max_len=40, past="81-160", trained="1-40",
    eval_lengths=[5, 10, 20, 30, 40, 60, 80, 120, 160, 250, 320, 500], eval_batches=2,
)


def study(task, spec, gpu=None, part=None):
    global TRAIN_MAX_LEN, EVAL_LENGTHS, PAST, TRAINED
    steps = spec["steps"]
    batch = 32
    name = f"chomsky_{task}" + ("_relative" if part == "relative" else "")
    if gpu:
        steps, batch, name = gpu["steps"], gpu["batch"], "chomsky_gpu"
        TRAIN_MAX_LEN, EVAL_LENGTHS, PAST, TRAINED = (
            gpu["train_max_len"], gpu["eval_lengths"], gpu["past"], gpu["trained"])
        spec = dict(spec, eval_batches=gpu["eval_batches"])
    fields = dict(
        task=task, level=spec["level"], range=RANGE, n=TRAIN_MAX_LEN, top=EVAL_LENGTHS[-1],
        steps=f"{steps:,}", past=PAST,
        solved_text="a standard Transformer solves it" if spec["solved"] else "no standard Transformer solves it",
        tupe_text="; TUPE-A against the learned table" if spec["tables"] else "",
    )
    fields["protocol"] = (GPU_PROTOCOL if gpu else CPU_PROTOCOL).format(**fields)
    every = spec.get("every_length") and not gpu
    lines = []
    for paragraph in HEADER + ([EVERY_LENGTH_TEXT] if every else []):
        if lines:
            lines.append("#")
        lines += textwrap.wrap(paragraph.format(**fields), 96, initial_indent="# ", subsequent_indent="# ")
    lines.append("")
    lines += [
        "[study]",
        f'name = "{name}"',
        f'description = "{task} ({spec["level"]}): does randomizing positions (Ruoss et al.) help each encoding past the training length, FLOATER included?"',
        "seeds = [0, 1, 2, 3, 4]",
        "",
        "[base.data]",
        'task = "chomsky"',
        f'name = "{task}"',
        f"train_max_len = {TRAIN_MAX_LEN}",
        "",
        "[base.model]",
        "d_model = 64",
        "heads = 8",
        "layers = 5",
        "ffn = 256",
        f"max_len = {RANGE}",
        'norm = "post"',
        "embedding_norm = false",
        "attention_biases = false",
        'activation = "relu"',
        "dropout = 0.1",
        'embed_scale = "sqrt_d"',
        f'kind = {{ type = "token_classifier", n_classes = {spec["classes"]} }}',
        'posenc = { type = "sinusoidal" }',
        "",
        "[base.train]",
        f"steps = {steps}",
        f"batch = {batch}",
        "lr = 1e-3",
        'decay = "constant"',
        "weight_decay = 0.0",
        "clip_grad_norm = 1.0",
        f"eval_every = {steps // 3}",
        f"eval_lengths = {value(EVERY_LENGTH['eval_lengths'] if every else EVAL_LENGTHS)}",
        f"eval_batches = {EVERY_LENGTH['eval_batches'] if every else spec['eval_batches']}",
    ] + ([f"final_eval_batches = {EVERY_LENGTH['final_eval_batches']}"] if every else [])
    chosen = variants(spec["tables"], part)
    names = {v[0] for v in chosen}
    if part == "main":
        variants_text = "the relative encodings' variants (ALiBi, T5) are in chomsky_" + task + "_relative.toml."
    elif part == "relative":
        variants_text = "this file has the relative encodings (ALiBi, T5) and randomized RoPE; the others are in chomsky_" + task + ".toml."
    else:
        variants_text = None
    if variants_text:
        lines.insert(lines.index("") , "#")
        lines.insert(lines.index(""), "# Split over two files to keep each near 90 minutes on 2 cores: " + variants_text)
    for name, label, posenc, randomized in chosen:
        lines += variant_lines(name, label, None if name == "sinusoidal" else posenc, randomized)
    for name, text, kind, fields in claims(task, spec):
        if kind == "gain":
            # A split task's files each average over their own encodings.
            fields = dict(fields, pairs=[p for p in fields["pairs"] if set(p) <= names])
            if not fields["pairs"]:
                continue
            if part:
                text = text.replace("over the encodings", "over this file's encodings")
        named = fields.get("order") or fields.get("variant") and [fields["variant"]] or [
            v for pair in fields["pairs"] for v in pair]
        if not set(named) <= names:
            continue
        lines += claim_lines(name, text, kind, fields)
    return "\n".join(lines) + "\n"


def variant_lines(name, label, posenc, randomized):
    """A [[variant]] table: its encoding (None: the base's) and randomized positions, if any."""
    sets = ([] if posenc is None else [f'"model.posenc" = {posenc}']) + (
        [f'"model.random_positions" = {RANGE}'] if randomized else [])
    return ["", "[[variant]]", f'name = "{name}"', f'label = "{label}"'] + (
        ["set = { " + ", ".join(sets) + " }"] if sets else [])


def claim_lines(name, text, kind, fields):
    """A [[claim]] table."""
    return ["", "[[claim]]", f'name = "{name}"', f'text = "{text}"', f'kind = "{kind}"'] + [
        f"{k} = {value(v)}" for k, v in fields.items()]


# Randomized FLOATER with its flow in its authors' range of t: positions 0..RANGE at this delta span
# t = 0..2.55, the 255 positions x 0.01 their code solves. chomsky_floater_horizon.toml (bucket
# sort, written by hand) tried it first; these files, fixed 2026-12-01 after it and before they
# ran, ask it of every other task.
# 0.01 * 255 / 2048 exactly, as the bucket-sort file writes it (Python's product rounds to ...0001).
HORIZON_DELTA = "0.0012451171875"
assert abs(float(HORIZON_DELTA) - 0.01 * 255 / RANGE) < 1e-18
HORIZON_HEADER = [
    "Randomized FLOATER with its flow in its authors' range of t, on {task} ({level}). "
    "chomsky_floater_horizon.toml showed on bucket sort that randomized FLOATER learns nothing at "
    "its authors' delta 0.01, where positions up to {last} solve its flow to t = {far_t}, and learns "
    "and generalizes as the randomized sinusoidal table does at delta = 0.01 * 255/{range} = "
    "{delta}, which keeps positions 0..{range} within their t = 0..2.55. This file asks the same of "
    "{task}. Written by studies/chomsky.py; settings fixed before running.",
    "The model and protocol are chomsky_{task}.toml's (its header says how they differ from the "
    "papers'), and its first four variants repeat that file's runs (the same configs and seeds): "
    "`bash studies/restore.sh --from chomsky_{task} chomsky_{task}_floater_horizon VARIANT...` "
    "takes those this binary repeats bit for bit, and posflow study checks each config again. "
    "Claims: the new FLOATER learns the training lengths; it beats randomized FLOATER at delta 0.01 "
    "and standard FLOATER (Ruoss et al. for FLOATER), and the randomized sinusoidal table and "
    "RoPE (new), past the training length ({past}); each a one-sided test at the 95% level, read at "
    "the final evaluation, replicated on fresh seeds (--replicate).",
]


# A horizon study whose task's own study was run again with EVERY_LENGTH's evaluation keeps the
# evaluation both had when it ran.
HORIZON_RERUN_TEXT = (
    "chomsky_{task}.toml has since been run again with every input length 2-100 evaluated (its "
    "evaluation alone changed); this file keeps the evaluation both had when it ran, so its runs "
    "are no longer that file's."
)


def horizon_study(task, spec):
    """chomsky_<task>_floater_horizon.toml: the task's base, the randomized variants the claims
    compare with, and randomized FLOATER at HORIZON_DELTA."""
    base = study(task, dict(spec, every_length=False), part="main" if spec.get("split") else None)
    base = base[base.index("[study]"):base.index("[[variant]]")].rstrip() + "\n"
    base = base.replace(f'name = "chomsky_{task}"', f'name = "chomsky_{task}_floater_horizon"', 1)
    base = re.sub(
        r'description = "[^"]*"',
        f'description = "{task}: does randomized FLOATER learn and generalize once its flow is solved '
        "over its authors' range of t (delta 0.01 * 255/2048) rather than to t = 20.47?\"",
        base, count=1,
    )
    fields = dict(task=task, level=spec["level"], range=RANGE, last=RANGE - 1,
                  far_t=f"{(RANGE - 1) * 0.01:.2f}", delta=HORIZON_DELTA, past=PAST)
    lines = []
    rerun = [HORIZON_RERUN_TEXT] if spec.get("every_length") else []
    for paragraph in HORIZON_HEADER + rerun:
        if lines:
            lines.append("#")
        lines += textwrap.wrap(paragraph.format(**fields), 96, initial_indent="# ", subsequent_indent="# ")
    lines += ["", base.rstrip()]
    horizon = f'{{ type = "floater", resolve_every = 100, delta = {HORIZON_DELTA} }}'
    for name, label, posenc, randomized in [
        ("sinusoidal_rand", "sinusoidal, randomized", '{ type = "sinusoidal" }', True),
        ("rope_rand", "RoPE, randomized", '{ type = "rope" }', True),
        ("floater", "FLOATER", FLOATER, False),
        ("floater_rand", "FLOATER, randomized (delta 0.01)", FLOATER, True),
        ("floater_horizon_rand", "FLOATER, randomized (delta 0.01 * 255/2048)", horizon, True),
    ]:
        lines += variant_lines(name, label, posenc, randomized)
    claims_ = [
        ("floater_horizon_rand_learns",
         f"randomized FLOATER with its flow in the authors' range learns the training lengths: accuracy above 90% on {TRAINED}",
         "bound", dict(metric="accuracy", bin=TRAINED, variant="floater_horizon_rand", bound=0.9, beats=True)),
        ("horizon_beats_delta_001",
         f"randomized FLOATER with its flow in the authors' range > randomized FLOATER at delta 0.01, in accuracy past the training length ({PAST})",
         "order", dict(metric="accuracy", bin=PAST, order=["floater_horizon_rand", "floater_rand"])),
        ("horizon_beats_standard",
         f"Ruoss et al. for FLOATER: randomized FLOATER (flow in the authors' range) > FLOATER in accuracy past the training length ({PAST})",
         "order", dict(metric="accuracy", bin=PAST, order=["floater_horizon_rand", "floater"])),
        ("horizon_beats_sinusoidal_rand",
         f"new: randomized FLOATER (flow in the authors' range) > randomized sinusoidal in accuracy past the training length ({PAST})",
         "order", dict(metric="accuracy", bin=PAST, order=["floater_horizon_rand", "sinusoidal_rand"])),
        ("horizon_beats_rope_rand",
         f"new: randomized FLOATER (flow in the authors' range) > randomized RoPE in accuracy past the training length ({PAST})",
         "order", dict(metric="accuracy", bin=PAST, order=["floater_horizon_rand", "rope_rand"])),
    ]
    for name, text, kind, fields_ in claims_:
        lines += claim_lines(name, text, kind, fields_)
    return "\n".join(lines) + "\n"


def main():
    for task, spec in TASKS.items():
        parts = [("main", ""), ("relative", "_relative")] if spec.get("split") else [(None, "")]
        for part, suffix in parts:
            path = STUDIES / f"chomsky_{task}{suffix}.toml"
            path.write_text(study(task, spec, part=part))
            print(f"wrote {path.relative_to(STUDIES.parent)}")
    for task, spec in TASKS.items():
        # Bucket sort's is chomsky_floater_horizon.toml, which ran first.
        if task != "bucket_sort":
            path = STUDIES / f"chomsky_{task}_floater_horizon.toml"
            path.write_text(horizon_study(task, spec))
            print(f"wrote {path.relative_to(STUDIES.parent)}")
    path = STUDIES / "chomsky_gpu.toml"
    path.write_text(study(GPU["task"], TASKS[GPU["task"]], GPU))
    print(f"wrote {path.relative_to(STUDIES.parent)}")


if __name__ == "__main__":
    main()
