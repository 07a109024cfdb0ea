"""One full-depth training step of Qwen2.5-VL-3B at its real size on this CPU, beside the memory plan.

The released architecture with random weights, built directly in bf16 (36 text layers, 32 vision blocks),
set up as configs/qwen2_5_vl_3b_clock_smmd.yaml says (sdpa, vision frozen, gradient checkpointing, one
448 x 448 image: its min_pixels = max_pixels) but with LoRA on the language model (the config's lora_r,
lora_alpha, lora_dropout): the config trains the whole language model, whose fp32 master weights and Adam
moments (16 bytes a parameter, ~50 GB) a 24 GiB machine cannot hold. One step is the forward, the
answer-only cross-entropy, the backward and a torch AdamW step over the trainable parameters, one thread.

Measured: the resident set once the model is built, its highest during the step (sampled every 5 ms by a
thread) and the rise, the process's peak (getrusage, the build included), the step's seconds. Planned (`training.memory_plan`, no DeepSpeed, device "cpu"): weights
+ gradients + optimizer states + activations + answer-only logits, without the 2 GiB GPU runtime reserve.

The plan counts live tensors; glibc's malloc keeps freed blocks under its dynamic mmap threshold (up to 32 MB)
resident, so the step's freed temporaries would stay in the resident set. The script first fixes that threshold
at 1 MB (mallopt, as bench/plan_memory.py does) so the resident set follows the live bytes; `--glibc-default`
keeps malloc's defaults.

    python bench/real_size_step.py [--glibc-default] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time

HUB_ID = "Qwen/Qwen2.5-VL-3B-Instruct"
CONFIG = "configs/qwen2_5_vl_3b_clock_smmd.yaml"


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def run(glibc_default: bool = False) -> dict:
    from plan_memory import return_freed_memory  # bench/ is this script's folder

    returned = False if glibc_default else return_freed_memory()
    import torch
    from PIL import Image

    from vlm_smmd.config import check_config
    from vlm_smmd.data import Sample
    from vlm_smmd.data.collator import VLMCollator
    from vlm_smmd.families import published_family
    from vlm_smmd.modeling import apply_lora, set_trainable
    from vlm_smmd.training.memory_plan import GIB, Setup, architecture, plan

    torch.set_num_threads(1)
    model_args, data_args, _, train = check_config(CONFIG, {"lora": "true"})
    checkpointing = bool(train.get("gradient_checkpointing"))
    assert model_args.model_name_or_path == HUB_ID
    family = published_family(HUB_ID)
    config = family.published_config(HUB_ID)
    processor = family.published_processor(HUB_ID, model_args.min_pixels, model_args.max_pixels)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = family.model_class()._from_config(config, dtype=torch.bfloat16,
                                              attn_implementation=model_args.attn_implementation)
    # as load_model_and_processor orders it: freezing, checkpointing, then the adapters
    set_trainable(model, freeze_vision=model_args.freeze_vision, freeze_merger=model_args.freeze_merger)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
        model.enable_input_require_grads()
    model = apply_lora(model, r=model_args.lora_r, alpha=model_args.lora_alpha, dropout=model_args.lora_dropout)
    model.train()
    build_s = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5)

    side = int(model_args.max_pixels**0.5)  # 448: the config's clocks are synthesize_size square
    sample = Sample(image=Image.new("RGB", (side, side), (240, 240, 235)), question="What time does the clock show?",
                    answer="10:42", source="clocks", id="0")
    batch = VLMCollator(processor, instruction=data_args.instruction, min_pixels=model_args.min_pixels,
                        max_pixels=model_args.max_pixels)([sample])
    labels = batch.pop("labels")
    batch.pop("numeric_mask", None)
    rows = (labels[0, 1:] != -100).nonzero().squeeze(1)  # the positions that predict an answer token

    before = _rss_mb()
    highest, done = [before], threading.Event()

    def sample_rss():  # the step's own peak, whatever the build's was
        while not done.is_set():
            highest[0] = max(highest[0], _rss_mb())
            time.sleep(0.005)

    thread = threading.Thread(target=sample_rss, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    inner = model.base_model.model
    hidden = inner.model(**batch).last_hidden_state
    logits = inner.lm_head(hidden[0, rows]).float()  # the answer-only head
    loss = torch.nn.functional.cross_entropy(logits, labels[0, rows + 1])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    step_s = time.perf_counter() - t0
    done.set()
    thread.join()

    setup = Setup(lora=True, lora_r=model_args.lora_r, lora_dropout=model_args.lora_dropout,
                  freeze_vision=model_args.freeze_vision, freeze_merger=model_args.freeze_merger,
                  gradient_checkpointing=checkpointing, batch=1,
                  max_length=int(labels.shape[1]), max_pixels=model_args.max_pixels, answer_tokens=len(rows),
                  device="cpu")
    p = plan(architecture(config, family), setup, family, name=CONFIG, suggest=False)
    planned_states = p.model_states
    planned_step = p.activations + p.logits_answer_only + p.gradients + p.optimizer
    return {"model": HUB_ID, "params": params, "trainable_params": sum(t.numel() for t in trainable),
            "planned_trainable_params": p.trainable_params, "tokens": int(labels.shape[1]),
            "image_tokens": p.image_tokens, "lora_r": model_args.lora_r, "build_s": round(build_s, 1),
            "step_s": round(step_s, 1), "loss": round(float(loss.detach()), 3),
            "rss_after_build_mb": round(before), "peak_rss_mb": round(_peak_mb()),
            "step_peak_rss_mb": round(highest[0]), "step_rise_mb": round(highest[0] - before),
            "planned_weights_mb": round(p.weights / 2**20), "planned_model_states_mb": round(planned_states / 2**20),
            "planned_activations_mb": round(p.activations / 2**20),
            "planned_step_rise_mb": round(planned_step / 2**20),
            "planned_total_mb": round((planned_states + p.activations + p.logits_answer_only) / 2**20),
            "planned_total_gpu_gib": round(p.total / GIB, 2), "freed_memory_returned": returned}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--glibc-default", action="store_true",
                        help="keep malloc's defaults (freed temporaries stay resident and are measured)")
    args = parser.parse_args(argv)
    r = run(args.glibc_default)
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"{r['model']} full depth, bf16, LoRA r {r['lora_r']}, one {r['tokens']}-token sample "
          f"({r['image_tokens']} image tokens), 1 thread, "
          + ("freed memory returned" if r["freed_memory_returned"] else "malloc defaults"))
    print(f"  parameters {r['params']:,}, trainable {r['trainable_params']:,} (plan: {r['planned_trainable_params']:,})")
    print(f"  build {r['build_s']} s, step {r['step_s']} s, loss {r['loss']}")
    print(f"  {'':24}{'measured MB':>12}{'planned MB':>12}")
    print(f"  {'after build / weights':24}{r['rss_after_build_mb']:>12,}{r['planned_weights_mb']:>12,}")
    print(f"  {'rise during the step':24}{r['step_rise_mb']:>12,}{r['planned_step_rise_mb']:>12,}")
    print(f"  {'peak during the step':24}{r['step_peak_rss_mb']:>12,}{r['planned_total_mb']:>12,}")
    print(f"  {'process peak (getrusage)':24}{r['peak_rss_mb']:>12,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
