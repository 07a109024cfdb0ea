"""compare's ownership of its folder, processes and state files (issue 45 items 3 and 4)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vlm_smmd.cli import main as cli
from vlm_smmd.experiments import orchestrate
from vlm_smmd.experiments.store import Status

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "tiny_cpu_clock.yaml"


@pytest.mark.parametrize("seed", ["-1", "4294967296", "99999999999999999999"])
def test_seeds_out_of_range_are_refused_when_parsed(seed, tmp_path, capsys):
    assert cli(["compare", str(CONFIG), f"--seeds={seed}", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"vlm-smmd compare: error: --seeds: seed must be an integer in 0..4294967295; got {seed}"]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("damage", [b"[]", b'{"variants": {"a-seed0": {"sta', b"\xff\xfe garbage", b'{"x": 1}'])
def test_a_damaged_status_json_is_named_and_rebuilt_from_the_runs(damage, tmp_path):
    (tmp_path / "runs" / "a-seed0").mkdir(parents=True)
    (tmp_path / "runs" / "a-seed0" / "done.json").write_text(json.dumps({"seconds": 3.5}))
    (tmp_path / "runs" / "b-seed0").mkdir()
    (tmp_path / "runs" / "b-seed0" / "error.txt").write_text("x")
    (tmp_path / "status.json").write_bytes(damage)
    status = Status(tmp_path / "status.json", ["a-seed0", "b-seed0", "c-seed0"])
    assert status.rebuilt.startswith(f"{tmp_path / 'status.json'} is damaged")
    assert status.variants == {"a-seed0": {"status": "done", "seconds": 3.5}, "b-seed0": {"status": "failed"},
                               "c-seed0": {"status": "pending"}}
    assert json.loads((tmp_path / "status.json").read_text())["variants"] == status.variants
    assert Status(tmp_path / "status.json", ["a-seed0"]).rebuilt is None  # the rebuilt file reads back


def test_damaged_done_and_metrics_are_named_and_dropped_weights_say_what_to_remove(tmp_path):
    run = tmp_path / "r"
    (run / "test").mkdir(parents=True)
    (run / "done.json").write_text('{"figures": {"te')  # truncated
    assert orchestrate.finished(run, ["test"]) == (False, f"{run / 'done.json'} is damaged (truncated or not "
                                                  "JSON: Unterminated string starting at: line 1 column 14 (char 13))")
    (run / "done.json").write_text("{}")
    (run / "test" / "metrics.json").write_text("[1]")
    done, problem = orchestrate.finished(run, ["test"])
    assert not done and problem.startswith(f"{run / 'test' / 'metrics.json'} is damaged (a JSON list")
    (run / "test" / "metrics.json").write_text("{}")
    assert orchestrate.finished(run, ["test"]) == (True, None)
    # trained, weights dropped, predictions gone: only training again can finish it
    (run / "model").mkdir()
    (run / "model" / "config.json").write_text("{}")
    (run / "train.json").write_text("{}")
    assert orchestrate._unfinishable(run, ["test"]).endswith(f"remove the folder {run} to train and evaluate it again")
    (run / "test" / "predictions.jsonl").write_text("")
    assert orchestrate._unfinishable(run, ["test"]) is None
    (run / "test" / "predictions.jsonl").unlink()
    (run / "model" / "model.safetensors").write_bytes(b"")
    assert orchestrate._unfinishable(run, ["test"]) is None  # the weights are there: the worker evaluates again


def test_a_failure_reports_the_workers_own_error_line_or_the_signal(tmp_path):
    log = tmp_path / "log.txt"
    rc = orchestrate._run_logged([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], log, {})
    assert rc == -9
    assert orchestrate._failure(tmp_path, "training", rc).reason == "training was killed by signal 9 (SIGKILL)"
    # the worker's marker wins over the log's last line (here an unrelated warning printed at exit)
    code = ("import json, sys; json.dump({'error': 'FileExistsError: [Errno 17] model'}, open('worker_error.json', 'w'));"
            "print('ValueError: an earlier one'); print('[WARNING] unrelated at exit'); sys.exit(1)")
    rc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path).returncode
    assert orchestrate._failure(tmp_path, "training", rc).reason == \
        "training exited with status 1: FileExistsError: [Errno 17] model"
    (tmp_path / "worker_error.json").unlink()  # a launcher's process writes none: its last error line
    log.write_text("[rank0]: ValueError: bad record\n[WARNING] unrelated at exit\n")
    assert orchestrate._failure(tmp_path, "training (torchrun)", 1).reason == \
        "training (torchrun) exited with status 1: ValueError: bad record"


# ---------------------------------------------------------------------------------------------------------
# Real compare processes whose training runs under --launcher: a script that records its pid and sleeps

SLEEPER = "import os, sys, time; open(os.environ['SLEEPER_PID'], 'w').write(str(os.getpid())); time.sleep(600)"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended (its reaper may be slow)


def _wait(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _start(tmp_path, out, *, preexec_fn=None):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    pid_file = tmp_path / f"{out.name}.pid"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SLEEPER_PID": str(pid_file), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "vlm_smmd.cli", "compare", str(CONFIG), "--aux", "none", "--kernel-controls", "",
            "--seeds", "0", "--out", str(out), "--eval-limit", "2", "--launcher", f"{sys.executable} {script}",
            "--data_root", str(tmp_path / "clocks"), "--synthesize_num", "16", "--synthesize_size", "64"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=preexec_fn)
    assert _wait(lambda: pid_file.is_file() and pid_file.read_text(), 120), proc.communicate(timeout=5)
    return proc, int(pid_file.read_text()), argv, env


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and uses PR_SET_PDEATHSIG")
def test_two_compares_one_folder_and_kill_9_leaves_no_orphan(tmp_path):
    out = tmp_path / "out"
    first, child, argv, env = _start(tmp_path, out)
    try:
        before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
        second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        assert second.stderr.strip().splitlines() == [
            f"vlm-smmd compare: error: --out {out} is in use by another compare (pid {first.pid} on "
            f"{os.uname().nodename}); wait for it to end or choose another --out"]
        assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before
        first.kill()  # kill -9: no handler runs in compare
        first.wait(timeout=10)
        assert _wait(lambda: not _alive(child), 5), "the training process outlived compare"
    finally:
        first.kill()
        if _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_stops_a_compare_whose_sigint_is_ignored_at_once(tmp_path):
    out = tmp_path / "out"
    first, child, _, _ = _start(tmp_path, out, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        t0 = time.monotonic()
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 143
        assert time.monotonic() - t0 < 20  # not after the variant (the sleeper would take 10 minutes)
        assert _wait(lambda: not _alive(child), 5)
        status = json.loads((out / "status.json").read_text())["variants"]
        assert status["none-seed0"]["status"] == "interrupted"
        assert not (out / ".lock").exists()
    finally:
        first.kill()
        if _alive(child):
            os.kill(child, signal.SIGKILL)
