"""One training step of a Qwen2.5-VL-3B-shaped model on one GPU: aux none vs SMMD, answer-only head vs full logits.

The model has the Qwen2.5-VL-3B architecture (text: hidden 2048, 36 layers, 16 heads, 2 KV heads,
intermediate 11008, vocab 151936, tied embeddings, mRoPE sections [16, 24, 24]; vision: depth 32, hidden
1280, 16 heads, intermediate 3420, merger to 2048, full attention in blocks 7/15/23/31, window 112; 3.75 B
parameters), randomly initialised directly on the GPU in bf16 (nothing is downloaded). It trains under
DeepSpeed ZeRO-2 (configs/deepspeed/zero2.json) in a single process (RANK/WORLD_SIZE/... set as for a
launcher-less `vlm-smmd train`), through the project's own Trainer, on a batch of four 448x448 clock
images (256 visual tokens each) with their "H:MM" answers, built by VLMCollator. Configurations:

    answer_none  NumericTrainer.compute_loss: forward with logits_to_keep (logits of the left-padded answer
                 window only, never [B, T, V]), CE over the answer tokens
    answer_smmd  the same + SMMD at the numeric answer tokens (NumericObjective, lambda 1)
    full_none    the usual path: model(**batch, labels=labels) builds logits at every position [B, T, V]
                 and the model's own shifted CE
    full_smmd    the same + SMMD on the answer rows gathered from those full logits
    liger_none   Liger's kernels on the model (fused linear cross-entropy: no logits at all) and
                 NumericTrainer(fused_ce=True): the model scores CE from the labels (needs liger-kernel)
    liger_smmd   the same + SMMD from the final hidden states and the LM head's V_num rows (issue 42)

Each configuration runs in its own process (fresh CUDA allocator and DeepSpeed engine): --warmup steps,
then --steps timed steps. A step is forward + backward + optimizer step (torch.cuda.synchronize at both
ends, from the Trainer's on_step_begin to on_step_end; batch collation happens before on_step_begin and is
not counted). step_ms is the median over the timed steps. peak_mb is torch.cuda.max_memory_allocated over
the timed steps; static_mb the memory allocated when they begin (bf16 weights, ZeRO-2 fp32 master weights,
Adam states, gradient buffers); peak_over_static_mb the difference (activations, logits, loss buffers).

    python bench/gpu_step.py              # table (needs a CUDA GPU and deepspeed)
    python bench/gpu_step.py --json       # one JSON object
    python bench/gpu_step.py --cpu-smoke  # the same code path on the CPU: tiny model, fp32, 1 + 1 steps
    python bench/gpu_step.py --configs liger_none,liger_smmd   # the Liger pairing (pip install liger-kernel)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIGS = ("answer_none", "answer_smmd", "full_none", "full_smmd", "liger_none", "liger_smmd")
RESULT = "GPU_STEP_RESULT "
IMAGE_PX = 448
BATCH = 4

QWEN25_VL_3B_TEXT = dict(
    vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
    num_key_value_heads=2, max_position_embeddings=128000, rms_norm_eps=1e-6, tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
    bos_token_id=151643, eos_token_id=151645,
)
QWEN25_VL_3B_VISION = dict(
    depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, in_channels=3, out_hidden_size=2048,
    patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
    fullatt_block_indexes=[7, 15, 23, 31], hidden_act="silu", tokens_per_second=2,
)


def qwen25_vl_3b_config():
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(text_config=dict(QWEN25_VL_3B_TEXT), vision_config=dict(QWEN25_VL_3B_VISION),
                            tie_word_embeddings=True)


# ---------------------------------------------------------------------------------------------------------
# Worker: one configuration


def build_model(cpu_smoke: bool, attn: str):
    """Randomly initialised Qwen2.5-VL built in place: the 3B shape in bf16 on cuda, or the tiny preset
    in fp32 on the CPU."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from vlm_smmd.families.qwen2_5_vl import FAMILY

    config, device, dtype = ((FAMILY.tiny_config(), "cpu", torch.float32) if cpu_smoke
                             else (qwen25_vl_3b_config(), "cuda", torch.bfloat16))
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=dtype, attn_implementation=attn)
    model.config.use_cache = False
    return model


def build_batch_data(processor):
    """Four 448 px clocks with their answers, and the project's collator for them."""
    from data_synth.clocks import render_clock
    from vlm_smmd.data import Sample
    from vlm_smmd.data.collator import VLMCollator

    times = [(10, 7), (3, 45), (12, 0), (8, 21)]
    samples = [Sample(image=render_clock(h, m, size=IMAGE_PX, seed=i), question="What time is shown on this clock?",
                      answer=f"{h}:{m:02d}", source="clocks", id=str(i)) for i, (h, m) in enumerate(times)]
    collator = VLMCollator(processor, instruction="Answer in H:MM format.", min_pixels=IMAGE_PX * IMAGE_PX,
                              max_pixels=IMAGE_PX * IMAGE_PX)
    return samples, collator


def make_trainer_classes():
    import torch
    from transformers import TrainerCallback

    from vlm_smmd.losses.objective import answer_positions
    from vlm_smmd.training import NumericTrainer

    class FullLogitsTrainer(NumericTrainer):
        """The usual path: the model builds [B, T, V] logits and its own CE from labels=...; an aux loss is
        added on the answer rows gathered from those full logits."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            inputs = dict(inputs)
            inputs.pop("numeric_mask", None)
            outputs = model(**inputs, use_cache=False)  # labels in inputs: HF shifts and computes CE
            loss = outputs.loss
            if self.objective.aux_loss is not None:
                batch_idx, pos_idx, targets = answer_positions(inputs["labels"])
                loss = loss + self.objective.lam * self.objective(outputs.logits[batch_idx, pos_idx], targets)["aux"]
            return (loss, outputs) if return_outputs else loss

    class StepTimer(TrainerCallback):
        """Wall time of each optimizer step after `warmup`; peak and static CUDA memory over the timed ones."""

        def __init__(self, warmup: int, cuda: bool):
            self.warmup, self.cuda = warmup, cuda
            self.times, self.static_bytes, self.t0 = [], None, 0.0

        def _sync(self):
            if self.cuda:
                torch.cuda.synchronize()

        def on_step_begin(self, args, state, control, **kwargs):
            self._sync()
            if state.global_step == self.warmup and self.cuda:
                torch.cuda.reset_peak_memory_stats()
                self.static_bytes = torch.cuda.memory_allocated()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self._sync()
            if state.global_step > self.warmup:  # global_step counts the step just finished
                self.times.append(time.perf_counter() - self.t0)

    return NumericTrainer, FullLogitsTrainer, StepTimer


def worker(args) -> dict:
    import torch

    from vlm_smmd.config import LossArguments, VLMTrainingArguments
    from vlm_smmd.families.qwen2_5_vl import build_processor
    from vlm_smmd.families.tokenizers import build_qwen_tokenizer
    from vlm_smmd.training import build_objective, ensure_single_process_env

    ensure_single_process_env()  # before TrainingArguments initialises DeepSpeed
    head, aux = args.worker.split("_")
    cuda = not args.cpu_smoke
    processor = build_processor(build_qwen_tokenizer(), IMAGE_PX * IMAGE_PX, IMAGE_PX * IMAGE_PX)
    processor.tokenizer.padding_side = "left"
    samples, collator = build_batch_data(processor)
    batch = collator(samples)
    model = build_model(args.cpu_smoke, args.attn)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    n_params = sum(p.numel() for p in model.parameters())

    numeric_trainer, full_trainer, step_timer = make_trainer_classes()
    timer = step_timer(args.warmup, cuda)
    with tempfile.TemporaryDirectory() as tmp:
        train_args = VLMTrainingArguments(
            output_dir=tmp, per_device_train_batch_size=BATCH, max_steps=args.warmup + args.steps,
            learning_rate=1e-5, lr_scheduler_type="constant", bf16=cuda, use_cpu=not cuda,
            deepspeed=json.loads((REPO / "configs" / "deepspeed" / "zero2.json").read_text()),
            logging_steps=10_000, save_strategy="no", report_to="none", disable_tqdm=True,
            dataloader_num_workers=0, seed=0,
        )
        cls = full_trainer if head == "full" else numeric_trainer
        extra = {}
        if head == "liger":
            from liger_kernel.transformers import _apply_liger_kernel_to_instance

            _apply_liger_kernel_to_instance(model=model)  # fused linear CE replaces the LM head's logits
            extra["fused_ce"] = True
        trainer = cls(model=model, args=train_args, train_dataset=samples, data_collator=collator,
                      processing_class=processor, objective=build_objective(LossArguments(aux=aux), collator.numeric_vocab),
                      callbacks=[timer], **extra)
        trainer.train()
        plugin = trainer.accelerator.state.deepspeed_plugin
        if not trainer.is_deepspeed_enabled or plugin.zero_stage != 2:
            raise RuntimeError("the Trainer did not run under DeepSpeed ZeRO-2")
    labels = batch["labels"]
    result = {
        "config": args.worker, "head": head, "aux": aux, "params": n_params,
        "seq_len": int(labels.shape[1]), "answer_tokens": int((labels[:, 1:] != -100).sum()),
        "step_ms": 1000 * statistics.median(timer.times), "step_ms_min": 1000 * min(timer.times),
        "steps_timed": len(timer.times),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if cuda:
        peak = torch.cuda.max_memory_allocated()
        result.update(device=torch.cuda.get_device_name(), peak_mb=peak / 2**20, static_mb=timer.static_bytes / 2**20,
                      peak_over_static_mb=(peak - timer.static_bytes) / 2**20)
    else:
        result["device"] = "cpu"
    return result


# ---------------------------------------------------------------------------------------------------------
# Parent: one process per configuration, table / JSON


def run_config(name: str, args) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--attn", args.attn]
    cmd += ["--cpu-smoke"] * args.cpu_smoke + ["--gradient-checkpointing"] * args.gradient_checkpointing
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise SystemExit(f"gpu_step: configuration {name} failed (exit status {proc.returncode}):\n{tail}")
    return json.loads(lines[-1][len(RESULT):])


def summary(results: dict[str, dict], args) -> dict:
    first = next(iter(results.values()))
    out = {
        "device": first["device"], "mode": "cpu_smoke" if args.cpu_smoke else "gpu",
        "model": "tiny" if args.cpu_smoke else "qwen2.5-vl-3b-shape", "params_m": round(first["params"] / 1e6, 1),
        "dtype": "fp32" if args.cpu_smoke else "bf16", "zero_stage": 2, "batch": BATCH, "image_px": IMAGE_PX,
        "seq_len": first["seq_len"], "answer_tokens": first["answer_tokens"], "steps_timed": first["steps_timed"],
        "gradient_checkpointing": args.gradient_checkpointing, "attn": args.attn,
    }
    for name, r in results.items():
        keys = ["step_ms", "step_ms_min"] + (["peak_rss_mb"] if args.cpu_smoke else
                                             ["peak_mb", "static_mb", "peak_over_static_mb"])
        for key in keys:
            out[f"{name}_{key}"] = round(r[key], 2)

    def ratio(a, b, key):
        if a in results and b in results:
            return round(results[a][key] / results[b][key], 4)
        return None

    out["smmd_step_time_ratio"] = ratio("answer_smmd", "answer_none", "step_ms")
    out["full_vs_answer_step_time_ratio"] = ratio("full_none", "answer_none", "step_ms")
    if {"liger_none", "liger_smmd"} <= set(results):
        out["liger_smmd_vs_liger_ce_step_time_ratio"] = ratio("liger_smmd", "liger_none", "step_ms")
        if not args.cpu_smoke:
            out["liger_smmd_vs_liger_ce_peak_ratio"] = ratio("liger_smmd", "liger_none", "peak_mb")
    if not args.cpu_smoke:
        out["full_vs_answer_peak_ratio"] = ratio("full_none", "answer_none", "peak_mb")
        out["full_vs_answer_activation_ratio"] = ratio("full_none", "answer_none", "peak_over_static_mb")
    return out


def print_table(results: dict[str, dict], s: dict) -> None:
    print(f"{s['model']} ({s['params_m']:.0f} M params, random init), {s['dtype']}, DeepSpeed ZeRO-{s['zero_stage']}, "
          f"one process on {s['device']}; batch {s['batch']} x {s['image_px']} px images, T = {s['seq_len']}, "
          f"{s['answer_tokens']} answer tokens; median of {s['steps_timed']} timed steps")
    mem = ["peak RSS MB"] if s["mode"] == "cpu_smoke" else ["peak MB", "static MB", "peak-static MB"]
    header = ["config", "head", "aux", "step ms", "min ms", *mem]
    rows = []
    for name, r in results.items():
        cells = [name, "answer-only" if r["head"] == "answer" else "full logits", r["aux"], f"{r['step_ms']:.1f}",
                 f"{r['step_ms_min']:.1f}"]
        cells += ([f"{r['peak_rss_mb']:.0f}"] if s["mode"] == "cpu_smoke" else
                  [f"{r['peak_mb']:.0f}", f"{r['static_mb']:.0f}", f"{r['peak_over_static_mb']:.0f}"])
        rows.append(cells)
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(c).rjust(w) if i >= 3 else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    for key, text in [("smmd_step_time_ratio", "SMMD / CE step time (answer-only head)"),
                      ("full_vs_answer_step_time_ratio", "full-logits / answer-only step time (aux none)"),
                      ("full_vs_answer_peak_ratio", "full-logits / answer-only peak memory (aux none)"),
                      ("full_vs_answer_activation_ratio", "full-logits / answer-only peak-static memory (aux none)")]:
        if s.get(key) is not None:
            print(f"{text}: {s[key]:.3f}")
    if s["mode"] == "cpu_smoke":
        print("(CPU smoke: checks the code path only; the figures mean nothing for a GPU)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 5; CPU smoke 1)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed first steps (default 2; CPU smoke 1)")
    parser.add_argument("--configs", default=",".join(CONFIGS[:4]), help="subset of " + ",".join(CONFIGS))
    parser.add_argument("--attn", default="sdpa", help="attention implementation (sdpa | eager | flash_attention_2)")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny model in fp32 on the CPU, same code path (DeepSpeed ZeRO-2, both heads)")
    parser.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.steps = args.steps if args.steps is not None else (1 if args.cpu_smoke else 5)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.cpu_smoke else 2)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")

    if args.worker:
        print(RESULT + json.dumps(worker(args)), flush=True)
        return 0

    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad or not configs:
        parser.error(f"--configs: unknown {bad}; choose from {', '.join(CONFIGS)}")
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu_step: needs a CUDA GPU, and torch.cuda.is_available() is False on this machine. "
              "Run it on a GPU machine (e.g. in docker/Dockerfile's image), or use --cpu-smoke to check the code "
              "path on the CPU with the tiny model.", file=sys.stderr)
        return 2
    if importlib.util.find_spec("deepspeed") is None:  # not imported here: it prints to stdout on import
        print("gpu_step: needs deepspeed (pip install deepspeed)", file=sys.stderr)
        return 2
    results = {}
    for name in configs:
        print(f"gpu_step: {name} ...", file=sys.stderr, flush=True)
        results[name] = run_config(name, args)
    s = summary(results, args)
    if args.json:
        print(json.dumps(s))
    else:
        print_table(results, s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
