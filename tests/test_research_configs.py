"""Every research config (configs/scratch_cpu_*.yaml) as committed trains 3 steps on a small rendering of its
own data and evaluates on each of its test splits through `vlm-smmd eval`, asking as it was trained."""

import json
from pathlib import Path

import pytest

from vlm_smmd.config import load_config

REPO = Path(__file__).resolve().parent.parent
# the research base (a mixture) and its fine-tunes (which start from its folder): tests/test_base_model.py
CONFIGS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "configs").glob("scratch_cpu_*.yaml")
                 if p.stem != "scratch_cpu_base" and not p.stem.startswith("scratch_cpu_ft_"))
SMALL = {"clocks": 200, "word_problems": 80}  # test split of 2.5 % (clocks) or val of 5 % (word problems): 5, 4


def test_every_research_setting_is_tested():
    assert {Path(c).stem for c in CONFIGS} >= {"scratch_cpu_arithmetic", "scratch_cpu_bar", "scratch_cpu_clock",
                                                 "scratch_cpu_point", "scratch_cpu_word_problems"}


@pytest.mark.parametrize("config", CONFIGS)
def test_research_config_trains_three_steps_and_evaluates(tmp_path, config, capsys):
    from vlm_smmd.cli import main
    from vlm_smmd.training import run

    root, out = tmp_path / "data", tmp_path / "out"
    data_args = load_config(REPO / config, {})[1]
    overrides = {"data_root": str(root), "output_dir": str(out), "max_steps": "3",
                 "synthesize_num": str(SMALL.get(data_args.synthesize, 40)), "per_device_train_batch_size": "4",
                 "logging_steps": "1", "disable_tqdm": "true", "report_to": "none"}
    metrics = run(*load_config(REPO / config, overrides))
    assert metrics["train_loss"] == metrics["train_loss"]  # finite, not NaN
    run_config = json.loads((out / "run_config.json").read_text())
    assert run_config["system_prompt"] == data_args.system_prompt
    for split in data_args.test_splits:
        capsys.readouterr()
        assert main(["eval", "--model", str(out), "--data", f"{data_args.dataset}:{root}", "--split", split,
                     "--limit", "3", "--out", str(tmp_path / f"eval_{split}")]) == 0
        printed = capsys.readouterr().out
        if data_args.system_prompt is not None:  # asked with the trained system turn, not the family's default
            assert f"system prompt {data_args.system_prompt!r}" in printed
        saved = json.loads((tmp_path / f"eval_{split}" / "metrics.json").read_text())
        assert saved["run"]["system_prompt"] == data_args.system_prompt
        assert saved["count"] == 3
