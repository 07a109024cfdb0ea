"""`vlm-smmd demo` end to end at a reduced size, and every README command's --help."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_smmd.demo import run_demo

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_demo_end_to_end_small(tmp_path):
    paths = run_demo(tmp_path / "demo", num=40, steps=3, eval_limit=4, max_new_tokens=4,
                     overrides={"per_device_train_batch_size": 2, "logging_steps": 1})
    records = [json.loads(line) for line in paths["predictions"].read_text().splitlines()]
    assert len(records) == 4 and all(r["source"] == "clocks" for r in records)
    metrics = json.loads(paths["metrics"].read_text())
    assert metrics["sources"]["clocks"]["test"]["count"] == 4
    report = paths["report"].read_text()
    assert "tiny-smmd" in report
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report):
        assert (paths["report"].parent / image).is_file()
    assert (paths["model"] / "config.json").is_file() and (paths["model"] / "tokenizer_config.json").is_file()


def readme_commands():
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, re.S)
    commands = set()
    for block in blocks:
        for line in block.splitlines():
            for tool in ("vlm-smmd", "data-synth"):
                for match in re.finditer(rf"(?:^|[\s;&|]){tool} ([a-z]+)", line):
                    commands.add((tool, match.group(1)))
    return sorted(commands)


def test_readme_names_commands():
    assert ("vlm-smmd", "demo") in readme_commands()


@pytest.mark.parametrize("tool, command", readme_commands())
def test_every_readme_command_has_help(tool, command):
    module = {"vlm-smmd": "vlm_smmd.cli", "data-synth": "data_synth.cli"}[tool]
    proc = subprocess.run([sys.executable, "-m", module, command, "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower()
