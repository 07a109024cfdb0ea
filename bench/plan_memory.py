"""The plan's activation model against measured memory on this CPU: Qwen2.5-VL-7B at its real width with
truncated depth (1, 2, 4 text layers; two vision blocks, one windowed and one full), bf16, LoRA as in
configs/qwen2_5_vl_7b_chartqa_smmd_lora.yaml (r 64, dropout 0.05, vision frozen), one image at that config's
max_pixels, an answer-only batch as VLMCollator makes it. Each depth runs in its own process; the resident
set is sampled every millisecond by a thread during forward + backward, and its rise over the loaded model
is compared with the plan's activations + gradients + answer-only logits for the same truncated model.

The plan counts live tensors (what CUDA's max_memory_allocated reports). glibc's malloc keeps freed blocks
under its dynamic mmap threshold (up to 32 MB: every [T, h] transient here) resident in its heap, so by default
the resident set also counts the forward's freed temporaries. The workers therefore fix that threshold at
1 MB (mallopt M_MMAP_THRESHOLD): a freed tensor goes back to the OS and the resident set follows the live
bytes. `--glibc-default` measures with malloc's defaults instead (the figure a CPU user sees in top).

    python bench/plan_memory.py [--depths 1,2,4] [--glibc-default] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time

HUB_ID = "Qwen/Qwen2.5-VL-7B-Instruct"
MAX_PIXELS = 1003520
RESULT = "PLAN_MEMORY "
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def return_freed_memory() -> bool:
    """Make glibc return every freed block of 1 MB or more to the OS (False where the libc is not glibc)."""
    import ctypes

    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 1 << 20))
    except (OSError, AttributeError):
        return False


def worker(depth: int, glibc_default: bool = False) -> dict:
    returned = False if glibc_default else return_freed_memory()
    import psutil
    import torch
    from PIL import Image

    from vlm_smmd.data import Sample
    from vlm_smmd.data.collator import VLMCollator
    from vlm_smmd.families import published_family
    from vlm_smmd.modeling import apply_lora, set_trainable
    from vlm_smmd.training.memory_plan import Setup, architecture, plan

    torch.set_num_threads(1)
    family = published_family(HUB_ID)
    config = family.published_config(HUB_ID)
    config.text_config.num_hidden_layers = depth
    config.vision_config.depth, config.vision_config.fullatt_block_indexes = 2, [1]
    processor = family.published_processor(HUB_ID, 200704, MAX_PIXELS)
    processor.tokenizer.padding_side = "left"
    torch.manual_seed(0)
    model = family.model_class()._from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    set_trainable(model, freeze_vision=True)
    model = apply_lora(model, r=64, alpha=128, dropout=0.05)
    model.train()
    side = int(MAX_PIXELS**0.5) // 28 * 28
    sample = Sample(image=Image.new("RGB", (side, side), (200, 120, 40)), question="What is the largest value?",
                    answer="47.5", source="chartqa", id="0")
    collator = VLMCollator(processor, instruction="Answer the question using a single word or number.",
                           min_pixels=200704, max_pixels=MAX_PIXELS)
    batch = collator([sample])
    labels = batch.pop("labels")
    batch.pop("numeric_mask", None)
    proc, peak, done = psutil.Process(), [0], threading.Event()

    def sample_rss():
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.001)

    before = proc.memory_info().rss
    thread = threading.Thread(target=sample_rss, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    hidden = model.base_model.model.model(**batch).last_hidden_state  # [1, T, h]
    rows = (labels[0, 1:] != -100).nonzero().squeeze(1)  # answer-only head: the rows that predict a label
    logits = model.base_model.model.lm_head(hidden[0, rows]).float()
    torch.nn.functional.cross_entropy(logits, labels[0, rows + 1]).backward()
    seconds = time.perf_counter() - t0
    done.set()
    thread.join()
    tokens = int(labels.shape[1])
    arch = architecture(config, family)
    setup = Setup(lora=True, lora_r=64, lora_dropout=0.05, freeze_vision=True, batch=1, max_length=tokens,
                  max_pixels=int(batch["image_grid_thw"].prod()) * 196, answer_tokens=len(rows), device="cpu")
    p = plan(arch, setup, family)
    predicted = p.activations + p.logits_answer_only + p.gradients  # LoRA's gradients (fp32)
    measured = peak[0] - before
    return {"text_layers": depth, "tokens": tokens, "image_tokens": p.image_tokens, "seconds": round(seconds, 1),
            "loaded_mb": round(before / 2**20), "measured_rise_mb": round(measured / 2**20),
            "planned_rise_mb": round(predicted / 2**20), "planned_over_measured": round(predicted / measured, 3),
            "freed_memory_returned": returned}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="1,2,4")
    parser.add_argument("--glibc-default", action="store_true",
                        help="keep malloc's defaults (freed temporaries stay resident and are measured)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(RESULT + json.dumps(worker(args.worker, args.glibc_default)), flush=True)
        return 0
    rows = []
    for depth in (int(d) for d in args.depths.split(",")):
        command = [sys.executable, __file__, "--worker", str(depth)] + ["--glibc-default"] * args.glibc_default
        proc = subprocess.run(command, capture_output=True, text=True)
        found = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
        if proc.returncode or not found:
            raise SystemExit(f"plan_memory: depth {depth} failed:\n{proc.stderr[-2000:]}")
        rows.append(json.loads(found[-1][len(RESULT):]))
        print(f"plan_memory: {depth} layer(s) done", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"model": HUB_ID, "max_pixels": MAX_PIXELS, "glibc_default": args.glibc_default,
                          "runs": rows}))
        return 0
    keys = list(rows[0])
    print(f"{HUB_ID} at real width, truncated depth, bf16, LoRA r 64, one {MAX_PIXELS}-pixel image, 1 thread, "
          + ("malloc defaults (freed temporaries resident)" if args.glibc_default else "freed memory returned"))
    print("  ".join(f"{k:>22}" for k in keys))
    for r in rows:
        print("  ".join(f"{r[k]:>22}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
