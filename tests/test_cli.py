"""The command line (issue 14, items 4-7): one-line errors with their exit status (1 bad input, 2 usage),
no output overwritten without --overwrite, no empty output folder left behind, both option spellings,
and usage answered before transformers or torch is imported."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

from data_synth.writer import write_clock_dataset
from vlm_smmd.cli import main

REPO = Path(__file__).resolve().parent.parent
TINY_CONFIG = REPO / "configs" / "tiny_cpu_clock.yaml"


@pytest.fixture(autouse=True)
def _preflight_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the preflight cache stays in tmp_path


@pytest.fixture(scope="module")
def clocks(tmp_path_factory):
    """8 clocks of 64 px (7 train, 1 test)."""
    return write_clock_dataset(tmp_path_factory.mktemp("data") / "clocks", num=8, size=64, progress=False)


def write_config(path: Path, data_root, output_dir, **extra) -> Path:
    values = {"model_name_or_path": "tiny", "min_pixels": 3136, "max_pixels": 4096, "dataset": "clocks",
              "data_root": str(data_root), "synthesize": "none", "eval_split": None, "output_dir": str(output_dir),
              "use_cpu": True, "seed": 0, "max_steps": 1, "per_device_train_batch_size": 2,
              "report_to": "none", "save_strategy": "no", "logging_steps": 1, "disable_tqdm": True,
              "dataloader_num_workers": 0, **extra}
    path.write_text(json.dumps(values))  # JSON is YAML
    return path


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def error_line(err: str, command: str) -> str:
    """The error: exactly one line, `vlm-smmd COMMAND: error: ...`, and no traceback."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"vlm-smmd {command}: error: "), err
    return lines[0]


def digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- usage before the training stack

NOT_IMPORTED = """
    import sys
    from vlm_smmd.cli import main
    status = main({argv!r})
    heavy = [m for m in ("transformers", "torch") if m in sys.modules]
    assert not heavy, heavy
    sys.exit(status)
"""


def test_misspelled_key_on_the_command_line_answers_before_transformers():
    proc = run_python(NOT_IMPORTED.format(argv=["train", str(TINY_CONFIG), "--learnig_rate", "1"]))
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc.stderr, "train")
    assert proc.stderr.strip() == line
    assert "on the command line" in line and "did you mean 'learning_rate'" in line
    assert str(TINY_CONFIG) not in line  # the key came from the command line, not the file


def test_train_help_answers_before_transformers():
    proc = run_python(NOT_IMPORTED.format(argv=["train", "--help"]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: vlm-smmd train") and "--overwrite" in proc.stdout


def test_misspelled_key_in_the_yaml_names_the_file(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("model_name_or_path: tiny\nlearnig_rate: 0.1\n")
    assert main(["train", str(config)]) == 2
    line = error_line(capsys.readouterr().err, "train")
    assert f"in {config}" in line and "did you mean 'learning_rate'" in line and "command line" not in line


def test_training_argument_names_read_with_ast_equal_the_class():
    from transformers import TrainingArguments

    from vlm_smmd.config import training_argument_names

    assert training_argument_names() == {f.name for f in fields(TrainingArguments) if f.init}


# ---------------------------------------------------------------- both spellings

def test_compare_takes_both_spellings_of_its_options():
    from vlm_smmd.commands.compare import build_parser

    for flag in ("--max-new-tokens", "--max_new_tokens"):
        args = build_parser().parse_args([str(TINY_CONFIG), "--out", "x", flag, "5", "--eval_limit=3"])
        assert args.max_new_tokens == 5 and args.eval_limit == 3


def test_yaml_keys_spelt_with_dashes(tmp_path, capsys):
    from vlm_smmd.config import load_config

    config = tmp_path / "run.yaml"
    config.write_text("max-steps: 3\ndata-root: d\ndataset: clocks\n")
    _, data, _, train = load_config(config, {"per_device_train_batch_size": "2"})
    assert (train.max_steps, data.data_root, train.per_device_train_batch_size) == (3, "d", 2)
    config.write_text("max-steps: 3\nmax_steps: 4\n")
    assert main(["train", str(config)]) == 2
    assert "given twice" in error_line(capsys.readouterr().err, "train")


# ---------------------------------------------------------------- train: data errors, existing output

@pytest.mark.slow
def test_train_data_errors_are_one_line_and_leave_no_output_folder(clocks, tmp_path, capsys):
    broken = shutil.copytree(clocks, tmp_path / "broken")
    image = sorted((broken / "train").rglob("*.png"))[0]
    image.write_bytes(b"not a png")
    out = tmp_path / "out"
    config = write_config(tmp_path / "run.yaml", broken, out / "model", on_error="raise")
    assert main(["train", str(config)]) == 1
    line = error_line(capsys.readouterr().err, "train")
    assert image.name in line
    assert not out.exists()
    # a split that is not there
    assert main(["train", str(config), "--train_split", "validation", "--data_root", str(clocks)]) == 1
    assert "validation" in error_line(capsys.readouterr().err, "train")
    assert not out.exists()


def test_path_like_model_that_does_not_exist_fails_at_once(clocks, tmp_path):
    out = tmp_path / "out"
    config = write_config(tmp_path / "run.yaml", clocks, out)
    proc = run_python(NOT_IMPORTED.format(argv=["train", str(config), "--model_name_or_path", "outputs/demo/modle"]))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == error_line(proc.stderr, "train")
    assert "outputs/demo/modle: no such model directory" in proc.stderr
    assert not out.exists()


def test_unknown_hub_id_offline_fails_at_once_and_a_cached_one_resolves(tmp_path):
    snapshot = tmp_path / "hub" / "models--someorg--cached" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    (tmp_path / "hub" / "models--someorg--cached" / "refs").mkdir()
    (tmp_path / "hub" / "models--someorg--cached" / "refs" / "main").write_text("0" * 40)
    proc = run_python("""
        import time
        from vlm_smmd.modeling import ModelLoadError, resolve_family
        print(resolve_family("someorg/cached").model_type)
        started = time.time()
        try:
            resolve_family("someorg/modle")
        except ModelLoadError as e:
            print(f"{time.time() - started:.3f}", e)
    """, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"))
    assert proc.returncode == 0, proc.stderr
    cached, refused = proc.stdout.splitlines()
    assert cached == "qwen2_5_vl"
    seconds, message = refused.split(" ", 1)
    assert float(seconds) < 1.0
    assert "someorg/modle" in message and "tiny-mllama" in message and "HF_HUB_OFFLINE" in message
    assert "no hub is reachable" in message


def test_train_refuses_an_existing_model_and_replaces_it_with_overwrite(clocks, tmp_path, capsys):
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text('{"earlier": true}')
    (out / "run_config.json").write_text("{}")  # the mark of a run vlm-smmd train wrote
    (out / "notes.txt").write_text("mine")
    config = write_config(tmp_path / "run.yaml", clocks, out)
    before = digest(out)
    assert main(["train", str(config)]) == 2
    line = error_line(capsys.readouterr().err, "train")
    assert "--overwrite" in line and "config.json" in line
    assert digest(out) == before
    # --max-steps (dash) and --max_steps (underscore) are the same key
    assert main(["train", str(config), "--overwrite", "--max-steps", "1"]) == 0
    assert json.loads((out / "config.json").read_text()).get("model_type") == "qwen2_5_vl"
    assert (out / "notes.txt").read_text() == "mine"  # what is not a trained model's is left alone
    state = json.loads((out / "trainer_state.json").read_text()) if (out / "trainer_state.json").is_file() else None
    assert state is None or state["global_step"] == 1


INSTRUCTION = "Answer in H:MM format."


@pytest.fixture(scope="module")
def trained(clocks, tmp_path_factory):
    """A tiny run of one step with a checkpoint and an instruction: output_dir (read only; copy to change)."""
    root = tmp_path_factory.mktemp("trained")
    out = root / "model"
    config = write_config(root / "run.yaml", clocks, out, save_strategy="steps", save_steps=1,
                          instruction=INSTRUCTION)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
        assert main(["train", str(config)]) == 0
    assert (out / "checkpoint-1" / "model.safetensors").is_file() and (out / "run_config.json").is_file()
    return out


@pytest.mark.slow
def test_overwrite_with_a_bad_data_root_leaves_the_earlier_model(clocks, trained, tmp_path, capsys):
    """--overwrite removes the earlier run only once the new one has its data and model: a typo in
    data_root leaves every file of it as it was (no lone run_config.json)."""
    out = shutil.copytree(trained, tmp_path / "model")
    before = digest(out)
    config = write_config(tmp_path / "run.yaml", clocks, out)
    capsys.readouterr()
    assert main(["train", str(config), "--overwrite", "--data_root", str(tmp_path / "clokcs")]) == 1
    printed = capsys.readouterr()
    assert "clokcs" in error_line(printed.err, "train")
    assert "--overwrite: removed" not in printed.out
    assert digest(out) == before


@pytest.mark.slow
def test_eval_on_a_checkpoint_folder_asks_with_the_training_instruction(clocks, trained, tmp_path, capsys):
    """output_dir/checkpoint-N has no run_config.json of its own: eval takes the run's from its parent.
    A model folder with none anywhere is asked without one, and eval says so."""
    argv = ["--data", f"clocks:{clocks}", "--limit", "1", "--batch-size", "1", "--max-new-tokens", "2",
            "--min-pixels", "3136", "--max-pixels", "4096"]
    checkpoint = trained / "checkpoint-1"
    assert not (checkpoint / "run_config.json").exists()
    assert main(["eval", "--model", str(checkpoint), "--out", str(tmp_path / "eval"), *argv]) == 0
    printed = capsys.readouterr().out
    assert f"asking as in training ({trained / 'run_config.json'}): instruction {INSTRUCTION!r}" in printed
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["run"]["instruction"] == INSTRUCTION

    alone = shutil.copytree(checkpoint, tmp_path / "alone" / "checkpoint-1")
    assert main(["eval", "--model", str(alone), "--out", str(tmp_path / "eval_alone"), *argv]) == 0
    printed = capsys.readouterr().out
    assert f"{alone} has no run_config.json (nor its parent, for a checkpoint folder)" in printed
    assert json.loads((tmp_path / "eval_alone" / "metrics.json").read_text())["run"]["instruction"] is None


def test_eval_refuses_a_model_with_non_finite_weights(clocks, tmp_path, capsys):
    import torch

    from vlm_smmd.modeling import load_model_and_processor

    model, processor = load_model_and_processor("tiny", verbose=False)
    with torch.no_grad():
        model.model.language_model.layers[0].mlp.gate_proj.weight[2, 7] = float("nan")
    folder = tmp_path / "diverged"
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(folder), "--data", f"clocks:{clocks}", "--out", str(out), "--limit", "1",
                 "--min-pixels", "3136", "--max-pixels", "4096"]) == 1
    line = error_line(capsys.readouterr().err, "eval")
    assert line == (f"vlm-smmd eval: error: {folder}: 1 of 57 weight tensors hold NaN or infinite values (e.g. "
                    "model.language_model.layers.0.mlp.gate_proj.weight), as a diverged training run leaves them; "
                    "not evaluated")
    assert not out.exists()


# ---------------------------------------------------------------- eval, analyze, compare

def test_eval_refuses_existing_results_and_replaces_them_with_overwrite(clocks, tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["eval", "--model", "tiny", "--data", f"clocks:{clocks}", "--out", str(out), "--limit", "1",
            "--batch-size", "1", "--min-pixels", "3136", "--max-pixels", "4096"]
    assert main([*argv, "--max_new_tokens", "2"]) == 0  # the underscore spelling
    capsys.readouterr()
    before = digest(out)
    assert main([*argv, "--max-new-tokens", "2"]) == 2
    line = error_line(capsys.readouterr().err, "eval")
    assert "predictions.jsonl" in line and "--overwrite" in line
    assert digest(out) == before
    (out / "predictions.jsonl").write_text("")
    assert main([*argv, "--max-new-tokens", "2", "--overwrite"]) == 0
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 1


def predictions(path: Path) -> Path:
    records = [{"id": i, "source": "chartqa", "question": "q", "target": str(10 + i), "prediction": str(11 + i)}
               for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_analyze_refuses_an_existing_report_and_replaces_it_with_overwrite(tmp_path, capsys):
    pred, out = predictions(tmp_path / "predictions.jsonl"), tmp_path / "analysis"
    assert main(["analyze", str(pred), "--out", str(out)]) == 0
    capsys.readouterr()
    (out / "report.md").write_text("earlier")
    before = digest(out)
    assert main(["analyze", str(pred), "--out", str(out)]) == 2
    assert "report.md" in error_line(capsys.readouterr().err, "analyze")
    assert digest(out) == before
    assert main(["analyze", str(pred), "--out", str(out), "--overwrite"]) == 0
    assert (out / "report.md").read_text() != "earlier"


def test_compare_refuses_a_folder_of_something_else(tmp_path, capsys):
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.md").write_text("my own notes")
    before = digest(out)
    # no data to read: were the folder taken, the run would stop at once rather than train
    assert main(["compare", str(TINY_CONFIG), "--out", str(out), "--aux", "none", "--kernel-controls", "",
                 "--seeds", "0", "--data_root", str(tmp_path / "nodata"), "--synthesize", "none"]) == 2
    line = error_line(capsys.readouterr().err, "compare")
    assert "compare.json" in line and "new or empty --out" in line
    assert digest(out) == before


# ---------------------------------------------------------------- every command: usage errors in one line

@pytest.mark.parametrize("argv", [
    ["eval"], ["eval", "--model", "tiny", "--data", "clocks:x", "--out", "o", "--batch-size", "x"],
    ["analyze"], ["compare"], ["compare", str(TINY_CONFIG)], ["demo", "--bogus"], ["demo", "--num", "0"],
    ["train", "missing.yaml"], ["train", str(TINY_CONFIG), "--max_steps", "abc"],
    ["summary"], ["summary", "nolabel", "--out", "o"], ["summary", "x=missing", "--out", "o"],
])
def test_usage_errors_are_one_line(argv, capsys):
    with pytest.raises(SystemExit) as e:
        sys.exit(main(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == error_line(err, argv[0])


@pytest.mark.parametrize("argv", [["clocks"], ["clocks", "--num", "x", "--out", "o"], ["charts", "--bogus"],
                                  ["arithmetic", "--num", "2"], ["bogus"]])
def test_data_synth_usage_errors_are_one_line(argv, capsys):
    from data_synth.cli import main as data_synth

    with pytest.raises(SystemExit) as e:
        sys.exit(data_synth(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("data-synth") and "error:" in err, err


@pytest.mark.slow
def test_the_pixel_limit_is_a_config_key_and_an_eval_flag(clocks, tmp_path, capsys):
    # 64 x 64 clocks are 4,096 pixels: a limit of 4,000 makes every one a bad record, named in one line
    config = write_config(tmp_path / "run.yaml", clocks, tmp_path / "model", max_image_pixels=4000)
    assert main(["train", str(config)]) == 1
    line = error_line(capsys.readouterr().err, "train")
    assert "image too large" in line and "4,096 pixels" in line and not (tmp_path / "model").exists()
    assert main(["train", str(write_config(tmp_path / "bad.yaml", clocks, tmp_path / "m2", max_image_pixels=-1))]) == 2
    assert "max_image_pixels must be >= 0" in capsys.readouterr().err
    bad = write_config(tmp_path / "merges.yaml", clocks, tmp_path / "m3", scratch_vocab_merges=-1)
    assert main(["train", str(bad)]) == 2
    assert "scratch_vocab_merges must be >= 0, got -1" in capsys.readouterr().err
    argv = ["eval", "--model", "tiny", "--data", f"clocks:{clocks}", "--out", str(tmp_path / "eval"),
            "--max-new-tokens", "2", "--max-image-pixels", "4000"]
    assert main(argv) == 1
    assert "image too large" in error_line(capsys.readouterr().err, "eval")
    assert main(argv[:-1] + ["0"]) == 0  # 0: no limit


def test_a_plain_file_as_out_is_one_line_for_every_command(tmp_path, capsys):
    """analyze wrote over nothing but ended in a FileExistsError traceback after reading its inputs; the check
    now sits in the dispatcher, before any command's work."""
    from vlm_smmd.cli import main

    plain = tmp_path / "notes.txt"
    plain.write_text("keep me")
    preds = tmp_path / "p.jsonl"
    preds.write_text('{"id": "0", "source": "clocks", "question": "q", "prediction": "3:00", "target": "3:00"}\n')
    assert main(["analyze", str(preds), "--out", str(plain)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"vlm-smmd analyze: error: --out {plain} exists and is not a folder; choose a new --out"]
    assert plain.read_text() == "keep me"


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder no file can be made in: a read-only tmpfs mount as root (root ignores permission bits), a
    mode-0500 folder otherwise."""
    import os
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("root, and a read-only tmpfs cannot be mounted here")
    yield folder
    subprocess.run(["umount", str(folder)], capture_output=True)


@pytest.mark.parametrize("command", [
    ["analyze", "{preds}", "--out", "{ro}/a"],
    ["train", "configs/tiny_cpu_clock.yaml", "--output_dir", "{ro}/t", "--max_steps", "1"],
    ["compare", "configs/tiny_cpu_clock.yaml", "--aux", "none", "--seeds", "0", "--out", "{ro}/c"],
])
def test_an_unwritable_output_is_one_line_before_any_work(command, read_only_folder, tmp_path, capsys, monkeypatch):
    from vlm_smmd.cli import main

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    preds = tmp_path / "p.jsonl"
    preds.write_text('{"id": "0", "source": "clocks", "question": "q", "prediction": "3:00", "target": "3:00"}\n')
    argv = [a.format(preds=preds, ro=read_only_folder) for a in command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write there (read-only, no permission, or a file in its path)" in err[0], err
