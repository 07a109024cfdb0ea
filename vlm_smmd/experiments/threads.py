"""How many torch threads each training process gets, so that jobs side by side do not oversubscribe the cores.

Torch's intra-op threads spin while they wait for each other: two processes running 2 threads each on 2 cores
slow each other 5-50x, while one thread per process keeps its pace (bench/research_step.py; README
"Several jobs at once"). The plan counts the cores this process may use, subtracts those busy with other work (measured over
half a second from /proc/stat; elsewhere the 1-minute load average, which lags) and shares the rest among
the jobs, at least one thread each. OMP_NUM_THREADS, when set, wins.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadPlan:
    jobs: int
    threads: int  # torch intra-op threads per job
    cores: int
    load: float  # cores busy with other work when planned
    chosen_by: str  # "load" or "OMP_NUM_THREADS"

    def env(self) -> dict[str, str]:
        """Environment for a job's process (torch sizes its pool from OMP_NUM_THREADS at import)."""
        return {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}

    def describe(self) -> str:
        jobs = f"{self.jobs} job{'s' if self.jobs > 1 else ''} x {self.threads} torch thread{'s' if self.threads > 1 else ''}"
        where = f"{self.cores} cores, {self.load:.1f} busy"
        if self.chosen_by != "load":
            line = f"threads: {jobs} (set by {self.chosen_by}; {where})"
        else:
            line = f"threads: {jobs} ({where})"
        if self.jobs * self.threads > max(1, self.cores - round(self.load)):
            line += ("; more threads than free cores: the jobs will slow each other (fewer --jobs, or wait for "
                     "the other work to end)")
        return line

    def record(self) -> dict:
        """The plan as run_config.json and metrics.json keep it."""
        return {"jobs": self.jobs, "threads": self.threads, "cores": self.cores, "busy": round(self.load, 2),
                "chosen_by": self.chosen_by, "line": self.describe()}


def use_thread_plan(jobs: int | None = None) -> ThreadPlan:
    """Plan this process's torch threads (`plan_threads`), set them and print the plan's line (once per
    machine: local rank 0). `jobs` defaults to the processes of this launch on this machine (torchrun's
    LOCAL_WORLD_SIZE, else 1)."""
    import torch

    if jobs is None:
        text = os.environ.get("LOCAL_WORLD_SIZE", "1").strip()
        jobs = int(text) if text.isdigit() and int(text) > 0 else 1
    plan = plan_threads(jobs)
    torch.set_num_threads(plan.threads)
    if os.environ.get("LOCAL_RANK", "0").strip() in ("", "0"):
        print(plan.describe(), flush=True)
    return plan


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat (busy: all but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return sum(ticks) - idle, sum(ticks)


def busy_cores(window: float = 0.5) -> float:
    """Cores busy (user, system, irq, steal) over the next `window` seconds, machine-wide; this process
    sleeps meanwhile, so the figure is other work. The 1-minute load average where /proc/stat is missing."""
    try:
        busy0, total0 = _machine_ticks()
        time.sleep(window)
        busy1, total1 = _machine_ticks()
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0]
    return (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1)


class LoadWatch:
    """Re-plans a running job's torch threads from the cores other work keeps busy (issue 41: a plan made once
    at start leaves torch's spinning threads fighting work that arrives later, 5x slower on 2 cores).

    Called often (each training step), it measures at most every `every_s` seconds: the machine's busy
    cores (/proc/stat) minus this process's own CPU use (os.times), and returns the thread count for the free
    cores (`plan.jobs` sharing them), or None between measurements. A core counts as taken from 0.4 of it
    busy (work squeezed by our threads shows only part of its demand). Only a plan chosen by load is
    re-planned: OMP_NUM_THREADS fixes the count, and with it the run's bytes."""

    TAKEN = 0.4

    def __init__(self, plan: ThreadPlan, *, every_s: float = 2.0, ticks=_machine_ticks, clock=time.monotonic,
                 own_cpu=lambda: sum(os.times()[:2]), cpus: int | None = None):
        self.plan, self.every_s, self._ticks, self._clock, self._own_cpu = plan, every_s, ticks, clock, own_cpu
        self.cpus = cpus or os.cpu_count() or 1
        self.other = plan.load  # cores busy with other work at the last measurement
        self._last = self._sample()

    def _sample(self):
        try:
            return self._clock(), self._own_cpu(), *self._ticks()
        except (OSError, ValueError, IndexError):
            return None  # no /proc/stat: the plan stays

    def __call__(self) -> int | None:
        if self.plan.chosen_by != "load" or self._last is None or self._clock() - self._last[0] < self.every_s:
            return None
        now = self._sample()
        if now is None:
            return None
        (t0, own0, busy0, total0), (t1, own1, busy1, total1) = self._last, now
        self._last = now
        machine = (busy1 - busy0) / max(1, total1 - total0) * self.cpus
        self.other = max(0.0, machine - (own1 - own0) / max(1e-9, t1 - t0))
        taken = min(self.plan.cores, int(self.other + 1 - self.TAKEN))
        return max(1, (self.plan.cores - taken) // self.plan.jobs)


def plan_threads(jobs: int = 1, *, environ=None, cores: int | None = None, load: float | None = None) -> ThreadPlan:
    """The thread plan for `jobs` processes side by side on this machine (arguments other than `jobs` are for
    tests: the environment, the usable cores and the busy cores to plan with)."""
    environ = os.environ if environ is None else environ
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    text = environ.get("OMP_NUM_THREADS", "").strip()
    if text:
        try:
            threads = int(text)
        except ValueError:
            raise ValueError(f"OMP_NUM_THREADS must be a whole number, got {text!r}") from None
        if threads < 1:
            raise ValueError(f"OMP_NUM_THREADS must be >= 1, got {threads}")
        return ThreadPlan(jobs, threads, cores, busy_cores() if load is None else load, "OMP_NUM_THREADS")
    load = busy_cores() if load is None else load
    free = max(1, cores - min(cores, round(load)))
    return ThreadPlan(jobs, max(1, free // jobs), cores, load, "load")
