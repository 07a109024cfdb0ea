"""bench/gpu_acceptance.sh --cpu-smoke: the GPU acceptance run's whole path (gpu_step's four configurations
under DeepSpeed ZeRO-2, the plan for the same model and batch, one JSON file) on the CPU at tiny size."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_cpu_smoke_writes_one_json_of_finite_figures(tmp_path):
    out = tmp_path / "acceptance.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", "bench/gpu_acceptance.sh", "--cpu-smoke", "--out", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["mode"] == "cpu_smoke" and result["flash_attention"] is None
    step = result["step"]
    for config in ("answer_none", "answer_smmd", "full_none", "full_smmd"):
        assert math.isfinite(step[f"{config}_step_ms"]) and step[f"{config}_step_ms"] > 0
        assert step[f"{config}_peak_rss_mb"] > 0
    plan_keys = ("plan_model_states_mb", "plan_activations_mb", "plan_logits_answer_only_mb", "plan_logits_full_mb",
                 "plan_peak_mb", "plan_total_with_reserve_gib")
    assert all(math.isfinite(result[k]) and result[k] > 0 for k in plan_keys)
    # the full logits the answer-only head avoids are the batch's [B, T, V], far beyond its answer rows
    assert result["plan_logits_full_mb"] > 10 * result["plan_logits_answer_only_mb"]
    assert step["zero_stage"] == 2 and step["smmd_step_time_ratio"] > 0
