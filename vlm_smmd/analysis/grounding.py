"""Grounding answers (a point or a box of a named object): IoU, IoU >= 0.5 and corner error of boxes,
point-in-box and centre error of points, answers giving neither, each coordinate's error and digits, a
few examples for the plots, and their chance and best constant (definitions in the `vlm_smmd.analysis`
docstring). Coordinates are the answer's own (pixels of the resized image, or 0..1000)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from vlm_smmd.metrics import (
    GROUNDING_KEYS,
    IOU_THRESHOLD,
    box_iou,
    corner_error,
    grounding_answer,
    parse_grounding,
    point_in_box,
)

from .chance import pair_mean, record_pairs
from .digits import DigitTally, align_digits, digit_places, place_chance, place_name, rate

COORDINATES = {"point": ("x", "y"), "box": ("x1", "y1", "x2", "y2")}
EXAMPLES = 7  # records kept (with their image path and geometry) for the predicted-vs-true plot


class GroundingTarget(NamedTuple):
    """What a grounding record asks for: `task` point | box; `answer` the right answer's coordinates (the
    box, or the point); `box` the object's box (for a point question: the box a point must fall in; None
    when the record does not say)."""

    task: str
    answer: tuple[float, ...]
    box: tuple[float, ...] | None


def _coords(value, size: int) -> tuple[float, ...] | None:
    if not isinstance(value, (list, tuple)) or len(value) != size:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        return None
    return tuple(float(v) for v in value)


def grounding_target(record: Mapping) -> GroundingTarget | None:
    """The target of a checked record: task, target_box and target_point from its meta (as the grounding
    reader writes them) where present, else the task and coordinates of its first target's JSON answer;
    None when neither gives a task and its geometry."""
    meta = record.get("meta") if isinstance(record.get("meta"), Mapping) else {}
    parsed = grounding_answer(record["targets"][0])
    task = meta.get("task") if meta.get("task") in GROUNDING_KEYS else (parsed[0] if parsed else None)
    if task is None:
        return None
    box = _coords(meta.get("target_box"), 4)
    if box is not None and (box[2] < box[0] or box[3] < box[1]):
        box = None
    own = parsed[1] if parsed is not None and parsed[0] == task else None
    answer = box if task == "box" else _coords(meta.get("target_point"), 2)
    answer = answer or own
    if answer is None:
        return None
    return GroundingTarget(task, answer, answer if task == "box" else box)


def _scores(pred: tuple[float, ...] | None, t: GroundingTarget) -> dict:
    """Per-answer figures of a parsed prediction (None: no valid answer) against target `t`."""
    if t.task == "box":
        iou = 0.0 if pred is None else box_iou(pred, t.answer)
        return {"iou": iou, "iou_hit": iou >= IOU_THRESHOLD,
                "error": None if pred is None else corner_error(pred, t.answer)}
    inside = None if t.box is None else (pred is not None and point_in_box(pred, t.box))
    return {"inside": inside, "error": None if pred is None else math.dist(pred, t.answer)}


def _number(value: float) -> str:
    """A coordinate as digits ("82", "82.5"), for the digit analysis."""
    return format(value, "f")


def _coordinate_part(task: str, pairs: Sequence[tuple[tuple[float, ...] | None, GroundingTarget]]) -> dict:
    """Per coordinate of one task's answers (x, y or x1, y1, x2, y2): exact share and |error| over the
    answers giving a valid point or box, and the digits of each coordinate aligned by place ("x tens",
    "x units", ...) in the layout of the numeric digit analysis (places, confusion, |digit error|)."""
    names = COORDINATES[task]
    tally = DigitTally()
    errors: dict[str, list[float]] = {name: [] for name in names}
    rank: dict[str, int] = {}  # place name -> its rank in the tables: by coordinate, most significant first
    for pred, t in pairs:
        if pred is None:
            continue
        for name, p, v in zip(names, pred, t.answer):
            errors[name].append(abs(p - v))
            for pair in align_digits(_number(p), _number(v)):
                place = f"{name} {place_name(pair.place)}"
                rank[place] = 100 * names.index(name) - pair.place
                tally.add(place, pair.target, pair.prediction)
    return {
        "records": len(pairs), "analysed": sum(pred is not None for pred, _ in pairs),
        "coordinates": {name: {"analysed": len(e), "exact": sum(x == 0 for x in e),
                               "exact_rate": rate(sum(x == 0 for x in e), len(e)),
                               "mean_abs_error": statistics.fmean(e) if e else None,
                               "median_abs_error": statistics.median(e) if e else None}
                        for name, e in errors.items()},
        "places": tally.table(sorted(rank, key=rank.get), {k: {"order": v} for k, v in rank.items()}),
        "digit_accuracy": tally.overall(),
        "confusion": tally.confusion, "digit_error_histogram": tally.digit_error,
    }


def _example(record: Mapping, pred: tuple[float, ...] | None, t: GroundingTarget) -> dict:
    """What the predicted-vs-true plot draws for one record (JSON-serialisable)."""
    meta = record.get("meta") if isinstance(record.get("meta"), Mapping) else {}
    return {"id": str(record["id"]), "image": record.get("image") if isinstance(record.get("image"), str) else None,
            "task": t.task, "answer": list(t.answer), "box": None if t.box is None else list(t.box),
            "prediction": None if pred is None else list(pred), "prediction_text": record["prediction"],
            "coords": meta.get("coords"), "label": meta.get("label"),
            "frame": [meta.get(k) for k in ("resized_width", "resized_height", "width", "height")]}


def _error_summary(errors: list[float]) -> dict:
    return {"analysed": len(errors), "mean": statistics.fmean(errors) if errors else None,
            "median": statistics.median(errors) if errors else None}


def grounding_analysis(pairs: Sequence[tuple[str, GroundingTarget]], records: Sequence[Mapping] = ()) -> dict:
    """Figures of (prediction, target) pairs of grounding records (`metrics.parse_grounding` reads the
    prediction; an answer giving no valid point or box scores IoU 0 and is outside every box). `records`:
    the records behind the pairs, in their order; the first EXAMPLES of them are kept as "examples"."""
    parsed = [(parse_grounding(p, t.task), t) for p, t in pairs]
    boxes = [(p, t) for p, t in parsed if t.task == "box"]
    points = [(p, t) for p, t in parsed if t.task == "point"]
    box_scores = [_scores(p, t) for p, t in boxes]
    point_scores = [_scores(p, t) for p, t in points]
    no_box = sum(s["error"] is None for s in box_scores)
    no_point = sum(s["error"] is None for s in point_scores)
    hits = sum(s["iou_hit"] for s in box_scores)
    judged = [s["inside"] for s in point_scores if s["inside"] is not None]
    n = len(pairs)
    return {
        "records": n,
        "box_records": len(boxes),
        "point_records": len(points),
        "no_valid_answer": no_box + no_point,
        "no_valid_answer_rate": rate(no_box + no_point, n),
        "no_valid_box": no_box,
        "no_valid_point": no_point,
        "iou_mean": rate(sum(s["iou"] for s in box_scores), len(boxes)),
        "iou_at_threshold": hits,
        "iou_at_threshold_rate": rate(hits, len(boxes)),
        "iou_threshold": IOU_THRESHOLD,
        "corner_error": _error_summary([s["error"] for s in box_scores if s["error"] is not None]),
        "point_in_box_records": len(judged),
        "point_in_box": sum(judged),
        "point_in_box_rate": rate(sum(judged), len(judged)),
        "centre_error": _error_summary([s["error"] for s in point_scores if s["error"] is not None]),
        "point_digits": _coordinate_part("point", points) if points else None,
        "box_digits": _coordinate_part("box", boxes) if boxes else None,
        "examples": [_example(r, p, t) for r, (p, t) in zip(records[:EXAMPLES], parsed)],
    }


def _coordinate_chance(task: str, answers: Sequence[tuple[float, ...]]) -> dict:
    """Chance of one task's per-coordinate figures: exact share and |error| of each coordinate over the
    ordered pairs of distinct records, and the per-place digit chance (`digits.place_chance`)."""
    names = COORDINATES[task]
    coordinates = {name: {"exact_rate": pair_mean([a[i] for a in answers], lambda p, t: float(p == t)),
                          "mean_abs_error": pair_mean([a[i] for a in answers], lambda p, t: abs(p - t))}
                   for i, name in enumerate(names)}
    digits = [{f"{name} {place_name(place)}": d for name, v in zip(names, a)
               for place, d in digit_places(_number(v)).items()} for a in answers]
    return {"coordinates": coordinates, **place_chance(digits)}


def best_point(boxes: Sequence[tuple[float, ...]]) -> tuple[tuple[float, float], int]:
    """The point inside the most of `boxes` (edges inside) and how many. The deepest region of closed
    rectangles is a rectangle whose corner (least x, least y) is (the largest x1, the largest y1) of the
    boxes holding it, so the pairs (some box's x1, some box's y1) are exhaustive candidates."""
    b = np.asarray(boxes, dtype=np.float64)
    xs, ys = np.unique(b[:, 0]), np.unique(b[:, 1])
    in_x = ((xs[:, None] >= b[None, :, 0]) & (xs[:, None] <= b[None, :, 2])).astype(np.float32)
    in_y = ((ys[:, None] >= b[None, :, 1]) & (ys[:, None] <= b[None, :, 3])).astype(np.float32)
    counts = in_x @ in_y.T  # [x candidate, y candidate]: boxes holding (x, y); exact below 2**24 boxes
    i, j = np.unravel_index(int(np.argmax(counts)), counts.shape)
    return (float(xs[i]), float(ys[j])), int(counts[i, j])


def geometric_median(points: Sequence[tuple[float, float]], steps: int = 5000) -> tuple[float, float]:
    """The point with the least summed distance to `points`. A data point x_k (w_k copies) is it exactly
    when the others' pull, |sum over x_i != x_k of (x_i - x_k) / |x_i - x_k||, is at most w_k (checked for
    every distinct point); otherwise it is no data point and Weiszfeld's iteration from the mean converges
    to it."""
    xs, w = np.unique(np.asarray(points, dtype=np.float64), axis=0, return_counts=True)
    for start in range(0, len(xs), 256):  # blocks of candidates: memory 256 x len(xs) x 2
        block = xs[start:start + 256]
        diff = xs[None, :, :] - block[:, None, :]
        dist = np.linalg.norm(diff, axis=2)
        unit = np.divide(diff, dist[..., None], out=np.zeros_like(diff), where=dist[..., None] > 0)
        pull = np.linalg.norm((unit * w[None, :, None]).sum(axis=1), axis=1)
        hit = np.flatnonzero(pull <= w[start:start + 256] * (1 + 1e-9))
        if hit.size:
            return float(block[hit[0], 0]), float(block[hit[0], 1])
    m = (xs * w[:, None]).sum(axis=0) / w.sum()
    for _ in range(steps):
        d = np.linalg.norm(xs - m, axis=1)
        if np.any(d == 0):  # on a data point, which is not the median (checked above): step off it
            m = m + 1e-7 * (1.0 + np.abs(m))
            continue
        new = (xs * (w / d)[:, None]).sum(axis=0) / (w / d).sum()
        done = np.linalg.norm(new - m) <= 1e-10 * (1.0 + np.linalg.norm(m))
        m = new
        if done:
            break
    return float(m[0]), float(m[1])


def grounding_chance(targets: Sequence[GroundingTarget]) -> dict:
    """Chance of the grounding figures: each record's target scored against the answer of another record
    of the same task (box against box, point against point), over the ordered pairs of `record_pairs`.
    Every such answer is valid, so the chance of giving no valid answer is 0. Best constant of the point
    figures: the one point inside the most target boxes, and the geometric median for the centre error;
    box figures have none."""
    boxes = [t.answer for t in targets if t.task == "box"]
    points = [(t.answer, t.box) for t in targets if t.task == "point"]
    judged = [(a, b) for a, b in points if b is not None]
    methods = [f"{what}: {record_pairs(keys)[2]}" for what, keys in (("boxes", boxes), ("points", points))
               if len(keys) >= 2]
    chance: dict = {"records": len(targets), "method": "; ".join(methods) or "fewer than 2 records of a task",
                    "no_valid_answer_rate": 0.0 if targets else None}
    chance["iou_mean"] = pair_mean(boxes, lambda p, t: box_iou(p, t))
    chance["iou_at_threshold_rate"] = pair_mean(boxes, lambda p, t: float(box_iou(p, t) >= IOU_THRESHOLD))
    chance["corner_error_mean"] = pair_mean(boxes, corner_error)
    chance["point_in_box_rate"] = pair_mean(judged, lambda p, t: float(point_in_box(p[0], t[1])))
    chance["centre_error_mean"] = pair_mean(points, lambda p, t: math.dist(p[0], t[0]))
    chance["point_digits"] = _coordinate_chance("point", [a for a, _ in points]) if len(points) >= 2 else None
    chance["box_digits"] = _coordinate_chance("box", boxes) if len(boxes) >= 2 else None
    constant: dict = {}
    if judged:
        point, inside = best_point([b for _, b in judged])
        constant.update(point_in_box_rate=inside / len(judged), point_in_box_answer=list(point))
    if points:
        median = geometric_median([a for a, _ in points])
        constant.update(centre_error_mean=statistics.fmean(math.dist(median, a) for a, _ in points),
                        centre_error_answer=[round(v, 3) for v in median])
    return {"chance": chance, "constant": constant}
