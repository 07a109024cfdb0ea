"""`vlm-smmd demo`: the research settings end to end, offline on a CPU.

For each setting it renders the data, trains the from-scratch research model (the scratch preset:
Qwen2.5-VL's architecture over a task vocabulary) with CE + SMMD, evaluates it on held-out images, writes
the per-digit report, and says what the model learned beside the chance level:
- bar: one unlabelled bar against a 0-100 axis, "what is the value?" (configs/scratch_cpu_bar.yaml);
- clock: plain clocks with coloured hands, "what time is it?" (configs/scratch_cpu_clock.yaml); on request,
  as its model does not learn yet (it says so: the collapse warning).
"""

from __future__ import annotations

import time
from pathlib import Path

from ..run_record import FILE_NAME as RUN_RECORD

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SETTINGS = {  # name -> (config, eval source, what one sample is)
    "bar": ("scratch_cpu_bar.yaml", "chartqa", "bar charts"),
    "clock": ("scratch_cpu_clock.yaml", "clocks", "clocks"),
}
# The clock setting does not learn in its budget since each clock's style varies (README "Research
# settings"); it runs on request (--settings bar,clock: 7 min 43 s together on 2 idle cores).
DEFAULT = ("bar",)  # 2 min 30 s on 2 idle cores
SUMMARY = 6  # headline figures printed per setting (the report has them all)


def _own_folders(model_dir: Path, eval_dir: Path, report_dir: Path):
    """(folder, whether it is the demo's own) for the three folders --overwrite replaces: a trained model
    (run_config.json), an eval per split (each split's metrics.json or its streamed partial), a report
    (report.md). A plain file or a symlink is never the demo's."""
    def real(folder):
        return folder.is_dir() and not folder.is_symlink()

    def evals(folder):
        return real(folder) and all(real(p) and ((p / "metrics.json").is_file()
                                                 or (p / "predictions.partial.jsonl").is_file())
                                    for p in folder.iterdir())
    return [(model_dir, lambda f: real(f) and (f / RUN_RECORD).is_file()), (eval_dir, evals),
            (report_dir, lambda f: real(f) and (f / "report.md").is_file())]


def run_setting(name: str, out: Path, *, num: int | None = None, steps: int | None = None,
                eval_limit: int | None = None, max_new_tokens: int = 8, overrides: dict | None = None,
                overwrite: bool = False, replan=None) -> dict:
    """Data -> train -> eval on every test split (held-out images; unseen values) -> report for one setting
    under out/name; returns paths and, per split, the analysis and the held-out check. `overwrite`: an
    earlier model, eval and report there are removed once the data is in place. `replan`: as for
    `training.run`."""
    from ..analysis import analyze_records, load_predictions, load_run_info, write_report
    from ..config import evaluated_splits, load_config
    from ..evaluation import evaluate_model
    from ..training import run, synthesize_if_missing

    config, source, what = SETTINGS[name]
    base = out / name
    data_root, model_dir, eval_dir, report_dir = out / "data" / name, base / "model", base / "eval", base / "report"
    values = {"data_root": str(data_root), "output_dir": str(model_dir), "disable_tqdm": True, **(overrides or {})}
    if steps is not None:
        values["max_steps"] = steps
    if num is not None:
        values["synthesize_num"] = num
    model_args, data_args, loss_args, train_args = load_config(CONFIGS / config, values)
    if overwrite:  # only what the demo wrote, each recognised by its own file: anything else refused, untouched
        for folder, own in _own_folders(model_dir, eval_dir, report_dir):
            if (folder.exists() or folder.is_symlink()) and not own(folder):
                raise ValueError(f"{folder} was not written by vlm-smmd demo (no run_config.json, metrics.json or "
                                      "report.md of its own); move it away or choose another --out")
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
    run(model_args, data_args, loss_args, train_args, replan=replan)
    trained = time.time() - train_started
    splits = evaluated_splits(data_args)
    print(f"[{name} 3/4] evaluating on {'all' if eval_limit is None else f'the first {eval_limit}'} {what} of "
          f"{', '.join(splits)} -> {eval_dir}", flush=True)
    results = {}
    for split in splits:
        metrics = evaluate_model(str(model_dir), [f"{source}:{data_root}"], eval_dir / split, split=split,
                                 limit=eval_limit, batch_size=100, max_new_tokens=max_new_tokens,
                                 instruction=data_args.instruction, min_pixels=model_args.min_pixels,
                                 max_pixels=model_args.max_pixels, progress=False,
                                 train_data=[(source, str(data_root), data_args.train_split)],
                                 max_image_pixels=data_args.max_image_pixels)
        predictions = eval_dir / split / "predictions.jsonl"
        analysis = analyze_records(load_predictions(predictions))
        results[split] = {"predictions": predictions, "metrics": eval_dir / split / "metrics.json",
                          "analysis": analysis, "leakage": metrics["leakage"][source]}
    print(f"[{name} 4/4] per-digit report -> {report_dir}", flush=True)
    report = write_report({f"{name} {split}": r["analysis"] for split, r in results.items()}, report_dir,
                          inputs={f"{name} {split}": str(r["predictions"]) for split, r in results.items()},
                          run_info={f"{name} {split}": load_run_info(model_dir, predictions=r["predictions"])
                                    for split, r in results.items()})
    return {"data": data_root, "model": model_dir, "splits": results, "report": report, "train_seconds": trained}


def summary(name: str, result: dict) -> list[str]:
    """What the model learned on each test split, each figure with its n, chance level and best constant,
    the held-out check, and a warning when it collapsed."""
    from ..analysis import headline
    from ..analysis.formatting import fmt

    lines = [f"{name}: trained {result['train_seconds']:.0f} s (one seed: a figure of this run on this machine, "
             "not a result; the same command on another machine gives other figures)"]
    for split, r in result["splits"].items():
        a = r["analysis"]
        kind = "values never seen in training" if "unseen" in split else "new images of values seen in training"
        lines.append(f" {split} ({kind}): {a['records']} {SETTINGS[name][2]}")
        if r["leakage"]:
            lines.append("  " + "; ".join(r["leakage"]["lines"]))
        figs = headline(a)
        if any(f.key == "clock_exact" for f in figs):  # the string match says the same as the time read exactly
            figs = [f for f in figs if f.key != "exact_match"]
        for f in figs[:SUMMARY]:
            chance = "" if f.chance is None else f", chance {fmt(f.chance)}"
            answer = "" if f.constant_answer is None else f" ({f.constant_answer!r})"
            best = "" if f.constant is None else f", best constant answer{answer} {fmt(f.constant)}"
            over = "" if f.n == a["records"] else f" (over {f.n} {f.over})"
            lines.append(f"  {f.label}: {fmt(f.value)}{over}{chance}{best}")
        places = [f for f in figs if f.key.startswith("digit_acc_")]
        if places:
            lines.append("  digits right per place: " + ", ".join(
                f"{f.label.split(': ', 1)[-1]} {fmt(f.value)} (chance {fmt(f.chance)})" for f in places))
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
    from .threads import LoadWatch, use_thread_plan

    out = Path(out)
    threads = use_thread_plan()  # one thread when another job keeps a core busy: spinning threads slow both
    kwargs.setdefault("replan", LoadWatch(threads))  # and again while training, as cores are taken or freed
    started = time.time()
    results = {name: run_setting(name, out, **kwargs) for name in settings}
    print(f"\ndone in {time.time() - started:.0f} s. What the models learned:")
    for name, result in results.items():
        print("\n".join(summary(name, result)))
    print("These are small models trained from scratch on one narrow synthetic task each, over a task "
          "vocabulary: evidence about the losses in a controlled setting, not about pretrained VLMs.")
    return results
