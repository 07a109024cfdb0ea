"""The research step of this tree against an earlier commit: median ms a step, measured A/B in one run.

Each setting (the bar, clock and word-problem research configs) trains `--steps` steps after `--warmup`
untimed ones, once with this tree's code and config and once with the commit's (checked out with
`git worktree add --detach` into a temporary folder, removed at the end, or `--old_tree DIR`), in
alternating order for `--rounds` rounds, each in its own process at `--threads` torch threads. A step's time
is the wall time between two optimizer steps' ends (a Trainer callback, so both trees are timed alike),
data loading, forward, backward and optimizer included. The medians pool every round's timed steps; the
ratio is old / new (above 1: this tree is faster). Each setting is compared with its baseline commit
(`--commit` sets one for all): bars and clocks with 5080082 (before the research-step work), word problems,
which that commit does not have, with 8bfc5c2 (the tree before issue 41). Each tree runs its own config
file (the setting as it was then: 5080082's bar config still had the default system turn) and renders its
own data into a temporary folder. `--old KEY=VALUE` overrides a key of the old run only. Run `uptime` first,
or read the load average printed beside the figures: on shared cores the ratio moves.

    python bench/step_vs_commit.py [--settings bar,clock,word_problems] [--commit C] [--steps 300]
                                   [--warmup 10] [--rounds 3] [--threads 1] [--old KEY=VALUE ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS = {"bar": "scratch_cpu_bar.yaml", "clock": "scratch_cpu_clock.yaml",
            "word_problems": "scratch_cpu_word_problems.yaml"}
BASELINE = {"bar": "5080082", "clock": "5080082", "word_problems": "8bfc5c2"}
MARK = "STEP_TIMES "

# Run in a child process with PYTHONPATH at one tree: trains through that tree's `training.run` with a
# callback (added to every Trainer) that records each optimizer step's end.
CHILD = r"""
import json, sys, time
import torch
spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
import transformers
ends, cpu = [], []
class Clock(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        ends.append(time.perf_counter()); cpu.append(time.process_time())
init = transformers.Trainer.__init__
def clocked(self, *a, **k):
    init(self, *a, **k)
    self.add_callback(Clock())
transformers.Trainer.__init__ = clocked
from vlm_smmd.config import load_config
from vlm_smmd.training import run
metrics = run(*load_config(spec["config"], spec["overrides"]))
w = spec["warmup"]
print("STEP_TIMES " + json.dumps({"step_s": [b - a for a, b in zip(ends[w:], ends[w + 1:])],
                       "cpu_s": [b - a for a, b in zip(cpu[w:], cpu[w + 1:])],
                       "train_loss": metrics.get("train_loss")}), flush=True)
"""  # the line starts with MARK


def run_tree(tree: Path, config: Path, overrides: dict, threads: int, warmup: int) -> dict:
    spec = {"config": str(config), "overrides": overrides, "threads": threads, "warmup": warmup}
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], cwd=tree, env=env, capture_output=True,
                          text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode or not lines:
        raise SystemExit(f"{tree}: {config.name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(MARK):])


def old_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def compare(setting: str, old_tree: Path, rounds: int, steps: int, warmup: int, threads: int, old_overrides: dict,
            tmp: Path) -> dict:
    name = SETTINGS[setting]
    if not (old_tree / "configs" / name).is_file():
        return {"setting": setting, "skipped": f"configs/{name} is not at that commit"}
    trees = {"old": old_tree, "new": REPO}
    times = {"old": [], "new": []}
    cpu = {"old": [], "new": []}
    rounds_ms, losses, loads = [], {}, []
    for r in range(rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        this_round = {}
        for which in order:
            overrides = {"max_steps": warmup + steps + 1, "eval_split": "none", "save_strategy": "no",
                         "report_to": "none", "disable_tqdm": True, "logging_steps": steps,
                         "output_dir": str(tmp / f"{setting}_{which}_{r}"), "data_root": str(tmp / f"data_{setting}_{which}"),
                         **(old_overrides if which == "old" else {})}
            out = run_tree(trees[which], trees[which] / "configs" / name, overrides, threads, warmup)
            times[which] += out["step_s"]
            cpu[which] += out["cpu_s"]
            this_round[which] = 1000 * statistics.median(out["step_s"])
            losses[which] = out["train_loss"]
            loads.append(os.getloadavg()[0])
        rounds_ms.append(this_round)
    old_ms, new_ms = (1000 * statistics.median(times[w]) for w in ("old", "new"))
    return {"setting": setting, "steps": steps, "rounds": rounds, "threads": threads,
            "old_step_ms": old_ms, "new_step_ms": new_ms, "ratio": old_ms / new_ms,
            "old_step_cpu_ms": 1000 * statistics.median(cpu["old"]),
            "new_step_cpu_ms": 1000 * statistics.median(cpu["new"]),
            "old_total_s": sum(times["old"]) / rounds, "new_total_s": sum(times["new"]) / rounds,
            "round_step_ms": rounds_ms, "old_train_loss": losses["old"], "new_train_loss": losses["new"],
            "loadavg_1min_max": max(loads)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="bar,clock,word_problems", help="comma-separated (%(default)s)")
    parser.add_argument("--commit", help="the baseline for every setting (default: bar/clock 5080082, "
                                         "word_problems 8bfc5c2)")
    parser.add_argument("--old_tree", help="a checkout of the baseline to use instead of a temporary worktree")
    parser.add_argument("--steps", type=int, default=300, help="timed steps a run (%(default)s)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed first steps (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="old/new alternations (%(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each run (%(default)s)")
    parser.add_argument("--old", action="append", default=[], metavar="KEY=VALUE", help="a key of the old runs only")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting {unknown[0]} (known: {', '.join(SETTINGS)})")
    old_overrides = {k: old_value(v) for k, _, v in (item.partition("=") for item in args.old)}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = {}
        for setting in settings:
            commit = args.commit or BASELINE[setting]
            if args.old_tree:
                trees[commit] = Path(args.old_tree).resolve()
            elif commit not in trees:
                trees[commit] = tmp / f"tree_{commit}"
                subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(trees[commit]), commit],
                               check=True, capture_output=True)
            result = compare(setting, trees[commit], args.rounds, args.steps, args.warmup, args.threads,
                             old_overrides, tmp)
            results.append({"commit": commit, **result})
        if not args.old_tree:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True)
    out = {"results": results, "loadavg_1min": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(out))
        return out
    print(f"{'setting':<14} {'vs commit':<9} {'old ms':>8} {'this ms':>8} {'ratio':>6} {'old cpu':>8} {'this cpu':>8} "
          f"{'load':>5}   per round (old / this ms)")
    for r in results:
        if "skipped" in r:
            print(f"{r['setting']:<14} {r['commit']:<9} skipped: {r['skipped']}")
            continue
        per = ", ".join(f"{x['old']:.1f}/{x['new']:.1f}" for x in r["round_step_ms"])
        print(f"{r['setting']:<14} {r['commit']:<9} {r['old_step_ms']:>8.1f} {r['new_step_ms']:>8.1f} "
              f"{r['ratio']:>5.2f}x {r['old_step_cpu_ms']:>8.1f} {r['new_step_cpu_ms']:>8.1f} "
              f"{r['loadavg_1min_max']:>5.2f}   {per}")
    print(f"median step ms over {args.rounds} rounds x {args.steps} steps after {args.warmup} warm-up, "
          f"{args.threads} torch thread(s) each; ratio = old / this")
    return out


if __name__ == "__main__":
    main()
