"""Grounding answers (a point or a box of a named object): IoU, IoU >= 0.5 and corner error of boxes,
point-in-box and centre error of points, answers giving neither, and their chance (definitions in the
`vlm_smmd.analysis` docstring). Coordinates are the answer's own (pixels of the resized image, or 0..1000)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import NamedTuple

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
from .digits import rate


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


def _error_summary(errors: list[float]) -> dict:
    return {"analysed": len(errors), "mean": statistics.fmean(errors) if errors else None,
            "median": statistics.median(errors) if errors else None}


def grounding_analysis(pairs: Sequence[tuple[str, GroundingTarget]]) -> dict:
    """Figures of (prediction, target) pairs of grounding records (`metrics.parse_grounding` reads the
    prediction; an answer giving no valid point or box scores IoU 0 and is outside every box)."""
    boxes = [(p, t) for p, t in pairs if t.task == "box"]
    points = [(p, t) for p, t in pairs if t.task == "point"]
    box_scores = [_scores(parse_grounding(p, "box"), t) for p, t in boxes]
    point_scores = [_scores(parse_grounding(p, "point"), t) for p, t in points]
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
    }


def grounding_chance(targets: Sequence[GroundingTarget]) -> dict:
    """Chance of the grounding figures: each record's target scored against the answer of another record
    of the same task (box against box, point against point), over the ordered pairs of `record_pairs`.
    Every such answer is valid, so the chance of giving no valid answer is 0."""
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
    return {"chance": chance}
