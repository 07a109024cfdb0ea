"""Headline figures of a run: what a results table shows, each with its n, chance and best constant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .clocks import WORST_GAP
from .digits import rate
from .numbers import REL_TOLERANCES


class Metric(NamedTuple):
    """One headline figure of a run: `key` names it in results.csv; `count` / `n` its numerator and
    denominator (`over` says what n counts); chance and best constant as in the package docstring."""

    key: str
    label: str
    value: float | int | None
    n: int
    over: str
    count: int | None = None
    chance: float | None = None
    constant: float | None = None
    constant_answer: str | None = None
    lower_is_better: bool = False
    total: int | None = None  # the records n is drawn from, when n leaves some out


def headline(a: Mapping) -> list[Metric]:
    """The figures of an analysis that a table shows, in order: exact match, relaxed accuracy (chart
    sources), the numeric figures (value exact and within relative tolerance when text sources are present;
    MAE, within ±1 / ±2, non-numeric answers, digit accuracy overall and per place), the clock figures
    (hour, minute, exact, within 5 min, mean gap over answers holding a time and worst case, no time,
    digit accuracy per place), the grounding figures (mean IoU, IoU >= 0.5 and corner error of box answers;
    point-in-box and centre error of point answers, with their best constant; each coordinate's mean
    |error| and per-place digit accuracy; no valid answer). Only those that apply to the run's records."""
    figs = [Metric("exact_match", "exact match", a["exact_match"], a["records"], "records", a["exact_match_count"],
                   a["chance"]["exact_match"], a["chance"]["constant"]["exact_match"],
                   a["chance"]["constant"]["exact_match_answer"])]
    if a["chart_records"]:
        figs.append(Metric("relaxed_accuracy", "relaxed accuracy (ChartQA, 5%)", a["relaxed_accuracy"],
                           a["chart_records"], "chart records", a["relaxed_accuracy_count"],
                           a["chance"]["relaxed_accuracy"]))
    num = a["numeric"]
    if num["records"]:
        ch, const, n = num["chance"], num["constant"], num["records"]
        if a["text_records"]:
            figs.append(Metric("value_exact", "final number exact", num["value_exact_rate"], n, "numeric answers",
                               num["value_exact"], ch.get("value_exact"), const.get("value_exact"),
                               const.get("value_exact_answer")))
            for tol in REL_TOLERANCES[1:]:
                k = f"{tol:g}"
                figs.append(Metric(f"within_rel_{k}", f"within relative tolerance {k}",
                                   num["within_relative_rate"][k], n, "numeric answers", num["within_relative"][k],
                                   ch.get("within_relative", {}).get(k)))
        figs.append(Metric("mae", "mean absolute error", num["abs_error"]["mean"], num["analysed"],
                           "numeric answers holding a number", None, ch.get("mae"), const.get("mae"),
                           const.get("mae_answer"), lower_is_better=True, total=n))
        for k in ("1", "2"):
            figs.append(Metric(f"within_{k}", f"within ±{k}", num["within_abs_rate"][k], n, "numeric answers",
                               num["within_abs"][k], ch.get("within_abs", {}).get(k)))
        figs.append(Metric("non_numeric_rate", "answer holds no number", rate(num["non_numeric_predictions"], n),
                           n, "numeric answers", num["non_numeric_predictions"], lower_is_better=True))
        figs += _digit_figures(num, "")
    clk = a["clock"]
    if clk["records"]:
        ch, const, n, analysed = clk["chance"], clk["constant"], clk["records"], clk["analysed"]
        rates = ch.get("rates", {})
        for key, label in (("hour_correct", "hour correct"), ("minute_correct", "minute correct"),
                           ("exact", "clock exact")):
            figs.append(Metric("clock_exact" if key == "exact" else key, label, clk["rates"][key], n,
                               "clock answers", clk[key], rates.get(key), const.get(key),
                               const.get("exact_answer") if key == "exact" else None))
        for k in ("1", "5"):  # 1: It's About Time's top_1
            figs.append(Metric(f"within_{k}_min", f"within {k} min", clk["within_minutes_rate"][k], n,
                               "clock answers", clk["within_minutes"][k], ch.get("within_minutes_rate", {}).get(k)))
        figs.append(Metric("mean_time_gap_min", "mean gap (min), answers holding a time", clk["mean_gap"], analysed,
                           "clock answers holding a time", None, ch.get("mean_gap"), const.get("mean_gap"),
                           const.get("mean_gap_answer"), lower_is_better=True, total=n))
        figs.append(Metric("mean_time_gap_worst_min", f"mean gap (min), no time = {WORST_GAP:g}",
                           clk["mean_gap_worst_case"], n, "clock answers", None, ch.get("mean_gap"),
                           const.get("mean_gap"), const.get("mean_gap_answer"), lower_is_better=True))
        figs.append(Metric("no_time_rate", "answer holds no time", clk["rates"]["no_time"], n, "clock answers",
                           clk["no_time"], lower_is_better=True))
        figs += _digit_figures(clk, "clock ")
    figs += _grounding_figures(a.get("grounding") or {})
    return figs


def _grounding_figures(g: Mapping) -> list[Metric]:
    if not g.get("records"):
        return []
    ch, const, figs = g.get("chance") or {}, g.get("constant") or {}, []
    boxes, points = g["box_records"], g["point_records"]
    if boxes:
        thr = f"{g['iou_threshold']:g}"
        figs += [
            Metric("iou", "mean IoU (no valid box = 0)", g["iou_mean"], boxes, "box answers", None, ch.get("iou_mean")),
            Metric(f"iou_at_{thr}", f"IoU >= {thr}", g["iou_at_threshold_rate"], boxes, "box answers",
                   g["iou_at_threshold"], ch.get("iou_at_threshold_rate")),
            Metric("corner_error", "mean corner error (answer units), answers giving a box", g["corner_error"]["mean"],
                   g["corner_error"]["analysed"], "box answers giving a box", None, ch.get("corner_error_mean"),
                   lower_is_better=True, total=boxes)]
    if points:
        if g["point_in_box_records"]:
            figs.append(Metric("point_in_box", "point in box", g["point_in_box_rate"], g["point_in_box_records"],
                               "point answers with a target box", g["point_in_box"], ch.get("point_in_box_rate"),
                               const.get("point_in_box_rate"), _point_text(const.get("point_in_box_answer")),
                               total=points))
        figs.append(Metric("centre_error", "mean centre error (answer units), answers giving a point", g["centre_error"]["mean"],
                           g["centre_error"]["analysed"], "point answers giving a point", None,
                           ch.get("centre_error_mean"), const.get("centre_error_mean"),
                           _point_text(const.get("centre_error_answer")), lower_is_better=True, total=points))
    for task in ("point", "box"):
        part, part_chance = g.get(f"{task}_digits"), ch.get(f"{task}_digits") or {}
        if not part:
            continue
        for name, c in part["coordinates"].items():
            figs.append(Metric(f"{task}_{name}_error", f"{task} {name}: mean |error| (answer units)", c["mean_abs_error"],
                               c["analysed"], f"{task} answers giving a {task}", None,
                               (part_chance.get("coordinates") or {}).get(name, {}).get("mean_abs_error"),
                               lower_is_better=True, total=part["records"]))
        figs += _digit_figures({**part, "chance": {"places": {}, **part_chance}}, f"{task} ",
                               f"coordinate digits of {task} answers giving a {task}")
    figs.append(Metric("no_valid_answer_rate", "answer gives no valid point or box", g["no_valid_answer_rate"],
                       g["records"], "grounding answers", g["no_valid_answer"], ch.get("no_valid_answer_rate"),
                       lower_is_better=True))
    return figs


def _point_text(point) -> str | None:
    return None if point is None else f"[{point[0]:g}, {point[1]:g}]"


def _digit_figures(part: Mapping, prefix: str, over: str | None = None) -> list[Metric]:
    over = over or "target digits of answers that hold a " + ("time" if prefix else "number")
    ch = part["chance"]
    figs = [] if prefix else [Metric("digit_accuracy", "digit accuracy (all places)", part["digit_accuracy"],
                                     sum(p["target_digits"] for p in part["places"].values()), over,
                                     sum(p["correct"] for p in part["places"].values()), ch.get("digit_accuracy"))]
    for name, p in part["places"].items():
        if not p["target_digits"]:  # only extra predicted digits here: no accuracy to show (the table keeps them)
            continue
        figs.append(Metric(f"digit_acc_{name.replace(' ', '_')}", f"{prefix}digit accuracy: {name}", p["accuracy"],
                           p["target_digits"], over, p["correct"], ch["places"].get(name)))
    return figs


def compare_runs(analyses: Mapping[str, dict]) -> dict[str, dict[str, float | int | None]]:
    """Headline figures side by side: {label: {run: value}}, "records" first, in `headline` order; a figure
    that no run has is left out."""
    rows: dict[str, dict] = {"records": {r: a["records"] for r, a in analyses.items()}}
    per_run = {r: {f.label: f.value for f in headline(a)} for r, a in analyses.items()}
    for label in dict.fromkeys(lbl for figs in per_run.values() for lbl in figs):
        values = {r: per_run[r].get(label) for r in analyses}
        if any(v is not None for v in values.values()):
            rows[label] = values
    return rows
