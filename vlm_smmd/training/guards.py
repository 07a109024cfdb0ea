"""Guards of a training run: it stops at the first non-finite loss, gradient or weight (`DivergenceGuard`),
no non-finite weights are saved (`check_finite_weights`), one run at a time writes an output folder
(`output_lock`), and one at a time renders a data_root (`waiting_lock`: the others wait for it)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

import torch
from transformers import TrainerCallback

LOCK_FILE = ".lock"


class DivergedError(ValueError):
    """Training produced a non-finite loss, gradient or weight; nothing of it was saved."""


class OutputLockedError(ValueError):
    """Another run is writing the output folder."""


def _local(p: torch.Tensor) -> torch.Tensor:
    """This rank's values of a parameter: its ZeRO-3 partition (`ds_tensor`), else the parameter."""
    return getattr(p, "ds_tensor", p).detach()


def finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """0-dim bool on the tensors' device, without a host sync: whether every value is finite. One foreach
    L2 norm per device and dtype (the norm clipping uses); a norm that overflows (values beyond about
    1e19) counts as non-finite too: such weights are as diverged as an inf."""
    if not tensors:
        return torch.tensor(True)
    return torch.isfinite(torch.nn.utils.get_total_norm(tensors, 2.0))


def _all_ranks(flags: torch.Tensor) -> list[int]:
    """`flags` (0/1 ints) AND-ed over data-parallel ranks, on the host: the one sync."""
    if torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MIN)
    return flags.tolist()


def nonfinite_weights(model) -> list[str]:
    """Names of the parameters of `model` (this rank's ZeRO-3 partitions) holding a non-finite value."""
    named = [(name, _local(p)) for name, p in model.named_parameters()]
    if bool(finite([t for _, t in named if t.numel()])):
        return []
    return [name for name, t in named if t.numel() and not bool(torch.isfinite(t).all())]


def check_finite_weights(model, where) -> None:
    """DivergedError unless every weight of `model` is finite (on every rank: call it on all of them)."""
    ok = finite([t for p in model.parameters() if (t := _local(p)).numel()])
    if _all_ranks(ok.to(torch.int32).reshape(1))[0]:
        return
    bad = nonfinite_weights(model)
    example = f" (e.g. {bad[0]})" if bad else " (on another rank)"
    raise DivergedError(f"not saving the model to {where}: {len(bad)} weight tensors hold non-finite values{example}; "
                        "the training run diverged")


class DivergenceGuard(TrainerCallback):
    """Stops training at the optimizer step whose loss is not finite or after which a trainable weight is
    not finite (a non-finite gradient makes the update so, and so does too large a learning rate), with a
    DivergedError naming the step (the recipe adds the last good checkpoint). It raises before the
    Trainer logs or saves that step, so no checkpoint holds non-finite weights.

    The loss is watched through a forward hook on the objective (training forwards only: those with
    autograd on); the per-step cost is one foreach norm over the trainable weights and one host sync
    (a 0/1 flag per check, AND-ed over ranks). Under fp16 the grad scaler skips a step whose gradient
    overflowed, the weights stay finite and training goes on, as it should."""

    def __init__(self, objective: torch.nn.Module):
        self._loss_ok: torch.Tensor | None = None
        self._params: list[torch.nn.Parameter] = []
        objective.register_forward_hook(self._watch_loss)

    def _watch_loss(self, module, args, output) -> None:
        if not torch.is_grad_enabled():  # evaluation
            return
        ok = torch.isfinite(output["loss"].detach()).all()
        self._loss_ok = ok if self._loss_ok is None else self._loss_ok & ok

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._loss_ok = None

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        weights = finite([t for p in self._params if (t := _local(p)).numel()])
        loss = weights if self._loss_ok is None else self._loss_ok.to(weights.device)  # None: no training forward
        self._loss_ok = None
        loss_ok, weights_ok = _all_ranks(torch.stack([loss, weights]).to(torch.int32))
        if loss_ok and weights_ok:
            return
        step = state.global_step + 1  # the Trainer counts the step once it is done
        groups = getattr(optimizer, "param_groups", None)
        lr = f" (learning_rate {groups[0]['lr']:g})" if groups and isinstance(groups[0].get("lr"), float) else ""
        if not loss_ok:
            what = "the loss is not finite"
        else:
            grads = [p.grad for p in self._params if p.grad is not None and p.grad.numel()]
            cause = "a non-finite gradient" if grads and not bool(finite(grads)) else "the update"
            what = f"{cause} made weights non-finite"
        raise DivergedError(f"training diverged at step {step}: {what}{lr}; stopped before logging or saving "
                            "that step")


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "a process that has not written its pid yet"


def _lock_file(path: Path, busy) -> int:
    """Open `path` (created if missing) and hold an exclusive `flock` on it; `busy(fd)` is called when another
    process holds it, and either raises or blocks until it has the lock. Returns the locked descriptor, the
    file rewritten to "pid N on HOST"."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            busy(fd)
        try:  # locked; but its previous holder may have removed the file in between: then lock the new one
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    return fd


@contextlib.contextmanager
def output_lock(folder, *, take: bool = True):
    """Hold an exclusive lock on `folder` (created if missing) for the body: `flock` on folder/.lock, which
    holds "pid N on HOST". A second holder gets an OutputLockedError naming the first. The kernel drops
    the lock when its process dies, so the file a killed run leaves blocks nobody; a clean exit removes
    it, and the folders made for it if they are left empty. `take=False` (the other ranks of a run)
    holds nothing."""
    if not take:
        yield
        return
    folder = Path(folder)
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE

    def refuse(fd):
        os.close(fd)
        raise OutputLockedError(f"{folder} is being written by another run ({_holder(path)}); wait for it to "
                                "end or choose another output_dir") from None

    fd = _lock_file(path, refuse)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still locked: a waiter that opened this file then sees it gone and retries
        os.close(fd)
        with contextlib.suppress(OSError):  # the folders made for the lock, if the run wrote nothing there
            for made in created:
                made.rmdir()


@contextlib.contextmanager
def waiting_lock(path, what: str):
    """Hold an exclusive `flock` on the file `path` (created, with its folder, if missing) for the body,
    waiting for a holder to finish first: then prints once "waiting for pid N, which is WHAT". The file
    holds "pid N on HOST" and is removed on exit while still locked (a waiter that opened it then sees it
    gone and locks the new one, as in `output_lock`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    told = []

    def wait(fd):
        if not told:
            holder = _holder(path)  # "pid N on HOST", or said plainly when not written yet
            who = f"pid {holder.removeprefix('pid ').split(' on ')[0]}" if holder.startswith("pid ") else holder
            print(f"waiting for {who}, which is {what}", flush=True)
            told.append(True)
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the holder ends (or dies: the kernel drops it)

    fd = _lock_file(path, wait)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)
