"""Training-step cost of the aux loss: the tiny Qwen2.5-VL on the CPU, aux none vs smmd (and others).

Each variant runs in a fresh subprocess (so peak RSS is its own) through NumericTrainer.training_step
on the same pre-collated batch of clock images; the first steps warm up and are not timed.
Target: smmd within 5% of none. Collator throughput is measured by bench/collator.py.

    python bench/train_step.py [--aux none,smmd,ntl_was] [--steps 20] [--batch-size 8] [--size 224] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def measure(aux: str, steps: int, warmup: int, batch_size: int, size: int) -> dict:
    """Runs inside the subprocess: seconds per step and peak RSS for one aux loss."""
    import torch

    from data_synth.clocks import render_clock
    from vlm_smmd.config import LossArguments, VLMTrainingArguments
    from vlm_smmd.data import Sample
    from vlm_smmd.data.collator import VLMCollator
    from vlm_smmd.modeling import load_model_and_processor
    from vlm_smmd.training import NumericTrainer, build_objective

    torch.manual_seed(0)
    model, processor = load_model_and_processor("tiny", verbose=False, max_pixels=size * size)
    samples = [Sample(render_clock(1 + i % 12, (7 * i) % 60, size=size, seed=i), "What time is it?",
                      f"{1 + i % 12}:{(7 * i) % 60:02d}", "clocks", str(i)) for i in range(batch_size)]
    collator = VLMCollator(processor)
    batch = collator(samples)
    with tempfile.TemporaryDirectory() as out:
        args = VLMTrainingArguments(output_dir=out, use_cpu=True, report_to="none", disable_tqdm=True,
                                    per_device_train_batch_size=batch_size, learning_rate=1e-4)
        objective = build_objective(LossArguments(aux=aux), collator.numeric_vocab)
        trainer = NumericTrainer(model=model, args=args, train_dataset=samples, data_collator=collator,
                                 objective=objective)
        trainer.create_optimizer_and_scheduler(num_training_steps=steps + warmup)
        times = []
        for i in range(steps + warmup):
            start = time.perf_counter()
            trainer.training_step(model, dict(batch))
            trainer.optimizer.step()
            trainer.optimizer.zero_grad()
            if i >= warmup:
                times.append(time.perf_counter() - start)
    times.sort()
    return {"aux": aux, "step_s_median": times[len(times) // 2], "steps_per_s": 1 / (sum(times) / len(times)),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "seq_len": int(batch["input_ids"].shape[1]), "numeric_tokens": int(batch["numeric_mask"].sum())}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aux", default="none,smmd", help="comma-separated aux losses (%(default)s)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--size", type=int, default=224, help="image side in px (%(default)s)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.steps, args.warmup, args.batch_size, args.size)))
        return {}

    rows = []
    for aux in args.aux.split(","):
        cmd = [sys.executable, __file__, "--child", aux, "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--batch-size", str(args.batch_size), "--size", str(args.size)]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    base = next((r for r in rows if r["aux"] == "none"), rows[0])
    for r in rows:
        r["overhead_pct"] = 100 * (r["step_s_median"] / base["step_s_median"] - 1)
    result = {"batch_size": args.batch_size, "image_px": args.size, "threads": int(os.environ.get("OMP_NUM_THREADS", 0))
              or None, "variants": rows}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"tiny Qwen2.5-VL, CPU, batch {args.batch_size} x {args.size} px, seq {rows[0]['seq_len']}, "
              f"{rows[0]['numeric_tokens']} numeric answer tokens; {args.steps} timed steps")
        print(f"{'aux':<10} {'step s (median)':>16} {'steps/s':>9} {'overhead %':>11} {'peak RSS MB':>12}")
        for r in rows:
            print(f"{r['aux']:<10} {r['step_s_median']:>16.4f} {r['steps_per_s']:>9.2f} {r['overhead_pct']:>11.1f} "
                  f"{r['peak_rss_mb']:>12.0f}")
    return result


if __name__ == "__main__":
    main()
