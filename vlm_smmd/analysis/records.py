"""Prediction records: reading and checking them, their kind, and the full analysis of one run.

The sources scored apart come from the task registry: CHART_SOURCES (relaxed accuracy) and TEXT_SOURCES
(the final-number figures of `headline`). A record's source is matched to a task name case-insensitively
("ChartQA" is chartqa); a source that names no task is scored by exact match only and counted, by name,
in `unknown_sources`, which the report names."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from vlm_smmd.data.records import iter_lines
from vlm_smmd.data.tasks import TASKS, names_with
from vlm_smmd.metrics import (
    exact_match,
    grounding_answer,
    normalize_answer,
    parse_decimal,
    parse_time,
    relaxed_accuracy,
    score_against_targets,
)

from .chance import distinct_records, pair_mean, record_pairs
from .clocks import SWAP_TOLERANCE, clock_analysis, clock_chance
from .collapse import collapse_check
from .digits import rate
from .grounding import grounding_analysis, grounding_chance, grounding_target
from .numbers import numeric_analysis, numeric_chance

KINDS = ("numeric", "non_numeric_target", "clock", "clock_non_time_target", "grounding", "grounding_bad_target")
CHART_SOURCES = names_with("relaxed")
TEXT_SOURCES = names_with("final_number")
GROUNDING_SOURCES = names_with("grounding")
_TASK_NAMES = {name.lower(): name for name in TASKS}


def task_source(source: str) -> str | None:
    """The task registry's name for `source`, matched case-insensitively ("ChartQA" -> "chartqa"); None
    when no task has that name."""
    return _TASK_NAMES.get(source.strip().lower())


def _checked(record, where: str) -> dict:
    """The record with a `targets` list; ValueError naming `where` when a field is missing or mistyped."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    for key in ("id", "source", "question", "prediction"):
        if key not in record:
            raise ValueError(f"{where}: missing field {key!r}")
    for key in ("source", "prediction"):
        if not isinstance(record[key], str):
            raise ValueError(f"{where}: field {key!r} must be a string, got {record[key]!r}")
    if "targets" in record:
        targets = record["targets"]
        if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
            raise ValueError(f"{where}: field 'targets' must be a non-empty list of strings, got {targets!r}")
    elif "target" in record:
        if not isinstance(record["target"], str):
            raise ValueError(f"{where}: field 'target' must be a string, got {record['target']!r}")
        targets = [record["target"]]
    else:
        raise ValueError(f"{where}: missing field 'target' (or 'targets')")
    return {**record, "source": task_source(record["source"]) or record["source"], "targets": list(targets)}


def load_predictions(path) -> list[dict]:
    """Records of a predictions.jsonl file (blank lines ignored; sources as `task_source` names them);
    ValueError naming file and line for a line that is not UTF-8, not JSON or not a valid record."""
    records = []
    for lineno, start, data in iter_lines(path):
        if not data.strip():
            continue
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {start + e.start})") from None
        try:
            record = json.loads(line)
        except ValueError as e:  # not JSON, or an integer past Python's digit limit
            raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from None
        records.append(_checked(record, f"{path}:{lineno} (id {record.get('id')!r})"
                                if isinstance(record, dict) else f"{path}:{lineno}"))
    if not records:
        raise ValueError(f"{path}: no records")
    return records


def record_kind(record: Mapping) -> str:
    """One of KINDS for a checked record (see the package docstring)."""
    target = record["targets"][0]
    if record["source"] in GROUNDING_SOURCES or grounding_answer(target) is not None:
        return "grounding" if grounding_target(record) is not None else "grounding_bad_target"
    if record["source"] == "clocks" or parse_time(target, whole=True) is not None:
        return "clock" if parse_time(target) is not None else "clock_non_time_target"
    return "numeric" if parse_decimal(target) is not None else "non_numeric_target"


def _answer_chance(records: Sequence[Mapping]) -> dict:
    """Chance and best constant of exact match (all records) and relaxed accuracy (chart-source records)."""
    def exact_key(r):
        return tuple(normalize_answer(t) for t in r["targets"])

    keys = [exact_key(r) for r in records]
    em = pair_mean(keys, lambda p, t: float(p[0] in t))
    firsts = Counter(k[0] for k in keys)
    mode, _ = firsts.most_common(1)[0] if firsts else (None, 0)
    constant_em = rate(sum(mode in k for k in keys), len(keys))
    out = {"records": len(records), "method": record_pairs(keys)[2], "exact_match": em,
           "constant": {"exact_match": constant_em,
                        "exact_match_answer": next((r["targets"][0] for r, k in zip(records, keys) if k[0] == mode),
                                                   None)},
           "relaxed_accuracy": None}
    charts = [tuple(r["targets"]) for r in records if r["source"] in CHART_SOURCES]
    if charts:
        out["relaxed_accuracy"] = pair_mean(charts, lambda p, t: score_against_targets(relaxed_accuracy, p[0], t))
    return out


def analyze_records(records: Iterable[Mapping], *, swap_tolerance: float = SWAP_TOLERANCE,
                    chance: bool = True) -> dict:
    """The full analysis of one run as a JSON-serialisable dict (keys: records, unknown_sources, kinds,
    exact_match, relaxed_accuracy, by_source, numeric, clock, grounding, chance, collapse). Exact match is
    `metrics.exact_match` with its defaults (case-insensitive, whitespace-normalised), relaxed accuracy the
    ChartQA one over chart-source records (None without any), both max over targets. numeric / clock hold "chance" and
    "constant" entries (package docstring). Raw per-record relative errors and clock gaps are kept, sorted,
    under numeric.relative_error.values and clock.gaps (for plots). With chance=False the chance and
    best-constant entries are left empty (None figures): faster, for many runs of one evaluation set.
    grounding's "constant" holds the point figures' best constant only (none for boxes)."""
    recs = [_checked(r, f"record {i} (id {r.get('id')!r})" if isinstance(r, dict) else f"record {i}")
            for i, r in enumerate(records)]
    kinds: Counter = Counter()
    numeric_pairs, clock_pairs, grounding_pairs, grounding_records = [], [], [], []
    by_source: dict[str, Counter] = {}
    em_total = relaxed_total = 0.0
    n_chart = 0
    for r in recs:
        em = score_against_targets(exact_match, r["prediction"], r["targets"])
        relaxed = score_against_targets(relaxed_accuracy, r["prediction"], r["targets"])
        em_total += em
        if r["source"] in CHART_SOURCES:
            relaxed_total, n_chart = relaxed_total + relaxed, n_chart + 1
        src = by_source.setdefault(r["source"], Counter())
        src["records"] += 1
        src["exact_match"] += em
        src["relaxed_accuracy"] += relaxed
        kind = record_kind(r)
        kinds[kind] += 1
        if kind == "numeric":
            numeric_pairs.append((r["prediction"], r["targets"][0]))
        elif kind == "clock":
            clock_pairs.append((r["prediction"], parse_time(r["targets"][0])))
        elif kind == "grounding":
            grounding_pairs.append((r["prediction"], grounding_target(r)))
            grounding_records.append(r)
    distinct = distinct_records(recs) if chance else []
    numeric = numeric_analysis(numeric_pairs)
    clock = clock_analysis(clock_pairs, swap_tolerance)
    grounding = grounding_analysis(grounding_pairs, grounding_records)
    if chance:
        grounding.update(grounding_chance([grounding_target(r) for r in distinct if record_kind(r) == "grounding"]))
        numeric.update(numeric_chance([r["targets"][0] for r in distinct if record_kind(r) == "numeric"]))
        clock.update(clock_chance([parse_time(r["targets"][0]) for r in distinct if record_kind(r) == "clock"],
                                  swap_tolerance))
    else:
        for part in (numeric, clock):
            part.update(chance={"method": "not computed", "places": {}, "digit_error_fractions": [None] * 10},
                        constant={})
        grounding.update(chance={"method": "not computed"}, constant={})
    n = len(recs)
    unknown = Counter(r["source"] for r in recs if r["source"] not in TASKS)
    return {
        "records": n,
        "unknown_sources": dict(sorted(unknown.items())),
        "kinds": {k: kinds[k] for k in KINDS},
        "exact_match": rate(em_total, n),
        "exact_match_count": int(em_total),
        "relaxed_accuracy": rate(relaxed_total, n_chart),
        "relaxed_accuracy_count": int(relaxed_total),
        "chart_records": n_chart,
        "text_records": sum(c["records"] for s, c in by_source.items() if s in TEXT_SOURCES),
        "by_source": {s: {"records": c["records"], "exact_match": c["exact_match"] / c["records"],
                          "relaxed_accuracy": c["relaxed_accuracy"] / c["records"]}
                      for s, c in sorted(by_source.items())},
        "numeric": numeric,
        "clock": clock,
        "grounding": grounding,
        "chance": _answer_chance(distinct) if chance else {
            "method": "not computed", "exact_match": None, "relaxed_accuracy": None,
            "constant": {"exact_match": None, "exact_match_answer": None}},
        "collapse": collapse_check(recs),
    }
