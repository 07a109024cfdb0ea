"""Start-up time of the command line: how long `vlm-smmd` takes to answer help and a misspelled key.

Each command runs as a fresh subprocess (`python -m vlm_smmd.cli ...`, so nothing is cached in-process);
the figure is the median wall-clock time of --repeat runs. Goal (issue 14): <= 3 s for each, where
train --help took 15 s and a misspelled key 16-25 s when both imported transformers first.
`--repo DIR` times another checkout's code (a `git worktree` of an earlier commit), run from that folder.

    python bench/cli_start.py [--repeat 3] [--repo DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

COMMANDS = {  # figure name -> vlm-smmd arguments
    "train_help_s": ["train", "--help"],
    "train_misspelled_key_s": ["train", "configs/tiny_cpu_clock.yaml", "--learnig_rate", "1"],
    "eval_help_s": ["eval", "--help"],
}


def time_command(argv: list[str], repo: Path, repeat: int) -> tuple[float, int, str]:
    """(median seconds, exit status, last line of stderr) of `vlm-smmd argv` run `repeat` times in `repo`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    times, proc = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "vlm_smmd.cli", *argv], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=300)
        times.append(time.perf_counter() - started)
    err = proc.stderr.strip().splitlines()
    return statistics.median(times), proc.returncode, err[-1] if err else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per command; the median is reported")
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose code runs (default this one)")
    parser.add_argument("--json", action="store_true", help="one JSON object of the figures")
    args = parser.parse_args()
    repo = args.repo.resolve()
    results = {name: time_command(argv, repo, args.repeat) for name, argv in COMMANDS.items()}
    if args.json:
        print(json.dumps({"repo": str(repo), "repeat": args.repeat,
                          **{name: round(s, 3) for name, (s, _, _) in results.items()},
                          **{name.removesuffix("_s") + "_exit": rc for name, (_, rc, _) in results.items()}}))
        return 0
    print(f"vlm-smmd start-up, {repo}, median of {args.repeat} fresh processes")
    print(f"{'command':<58} {'seconds':>8} {'exit':>5}")
    for name, (seconds, rc, _) in results.items():
        print(f"{'vlm-smmd ' + ' '.join(COMMANDS[name]):<58} {seconds:>8.2f} {rc:>5}")
    _, _, line = results["train_misspelled_key_s"]
    print(f"misspelled key says: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
