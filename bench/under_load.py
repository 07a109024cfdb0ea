"""Does training keep its pace when one core gets busy after it started? (issue 41 item 2)

Trains the bar research setting (configs/scratch_cpu_bar.yaml, a small rendered set) in this process three
times, each `warmup + 3 * phase` steps, with the torch threads planned at the start as `vlm-smmd train` plans
them (`use_thread_plan`):

  idle     nothing else runs
  fixed    a one-core busy loop (another process) runs during the middle phase; the plan made at start stays
           (what training did before `LoadWatch`)
  replan   the same busy loop; `LoadWatch` re-plans the threads as `vlm-smmd train` does

The busy loop starts after step `warmup + phase` and is ended by its PID after step `warmup + 2 * phase`.
Prints the median step time of each phase (before / during / after) and its ratio to the idle run's same
phase. Done when (2 cores): replan's during <= 2.2x idle, and its after back near 1x. Check `uptime` first:
the figures mean little while other work runs.

    python bench/under_load.py [--phase 100] [--warmup 30] [--modes idle,fixed,replan] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PHASES = ("before", "during", "after")


def train(config: str, overrides: dict, *, steps: int, load_at: tuple[int, int] | None, replan: bool) -> list[float]:
    """Seconds of each step of one run; a busy loop runs from step load_at[0] to load_at[1] (after those steps)."""
    import torch

    from vlm_smmd.config import load_config
    from vlm_smmd.experiments.threads import LoadWatch, use_thread_plan
    from vlm_smmd.training import run

    plan = use_thread_plan()
    watch = LoadWatch(plan) if replan else None
    ends, spinner = [time.perf_counter()], None

    def after_step():
        nonlocal spinner
        ends.append(time.perf_counter())
        done = len(ends) - 1
        if load_at and done == load_at[0]:
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        elif spinner is not None and done == load_at[1]:
            spinner.kill()
            spinner.wait()
            spinner = None
        return watch() if watch is not None else None

    try:
        run(*load_config(config, {**overrides, "max_steps": steps}), replan=after_step)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
        torch.set_num_threads(plan.threads)
    return [b - a for a, b in zip(ends[1:], ends[2:])]  # from the second step's end: the first includes setup


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", type=int, default=100, help="steps per phase (%(default)s)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed first steps (%(default)s)")
    parser.add_argument("--modes", default="idle,fixed,replan", help="runs, in order (%(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"idle", "fixed", "replan"}:
        parser.error(f"--modes: idle, fixed or replan, got {args.modes}")
    config = str(REPO / "configs" / "scratch_cpu_bar.yaml")
    steps = args.warmup + 3 * args.phase
    load_at = (args.warmup + args.phase, args.warmup + 2 * args.phase)
    result = {"config": config, "phase_steps": args.phase, "warmup_steps": args.warmup,
              "loadavg_1min_at_start": os.getloadavg()[0], "cores": len(os.sched_getaffinity(0))}
    with tempfile.TemporaryDirectory() as tmp:
        overrides = {"eval_split": "none", "save_strategy": "no", "report_to": "none", "disable_tqdm": True,
                     "logging_steps": 50, "data_root": str(Path(tmp) / "data"), "synthesize_num": 640}
        for mode in modes:
            times = train(config, {**overrides, "output_dir": str(Path(tmp) / mode)}, steps=steps,
                          load_at=None if mode == "idle" else load_at, replan=mode == "replan")
            for i, phase in enumerate(PHASES):  # step k's time is times[k - 2]
                kept = times[load_at[0] - args.phase - 1 + i * args.phase: load_at[0] - 1 + i * args.phase]
                result[f"{mode}_{phase}_step_ms"] = 1000 * statistics.median(kept)
    for mode in modes:
        for phase in PHASES:
            if "idle" in modes and mode != "idle":
                result[f"{mode}_{phase}_vs_idle"] = result[f"{mode}_{phase}_step_ms"] / result[f"idle_{phase}_step_ms"]
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{config}: median step time per phase of {args.phase} steps after {args.warmup} warm-up; a one-core "
              f"busy loop during the middle phase (load average at start {result['loadavg_1min_at_start']:.2f}, "
              f"{result['cores']} cores)")
        print(f"{'run':<8}" + "".join(f"{p + ' ms':>12}{'x idle':>8}" for p in PHASES))
        for mode in modes:
            cells = "".join(f"{result[f'{mode}_{p}_step_ms']:>12.1f}"
                            + (f"{result[f'{mode}_{p}_vs_idle']:>8.2f}" if f"{mode}_{p}_vs_idle" in result else f"{'':>8}")
                            for p in PHASES)
            print(f"{mode:<8}{cells}")
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
