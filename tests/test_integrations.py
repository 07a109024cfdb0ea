"""SMMD in the trainers people already use: the README's examples run as written (on tiny random models),
ms-swift's own SFT trainer with our plugin, and LLaMA-Factory's own SFT workflow with our recipe, each in a
fresh venv that holds the framework and the vlm-smmd core (the frameworks pin older transformers and TRL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integrations.support import (
    Venv,
    checkout_copy,
    readme_examples,
    run_example,
    save_tiny_checkpoints,
    torch_links,
)
from vlm_smmd.integrations.ms_swift import OPTIONS_VARIABLE, PLUGIN, SwiftConfigError, loss_options
from vlm_smmd.losses import AUX_NAMES

# the framework releases tested (the newest on PyPI); LLaMA-Factory under its main branch's transformers pin
MS_SWIFT = "ms-swift==4.6.0"
LLAMA_FACTORY = ("llamafactory==0.9.5", "transformers>=4.55.0,<=5.8.0,!=5.6.0")
# each README example, the tiny checkpoint it runs on, and the loss calls a run makes
HERE = {"hf-trainer": ("text", ["drop-in"] * 2), "trl-text": ("text", ["drop-in"] * 2),
        "trl-vlm": ("vlm", ["mixin"] * 2)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_checkpoints(tmp_path_factory.mktemp("tiny"))


def framework_venv(tmp_path: Path, *packages: str) -> Venv:
    """A fresh venv with `packages` and the checkout's core install, resolved together by pip."""
    links = tmp_path / "torch"
    torch_links(links)
    venv = Venv.create(tmp_path / "venv", links)
    venv.pip("install", *packages, checkout_copy(tmp_path / "src"))
    return venv


def test_every_readme_example_is_run_by_a_test():
    examples = readme_examples()
    assert set(examples) == set(HERE) | {"ms-swift", "llama-factory"}
    assert all(e.code for e in examples.values())


def test_the_swift_plugin_path_and_options():
    printed = subprocess.run([sys.executable, "-m", "vlm_smmd.integrations.ms_swift"], capture_output=True,
                             text=True, check=True).stdout.strip()
    assert Path(printed) == PLUGIN and PLUGIN.is_file()
    assert loss_options({}) == {} and loss_options({OPTIONS_VARIABLE: " "}) == {}
    assert loss_options({OPTIONS_VARIABLE: '{"aux_lambda": 0.5, "sigmas": [1, 2]}'}) == {"aux_lambda": 0.5,
                                                                                       "sigmas": [1, 2]}
    with pytest.raises(SwiftConfigError, match=f"^{OPTIONS_VARIABLE} is not JSON"):
        loss_options({OPTIONS_VARIABLE: "aux_lambda=0.5"})
    with pytest.raises(SwiftConfigError, match="must be a JSON object"):
        loss_options({OPTIONS_VARIABLE: "[0.5]"})


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HERE))
def test_readme_example_trains_here(tiny, tmp_path, name):
    """With this repository's transformers and TRL: every step goes through the numeric loss."""
    kind, expected = HERE[name]

    def run_here(command, cwd, env):
        command = [sys.executable, *command[1:]] if command[0] == "python" else command
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600,
                                env={**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", **env})
        assert result.returncode == 0, result.stderr[-4000:]

    calls = run_example(run_here, name, tmp_path / name, tiny[kind])
    assert [c["kind"] for c in calls] == expected


@pytest.mark.slow
def test_ms_swift_trains_with_the_plugin(tiny, tmp_path):
    """ms-swift's own `swift sft` with `--external_plugins` and `--loss_type smmd`: every aux loss is a loss
    type; the loss swift logs is ours and equals CE + 0.7 * SMMD recomputed in float64 from the logits and
    labels swift handed over, its CE part equals swift's own cross_entropy loss type; bad options are one line;
    the README example trains."""
    venv = framework_venv(tmp_path, MS_SWIFT)
    found = venv.check("swift_check.py", tiny["text"], "numbers.jsonl", tmp_path / "out",
                       cwd=_swift_data(tmp_path))
    assert found["registered"] == sorted(set(AUX_NAMES) - {"none"})
    assert found["steps_seen"] == 1 and found["logged_loss"] == pytest.approx(found["loss"], rel=1e-6)
    assert found["loss"] == pytest.approx(found["reference"], rel=1e-6)
    assert found["ce"] == pytest.approx(found["swift_ce"], rel=1e-6) and found["ce"] < found["loss"]
    assert found["num_items"] == found["answer_tokens"] and found["numeric_tokens"] == 8  # 7, 42, 15, 123
    assert found["logits_shape"][:2] == found["labels_shape"]
    assert "SMMD_OPTIONS" in found["bad_options"] and "sigmas" in found["bad_options"]

    calls = run_example(venv.run, "ms-swift", tmp_path / "readme", tiny["text"])
    assert {c["kind"] for c in calls} == {"drop-in"}
    venv.remove()


def _swift_data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    rows = [{"messages": [{"role": "user", "content": f"What is {a} + {b}?"},
                          {"role": "assistant", "content": str(a + b)}]}
            for a, b in [(3, 4), (12, 30), (7, 8), (100, 23)]]
    (folder / "numbers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.slow
def test_llama_factory_trains_with_the_recipe(tiny, tmp_path):
    """LLaMA-Factory's own SFT workflow after `use_numeric_loss`: it builds our trainer subclass, the loss it
    logs equals CE + 0.7 * SMMD recomputed in float64, its own loss switches are refused beside ours; the
    README recipe trains."""
    venv = framework_venv(tmp_path, *LLAMA_FACTORY)
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"instruction": f"What is {a} + {b}?", "input": "", "output": str(a + b)}
            for a, b in [(3, 4), (12, 30), (7, 8), (100, 23)]]
    (data / "numbers.json").write_text(json.dumps(rows))
    (data / "dataset_info.json").write_text(json.dumps({"numbers": {"file_name": "numbers.json"}}))
    found = venv.check("llama_factory_check.py", tiny["text"], data, tmp_path / "out")
    assert found["trainer_class"] == "NumericCustomSeq2SeqTrainer" and found["steps_seen"] == 1
    assert found["logged_loss"] == pytest.approx(found["loss"], rel=1e-6)
    assert found["loss"] == pytest.approx(found["reference"], rel=1e-6)
    assert found["num_items"] == found["answer_tokens"] and found["numeric_tokens"] == 8
    assert found["own_loss_refused"].startswith("use_dft_loss replaces the loss")

    calls = run_example(venv.run, "llama-factory", tmp_path / "readme", tiny["text"])
    assert [c["kind"] for c in calls] == ["drop-in"] * 2  # 4 examples, batches of 2, one epoch
    venv.remove()
