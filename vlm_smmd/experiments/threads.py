"""How many torch threads each training process gets, so that jobs side by side do not oversubscribe the cores.

Torch's intra-op threads spin while they wait for each other: two processes running 2 threads each on 2 cores
slow each other 5-50x, while one thread per process keeps its pace (bench/research_step.py; README
"Several jobs at once"). The plan counts the cores this process may use, subtracts those already busy (the
1-minute load average, which lags: a job that ended seconds ago still counts) and shares the rest among the
jobs, at least one thread each. OMP_NUM_THREADS, when set, wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadPlan:
    jobs: int
    threads: int  # torch intra-op threads per job
    cores: int
    load: float  # 1-minute load average when planned
    chosen_by: str  # "load" or "OMP_NUM_THREADS"

    def env(self) -> dict[str, str]:
        """Environment for a job's process (torch sizes its pool from OMP_NUM_THREADS at import)."""
        return {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}

    def describe(self) -> str:
        jobs = f"{self.jobs} job{'s' if self.jobs > 1 else ''} x {self.threads} torch thread{'s' if self.threads > 1 else ''}"
        where = f"{self.cores} cores, load {self.load:.1f}"
        if self.chosen_by != "load":
            line = f"threads: {jobs} (set by {self.chosen_by}; {where})"
        else:
            line = f"threads: {jobs} ({where})"
        if self.jobs * self.threads > max(1, self.cores - round(self.load)):
            line += ("; more threads than free cores: the jobs will slow each other (fewer --jobs, or wait for "
                     "the other work to end)")
        return line


def plan_threads(jobs: int = 1, *, environ=None, cores: int | None = None, load: float | None = None) -> ThreadPlan:
    """The thread plan for `jobs` processes side by side on this machine (arguments other than `jobs` are for
    tests: the environment, the usable cores and the load average to plan with)."""
    environ = os.environ if environ is None else environ
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    load = os.getloadavg()[0] if load is None else load
    text = environ.get("OMP_NUM_THREADS", "").strip()
    if text:
        try:
            threads = int(text)
        except ValueError:
            raise ValueError(f"OMP_NUM_THREADS must be a whole number, got {text!r}") from None
        if threads < 1:
            raise ValueError(f"OMP_NUM_THREADS must be >= 1, got {threads}")
        return ThreadPlan(jobs, threads, cores, load, "OMP_NUM_THREADS")
    free = max(1, cores - min(cores, round(load)))
    return ThreadPlan(jobs, max(1, free // jobs), cores, load, "load")
