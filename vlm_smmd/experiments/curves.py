"""Learning curves of a comparison (`compare --curve 25,50,75`): the primary metric on the first N records
of `val` at fixed shares of the training steps, per run (curve.json), and the page's section over the runs.

A point at P % of the steps is the checkpoint the worker had the Trainer save at step `curve_step(P,
max_steps)` (`training.trainer.SaveAtSteps`); 100 % is the final model, read from its own val evaluation (its
first N records). The curve is exploratory: on `val`, a subsample, not tested; the endpoint stays the final
figure on the primary split.

curve.json: {"split": "val", "limit": N, "metric", "label", "lower_is_better", "max_steps",
"points": [{"percent", "step", "n", METRIC: value}]}; a point whose checkpoint is missing has METRIC None and
"missing" (why), and is counted as missing on the page.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from .statistics import paired_t, spread
from .store import StateError, read_state, write_json

CURVE_FILE = "curve.json"
SPLIT = "val"
DEFAULT_LIMIT = 200  # val records per point


def parse_percents(text: str) -> list[int]:
    """"25,50,75" -> [25, 50, 75]: distinct integers from 1 to 99 (100 % is the final model, always a
    point); ValueError in one line otherwise."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    try:
        percents = [int(s) for s in items]
    except ValueError:
        raise ValueError(f"--curve {text!r}: expected comma-separated whole percents of max_steps, "
                         "such as 25,50,75") from None
    bad = [p for p in percents if not 1 <= p <= 99]
    if not percents or bad:
        raise ValueError(f"--curve {text!r}: each percent must be from 1 to 99 (100 % is the final model, "
                         "always a point)")
    if len(set(percents)) != len(percents):
        raise ValueError(f"--curve {text!r}: a percent is given twice")
    return sorted(percents)


def curve_step(percent: int, max_steps: int) -> int:
    """The global step of `percent` % of `max_steps`: rounded half up (50 % of 3 steps is step 2), at least 1
    (a point before the first update would show the initial model). 25 % of 1000 is 250."""
    return max(1, (2 * percent * max_steps + 100) // 200)


def checkpoint_steps(percents: Sequence[int], max_steps: int) -> set[int]:
    """The steps that need a checkpoint: those of `percents` before the last step (the last one is the final
    model)."""
    return {s for p in percents if (s := curve_step(p, max_steps)) < max_steps}


# ---------------------------------------------------------------------------------------------------------
# Evaluating checkpoints (the compare worker and bench/learning_curve.py)


def run_checkpoints(run: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint-N in a training output (as resume judges it), and of the
    final model (its step from trainer_state.json), by step."""
    import json

    from ..training import checkpoint_problem

    found = []
    for folder in run.glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", folder.name)
        if m and checkpoint_problem(folder) is None:
            found.append((int(m.group(1)), folder))
    state = run / "trainer_state.json"
    if (run / "config.json").is_file() and state.is_file():
        step = json.loads(state.read_text())["global_step"]
        if step not in {s for s, _ in found}:
            found.append((step, run))
    return sorted(found)


def evaluate_point(model_dir: Path, data, out_dir: Path, arguments) -> dict:
    """Evaluate one saved model (a checkpoint folder or the final model) with `arguments` (`EvalArguments`)
    into `out_dir` (predictions.jsonl, metrics.json) and return the analysis of its predictions
    (`analysis.analyze_records`, with chance)."""
    from ..analysis import analyze_records, load_predictions
    from ..evaluation import evaluate_model

    evaluate_model(str(model_dir), data, out_dir, arguments, progress=False)
    return analyze_records(load_predictions(Path(out_dir) / "predictions.jsonl"))


def _figure(analysis: Mapping, metric: str):
    from ..analysis import headline

    return next((f for f in headline(analysis) if f.key == metric), None)


def write_curve(run_dir: Path, data, arguments, curve: Mapping) -> dict:
    """The worker's curve stage: each point of `curve` ({"percents", "limit", "metric"}) not yet in
    run_dir/curve.json is evaluated (checkpoint predictions under run_dir/curve/step-N) and curve.json
    rewritten after each, so a retry evaluates only what is missing. Needs the final model's val evaluation
    (run_dir/val) for the 100 % point. Returns curve.json's content."""
    from ..analysis import analyze_records, load_predictions
    from ..training import checkpoint_problem

    model, path, limit, metric = run_dir / "model", run_dir / CURVE_FILE, curve["limit"], curve["metric"]
    max_steps = int(read_state(model / "trainer_state.json")["max_steps"])
    try:
        old = read_state(path)
    except FileNotFoundError:
        old = {}
    except StateError as e:  # a torn write: evaluate again
        print(f"{e}; evaluating the curve again", flush=True)
        old = {}
    same = old.get("limit") == limit and old.get("metric") == metric and old.get("max_steps") == max_steps
    kept = {p["percent"]: p for p in old.get("points", []) if same and p.get(metric) is not None}
    result = {"split": SPLIT, "limit": limit, "metric": metric, "label": old.get("label") if same else None,
              "lower_is_better": old.get("lower_is_better") if same else None, "max_steps": max_steps, "points": []}
    by_step: dict[int, dict] = {}  # analyses of this call: two percents may share a step
    for percent in [*curve["percents"], 100]:
        if percent in kept:
            result["points"].append(kept[percent])
            continue
        step = max_steps if percent == 100 else curve_step(percent, max_steps)
        point = {"percent": percent, "step": step}
        if step not in by_step:
            folder = model / f"checkpoint-{step}"
            if step >= max_steps:  # the final model, evaluated on val already: its first `limit` records
                by_step[step] = analyze_records(load_predictions(run_dir / SPLIT / "predictions.jsonl")[:limit])
            elif (problem := checkpoint_problem(folder) if folder.is_dir() else "no such folder") is not None:
                result["points"].append({**point, "n": 0, metric: None, "missing": f"{folder}: {problem}"})
                print(f"curve: {percent} % (step {step}) not evaluated: {folder}: {problem}", flush=True)
                write_json(path, result)
                continue
            else:
                by_step[step] = evaluate_point(folder, data, run_dir / "curve" / f"step-{step}",
                                               dataclasses.replace(arguments, split=SPLIT, limit=limit))
        figure = _figure(by_step[step], metric)
        if figure is not None:
            result["label"], result["lower_is_better"] = figure.label, figure.lower_is_better
        result["points"].append({**point, "n": by_step[step]["records"],
                                 metric: None if figure is None else figure.value})
        write_json(path, result)
    write_json(path, result)
    return result


# ---------------------------------------------------------------------------------------------------------
# The page


def _read_curve(path: Path, metric: str) -> tuple[dict[int, float], str | None, dict]:
    """({percent: value} of the points with a value, why the file cannot be used or None, the file)."""
    try:
        data = read_state(path)
    except FileNotFoundError:
        return {}, "no curve.json", {}
    except StateError as e:
        return {}, str(e), {}
    values = {}
    for i, p in enumerate(data.get("points") or []):
        if not isinstance(p, dict) or not isinstance(p.get("percent"), int):
            return {}, f"{path}: point #{i} has no whole percent", {}
        v = p.get(metric)
        if v is not None:
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                return {}, f"{path}: point #{i} ({p['percent']} %) has {metric} {v!r}, not a finite number", {}
            values[p["percent"]] = float(v)
    return values, None, data


def collect_curves(out: Path, variants: Sequence, status, settings: Mapping) -> dict:
    """The curves of the finished runs, development seeds left out: {"percents", "metric", "label",
    "lower_is_better", "groups": {group: {"runs": [names], "values": {percent: {seed: value}}}},
    "missing": {run: why}}; a run without a value at a percent (no curve.json, a point without value) is
    counted in that percent's n, not dropped."""
    curve = settings["curve"]
    metric, dev_seeds = curve["metric"], set(settings.get("dev_seeds") or [])
    got = {"percents": [*curve["percents"], 100], "metric": metric, "label": None, "lower_is_better": None,
           "groups": {}, "missing": {}}
    for v in variants:
        if status.variants.get(v.name, {}).get("status") != "done" or v.seed in dev_seeds:
            continue
        values, why, data = _read_curve(out / "runs" / v.name / CURVE_FILE, metric)
        group = got["groups"].setdefault(v.group, {"runs": [], "values": {p: {} for p in got["percents"]}})
        group["runs"].append(v.name)
        if why is not None:
            got["missing"][v.name] = why
        for p in got["percents"]:
            if p in values:
                group["values"][p][v.seed] = values[p]
        if got["label"] is None and data.get("label"):
            got["label"], got["lower_is_better"] = data["label"], data.get("lower_is_better")
    return got


def curve_section(out: Path, variants: Sequence, status, settings: Mapping, chance: Mapping | None = None,
                  primary_split: str | None = None) -> list[str]:
    """The page's learning-curve section (and plots/curve.png) when the comparison ran with --curve, else [].
    `chance`: {figure: (chance, best constant)} of the val split (the page's), for the plot's chance line."""
    from ..analysis.formatting import fmt, md_table
    from .variants import BASELINE

    curve = settings.get("curve")
    if not curve:
        return []
    got = collect_curves(out, variants, status, settings)
    metric, percents = got["metric"], got["percents"]
    label = got["label"] or metric
    split = primary_split or (settings.get("primary") or {}).get("split") or settings["eval"]["splits"][0]
    md = [f"## Learning curve ({SPLIT}, {curve['limit']} samples per point; exploratory)", "",
          f"{label}{' (lower is better)' if got['lower_is_better'] else ''} on the first {curve['limit']} records of "
          f"`{SPLIT}` at each share of the training steps (step = P % of max_steps rounded half up, at least 1; "
          "from a checkpoint saved at that step; 100 % is the final model's own val evaluation), mean ± std over "
          "the finished seeds"
          + (", development seeds left out" if settings.get("dev_seeds") else "")
          + f". Exploratory: on `{SPLIT}`, a subsample, intervals uncorrected and nothing tested. The final "
          f"endpoint is the 100 % figure on the primary split `{split}` (see Primary endpoint), not this curve.", ""]
    if not got["groups"]:
        return md + ["No finished run yet.", ""]
    table = []
    for group, g in got["groups"].items():
        cells = []
        for p in percents:
            s = spread(list(g["values"][p].values()))
            mean, std = s["mean"], s["std"]
            text = "–" if mean is None else fmt(mean, metric) + ("" if std is None else f" ± {fmt(std, metric)}")
            cells.append(f"{text} (n={len(g['values'][p])}/{len(g['runs'])})")
        table.append([group, *cells])
    md += ["mean ± std (n = runs with a value / finished runs):", ""]
    md += md_table(["group", *(f"{p} %" for p in percents)], table)
    base = got["groups"].get(BASELINE)
    if base is not None and len(got["groups"]) > 1:
        rows = []
        for group, g in got["groups"].items():
            if group == BASELINE:
                continue
            cells = []
            for p in percents:
                seeds = sorted(g["values"][p].keys() & base["values"][p].keys())
                t = paired_t([g["values"][p][s] - base["values"][p][s] for s in seeds])
                if t["mean"] is None:
                    cells.append("–")
                    continue
                text = fmt(t["mean"], metric, signed=True)
                if t["low"] is not None:
                    text += f" [{fmt(t['low'], metric, signed=True)}, {fmt(t['high'], metric, signed=True)}]"
                cells.append(f"{text} (n={t['n']})")
            rows.append([f"{group} - {BASELINE}", *cells])
        md += [f"paired difference to `{BASELINE}` (same seed): mean [95% paired t-interval, uncorrected] "
               "(n = pairs):", ""]
        md += md_table(["comparison", *(f"{p} %" for p in percents)], rows)
    if got["missing"]:
        md += [f"- {name}: {why}; counted as a run without a value" for name, why in got["missing"].items()] + [""]
    level = (chance or {}).get(metric, (None, None))[0]
    if _curve_plot(out / "plots" / "curve.png", got, label, level):
        md += ["![plots/curve.png](plots/curve.png)", ""]
    return md


def _curve_plot(path: Path, got: Mapping, label: str, chance: float | None) -> bool:
    """Per group: mean vs percent of steps (line), mean ± std shaded, seeds as dots; chance dashed."""
    from ..analysis.formatting import fmt, new_figure, place_legend, save_figure, series_color

    groups = [(name, g) for name, g in got["groups"].items() if any(g["values"][p] for p in got["percents"])]
    if not groups:
        return False
    fig, ax = new_figure(7.0, 4.4)
    for i, (name, g) in enumerate(groups):
        color = series_color(i, len(groups))
        xs, means, lows, highs = [], [], [], []
        for p in got["percents"]:
            vals = list(g["values"][p].values())
            if not vals:
                continue
            s = spread(vals)
            mean, std = s["mean"], s["std"]
            xs.append(p)
            means.append(mean)
            lows.append(mean - (std or 0.0))
            highs.append(mean + (std or 0.0))
            ax.scatter([p] * len(vals), vals, color=color, s=10, alpha=0.6, zorder=3)
        ax.plot(xs, means, marker="o", color=color, label=name)
        ax.fill_between(xs, lows, highs, color=color, alpha=0.15, linewidth=0)
    if chance is not None:
        ax.axhline(chance, color="black", linestyle="--", linewidth=1, label=f"chance {fmt(chance, got['metric'])}")
    ax.set_xlim(0, 102)
    ax.set_xlabel("percent of training steps")
    ax.set_ylabel(f"{label} ({SPLIT})")
    ax.set_title(f"Learning curve on {SPLIT} (exploratory): mean ± std over seeds; "
                 f"{'lower' if got['lower_is_better'] else 'higher'} is better", fontsize=10)
    place_legend(ax, len(groups) + (chance is not None))
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path)
    return True
