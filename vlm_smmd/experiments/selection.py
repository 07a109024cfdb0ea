"""The selection stage of a comparison: per loss, the grid point (`compare --grid`) with the best primary
endpoint on the validation split, averaged over the development seeds; ties go to the smaller value.

The choice is a development step, never a result: selection.json says so ("selection: not evidence") and keeps
the whole validation table, so a reader sees how much the choice mattered. The confirmation runs the chosen
values on fresh seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from .results import collect, spread
from .store import Status, write_json
from .variants import Variant, grid_label

STAGE = "selection: not evidence"
SPLIT = "val"


def _value_key(value: str, position: int) -> tuple:
    """Numbers by size ("0.3" < "1" < "3"), other text in the order the grid gave it, after the numbers."""
    try:
        number = float(value)
    except ValueError:
        return (1, position, value)
    return (0, number, value) if math.isfinite(number) else (1, position, value)


def select(scores: Mapping[str, Mapping[tuple, Mapping[int, float | None]]], seeds: Sequence[int],
           lower_is_better: bool) -> dict[str, dict]:
    """`scores`: loss -> grid point ((key, value), ...) -> seed -> endpoint (None: no figure). Per loss its
    table (one row per point: value, mean, std, n, per-seed scores, in grid order) and `chosen`: the point
    with the best mean over `seeds`, ties to the smaller value (key by key); None, with `why`, while a point
    lacks a seed (an incomplete grid is no fair choice)."""
    out = {}
    for loss, points in scores.items():
        order = {p: i for i, p in enumerate(points)}
        rows = []
        for point, by_seed in points.items():
            s = spread([by_seed.get(seed) for seed in seeds])
            rows.append({"value": dict(point), "mean": s["mean"], "std": s["std"], "n": s["n"],
                         "scores": {str(seed): by_seed.get(seed) for seed in seeds}})
        missing = [f"{grid_label(p) or '(no grid)'} has {r['n']} of {len(seeds)}" for p, r in zip(points, rows)
                   if r["n"] < len(seeds)]
        entry = {"table": rows, "chosen": None}
        if missing:
            entry["why"] = "incomplete: " + "; ".join(missing)
        elif rows:
            sign = 1.0 if lower_is_better else -1.0
            # means equal up to float rounding (0.5+0.3+0.4 vs 3 x 0.4) are a tie, broken by the smaller value
            ranks = [(round(sign * row["mean"], 12), tuple(_value_key(v, order[p]) for _, v in p))
                     for p, row in zip(points, rows)]
            best = min(range(len(rows)), key=ranks.__getitem__)
            entry["chosen"] = rows[best]["value"]
        out[loss] = entry
    return out


def write_selection(out: Path, variants: Sequence[Variant], settings: Mapping, dev_seeds: Sequence[int]) -> dict:
    """selection.json in `out` from the finished runs of a `compare --grid` on the val split: the endpoint is
    the config's primary_metric (lower or higher is better as that figure says). Returns what it wrote."""
    metric = (settings.get("primary") or {}).get("metric")
    if not metric:
        raise ValueError("selection needs the config's primary_metric (the endpoint a choice maximises)")
    status = Status(out / "status.json", [v.name for v in variants])
    got = collect(out, variants, status, [SPLIT])
    lower = next((low for key, _, low in got.columns[SPLIT] if key == metric), None)
    scores: dict[str, dict[tuple, dict[int, float | None]]] = {}
    for v in variants:
        loss = v.group.removesuffix(grid_label(v.overrides))
        by_seed = scores.setdefault(loss, {}).setdefault(v.overrides, {})
        if v.seed in dev_seeds:
            by_seed[v.seed] = (got.figures[SPLIT].get(v.name) or {}).get(metric)
    seeds = sorted({v.seed for v in variants if v.seed in dev_seeds})
    result = {"stage": STAGE, "split": SPLIT, "metric": metric,
              "lower_is_better": bool(lower), "seeds": seeds,
              "note": "weights chosen on the validation split with development seeds; confirm them on fresh seeds",
              "losses": select(scores, seeds, bool(lower))}
    if lower is None:
        result["why"] = f"no finished run has the figure {metric!r} on {SPLIT}"
    write_json(out / "selection.json", result)
    return result
