"""Issue 45 item 7: eval keeps what it generated and continues it.

eval streams its records to predictions.partial.jsonl batch by batch; a real eval process killed with
SIGKILL (or stopped with Ctrl-C) mid-generation keeps the finished batches, and `eval --resume` generates
only the rest, ending on the same predictions.jsonl as an uninterrupted run (greedy, batches of one, fp32 on
the CPU). A --out that cannot be written is refused before the model loads; a full disk at the final write
(the temporary file is a link to /dev/full, a real ENOSPC) is one line, leaves no temporary file and keeps
the partial predictions for --resume.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_synth.writer import write_clock_dataset
from vlm_smmd.cli import main
from vlm_smmd.evaluation import PARTIAL, PARTIAL_RUN

REPO = Path(__file__).resolve().parent.parent
EVAL = ["--model", "tiny", "--batch-size", "1", "--max-new-tokens", "12", "--min-pixels", "3136",
        "--max-pixels", "4096"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval_resume") / "data"
    write_clock_dataset(root, num=30, seed=0, size=64, splits="train=0.2,test=0.8", progress=False)
    return root


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data):
    out = tmp_path_factory.mktemp("eval_reference") / "out"
    assert main(["eval", *EVAL, "--data", f"clocks:{data}", "--out", str(out)]) == 0
    return out


def lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


def start_eval(data, out) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "vlm_smmd.cli", "eval", *EVAL, "--data", f"clocks:{data}",
                             "--out", str(out)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def stop_after(proc: subprocess.Popen, partial: Path, records: int, sig) -> None:
    """Send `sig` to `proc` once `partial` holds `records` records; fails when the run ended first."""
    deadline = time.monotonic() + 120
    while lines(partial) < records:
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(sig)


@pytest.mark.slow
def test_killed_eval_resumes_to_the_uninterrupted_predictions(tmp_path, data, reference, capsys):
    out = tmp_path / "out"
    proc = start_eval(data, out)
    stop_after(proc, out / PARTIAL, 3, signal.SIGKILL)
    proc.wait(timeout=30)
    kept = lines(out / PARTIAL)
    total = lines(reference / "predictions.jsonl")
    assert 3 <= kept < total  # killed mid-run, the finished batches kept
    assert not (out / "predictions.jsonl").exists()

    # without --resume the interrupted run is neither ignored nor replaced
    assert main(["eval", *EVAL, "--data", f"clocks:{data}", "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["eval", *EVAL, "--data", f"clocks:{data}", "--out", str(out), "--resume"]) == 0
    assert f"{kept} predictions kept" in capsys.readouterr().out
    assert (out / "predictions.jsonl").read_text() == (reference / "predictions.jsonl").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "predictions.jsonl"]


@pytest.mark.slow
def test_ctrl_c_keeps_the_generated_predictions(tmp_path, data):
    out = tmp_path / "out"
    proc = start_eval(data, out)
    stop_after(proc, out / PARTIAL, 2, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert "rerun the same eval with --resume" in err
    assert lines(out / PARTIAL) >= 2
    assert json.loads((out / PARTIAL_RUN).read_text())["batch_size"] == 1


def test_an_unwritable_out_is_refused_before_the_model_loads(tmp_path, data, capsys, monkeypatch):
    import vlm_smmd.modeling

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(vlm_smmd.modeling, "load_model_and_processor", no_load)
    plain = tmp_path / "plain"
    plain.write_text("notes\n")
    out = plain / "eval"  # a folder that cannot be made (root writes through file modes, so no chmod here)
    assert main(["eval", *EVAL, "--data", f"clocks:{data}", "--out", str(out)]) == 2  # checked by the dispatcher
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"--out {out}: cannot write there" in err
    assert plain.read_text() == "notes\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full to make a full disk with")
def test_a_full_disk_at_the_final_write_keeps_the_predictions_for_resume(tmp_path, data, capsys):
    out = tmp_path / "out"
    out.mkdir()
    tmp = out / ".predictions.jsonl.tmp"
    tmp.symlink_to("/dev/full")  # writing predictions.jsonl ends in ENOSPC
    args = ["eval", *EVAL, "--data", f"clocks:{data}", "--out", str(out), "--limit", "3"]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "".join(err)
    assert "cannot write" in err[-1] and "No space left" in err[-1] and "--resume" in err[-1]
    assert not tmp.exists() and not tmp.is_symlink()  # no temporary file left
    generated = (out / PARTIAL).read_text()
    assert generated.count("\n") == 3

    # a resume with other arguments is refused, naming them, before the model loads; nothing is replaced
    assert main([*args, "--resume", "--max-new-tokens", "5", "--split", "train"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other arguments (split, max_new_tokens)" in err[0]
    assert (out / PARTIAL).read_text() == generated

    assert main([*args, "--resume"]) == 0
    assert "3 predictions kept" in capsys.readouterr().out
    assert (out / "predictions.jsonl").read_text() == generated  # kept, not generated again
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "predictions.jsonl"]
