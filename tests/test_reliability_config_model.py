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
     r"run.yaml: line 9: unknown key 'hand_colr' in synthesize_options.style \(clock style\) \(did you mean"),
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
    # known keys pass and travel as JSON text
    _, data_args, _, _ = check_config(config, {"synthesize_options": "{plain: true, style: {hour_hand_color: red}}"})
    assert data_args.synthesize_options == '{"plain": true, "style": {"hour_hand_color": "red"}}'
