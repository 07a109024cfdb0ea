"""Issue 45 item 8: unknown keys inside the config's nested mappings, and unreadable model files, are one
line naming the file (and line and key)."""

import subprocess
import sys
from pathlib import Path

import pytest

from vlm_smmd.config import ConfigError, check_config

REPO = Path(__file__).resolve().parent.parent


def _config(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


BASE = "model_name_or_path: tiny\ndataset: clocks\ndata_root: {root}\noutput_dir: {out}\nuse_cpu: true\n"


def test_unknown_nested_key_is_one_line_before_rendering(tmp_path):
    root = tmp_path / "data"
    config = _config(tmp_path, BASE.format(root=root, out=tmp_path / "out") +
                     "synthesize: clocks\nsynthesize_num: 8\nsynthesize_options:\n  splits: train=0.5,test=0.5\n"
                     "  plian: true\n")
    proc = subprocess.run([sys.executable, "-m", "vlm_smmd.cli", "train", str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"vlm-smmd train: error: {config}: line 10: unknown key 'plian' in synthesize_options of synthesize: clocks "
        "(did you mean 'plain'?)"]
    assert "rendering" not in proc.stdout and not root.exists()


@pytest.mark.parametrize("extra, message", [
    ("synthesize: clocks\nsynthesize_options:\n  style:\n    hand_colr: red\n",
     r"run.yaml: line 9: unknown key 'hand_colr' in synthesize_options.style \(ClockStyle\) \(did you mean"),
    ("synthesize: clocks\nsynthesize_options: {size: 64}\n",  # clocks: synthesize_size sets it
     r"line 7: unknown key 'size' in synthesize_options of synthesize: clocks"),
    ("synthesize: bars\nsynthesize_options:\n  bar_place: 1\n",
     r"line 8: unknown key 'bar_place' in synthesize_options of synthesize: bars \(did you mean 'bar_places'\?\)"),
    ("reader_options: {verify: true}\n", r"line 6: unknown key 'verify' in reader_options of dataset clocks"),
    ("dataset: gsm8k\nreader_options: {target: final, max_record: 3}\n",
     r"unknown key 'max_record' in reader_options of dataset gsm8k \(did you mean 'max_records'\?\)"),
    ("dataset: mixture\nmixture:\n  - {name: gsm8k, root: g}\n  - name: dvqa\n    root: d\n    verify_image: true\n",
     r"line 10: unknown key 'verify_image' in mixture entry 1 \(dvqa\) \(did you mean 'verify_images'\?\)"),
])
def test_unknown_keys_at_any_depth_name_file_line_and_key(tmp_path, extra, message):
    text = BASE.format(root=tmp_path / "d", out=tmp_path / "o")
    if extra.startswith("dataset:"):
        text = text.replace("dataset: clocks\n", "")
    config = _config(tmp_path, text + extra)
    with pytest.raises(ConfigError, match=message):
        check_config(config)


def test_nested_options_from_the_command_line_go_through_the_safe_loader(tmp_path):
    config = _config(tmp_path, BASE.format(root=tmp_path / "d", out=tmp_path / "o") + "synthesize: clocks\n")
    with pytest.raises(ConfigError, match=r"--synthesize_options on the command line: unknown key 'wrokers'.*'workers'"):
        check_config(config, {"synthesize_options": "{wrokers: 2}"})
    with pytest.raises(ConfigError, match="key 'splits' is given twice"):
        check_config(config, {"synthesize_options": "{splits: a, splits: b}"})
    bomb = "{a: &a [1,1,1,1,1,1,1,1,1,1], " + ", ".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]" for p, n in zip("abcd", "bcde")) + "}"
    with pytest.raises(ConfigError, match="aliases expand past"):
        check_config(config, {"reader_options": bomb})
    # known keys pass, parsed once into a mapping
    _, data_args, _, _ = check_config(config, {"synthesize_options": "{plain: true, style: {hour_hand_color: red}}"})
    assert data_args.synthesize_options == {"plain": True, "style": {"hour_hand_color": "red"}}


# ---------------------------------------------------------------- model folders


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """The tiny text preset saved with save_pretrained (model.safetensors, tokenizer.json, config.json)."""
    from vlm_smmd.modeling import load_model_and_processor

    folder = tmp_path_factory.mktemp("model") / "m"
    model, tokenizer = load_model_and_processor("tiny-qwen2.5", verbose=False)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _damaged(saved_model, tmp_path, name, damage):
    import shutil

    folder = tmp_path / "m"
    folder.mkdir()
    for path in saved_model.iterdir():  # the damaged file a copy, the rest links to the saved model
        (shutil.copy(path, folder / path.name) if path.name == name else (folder / path.name).symlink_to(path))
    damage(folder / name)
    return folder


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _garble(path):
    data = bytearray(path.read_bytes())
    data[8:40] = b"x" * 32
    path.write_bytes(bytes(data))


def _pickle_code(path):
    import os
    import pickle

    class Runs:
        def __reduce__(self):
            return (os.getcwd, ())

    path.unlink()
    (path.parent / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": Runs()}))


@pytest.mark.parametrize("name, damage, message", [
    ("model.safetensors", _truncate, r"model.safetensors: unreadable weights: cut short \("),
    ("model.safetensors", _garble, "model.safetensors: unreadable weights: its safetensors header is not JSON"),
    ("model.safetensors", lambda p: p.write_bytes(b""), "model.safetensors: unreadable weights: empty"),
    ("tokenizer.json", _truncate, "tokenizer.json: unreadable model file: not valid JSON"),
    ("config.json", lambda p: p.write_text('{"model_type": "qwen2",'), "config.json"),
    ("model.safetensors", _pickle_code, "pytorch_model.bin: refused: a pickled weights file holding more than tensors"),
])
def test_an_unreadable_model_file_is_one_error_naming_it(saved_model, tmp_path, name, damage, message):
    from vlm_smmd.modeling import ModelLoadError, check_model_folder, load_model_and_processor

    folder = _damaged(saved_model, tmp_path, name, damage)
    if damage in (_truncate, _pickle_code):  # through the loader (the others take the same path)
        with pytest.raises(ModelLoadError, match=message) as error:
            load_model_and_processor(str(folder), verbose=False)
    if damage is not _pickle_code:  # found by the cheap check, before transformers reads a file
        with pytest.raises(ModelLoadError, match=message) as error:
            check_model_folder(folder)
    assert str(folder) in str(error.value) and "\n" not in str(error.value)


def test_the_saved_model_itself_loads(saved_model):
    from vlm_smmd.modeling import check_model_folder, load_model_and_processor

    check_model_folder(saved_model)
    model, _ = load_model_and_processor(str(saved_model), verbose=False)
    assert model.config.model_type == "qwen2"


@pytest.mark.slow
def test_eval_names_a_truncated_weights_file_in_one_line(saved_model, tmp_path):
    folder = _damaged(saved_model, tmp_path, "model.safetensors", _truncate)
    data = tmp_path / "gsm"
    data.mkdir()
    (data / "test.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    proc = subprocess.run([sys.executable, "-m", "vlm_smmd.cli", "eval", "--model", str(folder), "--data",
                           f"gsm8k:{data}", "--split", "test", "--out", str(tmp_path / "ev")], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env={**__import__("os").environ,
                                                                            "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"vlm-smmd eval: error: {folder}/model.safetensors: unreadable weights: cut short")
