"""`python -m posflow_torch.train` against posflow's own training: the same run config gives the
same losses and parameters as `posflow train` (FLOATER as its authors ran it, 5 steps with warmup
and cosine decay); two gloo processes under torchrun give what one process does; a run resumes
exactly, in the package or in posflow, and posflow evaluates what it wrote."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

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


def test_a_rank_killed_mid_run_resumes_from_the_last_checkpoint_with_nothing_lost(posflow, run_dir):
    """Two ranks, a checkpoint every 10 steps; one rank is killed after the first; the run resumed
    from that checkpoint ends where the uninterrupted run does, and its log reads as one run."""
    (run_dir / "run.toml").write_text(RUN.replace("steps = 5", "steps = 40\neval_every = 10\neval_lengths = [32]"))
    done = torch_train(posflow, run_dir, "--out", "straight.safetensors", "--metrics", "straight.jsonl", processes=2)
    assert done.returncode == 0, done.stderr
    env = dict(os.environ, POSFLOW_BIN=posflow, PYTHONPATH=str(PYTHON_DIR), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "posflow_torch.train",
               "--config", "run.toml", "--out", "killed.safetensors", "--metrics", "killed.jsonl"]
    job = subprocess.Popen(command, cwd=run_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (run_dir / "killed.safetensors").exists() and job.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    ranks = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
    assert job.poll() is None and len(ranks) == 2, "the job ended before its first checkpoint"
    os.kill(int(ranks[1]), signal.SIGKILL)
    assert job.wait(timeout=120) != 0
    saved = json.loads(safe_open_metadata(run_dir / "killed.safetensors")["training"])["step"]
    assert 10 <= saved < 40
    done = torch_train(posflow, run_dir, "--resume", "killed.safetensors", "--out", "killed.safetensors",
                       "--metrics", "killed.jsonl", processes=2)
    assert done.returncode == 0, done.stderr
    assert worst(run_dir / "straight.safetensors", run_dir / "killed.safetensors") == 0.0
    steps = lambda path: [(r["kind"], r["step"]) for r in map(json.loads, open(path))]
    assert steps(run_dir / "killed.jsonl") == steps(run_dir / "straight.jsonl")
    assert losses(run_dir / "killed.jsonl") == losses(run_dir / "straight.jsonl")


def safe_open_metadata(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.metadata()


def test_torchrun_trains_the_shipped_floater_config_and_posflow_evaluates_it(posflow, tmp_path):
    """The README's command: configs/moby_floater.toml (FLOATER as its authors ran it, d 128, 4
    layers) for 2 steps on 2 gloo processes; posflow evaluates what it wrote."""
    config = PYTHON_DIR.parent / "configs" / "moby_floater.toml"
    env = dict(os.environ, POSFLOW_BIN=posflow, PYTHONPATH=str(PYTHON_DIR), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "posflow_torch.train",
               "--config", str(config), "--steps", "2", "--out", "floater.safetensors", "--metrics", "floater.jsonl"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in open(tmp_path / "floater.jsonl")]
    assert [r["step"] for r in records if r["kind"] == "train"] == [0, 1]
    assert {r["bin"] for r in records if r["kind"] == "eval"} == {"33-64", "65-128", "129-256", "257-512"}
    done = posflow_run(posflow, tmp_path, "eval", "--checkpoint", "floater.safetensors", "--lengths", "64",
                       "--batches", "1")
    assert done.returncode == 0 and "at step 2" in done.stdout, done.stderr
