"""`vlm-smmd demo`: the research settings end to end, offline on a CPU.

For each setting it renders the data, trains the from-scratch research model (the scratch preset:
Qwen2.5-VL's architecture over a task vocabulary) with CE + SMMD, evaluates it on held-out images, writes
the per-digit report, and says what the model learned beside the chance level:
- bar: one unlabelled bar against a 0-100 axis, "what is the value?" (configs/scratch_cpu_bar.yaml);
- clock: plain clocks with coloured hands, "what time is it?" (configs/scratch_cpu_clock.yaml).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SETTINGS = {  # name -> (config, eval source, what one sample is)
    "bar": ("scratch_cpu_bar.yaml", "chartqa", "bar charts"),
    "clock": ("scratch_cpu_clock.yaml", "clocks", "clocks"),
}
DEFAULT = ("bar", "clock")  # 99 s + 529 s on 2 idle cores
SUMMARY = 6  # headline figures printed per setting (the report has them all)


def run_setting(name: str, out: Path, *, num: int | None = None, steps: int | None = None,
                eval_limit: int | None = None, max_new_tokens: int = 8, overrides: dict | None = None,
                overwrite: bool = False) -> dict:
    """Data -> train -> eval -> report for one setting under out/name; returns paths and the analysis.
    `overwrite`: an earlier model, eval and report there are removed once the data is in place."""
    from .analysis import analyze_records, load_predictions, load_run_info, write_report
    from .config import load_config
    from .evaluation import evaluate_model
    from .training import run, synthesize_if_missing

    config, source, what = SETTINGS[name]
    base = out / name
    data_root, model_dir, eval_dir, report_dir = out / "data" / name, base / "model", base / "eval", base / "report"
    values = {"data_root": str(data_root), "output_dir": str(model_dir), "disable_tqdm": True, **(overrides or {})}
    if steps is not None:
        values["max_steps"] = steps
    if num is not None:
        values["synthesize_num"] = num
    model_args, data_args, loss_args, train_args = load_config(CONFIGS / config, values)
    print(f"[{name} 1/4] {data_args.synthesize_num} {what} in {data_root}", flush=True)
    synthesize_if_missing(data_args)  # renders them, or reuses an identical earlier rendering
    if overwrite:
        import shutil

        for folder in (model_dir, eval_dir, report_dir):
            shutil.rmtree(folder, ignore_errors=True)
    print(f"[{name} 2/4] training the scratch model ({model_args.scratch_layers} x {model_args.scratch_hidden_size} "
          f"text, {model_args.scratch_vision_depth} x {model_args.scratch_vision_hidden_size} vision) for "
          f"{train_args.max_steps} steps of {train_args.per_device_train_batch_size} with CE + "
          f"{loss_args.aux_lambda:g} * {loss_args.aux} -> {model_dir}", flush=True)
    train_started = time.time()
    run(model_args, data_args, loss_args, train_args)
    trained = time.time() - train_started
    print(f"[{name} 3/4] evaluating on {'all' if eval_limit is None else f'the first {eval_limit}'} held-out "
          f"{what} -> {eval_dir}", flush=True)
    evaluate_model(str(model_dir), [f"{source}:{data_root}"], eval_dir, split="test", limit=eval_limit,
                   batch_size=100, max_new_tokens=max_new_tokens, instruction=data_args.instruction,
                   min_pixels=model_args.min_pixels, max_pixels=model_args.max_pixels, progress=False)
    predictions = eval_dir / "predictions.jsonl"
    print(f"[{name} 4/4] per-digit report -> {report_dir}", flush=True)
    analysis = analyze_records(load_predictions(predictions))
    report = write_report({name: analysis}, report_dir, inputs={name: str(predictions)},
                          run_info={name: load_run_info(model_dir, predictions=predictions)})
    return {"data": data_root, "model": model_dir, "predictions": predictions, "metrics": eval_dir / "metrics.json",
            "report": report, "analysis": analysis, "train_seconds": trained}


def summary(name: str, result: dict) -> list[str]:
    """What the model learned, each figure with its n and chance level; a warning when it collapsed."""
    from .analysis import _fmt, headline

    a = result["analysis"]
    lines = [f"{name}: {a['records']} held-out {SETTINGS[name][2]}, trained {result['train_seconds']:.0f} s"]
    figs = headline(a)
    if any(f.key == "clock_exact" for f in figs):  # the string match says the same as the time read exactly
        figs = [f for f in figs if f.key != "exact_match"]
    for f in figs[:SUMMARY]:
        chance = "" if f.chance is None else f", chance {_fmt(f.chance)}"
        answer = "" if f.constant_answer is None else f" ({f.constant_answer!r})"
        best = "" if f.constant is None else f", best constant answer{answer} {_fmt(f.constant)}"
        over = "" if f.n == a["records"] else f" (over {f.n} {f.over})"
        lines.append(f"  {f.label}: {_fmt(f.value)}{over}{chance}{best}")
    places = [f for f in figs if f.key.startswith("digit_acc_")]
    if places:
        lines.append("  digits right per place: " + ", ".join(
            f"{f.label.split(': ', 1)[-1]} {_fmt(f.value)} (chance {_fmt(f.chance)})" for f in places))
    c = a["collapse"]
    if c["collapsed"]:
        lines.append(f"  WARNING: the model mostly repeats itself: {'; '.join(c['reasons'])}")
    else:
        lines.append(f"  {c['distinct_predictions']} distinct answers for {c['distinct_targets']} distinct targets")
    lines.append(f"  report: {result['report']}")
    return lines


def run_demo(out: Path, *, settings=DEFAULT, **kwargs) -> dict:
    """Every setting in turn (keyword arguments as for `run_setting`); prints the summary; returns
    {setting: its result}."""
    out = Path(out)
    started = time.time()
    results = {name: run_setting(name, out, **kwargs) for name in settings}
    print(f"\ndone in {time.time() - started:.0f} s. What the models learned:")
    for name, result in results.items():
        print("\n".join(summary(name, result)))
    print("These are small models trained from scratch on one narrow synthetic task each, over a task "
          "vocabulary: evidence about the losses in a controlled setting, not about pretrained VLMs.")
    return results


def main(argv: list[str] | None = None) -> int:
    from .cli import TRAINED_MODEL, Parser, existing, fail, input_error, no_empty_folder, usage_error

    parser = Parser(prog="vlm-smmd demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/demo"), help="folder for everything (%(default)s)")
    parser.add_argument("--settings", default=",".join(DEFAULT),
                        help=f"comma-separated settings to run, from {', '.join(SETTINGS)} (default %(default)s)")
    parser.add_argument("--num", type=int, help="samples to render per setting (default: each config's synthesize_num)")
    parser.add_argument("--steps", type=int, help="training steps per setting (default: each config's max_steps)")
    parser.add_argument("--eval-limit", type=int, help="held-out samples to evaluate per setting (default all)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the models, predictions and reports of an earlier demo in --out (its data "
                             "is reused when rendered with the same settings)")
    args = parser.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown or not settings:
        parser.error(f"--settings: choose from {', '.join(SETTINGS)}, got {args.settings!r}")
    for name, _, _ in SETTINGS.values():
        if not (CONFIGS / name).is_file():
            parser.error(f"{CONFIGS / name}: config not found (the demo runs from a source checkout)")
    for flag in ("num", "steps", "eval_limit"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    earlier = [f"{s}/{part}/{name}" for s in settings
               for part, patterns in (("model", TRAINED_MODEL), ("eval", ("predictions.jsonl", "metrics.json")),
                                      ("report", ("report.md",)))
               for name in existing(args.out / s / part, patterns)]
    if earlier and not args.overwrite:
        return usage_error("demo", f"--out {args.out} holds an earlier demo ({', '.join(earlier[:4])}"
                           f"{', ...' if len(earlier) > 4 else ''}); pass --overwrite to replace it, or choose "
                           "another --out")
    try:
        with no_empty_folder(args.out):
            run_demo(args.out, settings=settings, num=args.num, steps=args.steps, eval_limit=args.eval_limit,
                     overwrite=bool(earlier))
    except Exception as e:
        if not input_error(e):
            raise
        return fail("demo", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
