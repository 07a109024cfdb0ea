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


def busy_cores(window: float = 0.5) -> float:
    """Cores busy (user, system, irq, steal) over the next `window` seconds, machine-wide; this process
    sleeps meanwhile, so the figure is other work. The 1-minute load average where /proc/stat is missing."""
    def sample():
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        return sum(ticks) - idle, sum(ticks)
    try:
        busy0, total0 = sample()
        time.sleep(window)
        busy1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0]
    return (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1)


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
