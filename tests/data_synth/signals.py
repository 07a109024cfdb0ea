"""Run a `data-synth` command in a real process and signal it once it has started writing."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def logged_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def terminate_when(args: list[str], cwd: Path, ready, timeout: float = 120.0, signum=signal.SIGTERM,
                   group: bool = False) -> tuple[int, str]:
    """Start `data-synth ARGS` in `cwd`, wait until `ready()` (polled), send `signum` to that process alone
    (or, `group=True`, to its whole process group, as a terminal's Ctrl-C does) and return (exit status,
    stderr). Fails if the command ended before it was ready."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "data_synth.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=group)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, f"the command ended before it was interrupted: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "the command did not start writing in time"
            time.sleep(0.01)
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err
