"""`vlm-smmd demo` end to end at a reduced size, and every README command's --help."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_smmd.experiments.demo import run_demo, summary

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_demo_end_to_end_small(tmp_path, capsys):
    results = run_demo(tmp_path / "demo", settings=("bar", "clock"), num=40, steps=3, eval_limit=4, max_new_tokens=6,
                       overrides={"per_device_train_batch_size": 2, "logging_steps": 1})
    assert list(results) == ["bar", "clock"]
    printed = capsys.readouterr().out
    for name, source in (("bar", "chartqa"), ("clock", "clocks")):
        paths = results[name]
        assert list(paths["splits"]) == ["test", "test_unseen"]
        for split, r in paths["splits"].items():
            records = [json.loads(line) for line in r["predictions"].read_text().splitlines()]
            assert 1 <= len(records) <= 4 and all(r["source"] == source and r["split"] == split for r in records)
            metrics = json.loads(r["metrics"].read_text())
            assert metrics["sources"][source][split]["count"] == len(records)
            # held out by construction: no image shared with training; the unseen split shares no answer either
            assert r["leakage"]["images"]["k"] == 0 and r["leakage"]["leaks"] is False
            if split == "test_unseen":
                assert r["leakage"]["answers"]["k"] == 0
            assert f" {split} (" in printed and "test images also in training: 0 of" in printed
        report = paths["report"].read_text()
        assert f"![training curve {name} test]" in report  # the run's identity and curve, from the model folder
        for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report):
            assert (paths["report"].parent / image).is_file()
        assert (paths["model"] / "config.json").is_file() and (paths["model"] / "tokenizer_config.json").is_file()
        run_config = json.loads((paths["model"] / "run_config.json").read_text())
        assert run_config["model_name_or_path"] == "scratch" and run_config["max_steps"] == 3
        assert f"{name}: trained" in printed and "one seed" in printed
    assert printed.count("chance") >= 8


def _records(predictions, targets, source):
    return [{"id": i, "source": source, "question": "q", "targets": [t], "prediction": p}
            for i, (p, t) in enumerate(zip(predictions, targets))]


def _result(analysis):
    return {"splits": {"test": {"analysis": analysis, "leakage": {"lines": ["test images also in training: 0 of 24"]}}},
            "train_seconds": 1.0, "report": "r.md"}


def test_summary_gives_chance_and_denominators_and_warns_on_collapse():
    from vlm_smmd.analysis import analyze_records

    targets = [f"{h}:{m:02d}" for h in range(1, 13) for m in (5, 40)]
    collapsed = analyze_records(_records(["1:01"] * 20 + ["11:0"] * 4, targets, "clocks"))
    lines = summary("clock", _result(collapsed))
    assert lines[0].startswith("clock: trained 1 s (one seed")
    assert lines[1].startswith(" test (new images of values seen in training): 24 clocks")
    assert lines[2] == "  test images also in training: 0 of 24"
    assert lines[3].startswith("  hour correct: 0.083, chance 0.04")  # chance: every target vs every other answer
    gap = next(line for line in lines if "mean gap (min), answers holding a time" in line)
    assert "(over 20 clock answers holding a time)" in gap  # "11:0" holds no time: the denominator says so
    assert any("digits right per place" in line and "minute units" in line for line in lines)
    assert "WARNING: the model mostly repeats itself" in lines[-2]

    varied = analyze_records(_records([f"{v + 1}" for v in range(30)], [f"{v}" for v in range(30)], "chartqa"))
    lines = summary("bar", _result(varied))
    mae = next(line for line in lines if line.startswith("  mean absolute error"))
    assert mae.startswith("  mean absolute error: 1.000") and "chance" in mae
    assert not any("WARNING" in line for line in lines) and "30 distinct answers for 30 distinct targets" in lines[-2]


def readme_commands():
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, re.S)
    commands = set()
    for block in blocks:
        for line in block.splitlines():
            for tool in ("vlm-smmd", "data-synth"):
                for match in re.finditer(rf"(?:^|[\s;&|]){tool} ([a-z][a-z-]*)", line):
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


def test_demo_overwrite_keeps_the_earlier_demo_when_the_data_does_not_fit(tmp_path):
    from vlm_smmd.cli import main as cli

    def main(argv):
        return cli(["demo", *argv])

    out = tmp_path / "demo"
    (out / "bar" / "model").mkdir(parents=True)
    (out / "bar" / "model" / "config.json").write_text("{}")
    (out / "bar" / "model" / "run_config.json").write_text("{}")  # the demo's own model folder
    assert main(["--out", str(out), "--num", "40"]) == 2  # an earlier demo: refused without --overwrite
    from vlm_smmd.config import load_config
    from vlm_smmd.experiments.demo import CONFIGS
    from vlm_smmd.training import synthesize_if_missing

    _, data_args, _, _ = load_config(CONFIGS / "scratch_cpu_bar.yaml", {"data_root": str(out / "data" / "bar"),
                                                                         "synthesize_num": 40})
    synthesize_if_missing(data_args)  # the earlier demo's data, rendered with --num 40
    assert main(["--out", str(out), "--num", "50", "--steps", "1", "--overwrite"]) == 1  # other settings
    assert (out / "bar" / "model" / "config.json").read_text() == "{}"  # the data error touched nothing


def test_demo_overwrite_never_removes_a_folder_it_did_not_write(tmp_path, capsys):
    from vlm_smmd.cli import main as cli

    out = tmp_path / "demo"
    notes = out / "bar" / "model" / "NOTES.txt"  # the user's own folder where the demo puts its model
    notes.parent.mkdir(parents=True)
    notes.write_text("notes")
    (out / "bar" / "model" / "config.json").write_text("{}")
    assert cli(["demo", "--out", str(out), "--settings", "bar", "--num", "40", "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "was not written by vlm-smmd demo" in err and "Traceback" not in err
    assert notes.read_text() == "notes" and not (out / "data").exists()  # refused before any work
