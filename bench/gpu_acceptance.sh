#!/usr/bin/env bash
# The GPU acceptance run (issue 39): one command, nothing downloaded, at most ~10 minutes on one H100.
# The real Qwen2.5-VL-3B architecture with random weights under DeepSpeed ZeRO-2 (bench/gpu_step.py): CE vs
# CE + SMMD step time and peak memory, answer-only head vs full logits, flash-attention 2 when installed, and
# `vlm-smmd plan`'s prediction for the same model and batch beside the measured peak. One JSON file out.
#
#   bash bench/gpu_acceptance.sh [--out FILE]        # on a GPU machine (default FILE: gpu_acceptance.json)
#   bash bench/gpu_acceptance.sh --cpu-smoke [--out FILE]   # the same path on the CPU, tiny model, seconds
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu_acceptance.json smoke=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-smoke) smoke=(--cpu-smoke) ;;
    --out) out="$2"; shift ;;
    *) echo "gpu_acceptance: unknown argument $1 (--cpu-smoke, --out FILE)" >&2; exit 2 ;;
  esac
  shift
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python bench/gpu_step.py --json "${smoke[@]}" > "$tmp/sdpa.json"
if [ ${#smoke[@]} -eq 0 ] && python -c "import flash_attn" 2>/dev/null; then
  python bench/gpu_step.py --json --attn flash_attention_2 --configs answer_none,answer_smmd > "$tmp/flash.json"
fi
python - "$tmp" "$out" "${smoke[@]}" <<'PY'
"""Join the step figures with the plan's prediction for the same model, batch and precision."""
import json
import math
import sys
from pathlib import Path

from vlm_smmd.families import presets, published_family
from vlm_smmd.training.memory_plan import GIB, Setup, architecture, plan

tmp, out, smoke = Path(sys.argv[1]), Path(sys.argv[2]), "--cpu-smoke" in sys.argv[3:]
step = json.loads((tmp / "sdpa.json").read_text())
hub_id = "Qwen/Qwen2.5-VL-3B-Instruct"
family = presets()["tiny"] if smoke else published_family(hub_id)
arch = architecture(family.tiny_config() if smoke else family.published_config(hub_id), family)
# gpu_step's run: every weight trains, ZeRO-2 on one GPU, batch 4 of one 448 px image, no checkpointing
setup = Setup(zero_stage=2, gpus=1, weight_bytes=4 if smoke else 2, batch=step["batch"], max_length=step["seq_len"],
              max_pixels=step["image_px"] ** 2, answer_tokens=math.ceil(step["answer_tokens"] / step["batch"]))
p = plan(arch, setup, family, name="gpu_step (Qwen2.5-VL-3B, ZeRO-2, batch 4 x 448 px)")
result = {"mode": step["mode"], "device": step["device"], "step": step,
          "plan_model_states_mb": round(p.model_states / 2**20, 1),
          "plan_activations_mb": round(p.activations / 2**20, 1),
          "plan_logits_answer_only_mb": round(p.logits_answer_only / 2**20, 1),
          "plan_logits_full_mb": round((p.logits_avoided + p.logits_answer_only) / 2**20, 1),
          "plan_peak_mb": round((p.total - p.runtime_reserve) / 2**20, 1),
          "plan_total_with_reserve_gib": round(p.total / GIB, 2)}
if not smoke:  # allocated memory has no CUDA context: compare against the plan without its reserve
    measured = step["answer_none_peak_mb"]
    result.update(measured_peak_mb=measured, plan_over_measured=round(result["plan_peak_mb"] / measured, 3))
flash = tmp / "flash.json"
result["flash_attention"] = json.loads(flash.read_text()) if flash.exists() else None
out.write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps(result, indent=1))
PY
echo "gpu_acceptance: wrote $out" >&2
