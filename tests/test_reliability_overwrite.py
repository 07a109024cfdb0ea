"""--overwrite replaces only a dataset data-synth wrote (its generation.json says so): a folder of other
files, a plain file, or the working directory is refused with one line that does not advise the flag,
and is left exactly as it was."""
import subprocess
import sys

import pytest

from data_synth.arithmetic import write_arithmetic_dataset
from data_synth.writer import write_clock_dataset

QUIET = dict(progress=False)


def snapshot(root):
    return {p.relative_to(root): p.read_bytes() if p.is_file() else None for p in root.rglob("*")}


def notes_folder(path):
    (path / "src").mkdir(parents=True)
    (path / "NOTES.txt").write_text("notes\n")
    (path / "src" / "main.c").write_text("int main;\n")
    return path


@pytest.mark.parametrize("write", [
    lambda out, **kw: write_clock_dataset(out, 6, seed=0, size=64, **kw),
    lambda out, **kw: write_arithmetic_dataset(out, 6, seed=0, **kw),
], ids=["clocks", "arithmetic"])
def test_overwrite_refuses_a_folder_it_did_not_write(tmp_path, write):
    out = notes_folder(tmp_path / "d")
    before = snapshot(out)
    for overwrite in (False, True):
        with pytest.raises(FileExistsError) as e:
            write(out, overwrite=overwrite, **QUIET)
        assert "--overwrite" not in str(e.value) and "generation.json" in str(e.value)
        assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no partial folder left


def test_overwrite_refuses_a_plain_file(tmp_path):
    out = tmp_path / "f"
    out.write_text("keep me\n")
    with pytest.raises(FileExistsError, match="not a folder") as e:
        write_arithmetic_dataset(out, 6, seed=0, overwrite=True, **QUIET)
    assert "--overwrite" not in str(e.value) and out.read_text() == "keep me\n"


def test_overwrite_replaces_its_own_dataset_and_an_empty_folder_is_used(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    write_arithmetic_dataset(out, 6, seed=0, **QUIET)  # empty: nothing to lose
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        write_arithmetic_dataset(out, 8, seed=1, **QUIET)
    write_arithmetic_dataset(out, 8, seed=1, overwrite=True, **QUIET)
    assert '"seed": 1' in (out / "generation.json").read_text()


def test_cli_out_dot_is_refused_and_leaves_no_partial(tmp_path):
    (tmp_path / "NOTES.txt").write_text("notes\n")
    proc = subprocess.run([sys.executable, "-m", "data_synth.cli", "arithmetic", "--num", "6", "--out", ".",
                           "--overwrite", "--no-progress"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "working directory" in proc.stderr
    assert "--overwrite" not in proc.stderr.replace("--out", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["NOTES.txt"]


def test_train_overwrite_refuses_a_model_folder_it_did_not_write(tmp_path, capsys):
    """A downloaded model's folder (config.json and weights, no run_config.json) is not a run to replace."""
    from vlm_smmd.cli import main

    out = tmp_path / "downloaded"
    out.mkdir()
    (out / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    (out / "model.safetensors").write_bytes(b"weights")
    before = snapshot(out)
    config = tmp_path / "run.yaml"
    config.write_text(f"model_name_or_path: tiny\ndataset: clocks\ndata_root: {tmp_path / 'clocks'}\n"
                      f"synthesize: none\noutput_dir: {out}\nuse_cpu: true\nmax_steps: 1\n")
    for extra in ([], ["--overwrite"]):
        assert main(["train", str(config), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "run_config.json" in err[0] and "--overwrite" not in err[0]
        assert snapshot(out) == before
    (tmp_path / "file").write_text("x")
    assert main(["train", str(config), "--output_dir", str(tmp_path / "file")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_eval_overwrite_refuses_predictions_it_did_not_write(tmp_path, capsys):
    """An lmms-eval log named predictions.jsonl, with no metrics.json of eval's own, is not replaced."""
    from vlm_smmd.cli import main

    out = tmp_path / "logs"
    out.mkdir()
    (out / "predictions.jsonl").write_text('{"doc_id": 0}\n')
    (out / "metrics.json").write_text('{"accuracy": 0.5}\n')  # someone else's metrics
    before = snapshot(out)
    argv = ["eval", "--model", "tiny", "--data", f"clocks:{tmp_path}", "--out", str(out)]
    for extra in ([], ["--overwrite"]):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "did not write" in err[0] and "--overwrite" not in err[0]
        assert snapshot(out) == before
    assert main([*argv[:-1], str(out / "predictions.jsonl"), "--overwrite"]) == 2
    assert "not a folder" in capsys.readouterr().err
