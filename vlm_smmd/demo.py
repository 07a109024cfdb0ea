"""`vlm-smmd demo`: the whole pipeline offline on a CPU, on the embedded default config.

Renders a clock dataset, trains the tiny Qwen2.5-VL with CE + SMMD (configs/tiny_cpu_clock.yaml),
evaluates it on the held-out clocks, and writes the per-digit report with its plots.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "tiny_cpu_clock.yaml"


def run_demo(out: Path, *, config: Path = DEFAULT_CONFIG, num: int | None = None, steps: int | None = None,
             eval_limit: int = 64, max_new_tokens: int = 8, overrides: dict | None = None) -> dict:
    """Run data -> train -> eval -> analyze under `out`; returns the paths of what was written."""
    from .analysis import analyze_records, load_predictions, write_report
    from .config import load_config
    from .evaluation import evaluate_model
    from .training import run, synthesize_if_missing

    out = Path(out)
    data_root, model_dir = out / "data" / "clocks", out / "model"
    # the eval loss during training is skipped: step 3 scores generated answers instead
    values = {"data_root": str(data_root), "output_dir": str(model_dir), "eval_split": None, **(overrides or {})}
    if steps is not None:
        values["max_steps"] = steps
    if num is not None:
        values["synthesize_num"] = num
    model_args, data_args, loss_args, train_args = load_config(config, values)
    started = time.time()

    print(f"[1/4] {data_args.synthesize_num} clocks in {data_root}", flush=True)
    synthesize_if_missing(data_args)  # renders them, or reuses an identical earlier rendering

    print(f"[2/4] training the tiny Qwen2.5-VL for {train_args.max_steps} steps with CE + "
          f"{loss_args.aux_lambda:g} * {loss_args.aux} -> {model_dir}", flush=True)
    run(model_args, data_args, loss_args, train_args)

    eval_dir = out / "eval"
    print(f"[3/4] evaluating on {eval_limit} held-out clocks -> {eval_dir}", flush=True)
    metrics = evaluate_model(str(model_dir), [f"clocks:{data_root}"], eval_dir, split="test", limit=eval_limit,
                             max_new_tokens=max_new_tokens, instruction=data_args.instruction,
                             min_pixels=model_args.min_pixels, max_pixels=model_args.max_pixels)

    report_dir = out / "report"
    print(f"[4/4] per-digit analysis -> {report_dir}", flush=True)
    predictions = eval_dir / "predictions.jsonl"
    report = write_report({"tiny-smmd": analyze_records(load_predictions(predictions))}, report_dir,
                          inputs={"tiny-smmd": str(predictions)})
    paths = {"data": data_root, "model": model_dir, "predictions": predictions,
             "metrics": eval_dir / "metrics.json", "report": report}
    clocks = metrics["sources"]["clocks"]["test"]
    gap = clocks["mean_time_gap_minutes"]
    print(f"\ndone in {time.time() - started:.0f} s; time read exactly: {clocks['time_exact']:.3f}, "
          f"mean gap {'n/a' if gap is None else f'{gap:.1f}'} min")
    for name, path in paths.items():
        print(f"  {name:<12} {path}")
    print("A randomly initialised model this small learns the answer format, not yet to read clocks: "
          "use configs/qwen2_5_vl_3b_clock_smmd.yaml on a GPU for real numbers.")
    return paths


def main(argv: list[str] | None = None) -> int:
    from .cli import TRAINED_MODEL, Parser, existing, fail, input_error, no_empty_folder, usage_error

    parser = Parser(prog="vlm-smmd demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/demo"), help="folder for everything (%(default)s)")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="training config (%(default)s)")
    parser.add_argument("--num", type=int, help="clocks to render (default: the config's synthesize_num)")
    parser.add_argument("--steps", type=int, help="training steps (default: the config's max_steps)")
    parser.add_argument("--eval-limit", type=int, default=64, help="held-out clocks to evaluate (%(default)s)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the model, predictions and report of an earlier demo in --out (its "
                             "clocks are reused when rendered with the same settings)")
    args = parser.parse_args(argv)
    if not args.config.is_file():
        parser.error(f"{args.config}: config not found (run from a source checkout, or pass --config)")
    for flag in ("num", "steps", "eval_limit"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    earlier = [f"{part}/{name}" for part, patterns in (("model", TRAINED_MODEL),
                                                     ("eval", ("predictions.jsonl", "metrics.json")),
                                                     ("report", ("report.md",)))
               for name in existing(args.out / part, patterns)]
    if earlier and not args.overwrite:
        return usage_error("demo", f"--out {args.out} holds an earlier demo ({', '.join(earlier[:4])}"
                           f"{', ...' if len(earlier) > 4 else ''}); pass --overwrite to replace it, or choose "
                           "another --out")
    try:
        with no_empty_folder(args.out):
            run_demo(args.out, config=args.config, num=args.num, steps=args.steps, eval_limit=args.eval_limit)
    except Exception as e:
        if not input_error(e):
            raise
        return fail("demo", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
