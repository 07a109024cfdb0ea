"""The selection stage of a comparison: per loss, the grid point (`compare --grid`) with the best primary
endpoint on the validation split, averaged over the development seeds; ties go to the smaller value.

The choice is a development step, never a result: selection.json says so ("selection: not evidence") and keeps
the whole validation table, so a reader sees how much the choice mattered. The confirmation
(`compare --selection selection.json`) runs each loss at its chosen values on fresh seeds: `load_selection`
reads the file, `confirmation_overrides` checks it against the confirmation and gives each loss its values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from .results import collect
from .statistics import spread
from .store import Status, write_json
from .variants import BASELINE, Variant, grid_label

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
    # the config the choice was made on: a confirmation refuses another config file (its sha256)
    result = {"stage": STAGE, "split": SPLIT, "metric": metric,
              "lower_is_better": bool(lower), "seeds": seeds, "config": settings.get("config"),
              "config_sha256": settings.get("config_sha256"), "overrides": dict(settings.get("overrides") or {}),
              "note": "weights chosen on the validation split with development seeds; confirm them on fresh seeds",
              "losses": select(scores, seeds, bool(lower))}
    if lower is None:
        result["why"] = f"no finished run has the figure {metric!r} on {SPLIT}"
    write_json(out / "selection.json", result)
    return result


class SelectionError(ValueError):
    """A selection.json a confirmation cannot use: one line naming the file."""


def load_selection(path: Path) -> dict:
    """selection.json as `write_selection` wrote it; SelectionError naming `path` when it is missing, not
    JSON, not of the selection stage, or its losses / seeds / config_sha256 are not of the written shape."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SelectionError(f"{path}: no such selection file (compare --grid writes it)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SelectionError(f"{path}: cannot be read ({e.__class__.__name__}: {e})") from None
    except json.JSONDecodeError as e:
        raise SelectionError(f"{path}: not a JSON selection file ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or data.get("stage") != STAGE:
        stage = data.get("stage") if isinstance(data, dict) else None
        raise SelectionError(f"{path}: not a selection file (stage {stage!r}, expected {STAGE!r}; compare --grid "
                             "writes it)")
    losses, seeds = data.get("losses"), data.get("seeds")
    if not isinstance(losses, dict) or not all(isinstance(e, dict) and isinstance(e.get("table"), list)
                                               for e in losses.values()):
        raise SelectionError(f"{path}: malformed: 'losses' must map each loss to its table and chosen value")
    for loss, entry in losses.items():
        chosen = entry.get("chosen")
        if chosen is not None and not (isinstance(chosen, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in chosen.items())):
            raise SelectionError(f"{path}: malformed: {loss}'s chosen must be null or {{key: value}} of strings, "
                                 f"got {json.dumps(chosen)}")
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise SelectionError(f"{path}: malformed: 'seeds' must be the list of development seeds it chose on")
    if not isinstance(data.get("config_sha256"), str):
        raise SelectionError(f"{path}: records no config_sha256 (written before selection.json kept the config's "
                             "hash); rerun compare --grid to choose on a known config")
    return data


def confirmation_overrides(data: Mapping, path: Path, auxes: Sequence[str], controls: Sequence[str],
                           seeds: Sequence[int], dev_seeds: Sequence[int], config_sha256: str,
                           loss_options: Sequence[str] = ()) -> dict[str, dict]:
    """aux -> the overrides it runs at in the confirmation: its chosen values in `data` (a `load_selection`
    result; {} for a group the grid left alone, CE only); with control kernels smmd's too. CE that the selection
    did not run gets {} when every key its grids varied is one of `loss_options` (which leave CE unchanged).
    SelectionError in one line naming `path` for a config of another sha256, a seed that is not fresh (a
    development seed or one the selection chose on), or an aux the file does not list or chose nothing for (no
    silent default weight)."""
    if data["config_sha256"] != config_sha256:
        raise SelectionError(f"{path}: chosen on another config file (sha256 {data['config_sha256'][:12]}, "
                             f"{data.get('config')}), this one has sha256 {config_sha256[:12]}: confirm on the "
                             "config the values were chosen on, unchanged (overrides may differ)")
    used = [s for s in seeds if s in dev_seeds or s in data["seeds"]]
    if used:
        raise SelectionError(f"--seeds {', '.join(map(str, used))}: not fresh (development seeds "
                             f"{list(dev_seeds) or 'none declared'}; {path} chose on seeds {data['seeds']}): "
                             "the confirmation runs on seeds never used to build or choose")
    needed = list(dict.fromkeys([*auxes, *(["smmd"] if controls else [])]))
    varied = {k for e in data["losses"].values() for row in e["table"] for k in row.get("value") or {}}
    out = {}
    for aux in needed:
        what = (f"{aux!r} (whose values the control kernels {', '.join(controls)} take)" if aux == "smmd" and controls
                and aux not in auxes else repr(aux))
        entry = data["losses"].get(aux)
        if entry is None and aux == BASELINE and varied and varied <= set(loss_options):
            out[aux] = {}  # nothing the grid varied changes CE, so it has nothing to choose
            continue
        if entry is None:
            raise SelectionError(f"{path}: lists no {what} (it lists {', '.join(data['losses']) or 'nothing'}); "
                                 "choose its values with compare --grid, or leave it out of --aux")
        if entry.get("chosen") is None:
            raise SelectionError(f"{path}: {what} has no chosen value ({entry.get('why') or 'none recorded'}); "
                                 "finish its grid, or leave it out of --aux")
        out[aux] = dict(entry["chosen"])
    return out
