"""Training a posflow run config in PyTorch: in one process, or under torchrun with
DistributedDataParallel (gloo on CPUs, NCCL on GPUs), each rank its own rows of every batch.

    python -m posflow_torch.train --config configs/moby_floater.toml
    torchrun --nproc_per_node 2 -m posflow_torch.train --config configs/moby_floater.toml --steps 5

posflow itself supplies what the run starts from and trains on (`posflow prepare`): the initial
parameters from the run's seed, the tokenizer, and every step's batch as its own trainer draws it
(a randomized model's positions included), so the data, tokenizers and masking are posflow's.
The step is posflow's: the loss is the mean cross-entropy over the whole batch's counted targets
(each rank's share scaled so that DDP's average of gradients is exactly that mean's), the global
gradient norm clipped to `clip_grad_norm`, AdamW with weight decay on matrices only and posflow's
learning-rate schedule; a step whose gradient is not finite updates nothing. The result is a
posflow checkpoint (parameters and AdamW's moments under posflow's names, the run config in its
training state) and posflow's metrics log: `posflow eval`, `posflow viz`, the browser demo and
`posflow train --resume` read them, and `--resume` here continues one.

Dropout uses PyTorch's generator at posflow's sites, so a run with dropout matches posflow's in
distribution, not mask for mask. FLOATER's `resolve_every > 1` (a cached solve reused between
solves) is not here: the flow is solved at every step.
"""

import argparse
import faulthandler
import json
import math
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import tomllib

import torch
import torch.distributed as dist
from safetensors.torch import load_file

from .checkpoint import IGNORE_INDEX, Checkpoint, load_checkpoint, save_checkpoint
from .model import PosflowModel


class RunError(ValueError):
    """A run that cannot train here; the message says why."""


def posflow_binary():
    """The posflow binary: POSFLOW_BIN, else `posflow` on PATH."""
    found = os.environ.get("POSFLOW_BIN") or shutil.which("posflow")
    if not found:
        raise RunError("no posflow binary: set POSFLOW_BIN or put posflow on PATH (cargo install --path .)")
    return found


def prepare(config, out, start, steps, data=None):
    """`posflow prepare`: the run's init.safetensors and the batches of steps start..start+steps in `out`."""
    command = [posflow_binary(), "prepare", "--config", str(config), "--out", str(out),
               "--from", str(start), "--steps", str(steps)]
    if data is not None:
        command += ["--data", str(data)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RunError(f"posflow prepare failed: {done.stderr.strip()}")


def evaluate(checkpoint, metrics, data=None):
    """`posflow eval` of `checkpoint` as the run's training evaluates (its eval lengths and
    batches), appended to the metrics log as posflow train writes it."""
    command = [posflow_binary(), "eval", "--checkpoint", str(checkpoint), "--as-in-training", "--metrics", str(metrics)]
    if data is not None:
        command += ["--data", str(data)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RunError(f"posflow eval failed: {done.stderr.strip()}")
    print(done.stdout, end="")


def evaluation_due(train, completed):
    """After `completed` steps, whether posflow's trainer evaluates and saves: every `eval_every`
    steps and after the last."""
    every = train["eval_every"]
    return completed > 0 and ((every > 0 and completed % every == 0) or completed == train["steps"])


def keep_log_until(metrics, step):
    """A resumed run's log as posflow's `--resume` leaves it: the lines an interrupted run wrote
    after its checkpoint at `step` dropped (train records of steps before it, evaluations up to
    it), rewritten through a temporary file, so the log reads as one run."""
    if not metrics.exists():
        return
    kept = []
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        if (record["kind"] == "train" and record["step"] < step) or (record["kind"] == "eval" and record["step"] <= step):
            kept.append(line + "\n")
    tmp = metrics.with_name(metrics.name + ".tmp")
    tmp.write_text("".join(kept))
    os.replace(tmp, metrics)


def learning_rate(train, step):
    """posflow's schedule (src/train/schedule.rs): linear warmup to `lr`, then constant, linear or
    cosine decay to `final_lr_fraction` of it at the last step."""
    peak, warmup, total = train["lr"], train["warmup"], train["steps"]
    if step < warmup:
        return peak * (step + 1) / warmup
    decay_steps = max(max(total - warmup - 1, 0), 1)
    progress = min((step - warmup) / decay_steps, 1.0)
    floor = peak * train["final_lr_fraction"]
    decay = train["decay"]
    if decay == "constant":
        return peak
    if decay == "linear":
        return peak + (floor - peak) * progress
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def adamw_settings(train):
    """posflow's AdamW hyperparameters of a run's [train] as posflow settled it (every key
    present: the run config stored in the checkpoint), src/train/config.rs's `adamw`."""
    clip = train["clip_grad_norm"]
    return {
        "lr": train["lr"],
        "beta1": train["beta1"],
        "beta2": train["beta2"],
        "eps": train["eps"],
        "weight_decay": train["weight_decay"],
        "max_grad_norm": clip if clip > 0 else None,
    }


def optimizer_for(model, train):
    """AdamW over the trainable parameters (`trainable` prefixes, or all), decaying matrices only."""
    prefixes = train.get("trainable") or [""]
    settings = adamw_settings(train)
    decay, other = [], []
    for name, p in model.named_parameters():
        p.requires_grad_(any(name.startswith(prefix) for prefix in prefixes))
        if p.requires_grad:
            (decay if p.dim() >= 2 else other).append(p)
    groups = [{"params": decay, "weight_decay": settings["weight_decay"]}, {"params": other, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=settings["lr"], betas=(settings["beta1"], settings["beta2"]), eps=settings["eps"])


def restore_optimizer(optimizer, model, checkpoint):
    """AdamW's moments and step count from a posflow checkpoint (`optim.adam_m.<name>`, ...)."""
    if checkpoint.optimizer is None:
        raise RunError("the checkpoint holds no optimizer state: it was saved without it, so training cannot resume from it")
    step = json.loads(checkpoint.optimizer)["step"]
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        m, v = (checkpoint.extra_tensors.get(f"optim.adam_{k}.{name}") for k in "mv")
        if m is None or v is None:
            raise RunError(f"the checkpoint has no AdamW moments of {name}")
        optimizer.state[p] = {"step": torch.tensor(float(step)), "exp_avg": m.to(p).clone(), "exp_avg_sq": v.to(p).clone()}


def save_run(path, model, optimizer, checkpoint, step, train):
    """The run as a posflow checkpoint after `step` steps: parameters, AdamW's moments and step
    count, the loaded checkpoint's tokenizer and run config."""
    params = {name: p.detach().cpu() for name, p in model.named_parameters()}
    moments, adam_step = {}, 0
    for name, p in model.named_parameters():
        state = optimizer.state.get(p)
        if state:
            moments[f"optim.adam_m.{name}"] = state["exp_avg"].detach().cpu().float()
            moments[f"optim.adam_v.{name}"] = state["exp_avg_sq"].detach().cpu().float()
            adam_step = int(state["step"])
        elif p.requires_grad or not train.get("trainable"):
            moments[f"optim.adam_m.{name}"] = torch.zeros_like(params[name])
            moments[f"optim.adam_v.{name}"] = torch.zeros_like(params[name])
    optimizer_state = {"algorithm": "adamw", "step": adam_step, "hyperparameters": adamw_settings(train)}
    training = dict(checkpoint.training, step=step)
    training["run"] = dict(training["run"], train=train)
    save_checkpoint(
        Checkpoint(config=model.config, params=params, training=training, tokenizer=checkpoint.tokenizer,
                   extra_tensors=moments, optimizer=json.dumps(optimizer_state)),
        path,
    )


def batch_inputs(batches, step, rank, world, device):
    """Step `step`'s model inputs and targets, this rank's rows of them, and the whole batch's
    number of counted targets."""
    get = lambda name: batches.get(f"{step}/{name}")
    if get("source") is not None:
        names, extra = ["source", "source_mask", "target_in"], []
    else:
        names, extra = ["tokens", "mask"], ([get("positions")] if get("positions") is not None else [])
    targets = get("targets").long()
    rows = targets.shape[0]
    if rows % world:
        raise RunError(f"a batch of {rows} rows does not split evenly over {world} processes")
    share = slice(rank * rows // world, (rank + 1) * rows // world)
    inputs = [None if get(n) is None else get(n).long()[share].to(device) for n in names]
    return inputs + [p.long().to(device) for p in extra], targets[share].to(device), int((targets != IGNORE_INDEX).sum())


def bind_gloo_to_loopback_on_one_machine():
    """Gloo binds to the address the host name resolves to; where that name resolves to nothing
    or to an address the ranks cannot reach (containers, CI sandboxes) a rank hangs or aborts.
    When every rank is on this machine, the loopback interface is the one to use (unless
    GLOO_SOCKET_IFNAME already names one)."""
    if "GLOO_SOCKET_IFNAME" in os.environ or os.environ.get("LOCAL_WORLD_SIZE") != os.environ.get("WORLD_SIZE"):
        return
    names = {name for _, name in socket.if_nameindex()}
    loopback = next((name for name in ("lo", "lo0") if name in names), None)
    if loopback:
        os.environ["GLOO_SOCKET_IFNAME"] = loopback


def train(args):
    # Under torchrun (which sets RANK) the run is distributed even in one process, so that one
    # GPU runs the NCCL path too.
    distributed = "RANK" in os.environ
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    cuda = torch.cuda.is_available() and args.device != "cpu"
    if distributed:
        if not cuda:
            bind_gloo_to_loopback_on_one_machine()
        dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    # Only the output paths come from the TOML; every setting from the run posflow settled.
    paths = tomllib.loads(pathlib.Path(args.config).read_text()).get("train", {})
    out = pathlib.Path(args.out or paths.get("checkpoint") or "runs/torch.safetensors")
    metrics = pathlib.Path(args.metrics or paths.get("metrics") or out.with_suffix(".jsonl"))
    resumed = load_checkpoint(args.resume) if args.resume else None
    start = resumed.training["step"] if resumed else 0
    total = args.steps if args.steps is not None else paths.get("steps", 0)
    if start >= total:
        raise RunError(f"the run is at step {start}; nothing to train up to step {total}")
    work = out.with_name(out.name + ".prepared")
    if rank == 0:
        for path in (out, metrics):
            path.parent.mkdir(parents=True, exist_ok=True)
        if resumed:
            keep_log_until(metrics, start)
        prepare(args.config, work, start, total - start, args.data)
    if distributed:
        dist.barrier()
    checkpoint = resumed or load_checkpoint(work / "init.safetensors")
    # As `posflow train --steps N`: the schedule runs over the steps asked for, and a short run
    # still warms up, over all of its steps at most.
    settled = checkpoint.training["run"]["train"]
    train_settings = dict(settled, steps=total, warmup=min(settled["warmup"], total))
    if checkpoint.config.get("posenc", {}).get("resolve_every", 1) > 1:
        raise RunError("FLOATER's resolve_every > 1 reuses a cached solve between solves: not in posflow_torch; set it to 1")
    model = PosflowModel(checkpoint.config, checkpoint.params).to(device)
    optimizer = optimizer_for(model, train_settings)
    if resumed:
        restore_optimizer(optimizer, model, resumed)
    net = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    batches = load_file(str(work / "batches.safetensors"))
    settings = adamw_settings(train_settings)
    trainable = [p for p in model.parameters() if p.requires_grad]
    log = open(metrics, "a") if rank == 0 else None
    for step in range(start, total):
        began = time.perf_counter()
        inputs, targets, counted = batch_inputs(batches, step, rank, world, device)
        lr = learning_rate(train_settings, step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        logits = net(*inputs)
        summed = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum")
        # DDP averages the ranks' gradients: each rank's sum over the whole batch's count, times the
        # number of ranks, makes that average the gradient of the whole batch's mean.
        (summed * world / counted).backward()
        clip = settings["max_grad_norm"] if settings["max_grad_norm"] is not None else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, clip))
        if math.isfinite(grad_norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss = summed.detach()
        if distributed:
            dist.all_reduce(loss)
        loss = float(loss) / counted
        if log is not None:
            tokens = targets.numel() * world / max(time.perf_counter() - began, 1e-9)
            record = {"kind": "train", "step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm, "tokens_per_s": tokens}
            log.write(json.dumps(record) + "\n")
            log.flush()
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            raise RunError(f"the loss is {loss} at step {step} (gradient norm {grad_norm}); the update was skipped")
        if rank == 0 and evaluation_due(train_settings, step + 1):
            # As posflow's trainer: evaluate and save at every evaluation and at the end. The
            # checkpoint takes its place only after its evaluation is logged, so a run killed in
            # between resumes from the previous one and evaluates again: nothing is lost.
            log.close()
            pending = out.with_name(out.name + ".next")
            save_run(pending, model, optimizer, checkpoint, step + 1, train_settings)
            evaluate(pending, metrics, args.data)
            os.replace(pending, out)
            log = open(metrics, "a")
    if rank == 0:
        print(f"trained steps {start}..{total} on {world} process(es), {device}: loss {loss:.4f}; saved {out}")
    if distributed:
        # Ranks leave together: rank 0 may still be evaluating when the others are done.
        dist.barrier()
        dist.destroy_process_group()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m posflow_torch.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the posflow run config (TOML)")
    parser.add_argument("--steps", type=int, help="train up to this step (default: the config's steps)")
    parser.add_argument("--out", help="the checkpoint to write (default: [train] checkpoint)")
    parser.add_argument("--metrics", help="the metrics log to append to (default: [train] metrics)")
    parser.add_argument("--resume", help="continue from this posflow checkpoint (posflow's or this trainer's)")
    parser.add_argument("--data", help="the text file of a text_file run")
    parser.add_argument("--device", choices=["auto", "cpu"], default="auto", help="cpu, or a GPU when there is one")
    args = parser.parse_args(argv)
    # A rank that dies of a signal (an abort in a library) says where it was.
    faulthandler.enable()
    try:
        train(args)
    except (RunError, ValueError, OSError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
