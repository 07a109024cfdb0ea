"""`vlm-smmd train CONFIG --dry-run`: the released architecture at truncated depth (widths and index lists
checked on the config arguments), a preset config end to end in a temporary folder that is removed and never
the config's output_dir, a config that cannot work as one line, and (slow) every ready config's dry run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vlm_smmd.experiments.dry_run import truncated_architecture
from vlm_smmd.families import published_family

REPO = Path(__file__).resolve().parent.parent
READY = ["qwen2_5_vl_3b_clock_smmd", "qwen2_5_vl_7b_chartqa_smmd", "qwen2_5_vl_7b_chartqa_smmd_lora",
         "qwen2_5_vl_7b_chartqa_gsm8k_mix", "qwen2_5_vl_7b_refcoco", "qwen3_vl_8b_clock_smmd", "qwen3_vl_8b_refcoco",
         "llama3_2_11b_vision_chartqa_smmd", "qwen2_5_7b_gsm8k_smmd"]


def published(hub_id):
    return published_family(hub_id).published[hub_id]


def test_truncation_keeps_every_width_and_maps_the_index_lists():
    real = published("Qwen/Qwen3-VL-8B-Instruct")
    cut = truncated_architecture(real, 2, 2)
    assert cut["text_config"]["num_hidden_layers"] == 2 and cut["vision_config"]["depth"] == 2
    assert cut["vision_config"]["deepstack_visual_indexes"] == [0, 1]  # blocks 8, 16, 24 of 27, distinct
    for part in ("text_config", "vision_config"):
        widths = {k: v for k, v in real[part].items() if k not in ("num_hidden_layers", "depth", "deepstack_visual_indexes")}
        assert {k: cut[part][k] for k in widths} == widths
    assert real["vision_config"]["depth"] == 27  # the published table is left as it was

    qwen25 = truncated_architecture(published("Qwen/Qwen2.5-VL-7B-Instruct"), 2, 3)
    assert qwen25["vision_config"]["fullatt_block_indexes"] == [2]  # window blocks, then a full one

    mllama = truncated_architecture(published("meta-llama/Llama-3.2-11B-Vision-Instruct"), 2, 2)
    text, vision = mllama["text_config"], mllama["vision_config"]
    assert text["num_hidden_layers"] == 2 and text["cross_attention_layers"] == [1]
    # five taps of the encoder's per-layer outputs (one a layer, no embedding): 3, 7, 15, 23, 30 of 0..31 scaled
    # to 0..1; the projector keeps its 7680 inputs
    assert vision["intermediate_layers_indices"] == [0, 0, 0, 1, 1]
    assert vision["num_hidden_layers"] == 2 and vision["num_global_layers"] == 2
    assert vision["vision_output_dim"] == 1280 * (len(vision["intermediate_layers_indices"]) + 1)


def error_line(stderr: str) -> str:
    """The one error line (transformers' FutureWarnings may come before it); no traceback."""
    assert "Traceback" not in stderr, stderr[-2000:]
    (line,) = [x for x in stderr.splitlines() if x.startswith("vlm-smmd train: error:")]
    return line


def run_cli(*args, timeout=300):
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "vlm_smmd.cli", "train", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # end to end in a process of its own: build, 2 steps, save 85 MB, reload, answer (6-12 s)
def test_dry_run_of_a_preset_config_leaves_output_dir_alone(tmp_path):
    out = tmp_path / "never"
    result = run_cli("configs/tiny_cpu_arithmetic.yaml", "--dry-run", "--output_dir", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "dry run passed: the tiny-qwen2.5 preset" in result.stdout
    assert "2 steps of 1 sample" in result.stdout and "reloaded, answered" in result.stdout
    assert not out.exists()


def run_main(capsys, *args) -> tuple[int, str]:
    """`vlm-smmd train ARGS` in this process (the command's main(), as the console script calls it): exit status
    and stderr. For refusals that come before any work; a dry run that trains runs in a process of its own."""
    from vlm_smmd.cli import main

    capsys.readouterr()
    status = main(["train", *args])
    return status, capsys.readouterr().err


def test_a_lora_target_the_model_lacks_is_one_line(capsys):
    status, err = run_main(capsys, "configs/qwen2_5_7b_gsm8k_smmd.yaml", "--dry-run", "--lora", "true",
                           "--lora_vision", "true")
    assert status == 1
    assert error_line(err).startswith("vlm-smmd train: error: lora_vision: Qwen2.5 (text) has no vision")


def test_an_unknown_hub_id_is_one_line(capsys):
    status, err = run_main(capsys, "configs/qwen2_5_7b_gsm8k_smmd.yaml", "--dry-run", "--model_name_or_path",
                           "someone/Some-7B")
    assert status == 1
    line = error_line(err)
    assert "someone/Some-7B" in line and "Qwen/Qwen2.5-VL-7B-Instruct" in line


@pytest.mark.slow
@pytest.mark.real_size  # 1-3 min and 6-15 GB each: not in the default run (bench/dry_run_all.py runs them too)
@pytest.mark.parametrize("name", READY)
def test_every_ready_config_dry_runs(name):
    result = run_cli(f"configs/{name}.yaml", "--dry-run", timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "dry run passed" in result.stdout and "2 text layers" in result.stdout


def test_counting_on_the_meta_device_ignores_zero3_and_leaves_it_set():
    """A stage-3 DeepSpeed config (global in transformers once TrainingArguments names one) made the meta-device
    count of a vision model fail ("Cannot copy out of meta tensor"): the count turns it off, then back on."""
    from transformers.integrations.deepspeed import (
        HfDeepSpeedConfig,
        is_deepspeed_zero3_enabled,
        set_hf_deepspeed_config,
        unset_hf_deepspeed_config,
    )

    from vlm_smmd.config import ModelArguments
    from vlm_smmd.experiments.dry_run import _counts

    held = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1})
    set_hf_deepspeed_config(held)
    try:
        total, trainable, _ = _counts("tiny", ModelArguments(model_name_or_path="tiny", freeze_vision=True))
        assert is_deepspeed_zero3_enabled()
    finally:
        unset_hf_deepspeed_config()
    assert 0 < trainable < total  # the vision tower is frozen, so it was built and counted


def test_train_help_names_the_dry_run():
    result = run_cli("--help")
    assert result.returncode == 0 and "[--dry-run]" in result.stdout.splitlines()[0]
    assert "--dry-run: build the config's released architecture" in result.stdout


def test_the_bench_reads_the_summary_the_dry_run_prints():
    """bench/dry_run_all.py parses `summary()`'s lines: a change to either shows here."""
    import importlib.util

    from vlm_smmd.experiments.dry_run import summary

    spec = importlib.util.spec_from_file_location("dry_run_all", REPO / "bench" / "dry_run_all.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = {"built": "X at its published width", "depth": "2 text layers, 2 vision blocks", "parameters": 1234567,
              "trainable_parameters": 89012, "dtype": "bf16", "lora": True, "gradient_checkpointing": True,
              "zero_stage": 3, "vocabulary_frozen": 5, "data": "a stand-in", "min_pixels": 1, "max_pixels": 2,
              "step_s": [12.34, 5.0], "train_loss": 3.0, "saved_mb": 10.0, "peak_rss_mb": 100, "total_s": 20.0,
              "answer": {"id": "a", "prediction": "1", "target": "2"}}
    assert bench.parse_summary(summary(report)) == {"depth": "2 text layers, 2 vision blocks", "parameters": 1234567,
                                                    "trainable_parameters": 89012, "step_s": [12.3, 5.0]}
    assert bench.reason(-9, "", "").startswith("killed by signal 9")
    assert bench.reason(1, "FutureWarning: x\nvlm-smmd train: error: lora: no\n  warnings.warn(\n", "") == \
        "vlm-smmd train: error: lora: no"
