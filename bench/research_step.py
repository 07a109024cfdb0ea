"""Where one scratch training step's time goes: the bar research setting through the real recipe.

Runs `vlm_smmd.training.run` on a config (default configs/scratch_cpu_bar.yaml: the scratch preset, 56 px
bars, batch 32) for `--steps` optimizer steps, with the Trainer swapped for a subclass that times each
part of every step:

  data       waiting for the next batch (DataLoader; with 0 workers this is collation plus sampling)
  collate    the collator call itself (in this process; 0 with DataLoader workers)
  batch      the rest of get_batch_samples (the host copy of labels, answer indices, token counts)
  forward    compute_loss: the model's forward and the objective
  backward   the backward pass
  clip       gradient norm and clipping
  optimizer  optimizer.step
  other      everything else in the step: Trainer bookkeeping (callbacks, logging, lr scheduler,
             zero_grad, input preparation, flos)

Per step: the median over the steps after `--warmup`; total: the sum over those steps; `step_cpu_ms`, this
process's CPU time per step, moves less than wall time when other work shares the cores (DataLoader workers
not counted). The first epoch processes every sample, later ones reuse the collator's cached rows: the bar
config's first epoch is 157 steps, so `--warmup 160` times later epochs. `--profile` prints cProfile's top
functions over the timed steps. The data is rendered into `--data_root` on first use
(`synthesize_if_missing`, as training does); `--smoke` renders a small set into a temporary folder and
runs a few steps (the test suite runs it). Further `--key value` pairs override config keys as in
`vlm-smmd train` (e.g. `--dataloader_num_workers 1`).

    python bench/research_step.py [CONFIG] [--steps 100] [--warmup 5] [--data_root DIR] [--threads N]
                                  [--smoke] [--profile] [--json] [--key value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PARTS = ("data", "collate", "batch", "forward", "backward", "clip", "optimizer", "other")


def timed_trainer(base, clock: dict):
    """A subclass of the Trainer class `base` that adds each part's seconds to `clock[part][step]`."""
    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            clock["_opt_start"] = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            add("optimizer", time.perf_counter() - clock["_opt_start"])

    def add(part: str, seconds: float) -> None:
        clock[part][-1] += seconds

    class Timed(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            collate = self.data_collator

            def timed_collate(samples):
                start = time.perf_counter()
                try:
                    return collate(samples)
                finally:
                    if clock["step_start"]:  # the preflight and the model build are not steps
                        add("collate", time.perf_counter() - start)

            self.data_collator = timed_collate
            self.add_callback(Steps())
            backward = self.accelerator.backward

            def timed_backward(loss, **kw):
                start = time.perf_counter()
                backward(loss, **kw)
                add("backward", time.perf_counter() - start)

            self.accelerator.backward = timed_backward

        def get_batch_samples(self, epoch_iterator, num_batches, device):
            now, cpu = time.perf_counter(), time.process_time()
            if clock["step_start"]:
                clock["step"][-1] = now - clock["step_start"][-1]
                clock["cpu"][-1] = cpu - clock["cpu_start"][-1]
            clock["step_start"].append(now)
            clock["cpu_start"].append(cpu)
            for part in (*PARTS, "step", "cpu"):
                clock[part].append(0.0)
            if clock["profile"] is not None and len(clock["step"]) == clock["warmup"] + 1:
                clock["profile"].enable()

            def timed_iter():
                while True:
                    start = time.perf_counter()
                    try:
                        item = next(epoch_iterator)
                    except StopIteration:
                        add("data", time.perf_counter() - start)
                        return
                    add("data", time.perf_counter() - start)
                    yield item

            out = super().get_batch_samples(timed_iter(), num_batches, device)
            add("batch", time.perf_counter() - now - clock["data"][-1])
            return out

        def compute_loss(self, *args, **kwargs):
            start = time.perf_counter()
            out = super().compute_loss(*args, **kwargs)
            add("forward", time.perf_counter() - start)
            return out

        def _clip_grad_norm(self, model):
            start = time.perf_counter()
            out = super()._clip_grad_norm(model)
            add("clip", time.perf_counter() - start)
            return out

        def _inner_training_loop(self, *args, **kwargs):
            out = super()._inner_training_loop(*args, **kwargs)
            if clock["profile"] is not None:  # the steps only, not the final save
                clock["profile"].disable()
            clock["step"][-1] = clock["end"] - clock["step_start"][-1]
            clock["cpu"][-1] = clock["end_cpu"] - clock["cpu_start"][-1]
            return out

        def _maybe_log_save_evaluate(self, *args, **kwargs):
            super()._maybe_log_save_evaluate(*args, **kwargs)
            clock["end"], clock["end_cpu"] = time.perf_counter(), time.process_time()

    return Timed


def measure(config: str, overrides: dict, steps: int, warmup: int, profile: bool) -> dict:
    """Train `steps + warmup` steps of `config` with the timed Trainer; figures of the last `steps`."""
    import cProfile

    import torch

    from vlm_smmd.config import load_config
    from vlm_smmd.training import recipe

    model_args, data_args, loss_args, train_args = load_config(config, overrides)
    clock = {part: [] for part in (*PARTS, "step", "step_start", "cpu", "cpu_start")}
    clock.update(end=None, warmup=warmup, profile=cProfile.Profile() if profile else None)
    base = recipe.NumericTrainer
    recipe.NumericTrainer = timed_trainer(base, clock)
    start = time.perf_counter()
    try:
        recipe.run(model_args, data_args, loss_args, train_args)
    finally:
        recipe.NumericTrainer = base
        if clock["profile"] is not None:
            clock["profile"].disable()
    total_s = time.perf_counter() - start

    kept = slice(warmup, None)
    steps_s = clock["step"][kept]
    if not steps_s:
        raise SystemExit(f"no step after the {warmup} warm-up steps: raise --steps")
    parts = {part: clock[part][kept] for part in PARTS}
    measured = [sum(parts[p][i] for p in PARTS if p != "collate") for i in range(len(steps_s))]
    parts["other"] = [s - m for s, m in zip(steps_s, measured)]
    result = {
        "config": config, "steps": len(steps_s), "warmup_steps": warmup,
        "batch_size": train_args.per_device_train_batch_size, "torch_threads": torch.get_num_threads(),
        "dataloader_workers": train_args.dataloader_num_workers,
        "attn_implementation": model_args.attn_implementation or "default",
        "step_ms": 1000 * statistics.median(steps_s), "step_mean_ms": 1000 * statistics.fmean(steps_s),
        "step_cpu_ms": 1000 * statistics.median(clock["cpu"][kept]),
        "steps_total_s": sum(steps_s), "run_total_s": total_s,
        "setup_s": clock["step_start"][0] - start,
        "loadavg_1min": os.getloadavg()[0],
    }
    for part in PARTS:
        result[f"{part}_ms"] = 1000 * statistics.median(parts[part])
        result[f"{part}_total_s"] = sum(parts[part])
    if clock["profile"] is not None:
        import io
        import pstats

        text = io.StringIO()
        pstats.Stats(clock["profile"], stream=text).sort_stats("tottime").print_stats(45)
        result["profile"] = text.getvalue()
    return result


def table(r: dict) -> str:
    lines = [f"{r['config']}: {r['steps']} timed steps after {r['warmup_steps']} warm-up, batch {r['batch_size']}, "
             f"{r['torch_threads']} torch threads, {r['dataloader_workers']} DataLoader workers, attention "
             f"{r['attn_implementation']}, load average {r['loadavg_1min']:.2f}",
             f"{'part':<10} {'median ms':>10} {'total s':>9} {'share':>7}"]
    total = r["steps_total_s"]
    for part in PARTS:
        note = "  (inside data)" if part == "collate" else ""
        lines.append(f"{part:<10} {r[f'{part}_ms']:>10.2f} {r[f'{part}_total_s']:>9.2f} "
                     f"{100 * r[f'{part}_total_s'] / total:>6.1f}%{note}")
    lines.append(f"{'step':<10} {r['step_ms']:>10.2f} {total:>9.2f} {100.0:>6.1f}%   "
                 f"(mean {r['step_mean_ms']:.2f} ms; this process's CPU time {r['step_cpu_ms']:.2f} ms)")
    lines.append(f"whole run {r['run_total_s']:.1f} s (setup before the first step {r['setup_s']:.1f} s)")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="timed optimizer steps (%(default)s)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed first steps (%(default)s)")
    parser.add_argument("--data_root", help="where the data is rendered or reused (default: the config's)")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--smoke", action="store_true", help="a small rendered set and 3 steps (for tests)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of the timed steps")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args, rest = parser.parse_known_args(argv)
    from vlm_smmd.config import parse_overrides

    config = rest.pop(0) if rest and not rest[0].startswith("-") else str(REPO / "configs" / "scratch_cpu_bar.yaml")
    overrides = parse_overrides(rest)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        steps, warmup = (3, 1) if args.smoke else (args.steps, args.warmup)
        overrides = {"eval_split": "none", "save_strategy": "no", "report_to": "none", "disable_tqdm": True,
                     **overrides, "output_dir": str(Path(tmp) / "model"), "max_steps": steps + warmup}
        if args.smoke:
            overrides.update(data_root=str(Path(tmp) / "data"), synthesize_num=64, logging_steps=1)
        elif args.data_root:
            overrides["data_root"] = args.data_root
        result = measure(config, overrides, steps, warmup, args.profile)
    profile = result.pop("profile", None)
    if args.json:
        print(json.dumps(result))
    else:
        print(table(result))
        if profile:
            print(profile)
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
