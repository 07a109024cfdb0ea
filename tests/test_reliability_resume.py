"""A resumed `vlm-smmd train` continues its checkpoint's settings or is refused (issue 45 item 2)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from data_synth.writer import write_clock_dataset
from vlm_smmd.training.resume import SETTINGS_FILE, changes, check_data, check_settings, data_fingerprint

REPO = Path(__file__).resolve().parent.parent


def test_changes_split_model_keys_from_cadence_and_budget():
    old = {"learning_rate": 0.005, "seed": 0, "max_steps": 6, "num_train_epochs": 3.0, "logging_steps": 1,
           "aux": "smmd", "lora_r": 16, "eval_split": None}
    new = {**old, "learning_rate": 0.5, "max_steps": 8, "num_train_epochs": 1.0, "logging_steps": 5, "aux": "none",
           "eval_split": "test"}
    refused, allowed = changes(old, new)
    assert refused == {"learning_rate": (0.005, 0.5), "aux": ("smmd", "none")}
    # epochs are not used under a step budget; more steps and other logging change no trained weight
    assert allowed == {"max_steps": (6, 8), "num_train_epochs": (3.0, 1.0), "logging_steps": (1, 5),
                       "eval_split": (None, "test")}
    assert changes(old, {**old, "max_steps": 4})[0] == {"max_steps": (6, 4)}  # fewer steps: another schedule
    epochs = {**old, "max_steps": -1}
    assert changes(epochs, {**epochs, "num_train_epochs": 5.0})[1] == {"num_train_epochs": (3.0, 5.0)}
    assert changes(epochs, {**epochs, "num_train_epochs": 2.0})[0] == {"num_train_epochs": (3.0, 2.0)}
    assert changes(epochs, {**epochs, "max_steps": 10})[0] == {"max_steps": (-1, 10)}


def test_a_checkpoint_without_settings_is_named_and_bad_records_refused(tmp_path, capsys):
    from vlm_smmd.training import CheckpointError

    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    entry = check_settings(folder, {"seed": 0})
    assert entry["compared"] is False and entry["step"] == 4 and "keeps no run_settings.json" in capsys.readouterr().out
    (folder / SETTINGS_FILE).write_text('{"settings": {"seed": 0}')  # cut short
    with pytest.raises(CheckpointError, match="run_settings.json does not parse"):
        check_settings(folder, {"seed": 0})
    (folder / SETTINGS_FILE).write_text(json.dumps({"settings": {"seed": 0}, "data_fingerprint": "abc"}))
    entry = check_settings(folder, {"seed": 0})
    check_data(dict(entry), "abc")
    with pytest.raises(CheckpointError, match="trained on other data"):
        check_data(entry, "abd")


def test_data_fingerprint_follows_answers_and_image_files(tmp_path):
    from vlm_smmd.data import Sample

    image = tmp_path / "a.png"
    image.write_bytes(b"x" * 10)
    samples = [Sample(str(image), "What time?", "3:15", "clocks", "a"), Sample(None, "2+2?", "4", "t", "b")]
    base = data_fingerprint(samples)
    assert data_fingerprint(list(samples)) == base
    assert data_fingerprint([samples[0], Sample(None, "2+2?", "5", "t", "b")]) != base
    assert data_fingerprint(samples[:1]) != base
    image.write_bytes(b"x" * 11)  # the file was replaced by another image
    assert data_fingerprint(samples) != base


def _train(config, *overrides):
    proc = subprocess.run([sys.executable, "-m", "vlm_smmd.cli", "train", str(config), *overrides], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**__import__("os").environ,
                                                                            "OMP_NUM_THREADS": "1"})
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow
def test_resume_with_a_changed_setting_is_refused_and_more_steps_recorded(tmp_path):
    data = tmp_path / "data"
    write_clock_dataset(data, num=8, seed=3, size=96, splits="train=0.5,test=0.5", progress=False)
    config = tmp_path / "run.yaml"
    values = {"model_name_or_path": "tiny", "dataset": "clocks", "data_root": str(data), "max_pixels": 112 * 112,
              "aux": "smmd", "aux_lambda": 0.5, "output_dir": str(tmp_path / "out"), "use_cpu": True, "max_steps": 6,
              "per_device_train_batch_size": 2, "learning_rate": 0.005, "logging_steps": 1, "save_strategy": "steps",
              "save_steps": 2, "disable_tqdm": True, "seed": 0}
    config.write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in values.items()))
    rc, log = _train(config)
    assert rc == 0, log[-3000:]
    checkpoint = tmp_path / "out" / "checkpoint-2"
    assert json.loads((checkpoint / SETTINGS_FILE).read_text())["settings"]["learning_rate"] == 0.005
    shutil.rmtree(tmp_path / "out" / "checkpoint-4")  # as if killed after checkpoint-2
    shutil.rmtree(tmp_path / "out" / "checkpoint-6")
    before = (tmp_path / "out" / "run_config.json").read_text()

    for overrides, listed in ((["--learning_rate", "0.5"], "learning_rate 0.005 -> 0.5"),
                              (["--aux", "none", "--seed", "7"], 'aux "smmd" -> "none", seed 0 -> 7'),
                              (["--max_steps", "4"], "max_steps 6 -> 4 (max_steps may only grow)")):
        rc, log = _train(config, "--resume_from_checkpoint", str(checkpoint), *overrides)
        assert rc == 1 and f"was trained with other settings: {listed};" in log, log[-3000:]
        assert "Traceback" not in log and "rendering" not in log and "preflight" not in log  # before any work
    assert (tmp_path / "out" / "run_config.json").read_text() == before

    # the same data_root with one answer edited: refused before the model loads
    meta = data / "train" / "metadata.jsonl"
    original = meta.read_text()
    meta.write_text(original.replace('"answer": "', '"answer": "1', 1))
    rc, log = _train(config, "--resume_from_checkpoint", "true")
    assert rc == 1 and "was trained on other data" in log and "trainable params" not in log, log[-3000:]
    meta.write_text(original)

    rc, log = _train(config, "--resume_from_checkpoint", "true", "--max_steps", "8", "--logging_steps", "2")
    assert rc == 0, log[-3000:]
    assert "continuing" in log and "max_steps 6 -> 8" in log
    run_config = json.loads((tmp_path / "out" / "run_config.json").read_text())
    assert run_config["max_steps"] == 8 and run_config["learning_rate"] == 0.005
    assert run_config["resumed"] == [{"checkpoint": str(checkpoint), "step": 2,
                                      "changed": {"logging_steps": [1, 2], "max_steps": [6, 8]}}]
    # the checkpoints of the resumed part carry the resume, so a second resume extends the list
    assert json.loads((tmp_path / "out" / "checkpoint-8" / SETTINGS_FILE).read_text())["resumed"] == \
        run_config["resumed"]
