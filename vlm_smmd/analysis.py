"""Per-digit error analysis of predictions.jsonl files: tables, plots, report, run-vs-run comparison.

`vlm-smmd analyze PRED.jsonl [PRED2.jsonl ...] --out DIR [--names a,b]` writes DIR/report.md,
DIR/analysis.json and PNG plots. The pure parts (`align_digits`, `analyze_records`, `compare_runs`,
`write_report`) are what the `compare` command calls.

Input records: one JSON object a line with id, source, question, prediction (string) and target (string)
or targets (non-empty list of strings); other keys (raw_output, meta, scores) are ignored. Exact match and
relaxed accuracy take the max over all targets; the digit and clock analyses use the first target.

Every record falls in exactly one kind, all counted in the report:
- "clock": source "clocks" or a target that is exactly a time ("10:07"), and the target holds a time;
- "clock_non_time_target": source "clocks" but the target holds no time;
- "numeric": the target parses with `metrics.parse_decimal` ("1,234", "45%", "$12", "1.5k", ...);
- "non_numeric_target": everything else (words such as "Democrat" or "three").

Digits (numeric records whose prediction also parses). Both numbers are written canonically: absolute
value, integer part without leading zeros (at least "0": "0.07" has a units digit 0), fraction without
trailing zeros ("2.50" -> "2.5"); the sign is compared separately (sign error). Digits are aligned by place
value via the decimal point: place 0 = units, 1 = tens, -1 = tenths, ... For each place:
- target_digits: the target has a digit there; correct / wrong: the prediction has the same / another digit;
  missing: the prediction has no digit there (a length error); accuracy = correct / target_digits,
- extra: the prediction has a digit where the target has none (not in the accuracy denominator).
The confusion matrix [target digit][predicted digit] and the |digit error| histogram use the places where
both have a digit. The first wrong place is the most significant place where the two differ (a missing or
extra digit counts as differing). Length errors compare the number of integer digits (too many / too few)
and of fraction digits; a magnitude error is a different order of magnitude (position of the most
significant non-zero digit; 0 against a non-zero number is one too). Numeric records whose prediction does
not parse are counted (non_numeric_predictions) and left out of the digit statistics.
Relative error |p - t| / |t| over numeric records with a non-zero target; its CDF counts non-numeric
predictions as larger than every threshold, so it tops out below 1 when there are any.

Clocks (12-hour dial, `metrics.parse_time`): the gap is `metrics.dial_gap`; hour correct means hour mod 12
equal, minute correct means minute equal; predictions holding no time are counted (no_time) and fail every
accuracy. Swapped hands: the prediction read the minute hand as the hour hand and the hour hand as the
minute hand, i.e. predicted hour mod 12 == target minute // 5 and the predicted minute is within
`swap_tolerance` (default 5.0) minutes, circularly on the 60-minute dial, of where the hour hand points,
(target hour mod 12) * 5 + target minute / 12; a prediction that is right on hour and minute is never
counted as swapped.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from vlm_smmd.metrics import (
    ClockTime,
    dial_gap,
    exact_match,
    parse_decimal,
    parse_time,
    readings_match,
    relaxed_accuracy,
    score_against_targets,
)

SWAP_TOLERANCE = 5.0
WITHIN_MINUTES = (0, 1, 5, 10, 15, 30, 60)
REL_THRESHOLDS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0)
GAP_BUCKETS = ((0, 0), (0, 1), (1, 5), (5, 15), (15, 30), (30, 60), (60, 180), (180, 360))  # (lo, hi]; first is == 0
KINDS = ("numeric", "non_numeric_target", "clock", "clock_non_time_target")

_PLACE_NAMES = {6: "millions", 5: "hundred-thousands", 4: "ten-thousands", 3: "thousands", 2: "hundreds",
                1: "tens", 0: "units", -1: "tenths", -2: "hundredths", -3: "thousandths"}


def place_name(place: int) -> str:
    """0 -> "units", 1 -> "tens", -1 -> "tenths", ...; beyond the named ones "10^7", "10^-4"."""
    return _PLACE_NAMES.get(place, f"10^{place}")


# ---------------------------------------------------------------------------------------------------------
# Digits


class DigitPair(NamedTuple):
    """The digits of target and prediction at one place value (None where that number has no digit)."""

    place: int
    target: int | None
    prediction: int | None


def canonical_digits(text: str) -> tuple[str, str, bool] | None:
    """(integer digits, fraction digits, negative) of the number in `text`, canonical as described in the
    module docstring ("-012.50" -> ("12", "5", True), "1.5k" -> ("1500", "", False)); None if no number."""
    value = parse_decimal(text)
    if value is None:
        return None
    int_part, _, frac = format(abs(value), "f").partition(".")
    return int_part.lstrip("0") or "0", frac.rstrip("0"), value < 0


def digit_places(text: str) -> dict[int, int] | None:
    """{place: digit} of the number in `text` ("12.5" -> {1: 1, 0: 2, -1: 5}); None if no number."""
    parts = canonical_digits(text)
    if parts is None:
        return None
    int_part, frac, _ = parts
    places = {len(int_part) - 1 - i: int(d) for i, d in enumerate(int_part)}
    places.update({-1 - i: int(d) for i, d in enumerate(frac)})
    return places


def align_digits(prediction: str, target: str) -> list[DigitPair] | None:
    """Digits of both numbers aligned by place value, most significant place first, over the union of
    their places; None when either does not parse. "2.55" vs target "12.5" ->
    [(1, 1, None), (0, 2, 2), (-1, 5, 5), (-2, None, 5)] as (place, target, prediction)."""
    p, t = digit_places(prediction), digit_places(target)
    if p is None or t is None:
        return None
    return [DigitPair(place, t.get(place), p.get(place)) for place in sorted(p.keys() | t.keys(), reverse=True)]


def _magnitude(value) -> int | None:
    return None if value == 0 else abs(value).adjusted()


def _rate(count: int | float, total: int) -> float | None:
    return None if total == 0 else count / total


def _numeric_analysis(pairs: Sequence[tuple[str, str]]) -> dict:
    """Digit statistics of (prediction, target) pairs whose target is a number."""
    places: dict[int, Counter] = {}
    confusion = [[0] * 10 for _ in range(10)]
    digit_error = [0] * 10
    first_wrong: Counter = Counter()
    counts: Counter = Counter()
    rel_errors: list[float] = []
    for pred, target in pairs:
        t_val, p_val = parse_decimal(target), parse_decimal(pred)
        counts["zero_target" if t_val == 0 else "nonzero_target"] += 1
        if p_val is None:
            counts["non_numeric_predictions"] += 1
            continue
        counts["analysed"] += 1
        counts["value_exact"] += p_val == t_val
        if t_val != 0:
            rel_errors.append(float(abs(p_val - t_val) / abs(t_val)))
        (t_int, t_frac, t_neg), (p_int, p_frac, p_neg) = canonical_digits(target), canonical_digits(pred)
        counts["sign_errors"] += t_neg != p_neg
        counts["int_too_many"] += len(p_int) > len(t_int)
        counts["int_too_few"] += len(p_int) < len(t_int)
        counts["frac_too_many"] += len(p_frac) > len(t_frac)
        counts["frac_too_few"] += len(p_frac) < len(t_frac)
        counts["magnitude_errors"] += _magnitude(p_val) != _magnitude(t_val)
        first = None
        for pair in align_digits(pred, target):
            c = places.setdefault(pair.place, Counter())
            if pair.target is not None:
                c["target_digits"] += 1
                if pair.prediction is None:
                    c["missing"] += 1
                else:
                    c["correct" if pair.prediction == pair.target else "wrong"] += 1
                    confusion[pair.target][pair.prediction] += 1
                    digit_error[abs(pair.prediction - pair.target)] += 1
            else:
                c["extra"] += 1
            if first is None and pair.target != pair.prediction:
                first = pair.place
        if first is None:
            counts["all_digits_correct"] += 1
        else:
            first_wrong[first] += 1

    place_table = {}
    for place in sorted(places, reverse=True):
        c = places[place]
        place_table[place_name(place)] = {
            "place": place, **{k: c[k] for k in ("target_digits", "correct", "wrong", "missing", "extra")},
            "accuracy": _rate(c["correct"], c["target_digits"]),
        }
    total_digits = sum(v["target_digits"] for v in place_table.values())
    rel_den = counts["nonzero_target"]
    rel_sorted = sorted(rel_errors)
    analysed = counts["analysed"]
    return {
        "records": len(pairs),
        "non_numeric_predictions": counts["non_numeric_predictions"],
        "analysed": analysed,
        "value_exact": counts["value_exact"],
        "value_exact_rate": _rate(counts["value_exact"], len(pairs)),
        "digit_accuracy": _rate(sum(v["correct"] for v in place_table.values()), total_digits),
        "places": place_table,
        "confusion": confusion,
        "digit_error_histogram": digit_error,
        "first_wrong_place": {place_name(p): first_wrong[p] for p in sorted(first_wrong, reverse=True)},
        "all_digits_correct": counts["all_digits_correct"],
        "sign_errors": counts["sign_errors"],
        "length_errors": {k: counts[k] for k in ("int_too_many", "int_too_few", "frac_too_many", "frac_too_few")},
        "magnitude_errors": counts["magnitude_errors"],
        "magnitude_error_rate": _rate(counts["magnitude_errors"], analysed),
        "relative_error": {
            "nonzero_target_records": rel_den,
            "zero_target_records": counts["zero_target"],
            "cdf": {str(thr): _rate(bisect_right(rel_sorted, thr), rel_den) for thr in REL_THRESHOLDS},
            "median": statistics.median(rel_sorted) if rel_sorted else None,
            "mean": statistics.fmean(rel_sorted) if rel_sorted else None,
            "values": rel_sorted,
        },
    }


# ---------------------------------------------------------------------------------------------------------
# Clocks


def swapped_hands(prediction: ClockTime, target: ClockTime, tolerance: float = SWAP_TOLERANCE) -> bool:
    """The prediction reads the target's hands the wrong way round (definition in the module docstring)."""
    if prediction.hour % 12 == target.hour % 12 and prediction.minute == target.minute:
        return False
    hour_hand = (target.hour % 12) * 5 + target.minute / 12  # where the hour hand points, in minutes
    d = abs(prediction.minute - hour_hand) % 60
    return prediction.hour % 12 == (target.minute // 5) % 12 and min(d, 60 - d) <= tolerance


def _clock_analysis(pairs: Sequence[tuple[str, ClockTime]], swap_tolerance: float) -> dict:
    """Clock statistics of (prediction, target time) pairs."""
    counts: Counter = Counter()
    within: Counter = Counter()
    gaps: list[float] = []
    for pred, t in pairs:
        p = parse_time(pred)
        if p is None:
            counts["no_time"] += 1
            continue
        gap = dial_gap(p, t)
        gaps.append(gap)
        hour_ok, minute_ok = p.hour % 12 == t.hour % 12, p.minute == t.minute
        counts["exact"] += readings_match(p, t)
        counts["hour_correct"] += hour_ok
        counts["minute_correct"] += minute_ok
        counts[{(True, True): "both_correct", (True, False): "hour_only", (False, True): "minute_only",
                (False, False): "neither"}[hour_ok, minute_ok]] += 1
        counts["swapped_hands"] += swapped_hands(p, t, swap_tolerance)
        for k in WITHIN_MINUTES:
            within[k] += gap <= k
    n = len(pairs)
    gaps.sort()
    buckets = []
    for lo, hi in GAP_BUCKETS:
        label = "0" if hi == 0 else f"({lo}, {hi}]"
        buckets.append({"label": label, "count": sum((g == 0) if hi == 0 else (lo < g <= hi) for g in gaps)})
    keys = ("exact", "hour_correct", "minute_correct", "both_correct", "hour_only", "minute_only", "neither",
            "no_time", "swapped_hands")
    return {
        "records": n,
        **{k: counts[k] for k in keys},
        "rates": {k: _rate(counts[k], n) for k in keys},
        "swap_tolerance_minutes": swap_tolerance,
        "within_minutes": {str(k): within[k] for k in WITHIN_MINUTES},
        "within_minutes_rate": {str(k): _rate(within[k], n) for k in WITHIN_MINUTES},
        "gap_buckets": buckets,
        "mean_gap": statistics.fmean(gaps) if gaps else None,
        "median_gap": statistics.median(gaps) if gaps else None,
        "gaps": gaps,
    }


# ---------------------------------------------------------------------------------------------------------
# Records


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
    return {**record, "targets": list(targets)}


def load_predictions(path) -> list[dict]:
    """Records of a predictions.jsonl file (blank lines ignored); ValueError naming file and line."""
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from None
            records.append(_checked(record, f"{path}:{lineno} (id {record.get('id')!r})"
                                    if isinstance(record, dict) else f"{path}:{lineno}"))
    if not records:
        raise ValueError(f"{path}: no records")
    return records


def record_kind(record: Mapping) -> str:
    """One of KINDS for a checked record (see the module docstring)."""
    target = record["targets"][0]
    if record["source"] == "clocks" or parse_time(target, whole=True) is not None:
        return "clock" if parse_time(target) is not None else "clock_non_time_target"
    return "numeric" if parse_decimal(target) is not None else "non_numeric_target"


def analyze_records(records: Iterable[Mapping], *, swap_tolerance: float = SWAP_TOLERANCE) -> dict:
    """The full analysis of one run as a JSON-serialisable dict (keys: records, kinds, exact_match,
    relaxed_accuracy, by_source, numeric, clock). Exact match is `metrics.exact_match` with its defaults
    (case-insensitive, whitespace-normalised), relaxed accuracy the ChartQA one, both max over targets. Raw per-record relative errors and clock gaps are kept,
    sorted, under numeric.relative_error.values and clock.gaps (for plots)."""
    recs = [_checked(r, f"record {i} (id {r.get('id')!r})" if isinstance(r, dict) else f"record {i}")
            for i, r in enumerate(records)]
    kinds: Counter = Counter()
    numeric_pairs, clock_pairs = [], []
    by_source: dict[str, Counter] = {}
    em_total = relaxed_total = 0.0
    for r in recs:
        em = score_against_targets(exact_match, r["prediction"], r["targets"])
        relaxed = score_against_targets(relaxed_accuracy, r["prediction"], r["targets"])
        em_total, relaxed_total = em_total + em, relaxed_total + relaxed
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
    n = len(recs)
    return {
        "records": n,
        "kinds": {k: kinds[k] for k in KINDS},
        "exact_match": _rate(em_total, n),
        "relaxed_accuracy": _rate(relaxed_total, n),
        "by_source": {s: {"records": c["records"], "exact_match": c["exact_match"] / c["records"],
                          "relaxed_accuracy": c["relaxed_accuracy"] / c["records"]}
                      for s, c in sorted(by_source.items())},
        "numeric": _numeric_analysis(numeric_pairs),
        "clock": _clock_analysis(clock_pairs, swap_tolerance),
    }


def compare_runs(analyses: Mapping[str, dict]) -> dict[str, dict[str, float | int | None]]:
    """Headline metrics side by side: {metric: {run: value}}, in a fixed order; metrics that no run has
    (e.g. clock metrics without clock records) are left out. Per-place rows are "digit accuracy: tens"."""
    rows: dict[str, dict] = {}

    def add(name, get):
        values = {run: get(a) for run, a in analyses.items()}
        if any(v is not None for v in values.values()):
            rows[name] = values

    add("records", lambda a: a["records"])
    add("exact match", lambda a: a["exact_match"])
    add("relaxed accuracy", lambda a: a["relaxed_accuracy"])
    if any(a["kinds"]["numeric"] for a in analyses.values()):
        add("numeric records", lambda a: a["numeric"]["records"])
        add("non-numeric predictions", lambda a: a["numeric"]["non_numeric_predictions"])
        add("value exact", lambda a: a["numeric"]["value_exact_rate"])
        add("digit accuracy (all places)", lambda a: a["numeric"]["digit_accuracy"])
        places = sorted({p["place"] for a in analyses.values() for p in a["numeric"]["places"].values()},
                        reverse=True)
        for place in places:
            name = place_name(place)
            add(f"digit accuracy: {name}", lambda a, name=name: a["numeric"]["places"].get(name, {}).get("accuracy"))
        add("magnitude error rate", lambda a: a["numeric"]["magnitude_error_rate"])
        add("relative error <= 5%", lambda a: a["numeric"]["relative_error"]["cdf"]["0.05"])
        add("median relative error", lambda a: a["numeric"]["relative_error"]["median"])
    if any(a["kinds"]["clock"] for a in analyses.values()):
        add("clock records", lambda a: a["clock"]["records"])
        add("clock exact", lambda a: a["clock"]["rates"]["exact"])
        add("hour correct", lambda a: a["clock"]["rates"]["hour_correct"])
        add("minute correct", lambda a: a["clock"]["rates"]["minute_correct"])
        add("within 5 minutes", lambda a: a["clock"]["within_minutes_rate"]["5"])
        add("mean time gap (min)", lambda a: a["clock"]["mean_gap"])
        add("swapped hands", lambda a: a["clock"]["swapped_hands"])
        add("no time in prediction", lambda a: a["clock"]["no_time"])
    return rows


# ---------------------------------------------------------------------------------------------------------
# Plots (matplotlib object API with the Agg canvas: no pyplot, no global backend state)


def _figure(width=7.0, height=4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})


def _grouped_bars(ax, labels: list[str], series: Mapping[str, list[float]]) -> None:
    width = 0.8 / max(1, len(series))
    for i, (run, values) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        ax.bar(xs, [0.0 if v is None else v for v in values], width=width, label=run)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.legend()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "run"


def _plots(analyses: Mapping[str, dict], out: Path) -> dict[str, str]:
    """Write the PNGs that have data; {plot name: file name}."""
    files: dict[str, str] = {}
    runs = list(analyses)
    numeric = {r: a["numeric"] for r, a in analyses.items()}
    if any(n["analysed"] for n in numeric.values()):
        places = sorted({p["place"] for n in numeric.values() for p in n["places"].values()}, reverse=True)
        names = [place_name(p) for p in places]
        fig, ax = _figure()
        _grouped_bars(ax, names, {r: [numeric[r]["places"].get(nm, {}).get("accuracy") for nm in names]
                                  for r in runs})
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("digit accuracy")
        ax.set_title("Accuracy per place value")
        _save(fig, out / "place_accuracy.png")
        files["place_accuracy"] = "place_accuracy.png"

        fig, ax = _figure()
        _grouped_bars(ax, [str(d) for d in range(10)],
                      {r: [c / max(1, sum(numeric[r]["digit_error_histogram"]))
                           for c in numeric[r]["digit_error_histogram"]] for r in runs})
        ax.set_xlabel("|predicted digit - target digit|")
        ax.set_ylabel("fraction of aligned digits")
        ax.set_title("Digit error distribution")
        _save(fig, out / "digit_error.png")
        files["digit_error"] = "digit_error.png"

        fig, ax = _figure()
        labels = names + ["none"]
        _grouped_bars(ax, labels, {r: [numeric[r]["first_wrong_place"].get(nm, 0) for nm in names]
                                   + [numeric[r]["all_digits_correct"]] for r in runs})
        ax.set_ylabel("records")
        ax.set_title("Place of the first wrong digit (most significant first)")
        _save(fig, out / "first_wrong_place.png")
        files["first_wrong_place"] = "first_wrong_place.png"

        fig, ax = _figure()
        for r in runs:
            rel = numeric[r]["relative_error"]
            values, den = rel["values"], rel["nonzero_target_records"]
            if den:
                ys = [(i + 1) / den for i in range(len(values))]
                ax.step([0.0] + values, [0.0] + ys, where="post", label=r)
        ax.set_xscale("symlog", linthresh=1e-3)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("relative error |p - t| / |t|")
        ax.set_ylabel("fraction of records (non-zero target)")
        ax.set_title("Relative error CDF")
        ax.legend()
        _save(fig, out / "relative_error_cdf.png")
        files["relative_error_cdf"] = "relative_error_cdf.png"

        for i, r in enumerate(runs):
            fig, ax = _figure(5.5, 5.0)
            conf = numeric[r]["confusion"]
            rows = [[c / max(1, sum(row)) for c in row] for row in conf]
            im = ax.imshow(rows, cmap="Blues", vmin=0, vmax=1)
            for ti in range(10):
                for pi in range(10):
                    if conf[ti][pi]:
                        ax.text(pi, ti, str(conf[ti][pi]), ha="center", va="center", fontsize=7,
                                color="white" if rows[ti][pi] > 0.5 else "black")
            ax.set_xticks(range(10))
            ax.set_yticks(range(10))
            ax.set_xlabel("predicted digit")
            ax.set_ylabel("target digit")
            ax.set_title(f"Digit confusion: {r} (row-normalised, counts)")
            fig.colorbar(im, ax=ax, fraction=0.046)
            name = f"confusion_{i}_{_safe(r)}.png"
            _save(fig, out / name)
            files[f"confusion:{r}"] = name

    clock = {r: a["clock"] for r, a in analyses.items()}
    if any(c["records"] for c in clock.values()):
        fig, ax = _figure()
        for r in runs:
            if clock[r]["gaps"]:
                ax.hist(clock[r]["gaps"], bins=range(0, 370, 10), histtype="step", linewidth=1.5, label=r)
        ax.set_xlabel("time gap on the 12-hour dial (minutes)")
        ax.set_ylabel("records")
        ax.set_title("Clock time-gap histogram (10-minute bins)")
        if any(clock[r]["gaps"] for r in runs):
            ax.legend()
        else:
            ax.text(0.5, 0.5, "no prediction holds a time", ha="center", transform=ax.transAxes)
        _save(fig, out / "clock_gap_hist.png")
        files["clock_gap_hist"] = "clock_gap_hist.png"

        cats = ("both_correct", "hour_only", "minute_only", "neither", "no_time", "swapped_hands")
        fig, ax = _figure()
        _grouped_bars(ax, [c.replace("_", " ") for c in cats],
                      {r: [clock[r]["rates"][c] for c in cats] for r in runs})
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("fraction of clock records")
        ax.set_title("Hour vs minute correctness")
        _save(fig, out / "clock_breakdown.png")
        files["clock_breakdown"] = "clock_breakdown.png"
    return files


# ---------------------------------------------------------------------------------------------------------
# Report


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value).replace("|", "\\|")  # keep markdown tables intact


def _table(header: Sequence[str], rows: Iterable[Sequence]) -> list[str]:
    lines = ["| " + " | ".join(_fmt(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return lines + [""]


def write_report(analyses: Mapping[str, dict], out_dir, *, inputs: Mapping[str, str] | None = None,
                 notes: Sequence[str] = ()) -> Path:
    """Write report.md, analysis.json and the PNG plots for one or several runs (one table column per
    run, overlaid plots) into `out_dir`; returns the report path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = list(analyses)
    plots = _plots(analyses, out)
    comparison = compare_runs(analyses)
    (out / "analysis.json").write_text(json.dumps(
        {"runs": analyses, "comparison": comparison, "inputs": dict(inputs or {}), "notes": list(notes),
         "plots": plots}, indent=1) + "\n", encoding="utf-8")

    md = ["# Error analysis", ""]
    md += _table(["run", "predictions", "records"],
                 [[r, (inputs or {}).get(r, "–"), analyses[r]["records"]] for r in runs])
    md += [f"> {note}" for note in notes] + ([""] if notes else [])
    md += ["## Summary", ""] + _table(["metric", *runs], [[m, *vals.values()] for m, vals in comparison.items()])

    md += ["## Records by kind", "",
           "Every record is counted in exactly one kind; only `numeric` records enter the digit analysis and only "
           "`clock` records the clock analysis.", ""]
    md += _table(["kind", *runs], [[k, *(analyses[r]["kinds"][k] for r in runs)] for k in KINDS])
    sources = sorted({s for a in analyses.values() for s in a["by_source"]})
    md += _table(["source: records / exact match / relaxed accuracy", *runs],
                 [[s, *(" / ".join(_fmt(v) for v in analyses[r]["by_source"][s].values())
                        if s in analyses[r]["by_source"] else "–" for r in runs)] for s in sources])

    numeric = {r: analyses[r]["numeric"] for r in runs}
    if any(n["records"] for n in numeric.values()):
        md += ["## Numeric answers", ""]
        md += _table(["", *runs], [
            ["numeric-target records", *(numeric[r]["records"] for r in runs)],
            ["non-numeric predictions (left out of the digit tables)", *(numeric[r]["non_numeric_predictions"]
                                                                         for r in runs)],
            ["analysed (both numeric)", *(numeric[r]["analysed"] for r in runs)],
            ["value exactly right", *(numeric[r]["value_exact"] for r in runs)],
            ["all digits right (sign aside)", *(numeric[r]["all_digits_correct"] for r in runs)],
            ["sign errors", *(numeric[r]["sign_errors"] for r in runs)],
        ])
        names = [place_name(p) for p in sorted({p["place"] for n in numeric.values() for p in n["places"].values()},
                                               reverse=True)]
        md += ["### Accuracy per place value", "",
               "accuracy = correct / target digits at that place; missing = the prediction has no digit there; "
               "extra = the prediction has a digit where the target has none.", ""]

        def place_cell(r, nm):
            p = numeric[r]["places"].get(nm)
            if p is None:
                return "–"
            return (f"{_fmt(p['accuracy'])} ({p['correct']}/{p['target_digits']}; {p['missing']} missing, "
                    f"{p['extra']} extra)")

        md += _table(["place", *runs], [[nm, *(place_cell(r, nm) for r in runs)] for nm in names])
        if "place_accuracy" in plots:
            md += ["![accuracy per place](place_accuracy.png)", ""]
        md += ["### Place of the first wrong digit", ""]
        md += _table(["first wrong place", *runs],
                     [[nm, *(numeric[r]["first_wrong_place"].get(nm, 0) for r in runs)] for nm in names]
                     + [["none (all digits right)", *(numeric[r]["all_digits_correct"] for r in runs)]])
        if "first_wrong_place" in plots:
            md += ["![first wrong place](first_wrong_place.png)", ""]
        md += ["### Absolute digit error over aligned digits", ""]
        md += _table(["absolute digit error", *runs], [[d, *(numeric[r]["digit_error_histogram"][d] for r in runs)]
                                          for d in range(10)])
        if "digit_error" in plots:
            md += ["![digit error distribution](digit_error.png)", ""]
        md += ["### Length and magnitude errors", ""]
        md += _table(["", *runs], [
            ["too many integer digits", *(numeric[r]["length_errors"]["int_too_many"] for r in runs)],
            ["too few integer digits", *(numeric[r]["length_errors"]["int_too_few"] for r in runs)],
            ["too many fraction digits", *(numeric[r]["length_errors"]["frac_too_many"] for r in runs)],
            ["too few fraction digits", *(numeric[r]["length_errors"]["frac_too_few"] for r in runs)],
            ["order of magnitude differs", *(numeric[r]["magnitude_errors"] for r in runs)],
        ])
        md += ["### Relative error", "",
               "Fraction of numeric records with a non-zero target whose relative error is at most the threshold "
               "(non-numeric predictions count as above every threshold); mean and median over parsed "
               "predictions.", ""]
        rel = {r: numeric[r]["relative_error"] for r in runs}
        md += _table(["", *runs],
                     [["records with non-zero target", *(rel[r]["nonzero_target_records"] for r in runs)],
                      ["records with zero target (no relative error)", *(rel[r]["zero_target_records"] for r in runs)]]
                     + [[f"<= {thr:g}", *(rel[r]["cdf"][str(thr)] for r in runs)] for thr in REL_THRESHOLDS]
                     + [["median", *(rel[r]["median"] for r in runs)], ["mean", *(rel[r]["mean"] for r in runs)]])
        if "relative_error_cdf" in plots:
            md += ["![relative error CDF](relative_error_cdf.png)", ""]
        md += ["### Digit confusion (rows: target digit, columns: predicted digit)", ""]
        for r in runs:
            md += [f"**{r}**", ""]
            md += _table(["target \\ pred", *map(str, range(10))],
                         [[d, *numeric[r]["confusion"][d]] for d in range(10)])
            if f"confusion:{r}" in plots:
                md += [f"![confusion {r}]({plots[f'confusion:{r}']})", ""]

    clock = {r: analyses[r]["clock"] for r in runs}
    if any(c["records"] for c in clock.values()):
        md += ["## Clock answers", "",
               "12-hour dial. Swapped hands: predicted hour == target minute // 5 (mod 12) and predicted minute "
               f"within {clock[runs[0]]['swap_tolerance_minutes']:g} minutes of where the hour hand points "
               "((hour mod 12) * 5 + minute / 12), the prediction not being right on both.", ""]
        rows = [["clock records", *(clock[r]["records"] for r in runs)]]
        for key, label in [("exact", "exact time"), ("hour_correct", "hour correct"),
                           ("minute_correct", "minute correct"), ("both_correct", "hour and minute correct"),
                           ("hour_only", "hour only correct"), ("minute_only", "minute only correct"),
                           ("neither", "neither correct"), ("no_time", "no time in prediction"),
                           ("swapped_hands", "swapped hands")]:
            rows.append([label, *(f"{clock[r][key]} ({_fmt(clock[r]['rates'][key])})" for r in runs)])
        rows += [[f"within {k} min", *(f"{clock[r]['within_minutes'][str(k)]} "
                                       f"({_fmt(clock[r]['within_minutes_rate'][str(k)])})" for r in runs)]
                 for k in WITHIN_MINUTES]
        rows += [["mean gap (min)", *(clock[r]["mean_gap"] for r in runs)],
                 ["median gap (min)", *(clock[r]["median_gap"] for r in runs)]]
        md += _table(["", *runs], rows)
        md += ["### Time-gap histogram (minutes)", ""]
        md += _table(["gap", *runs], [[b["label"], *(clock[r]["gap_buckets"][i]["count"] for r in runs)]
                                      for i, b in enumerate(clock[runs[0]]["gap_buckets"])])
        if "clock_gap_hist" in plots:
            md += ["![time-gap histogram](clock_gap_hist.png)", ""]
        if "clock_breakdown" in plots:
            md += ["![hour vs minute correctness](clock_breakdown.png)", ""]

    report = out / "report.md"
    report.write_text("\n".join(md), encoding="utf-8")
    return report


# ---------------------------------------------------------------------------------------------------------
# CLI


def _default_names(paths: Sequence[Path]) -> list[str]:
    """File stem, or the parent folder's name for files called predictions.jsonl; repeats get "#2", "#3"."""
    names, seen = [], Counter()
    for p in paths:
        base = p.parent.name if p.stem == "predictions" and p.parent.name else p.stem
        seen[base] += 1
        names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vlm-smmd analyze",
        description="Per-digit error analysis of predictions.jsonl files; several files are compared side by side.")
    parser.add_argument("predictions", nargs="+", type=Path, help="predictions.jsonl files, one per run")
    parser.add_argument("--out", required=True, type=Path, help="folder for report.md, analysis.json and PNGs")
    parser.add_argument("--names", help="comma-separated run names, one per file (default: from the paths)")
    parser.add_argument("--swap-tolerance", type=float, default=SWAP_TOLERANCE,
                        help="minutes on the dial for the swapped-hands test (default %(default)s)")
    args = parser.parse_args(argv)
    if args.names is None:
        names = _default_names(args.predictions)
    else:
        names = [n.strip() for n in args.names.split(",")]
        if len(names) != len(args.predictions):
            parser.error(f"--names gives {len(names)} names for {len(args.predictions)} prediction files")
        if len(set(names)) != len(names) or not all(names):
            parser.error(f"--names must be distinct and non-empty, got {args.names!r}")
    try:
        runs = {name: load_predictions(path) for name, path in zip(names, args.predictions)}
    except (OSError, ValueError) as e:
        print(f"vlm-smmd analyze: error: {e}", file=sys.stderr)
        return 1
    notes = []
    ids = {name: {str(r["id"]) for r in recs} for name, recs in runs.items()}
    if len({frozenset(s) for s in ids.values()}) > 1:
        notes.append("The runs do not cover the same record ids; compare their figures with care.")
    analyses = {name: analyze_records(recs, swap_tolerance=args.swap_tolerance) for name, recs in runs.items()}
    report = write_report(analyses, args.out, inputs={n: str(p) for n, p in zip(names, args.predictions)},
                          notes=notes)
    for name, a in analyses.items():
        print(f"{name}: {a['records']} records, exact match {_fmt(a['exact_match'])}, "
              f"relaxed accuracy {_fmt(a['relaxed_accuracy'])}, kinds {a['kinds']}")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
