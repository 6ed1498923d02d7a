"""`python -m posflow_torch.train` against posflow's own training: the same run config gives the
same losses and parameters as `posflow train` (FLOATER as its authors ran it, 5 steps with warmup
and cosine decay); two gloo processes under torchrun give what one process does; a run resumes
exactly, in the package or in posflow, and posflow evaluates what it wrote."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from safetensors.torch import load_file

PYTHON_DIR = pathlib.Path(__file__).resolve().parents[1]

RUN = """
[data]
task = "moby_dick"
seq_len = 32

[model]
d_model = 16
heads = 2
layers = 2
ffn = 32
max_len = 32
kind = { type = "causal_lm" }
posenc = { type = "floater" }

[train]
steps = 5
batch = 4
lr = 1e-2
warmup = 2
checkpoint = "run.safetensors"
metrics = "run.jsonl"
"""


def torch_train(posflow, cwd, *args, processes=1):
    """Runs the package's trainer in `cwd` (under torchrun for several processes); its output."""
    module = ["-m", "posflow_torch.train", "--config", "run.toml", *args]
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), *module]
    else:
        command = [sys.executable, *module]
    env = dict(os.environ, POSFLOW_BIN=posflow, PYTHONPATH=str(PYTHON_DIR), OMP_NUM_THREADS="1")
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)


def posflow_run(posflow, cwd, *args):
    return subprocess.run([posflow, *args, "--device", "cpu"], cwd=cwd, capture_output=True, text=True)


def worst(a, b):
    """The largest |a − b| over the tensors of two checkpoints, which must hold the same names."""
    a, b = load_file(str(a)), load_file(str(b))
    assert set(a) == set(b), set(a) ^ set(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if json.loads(line)["kind"] == "train"]


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "run.toml").write_text(RUN)
    return tmp_path


def test_a_torch_run_is_posflows_run(posflow, run_dir):
    done = posflow_run(posflow, run_dir, "train", "--config", "run.toml", "--out", "posflow.safetensors",
                       "--metrics", "posflow.jsonl", "--sample-chars", "0")
    assert done.returncode == 0, done.stderr
    done = torch_train(posflow, run_dir, "--out", "torch.safetensors", "--metrics", "torch.jsonl")
    assert done.returncode == 0, done.stderr
    assert losses(run_dir / "torch.jsonl") == pytest.approx(losses(run_dir / "posflow.jsonl"), rel=1e-5)
    # Parameters and AdamW's moments after 5 steps (measured: 2e-6).
    assert worst(run_dir / "torch.safetensors", run_dir / "posflow.safetensors") < 1e-5


def test_two_gloo_processes_train_what_one_does(posflow, run_dir):
    done = torch_train(posflow, run_dir, "--out", "one.safetensors", "--metrics", "one.jsonl")
    assert done.returncode == 0, done.stderr
    done = torch_train(posflow, run_dir, "--out", "two.safetensors", "--metrics", "two.jsonl", processes=2)
    assert done.returncode == 0, done.stderr
    assert "on 2 process(es)" in done.stdout
    assert worst(run_dir / "one.safetensors", run_dir / "two.safetensors") <= 1e-6


def test_a_run_resumes_exactly_here_and_in_posflow(posflow, run_dir):
    for args in (["--out", "five.safetensors"], ["--steps", "3", "--out", "three.safetensors"],
                 ["--resume", "three.safetensors", "--out", "resumed.safetensors"]):
        done = torch_train(posflow, run_dir, *args)
        assert done.returncode == 0, done.stderr
    assert worst(run_dir / "five.safetensors", run_dir / "resumed.safetensors") == 0.0
    # posflow continues the package's checkpoint, and evaluates it.
    done = posflow_run(posflow, run_dir, "train", "--config", "run.toml", "--resume", "three.safetensors",
                       "--out", "posflow_resumed.safetensors", "--sample-chars", "0")
    assert done.returncode == 0, done.stderr
    assert worst(run_dir / "five.safetensors", run_dir / "posflow_resumed.safetensors") < 1e-5
    done = posflow_run(posflow, run_dir, "eval", "--checkpoint", "five.safetensors", "--lengths", "32")
    assert done.returncode == 0 and "1-32" in done.stdout, done.stderr


def test_what_cannot_train_is_refused_with_the_reason(posflow, run_dir):
    done = torch_train(posflow, run_dir, "--steps", "2", "--out", "two.safetensors")
    assert done.returncode == 0, done.stderr
    done = torch_train(posflow, run_dir, "--steps", "2", "--resume", "two.safetensors")
    assert done.returncode != 0 and "nothing to train up to step 2" in done.stderr
    # The prepared initial checkpoint has no optimizer state to resume.
    done = torch_train(posflow, run_dir, "--resume", "two.safetensors.prepared/init.safetensors")
    assert done.returncode != 0 and "holds no optimizer state" in done.stderr
    (run_dir / "run.toml").write_text(RUN.replace('{ type = "floater" }', '{ type = "floater", resolve_every = 2 }'))
    done = torch_train(posflow, run_dir, "--out", "cached.safetensors")
    assert done.returncode != 0 and "resolve_every > 1" in done.stderr
