"""bench/research_step.py runs end to end in its smoke mode and reports every part of the step (figures not
asserted: tests never time anything)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PARTS = ("data", "collate", "batch", "forward", "backward", "clip", "optimizer", "other")


@pytest.mark.slow
def test_smoke_run_reports_each_part_of_the_step():
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "research_step.py"), "--smoke", "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["steps"] == 3 and result["batch_size"] == 32
    for key in ("step_ms", "step_mean_ms", "step_cpu_ms", "steps_total_s", "run_total_s", "setup_s",
                *(f"{part}_ms" for part in PARTS), *(f"{part}_total_s" for part in PARTS)):
        assert isinstance(result[key], float), key
    assert all(result[f"{part}_total_s"] >= 0 for part in PARTS if part != "other")
    # the collator runs inside the DataLoader's fetch (no workers): its time is part of the data time
    assert 0 < result["collate_total_s"] <= result["data_total_s"]
    assert result["forward_total_s"] > 0 and result["backward_total_s"] > 0 and result["optimizer_total_s"] > 0
