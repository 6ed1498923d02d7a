"""A study that scales out: the same study file trained by posflow and, with `[study] trainer =
"torchrun"`, by posflow_torch under torchrun (2 gloo processes per run), gives the same numbers at
every evaluation, and posflow writes its report and verdicts from either."""

import json
import os
import pathlib
import subprocess

PYTHON_DIR = pathlib.Path(__file__).resolve().parents[1]

STUDY = """
[study]
name = "scales_out"
seeds = [0, 1]
{trainer}

[base.data]
task = "moby_dick"
seq_len = 32

[base.model]
d_model = 16
heads = 2
layers = 2
ffn = 32
max_len = 64
kind = {{ type = "causal_lm" }}
posenc = {{ type = "rope" }}

[base.train]
steps = 4
batch = 4
lr = 1e-2
warmup = 2
eval_every = 2
eval_lengths = [32, 64]
eval_batches = 2

[[variant]]
name = "floater"
set = {{ "model.posenc" = {{ type = "floater" }} }}

[[variant]]
name = "rope"
set = {{ "model.posenc" = {{ type = "rope" }} }}

[[claim]]
name = "floater_beats_rope"
text = "FLOATER < RoPE in loss at 33-64"
kind = "order"
metric = "loss"
bin = "33-64"
order = ["floater", "rope"]
"""


def study(posflow, directory, trainer):
    path = directory / "study.toml"
    path.write_text(STUDY.format(trainer=trainer))
    env = dict(os.environ, POSFLOW_PYTHON=os.environ.get("POSFLOW_PYTHON", "python3"),
               PYTHONPATH=str(PYTHON_DIR), OMP_NUM_THREADS="1")
    done = subprocess.run([posflow, "study", str(path), "--out", str(directory / "out"), "--device", "cpu"],
                          capture_output=True, text=True, env=env)
    # A failed run's own output is in its torchrun.log, which a CI log shows only from here.
    assert done.returncode == 0, done.stderr + torchrun_logs(directory / "out")
    return directory / "out"


def torchrun_logs(out):
    """The last lines of every run's torchrun.log under `out`."""
    return "".join(f"\n--- {log}:\n" + "\n".join(log.read_text().splitlines()[-40:])
                   for log in sorted(out.glob("runs/*/seed*/torchrun.log")))


def evaluations(out):
    """Every run's evaluation records, by run."""
    values = {}
    for log in sorted(out.glob("runs/*/seed*/metrics.jsonl")):
        records = [json.loads(line) for line in open(log)]
        values[str(log.relative_to(out))] = [(r["step"], r["bin"], r["loss"]) for r in records if r["kind"] == "eval"]
    return values


def test_a_study_trained_under_torchrun_is_the_study_posflow_trains(posflow, tmp_path):
    (tmp_path / "posflow").mkdir()
    (tmp_path / "torch").mkdir()
    ours = study(posflow, tmp_path / "torch", 'trainer = "torchrun"\nprocesses = 2')
    theirs = study(posflow, tmp_path / "posflow", "")
    assert list(ours.glob("runs/*/seed*/torchrun.log")), "the runs went through torchrun"
    a, b = evaluations(ours), evaluations(theirs)
    assert a.keys() == b.keys() and len(a) == 4
    for run, records in a.items():
        assert [r[:2] for r in records] == [r[:2] for r in b[run]], run
        for (_, _, x), (_, _, y) in zip(records, b[run]):
            assert abs(x - y) <= 1e-4 * abs(y), (run, x, y)
    report = (ours / "study.md").read_text()
    assert "floater_beats_rope" in report
