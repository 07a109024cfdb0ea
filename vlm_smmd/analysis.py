"""Per-digit error analysis of predictions.jsonl files: tables, plots, report, run-vs-run comparison.

`vlm-smmd analyze PRED.jsonl [PRED2.jsonl ...] --out DIR [--names a,b] [--run-dir MODEL_DIR ...]` writes
DIR/report.md, DIR/analysis.json and PNG plots. The pure parts (`align_digits`, `analyze_records`,
`headline`, `compare_runs`, `write_report`) are what the demo and the `compare` command call.

Input records: one JSON object a line with id, source, question, prediction (string) and target (string)
or targets (non-empty list of strings); other keys (raw_output, meta, scores) are ignored. Exact match takes
the max over all targets, relaxed accuracy too (over chart-source records: chartqa, plotqa, dvqa); the
digit and clock analyses use the first target.

Every record falls in exactly one kind, all counted in the report:
- "clock": source "clocks" or a target that is exactly a time ("10:07"), and the target holds a time;
- "clock_non_time_target": source "clocks" but the target holds no time;
- "numeric": the target parses with `metrics.parse_decimal` ("1,234", "-3.5", "45%", "$12", "1.5k", ...);
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
not parse are counted (non_numeric_predictions) and left out of the digit statistics and of the mean
absolute error; "within ±k" and "within relative tolerance" count them as failures (their denominator is
every numeric record). Relative error |p - t| / |t| over numeric records with a non-zero target; its CDF
counts non-numeric predictions as larger than every threshold, so it tops out below 1 when there are any.

Clocks (12-hour dial, `metrics.parse_time`): the gap is `metrics.dial_gap`; hour correct means hour mod 12
equal, minute correct means minute equal; predictions holding no time are counted (no_time) and fail every
accuracy. The mean gap is over the predictions that hold a time (the report says how many); the worst-case
mean gap counts each of the others as WORST_GAP (360 minutes, the largest gap on a 12-hour dial). Clock
digits (`clock_digit_pairs`): each field as the answer writes it (hour on the 12-hour dial "1".."12",
minute and second "00".."59"), aligned from the units digit: hour tens / units, minute tens / units, and
second tens / units when the target has seconds; the same per-place table, confusion and |digit error|
histogram as numbers, over the predictions holding a time. Swapped hands: the prediction read the minute
hand as the hour hand and the hour hand as the minute hand, i.e. predicted hour mod 12 == target minute // 5
and the predicted minute is within `swap_tolerance` (default 5.0) minutes, circularly on the 60-minute
dial, of where the hour hand points, (target hour mod 12) * 5 + target minute / 12; a prediction that is
right on hour and minute is never counted as swapped.

Chance (`chance` entries): the expected score of a predictor that ignores the input but knows the target
distribution, i.e. each record's target scored against the answer of another record (that record's first
target), averaged over every ordered pair of distinct records. Computed exactly over the distinct answers
with their multiplicities (at most PAIR_LIMIT distinct pairs; above that, estimated from PAIR_SAMPLES
random pairs drawn with seed PAIR_SEED, and the method says so). Records are distinct by (source, id), so
pooling several seeds of one evaluation set does not pair a record with its own copy. Per-place digit
chance and its |digit error| histogram are computed exactly from the per-place digit counts.
Best constant (`constant` entries): the single answer that scores best on these very targets (the most
common answer for exact figures, the median for the mean absolute error, the target time with the least
mean gap), in-sample: a model that always gives one answer scores at most this.

Collapse (`collapse`): distinct predictions, the most common one and its share. A run is flagged as
collapsed when the most common prediction is more than COLLAPSE_SHARE (half) of the answers and more than
twice as common as the most common target, or when there are at least 10 distinct targets and fewer
distinct predictions than COLLAPSE_DISTINCT (a tenth) of the distinct targets.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import sys
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple

from vlm_smmd.metrics import (
    ClockTime,
    dial_gap,
    exact_match,
    normalize_answer,
    parse_decimal,
    parse_time,
    readings_match,
    relaxed_accuracy,
    score_against_targets,
)

SWAP_TOLERANCE = 5.0
WORST_GAP = 360.0  # minutes: the largest gap on a 12-hour dial, charged to answers holding no time
WITHIN_MINUTES = (0, 1, 5, 10, 15, 30, 60)
ABS_WITHIN = (0, 1, 2, 5, 10)  # |prediction - target| <= k
REL_THRESHOLDS = (0.0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0)
REL_TOLERANCES = (0.0, 0.001, 0.01, 0.05)  # "within relative tolerance" for text answers
GAP_BUCKETS = ((0, 0), (0, 1), (1, 5), (5, 15), (15, 30), (30, 60), (60, 180), (180, 360))  # (lo, hi]; first is == 0
GAP_BIN = 10  # minutes per bin of the gap histogram plot
KINDS = ("numeric", "non_numeric_target", "clock", "clock_non_time_target")
CHART_SOURCES = ("chartqa", "plotqa", "dvqa")
TEXT_SOURCES = ("gsm8k", "svamp", "deepmind_math", "arithmetic")
CLOCK_PLACES = tuple(f"{f} {p}" for f in ("hour", "minute", "second") for p in ("tens", "units"))
PAIR_LIMIT = 1_000_000  # distinct (prediction, target) answer pairs enumerated exactly for chance
PAIR_SAMPLES = 200_000  # random pairs above that
PAIR_SEED = 0
COLLAPSE_SHARE = 0.5
COLLAPSE_DISTINCT = 0.1

_PLACE_NAMES = {6: "millions", 5: "hundred-thousands", 4: "ten-thousands", 3: "thousands", 2: "hundreds",
                1: "tens", 0: "units", -1: "tenths", -2: "hundredths", -3: "thousandths"}


def place_name(place: int) -> str:
    """0 -> "units", 1 -> "tens", -1 -> "tenths", ...; beyond the named ones "10^7", "10^-4"."""
    return _PLACE_NAMES.get(place, f"10^{place}")


def _rate(count: int | float, total: int) -> float | None:
    return None if total == 0 else count / total


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


def _clock_digits(field: str, value: int) -> str:
    """A clock field as the answer writes it: hour on the 12-hour dial "1".."12", minute/second "00".."59"."""
    return str(value % 12 or 12) if field == "hour" else f"{value:02d}"


def clock_digit_pairs(prediction: ClockTime, target: ClockTime) -> list[tuple[str, int | None, int | None]]:
    """(place, target digit, predicted digit) of two clock readings, each field aligned from its units digit
    (module docstring): 1:07 vs target 10:07 -> [("hour tens", 1, None), ("hour units", 0, 1),
    ("minute tens", 0, 0), ("minute units", 7, 7)]. Seconds only when the target has them; a place where
    neither has a digit is left out."""
    pairs = []
    for field in ("hour", "minute", "second"):
        t_value, p_value = getattr(target, field), getattr(prediction, field)
        if t_value is None:
            continue
        t_digits = _clock_digits(field, t_value)
        p_digits = "" if p_value is None else _clock_digits(field, p_value)
        for k, place in ((1, "tens"), (0, "units")):
            t = int(t_digits[-1 - k]) if k < len(t_digits) else None
            p = int(p_digits[-1 - k]) if k < len(p_digits) else None
            if t is not None or p is not None:
                pairs.append((f"{field} {place}", t, p))
    return pairs


class _DigitTally:
    """Per-place counts, confusion [target][prediction] and |digit error| histogram of aligned digits."""

    def __init__(self):
        self.places: dict[str, Counter] = {}
        self.confusion = [[0] * 10 for _ in range(10)]
        self.digit_error = [0] * 10

    def add(self, place: str, target: int | None, prediction: int | None) -> None:
        c = self.places.setdefault(place, Counter())
        if target is None:
            c["extra"] += 1
            return
        c["target_digits"] += 1
        if prediction is None:
            c["missing"] += 1
            return
        c["correct" if prediction == target else "wrong"] += 1
        self.confusion[target][prediction] += 1
        self.digit_error[abs(prediction - target)] += 1

    def table(self, order: Sequence[str], extra: Mapping[str, dict] | None = None) -> dict[str, dict]:
        """{place: {target_digits, correct, wrong, missing, extra, accuracy}} in `order`."""
        return {name: {**(extra or {}).get(name, {}),
                       **{k: self.places[name][k] for k in ("target_digits", "correct", "wrong", "missing", "extra")},
                       "accuracy": _rate(self.places[name]["correct"], self.places[name]["target_digits"])}
                for name in order if name in self.places}

    def overall(self) -> float | None:
        return _rate(sum(c["correct"] for c in self.places.values()),
                     sum(c["target_digits"] for c in self.places.values()))


def _place_chance(target_digits: Sequence[Mapping[str, int]]) -> dict:
    """Chance of the per-place figures, exact, from per-place digit counts: a pair (i, j), i != j, scores
    record j's digits against record i's. {"places": {place: accuracy}, "digit_accuracy",
    "digit_error_fractions": [10 floats]} (None figures below 2 records)."""
    n = len(target_digits)
    counts: dict[str, Counter] = {}
    for digits in target_digits:
        for place, d in digits.items():
            counts.setdefault(place, Counter())[d] += 1
    places, correct_total, pairs_total = {}, 0, 0
    error = [0] * 10
    for place, c in counts.items():
        n_place = sum(c.values())
        correct = sum(k * (k - 1) for k in c.values())
        pairs = n_place * (n - 1)
        places[place] = _rate(correct, pairs)
        correct_total, pairs_total = correct_total + correct, pairs_total + pairs
        for d, kd in c.items():
            for e, ke in c.items():
                error[abs(d - e)] += kd * ke - (kd if d == e else 0)
    both = sum(error)
    return {"places": places, "digit_accuracy": _rate(correct_total, pairs_total),
            "digit_error_fractions": [_rate(e, both) for e in error]}


# ---------------------------------------------------------------------------------------------------------
# Chance by pairs of records


def _pairs(keys: Sequence[Hashable]) -> tuple[Iterator[tuple[Hashable, Hashable, int]], int, str]:
    """(iterator of (prediction key, target key, weight), total weight, method) over the ordered pairs
    (i, j) of distinct records, the prediction being record j's key and the target record i's. Exact over
    the distinct keys with their multiplicities up to PAIR_LIMIT distinct pairs, else PAIR_SAMPLES pairs
    drawn with seed PAIR_SEED (weight 1 each). A mean over pairs is sum(weight * score) / total."""
    n = len(keys)
    counts = Counter(keys)
    if len(counts) ** 2 <= PAIR_LIMIT:
        exact = ((p, t, kt * (kp - (p == t))) for t, kt in counts.items() for p, kp in counts.items())
        return ((p, t, w) for p, t, w in exact if w), n * (n - 1), \
            f"exact over all {n} x {n - 1} ordered pairs of distinct records"

    def sampled():
        rng = random.Random(PAIR_SEED)
        for _ in range(PAIR_SAMPLES):
            i, j = rng.randrange(n), rng.randrange(n - 1)
            yield keys[j + (j >= i)], keys[i], 1

    return sampled(), PAIR_SAMPLES, f"estimated from {PAIR_SAMPLES:,} random pairs of the {n} records (seed {PAIR_SEED})"


def _pair_mean(keys: Sequence[Hashable], score: Callable[[Hashable, Hashable], float]) -> float | None:
    """Mean of score(prediction key, target key) over `_pairs(keys)`; None below 2 records."""
    if len(keys) < 2:
        return None
    pairs, total, _ = _pairs(keys)
    return sum(w * score(p, t) for p, t, w in pairs) / total


def _distinct(records: Iterable[Mapping]) -> list[Mapping]:
    """Records distinct by (source, id), first occurrence kept (pooled seeds repeat them)."""
    seen, out = set(), []
    for r in records:
        key = (r["source"], str(r["id"]))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _answer_chance(records: Sequence[Mapping]) -> dict:
    """Chance and best constant of exact match (all records) and relaxed accuracy (chart-source records)."""
    def exact_key(r):
        return tuple(normalize_answer(t) for t in r["targets"])

    keys = [exact_key(r) for r in records]
    em = _pair_mean(keys, lambda p, t: float(p[0] in t))
    firsts = Counter(k[0] for k in keys)
    mode, _ = firsts.most_common(1)[0] if firsts else (None, 0)
    constant_em = _rate(sum(mode in k for k in keys), len(keys))
    out = {"records": len(records), "method": _pairs(keys)[2], "exact_match": em,
           "constant": {"exact_match": constant_em,
                        "exact_match_answer": next((r["targets"][0] for r, k in zip(records, keys) if k[0] == mode),
                                                   None)},
           "relaxed_accuracy": None}
    charts = [tuple(r["targets"]) for r in records if r["source"] in CHART_SOURCES]
    if charts:
        out["relaxed_accuracy"] = _pair_mean(charts, lambda p, t: score_against_targets(relaxed_accuracy, p[0], t))
    return out


# ---------------------------------------------------------------------------------------------------------
# Numbers


def _numeric_analysis(pairs: Sequence[tuple[str, str]]) -> dict:
    """Digit statistics of (prediction, target) pairs whose target is a number."""
    tally = _DigitTally()
    first_wrong: Counter = Counter()
    counts: Counter = Counter()
    rel_errors: list[float] = []
    abs_errors: list[float] = []
    within_abs: Counter = Counter()
    within_rel: Counter = Counter()
    place_of: dict[str, int] = {}
    for pred, target in pairs:
        t_val, p_val = parse_decimal(target), parse_decimal(pred)
        counts["zero_target" if t_val == 0 else "nonzero_target"] += 1
        if p_val is None:
            counts["non_numeric_predictions"] += 1
            continue
        counts["analysed"] += 1
        counts["value_exact"] += p_val == t_val
        err = abs(p_val - t_val)
        abs_errors.append(float(err))
        for k in ABS_WITHIN:
            within_abs[k] += err <= k
        for tol in REL_TOLERANCES:
            within_rel[tol] += err <= abs(t_val) * Decimal(str(tol))
        if t_val != 0:
            rel_errors.append(float(err / abs(t_val)))
        (t_int, t_frac, t_neg), (p_int, p_frac, p_neg) = canonical_digits(target), canonical_digits(pred)
        counts["sign_errors"] += t_neg != p_neg
        counts["int_too_many"] += len(p_int) > len(t_int)
        counts["int_too_few"] += len(p_int) < len(t_int)
        counts["frac_too_many"] += len(p_frac) > len(t_frac)
        counts["frac_too_few"] += len(p_frac) < len(t_frac)
        counts["magnitude_errors"] += _magnitude(p_val) != _magnitude(t_val)
        first = None
        for pair in align_digits(pred, target):
            name = place_name(pair.place)
            place_of[name] = pair.place
            tally.add(name, pair.target, pair.prediction)
            if first is None and pair.target != pair.prediction:
                first = pair.place
        if first is None:
            counts["all_digits_correct"] += 1
        else:
            first_wrong[first] += 1

    order = sorted(place_of, key=place_of.get, reverse=True)
    n = len(pairs)
    rel_den = counts["nonzero_target"]
    rel_sorted = sorted(rel_errors)
    analysed = counts["analysed"]
    return {
        "records": n,
        "non_numeric_predictions": counts["non_numeric_predictions"],
        "analysed": analysed,
        "value_exact": counts["value_exact"],
        "value_exact_rate": _rate(counts["value_exact"], n),
        "abs_error": {"mean": statistics.fmean(abs_errors) if abs_errors else None,
                      "median": statistics.median(abs_errors) if abs_errors else None, "n": analysed},
        "within_abs": {str(k): within_abs[k] for k in ABS_WITHIN},
        "within_abs_rate": {str(k): _rate(within_abs[k], n) for k in ABS_WITHIN},
        "within_relative": {f"{t:g}": within_rel[t] for t in REL_TOLERANCES},
        "within_relative_rate": {f"{t:g}": _rate(within_rel[t], n) for t in REL_TOLERANCES},
        "digit_accuracy": tally.overall(),
        "places": tally.table(order, {name: {"place": place_of[name]} for name in order}),
        "confusion": tally.confusion,
        "digit_error_histogram": tally.digit_error,
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


def _magnitude(value) -> int | None:
    return None if value == 0 else abs(value).adjusted()


def _numeric_chance(targets: Sequence[str]) -> dict:
    """Chance and best constant of the numeric figures over the (first) targets of numeric records."""
    values = [parse_decimal(t) for t in targets]
    tolerances = [Decimal(str(t)) for t in REL_TOLERANCES]
    chance = {"records": len(values), "method": _pairs(values)[2],
              **_place_chance([{place_name(p): d for p, d in digit_places(t).items()} for t in targets])}
    if len(values) >= 2:
        pairs, total, _ = _pairs(values)
        exact = abs_sum = 0.0
        within_abs, within_rel = [0] * len(ABS_WITHIN), [0] * len(tolerances)
        for pv, tv, w in pairs:
            err = abs(pv - tv)
            exact += w * (err == 0)
            abs_sum += w * float(err)
            for i, k in enumerate(ABS_WITHIN):
                within_abs[i] += w * (err <= k)
            for i, tol in enumerate(tolerances):
                within_rel[i] += w * (err <= abs(tv) * tol)
        chance.update(value_exact=exact / total, mae=abs_sum / total,
                      within_abs={str(k): c / total for k, c in zip(ABS_WITHIN, within_abs)},
                      within_relative={f"{t:g}": c / total for t, c in zip(REL_TOLERANCES, within_rel)})
    constant = {}
    if values:
        mode, count = Counter(values).most_common(1)[0]
        median = sorted(values)[(len(values) - 1) // 2]  # a median minimises the mean absolute error
        constant = {"value_exact": count / len(values), "value_exact_answer": format(mode.normalize(), "f"),
                    "mae": statistics.fmean(float(abs(v - median)) for v in values),
                    "mae_answer": format(median.normalize(), "f")}
    return {"chance": chance, "constant": constant}


# ---------------------------------------------------------------------------------------------------------
# Clocks


def swapped_hands(prediction: ClockTime, target: ClockTime, tolerance: float = SWAP_TOLERANCE) -> bool:
    """The prediction reads the target's hands the wrong way round (definition in the module docstring)."""
    if prediction.hour % 12 == target.hour % 12 and prediction.minute == target.minute:
        return False
    hour_hand = (target.hour % 12) * 5 + target.minute / 12  # where the hour hand points, in minutes
    d = abs(prediction.minute - hour_hand) % 60
    return prediction.hour % 12 == (target.minute // 5) % 12 and min(d, 60 - d) <= tolerance


_CLOCK_CATEGORIES = {(True, True): "both_correct", (True, False): "hour_only", (False, True): "minute_only",
                     (False, False): "neither"}
_CLOCK_COUNTS = ("exact", "hour_correct", "minute_correct", "both_correct", "hour_only", "minute_only", "neither",
                 "swapped_hands")


def _clock_scores(p: ClockTime, t: ClockTime, swap_tolerance: float) -> tuple[float, dict[str, bool]]:
    """(gap, {each of _CLOCK_COUNTS: bool}) of one reading."""
    hour_ok, minute_ok = p.hour % 12 == t.hour % 12, p.minute == t.minute
    flags = {"exact": readings_match(p, t), "hour_correct": hour_ok, "minute_correct": minute_ok,
             "swapped_hands": swapped_hands(p, t, swap_tolerance)}
    flags.update({name: (hour_ok, minute_ok) == key for key, name in _CLOCK_CATEGORIES.items()})
    return dial_gap(p, t), flags


def _gap_bucket(gap: float) -> int:
    return next(i for i, (lo, hi) in enumerate(GAP_BUCKETS) if (gap == 0 if hi == 0 else lo < gap <= hi))


def _clock_analysis(pairs: Sequence[tuple[str, ClockTime]], swap_tolerance: float) -> dict:
    """Clock statistics of (prediction, target time) pairs."""
    counts: Counter = Counter()
    within: Counter = Counter()
    gaps: list[float] = []
    tally = _DigitTally()
    for pred, t in pairs:
        p = parse_time(pred)
        if p is None:
            counts["no_time"] += 1
            continue
        gap, flags = _clock_scores(p, t, swap_tolerance)
        gaps.append(gap)
        counts.update(k for k, v in flags.items() if v)
        for k in WITHIN_MINUTES:
            within[k] += gap <= k
        for place, td, pd in clock_digit_pairs(p, t):
            tally.add(place, td, pd)
    n = len(pairs)
    gaps.sort()
    buckets = Counter(_gap_bucket(g) for g in gaps)
    keys = (*_CLOCK_COUNTS, "no_time")
    return {
        "records": n,
        "analysed": len(gaps),
        **{k: counts[k] for k in keys},
        "rates": {k: _rate(counts[k], n) for k in keys},
        "swap_tolerance_minutes": swap_tolerance,
        "within_minutes": {str(k): within[k] for k in WITHIN_MINUTES},
        "within_minutes_rate": {str(k): _rate(within[k], n) for k in WITHIN_MINUTES},
        "gap_buckets": [{"label": "0" if hi == 0 else f"({lo}, {hi}]", "count": buckets[i]}
                        for i, (lo, hi) in enumerate(GAP_BUCKETS)],
        "mean_gap": statistics.fmean(gaps) if gaps else None,
        "median_gap": statistics.median(gaps) if gaps else None,
        "mean_gap_worst_case": _rate(sum(gaps) + WORST_GAP * counts["no_time"], n),
        "digit_accuracy": tally.overall(),
        "places": tally.table(CLOCK_PLACES),
        "confusion": tally.confusion,
        "digit_error_histogram": tally.digit_error,
        "gaps": gaps,
    }


def _clock_chance(targets: Sequence[ClockTime], swap_tolerance: float) -> dict:
    """Chance and best constant of the clock figures over the target times of clock records."""
    chance = {"records": len(targets), "method": _pairs(targets)[2],
              **_place_chance([{pl: td for pl, td, _ in clock_digit_pairs(t, t)} for t in targets])}
    if len(targets) >= 2:
        pairs, total, _ = _pairs(targets)
        gaps: Counter = Counter()
        flags: Counter = Counter()
        for p, t, w in pairs:
            gap, f = _clock_scores(p, t, swap_tolerance)
            gaps[gap] += w
            for k, v in f.items():
                if v:
                    flags[k] += w
        n_bins = int(WORST_GAP // GAP_BIN)
        bins, buckets = [0] * n_bins, [0] * len(GAP_BUCKETS)
        for gap, w in gaps.items():
            bins[min(int(gap // GAP_BIN), n_bins - 1)] += w
            buckets[_gap_bucket(gap)] += w
        chance.update(
            mean_gap=sum(g * w for g, w in gaps.items()) / total,
            rates={k: flags[k] / total for k in _CLOCK_COUNTS},
            within_minutes_rate={str(k): sum(w for g, w in gaps.items() if g <= k) / total for k in WITHIN_MINUTES},
            gap_bin_fractions=[b / total for b in bins], gap_bucket_fractions=[b / total for b in buckets])
    constant = {}
    if targets:
        times = Counter((t.hour % 12, t.minute, t.second) for t in targets)
        (h, m, s), count = times.most_common(1)[0]
        best = min(times, key=lambda c: (statistics.fmean(dial_gap(ClockTime(*c), t) for t in targets), c))
        constant = {
            "exact": count / len(targets), "exact_answer": _clock_text(h, m, s),
            "hour_correct": max(Counter(t.hour % 12 for t in targets).values()) / len(targets),
            "minute_correct": max(Counter(t.minute for t in targets).values()) / len(targets),
            "mean_gap": statistics.fmean(dial_gap(ClockTime(*best), t) for t in targets),
            "mean_gap_answer": _clock_text(*best),
        }
    return {"chance": chance, "constant": constant}


def _clock_text(hour: int, minute: int, second: int | None = None) -> str:
    return f"{hour % 12 or 12}:{minute:02d}" + ("" if second is None else f":{second:02d}")


# ---------------------------------------------------------------------------------------------------------
# Collapse


def collapse_check(records: Sequence[Mapping]) -> dict:
    """Does the run mostly repeat itself? (rule in the module docstring). Predictions and targets are
    compared normalised (`metrics.normalize_answer`: trimmed, whitespace collapsed, lower case)."""
    preds = Counter(normalize_answer(r["prediction"]) for r in records)
    targets = Counter(normalize_answer(r["targets"][0]) for r in records)
    n = len(records)
    top, top_count = preds.most_common(1)[0] if preds else ("", 0)
    top_target_share = _rate(targets.most_common(1)[0][1], n) if targets else None
    share = _rate(top_count, n)
    reasons = []
    if share is not None and share > COLLAPSE_SHARE and share > 2 * top_target_share:
        reasons.append(f"the most common answer {top!r} is {top_count} of {n} answers ({share:.0%}); the most "
                       f"common target is only {top_target_share:.0%} of the targets")
    if len(targets) >= 10 and len(preds) < COLLAPSE_DISTINCT * len(targets):
        reasons.append(f"only {len(preds)} distinct answers for {len(targets)} distinct targets")
    return {"records": n, "distinct_predictions": len(preds), "distinct_targets": len(targets),
            "most_common_prediction": top, "most_common_count": top_count, "most_common_share": share,
            "most_common_target_share": top_target_share, "top_predictions": preds.most_common(5),
            "collapsed": bool(reasons), "reasons": reasons}


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


def analyze_records(records: Iterable[Mapping], *, swap_tolerance: float = SWAP_TOLERANCE,
                    chance: bool = True) -> dict:
    """The full analysis of one run as a JSON-serialisable dict (keys: records, kinds, exact_match,
    relaxed_accuracy, by_source, numeric, clock, chance, collapse). Exact match is `metrics.exact_match`
    with its defaults (case-insensitive, whitespace-normalised), relaxed accuracy the ChartQA one over
    chart-source records (None without any), both max over targets. numeric / clock hold "chance" and
    "constant" entries (module docstring). Raw per-record relative errors and clock gaps are kept, sorted,
    under numeric.relative_error.values and clock.gaps (for plots). With chance=False the chance and
    best-constant entries are left empty (None figures): faster, for many runs of one evaluation set."""
    recs = [_checked(r, f"record {i} (id {r.get('id')!r})" if isinstance(r, dict) else f"record {i}")
            for i, r in enumerate(records)]
    kinds: Counter = Counter()
    numeric_pairs, clock_pairs = [], []
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
    distinct = _distinct(recs) if chance else []
    numeric = _numeric_analysis(numeric_pairs)
    clock = _clock_analysis(clock_pairs, swap_tolerance)
    if chance:
        numeric.update(_numeric_chance([r["targets"][0] for r in distinct if record_kind(r) == "numeric"]))
        clock.update(_clock_chance([parse_time(r["targets"][0]) for r in distinct if record_kind(r) == "clock"],
                                   swap_tolerance))
    else:
        for part in (numeric, clock):
            part.update(chance={"method": "not computed", "places": {}, "digit_error_fractions": [None] * 10},
                        constant={})
    n = len(recs)
    return {
        "records": n,
        "kinds": {k: kinds[k] for k in KINDS},
        "exact_match": _rate(em_total, n),
        "exact_match_count": int(em_total),
        "relaxed_accuracy": _rate(relaxed_total, n_chart),
        "relaxed_accuracy_count": int(relaxed_total),
        "chart_records": n_chart,
        "text_records": sum(c["records"] for s, c in by_source.items() if s in TEXT_SOURCES),
        "by_source": {s: {"records": c["records"], "exact_match": c["exact_match"] / c["records"],
                          "relaxed_accuracy": c["relaxed_accuracy"] / c["records"]}
                      for s, c in sorted(by_source.items())},
        "numeric": numeric,
        "clock": clock,
        "chance": _answer_chance(distinct) if chance else {
            "method": "not computed", "exact_match": None, "relaxed_accuracy": None,
            "constant": {"exact_match": None, "exact_match_answer": None}},
        "collapse": collapse_check(recs),
    }


# ---------------------------------------------------------------------------------------------------------
# Headline figures


class Metric(NamedTuple):
    """One headline figure of a run: `key` names it in results.csv; `count` / `n` its numerator and
    denominator (`over` says what n counts); chance and best constant as in the module docstring."""

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
    digit accuracy per place). Only those that apply to the run's records."""
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
        figs.append(Metric("non_numeric_rate", "answer holds no number", _rate(num["non_numeric_predictions"], n),
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
        figs.append(Metric("within_5_min", "within 5 min", clk["within_minutes_rate"]["5"], n, "clock answers",
                           clk["within_minutes"]["5"], ch.get("within_minutes_rate", {}).get("5")))
        figs.append(Metric("mean_time_gap_min", "mean gap (min), answers holding a time", clk["mean_gap"], analysed,
                           "clock answers holding a time", None, ch.get("mean_gap"), const.get("mean_gap"),
                           const.get("mean_gap_answer"), lower_is_better=True, total=n))
        figs.append(Metric("mean_time_gap_worst_min", f"mean gap (min), no time = {WORST_GAP:g}",
                           clk["mean_gap_worst_case"], n, "clock answers", None, ch.get("mean_gap"),
                           const.get("mean_gap"), const.get("mean_gap_answer"), lower_is_better=True))
        figs.append(Metric("no_time_rate", "answer holds no time", clk["rates"]["no_time"], n, "clock answers",
                           clk["no_time"], lower_is_better=True))
        figs += _digit_figures(clk, "clock ")
    return figs


def _digit_figures(part: Mapping, prefix: str) -> list[Metric]:
    over = "target digits of answers that hold a " + ("time" if prefix else "number")
    ch = part["chance"]
    figs = [] if prefix else [Metric("digit_accuracy", "digit accuracy (all places)", part["digit_accuracy"],
                                     sum(p["target_digits"] for p in part["places"].values()), over,
                                     sum(p["correct"] for p in part["places"].values()), ch.get("digit_accuracy"))]
    for name, p in part["places"].items():
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


# ---------------------------------------------------------------------------------------------------------
# The run behind a predictions file


def find_run_dir(predictions) -> Path | None:
    """The training output folder of the model that wrote `predictions`: the folder's metrics.json names it
    (run.model); None when that file, key or folder is missing."""
    metrics = Path(predictions).parent / "metrics.json"
    try:
        model = json.loads(metrics.read_text(encoding="utf-8"))["run"]["model"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(model, str):
        return None
    for candidate in (Path(model), metrics.parent / model):  # as given (relative to the cwd), or to the file
        if candidate.is_dir():
            return candidate
    return None


def _read_json_file(path: Path, notes: list[str]):
    if not path.is_file():
        notes.append(f"no {path.name} in {path.parent}")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        notes.append(f"{path} unreadable ({e})")
        return None


def load_run_info(run_dir=None, *, predictions=None) -> dict:
    """What a report says about the run: {"run_dir", "config" (run_config.json, a flat dict), "log_history"
    (trainer_state.json's list), "evaluation" (metrics.json's "run" beside `predictions`), "notes" (what
    was not found)}. `run_dir` defaults to `find_run_dir(predictions)`. Never raises on missing or bad files."""
    notes: list[str] = []
    evaluation = None
    if predictions is not None:
        metrics = _read_json_file(Path(predictions).parent / "metrics.json", notes)
        evaluation = metrics.get("run") if isinstance(metrics, dict) else None
        if run_dir is None:
            run_dir = find_run_dir(predictions)
    config = history = None
    if run_dir is None:
        notes.append("no training folder found (pass --run-dir)")
    else:
        run_dir = Path(run_dir)
        config = _read_json_file(run_dir / "run_config.json", notes)
        state = _read_json_file(run_dir / "trainer_state.json", notes)
        config = config if isinstance(config, dict) else None
        history = state.get("log_history") if isinstance(state, dict) else None
        if state is not None and not isinstance(history, list):
            notes.append(f"{run_dir / 'trainer_state.json'} has no log_history list")
            history = None
    return {"run_dir": None if run_dir is None else str(run_dir), "config": config, "log_history": history,
            "evaluation": evaluation, "notes": notes}


IDENTITY_KEYS = ("model_name_or_path", "family", "dataset", "data_root", "mixture", "train_split", "eval_split",
                 "synthesize", "synthesize_num", "synthesize_size", "aux", "aux_lambda", "kernel", "kernel_mode",
                 "max_steps", "num_train_epochs", "per_device_train_batch_size", "gradient_accumulation_steps",
                 "learning_rate", "lr_scheduler_type", "warmup_steps", "warmup_ratio", "seed")
_SIZE_KEY = re.compile(r"hidden|layers|depth|heads|intermediate|vocab|pixels|image_size|patch")
_EVAL_SKIP = re.compile(r"runtime|per_second|epoch|numeric_tokens")  # bookkeeping, not a metric


def _curve_series(history: Sequence[Mapping]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """{"training": {key: [(step, value)]}, "evaluation losses": ..., "evaluation metrics": ...} from a
    log history; non-numeric and non-finite values skipped."""
    panels: dict[str, dict[str, list]] = {"training": {}, "evaluation losses": {}, "evaluation metrics": {}}
    for entry in history:
        step = entry.get("step")
        if not isinstance(step, (int, float)):
            continue
        for key, value in entry.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                continue
            if key.startswith("eval_"):
                if _EVAL_SKIP.search(key):
                    continue
                panel = "evaluation losses" if re.search(r"loss|_ce$|_aux$|_total$", key) else "evaluation metrics"
            elif key in ("loss", "ce", "aux", "total"):
                panel = "training"
            else:
                continue
            panels[panel].setdefault(key, []).append((float(step), float(value)))
    return {p: s for p, s in panels.items() if s}


# ---------------------------------------------------------------------------------------------------------
# Plots (matplotlib object API with the Agg canvas: no pyplot, no global backend state)


def _figure(width=7.0, height=4.0, ncols=1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, (axes[0] if ncols == 1 else axes)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})


def _integer_axis(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _grouped_bars(ax, labels: Sequence[str], series: Mapping[str, Sequence[float | None]],
                  chance: Mapping[str, Sequence[float | None]] | None = None, *, rotate: bool = True,
                  notes: Mapping[str, Sequence[str]] | None = None) -> None:
    """Bars per label and run; a None value is written "no data" (not drawn as 0); chance (per run) as a
    black dash over each bar; `notes` (per run and bar, e.g. "3/6") written above the bars."""
    width = 0.8 / max(1, len(series))
    chance_drawn = False
    for i, (run, values) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        ax.bar([x for x, v in zip(xs, values) if v is not None], [v for v in values if v is not None],
               width=width, label=run, color=f"C{i}")
        for x, v in zip(xs, values):
            if v is None:
                ax.text(x, 0.02, "no data", rotation=90, ha="center", va="bottom", fontsize=7, color="0.4",
                        transform=ax.get_xaxis_transform())
        for x, v, note in zip(xs, values, (notes or {}).get(run, ())):
            if v is not None:
                ax.text(x, v, note, ha="center", va="bottom", fontsize=6, color="0.25")
        for x, c in zip(xs, (chance or {}).get(run, ())):
            if c is not None:
                ax.hlines(c, x - width / 2, x + width / 2, colors="black", linestyles="--", linewidth=1.5,
                          label=None if chance_drawn else "chance")
                chance_drawn = True
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30 if rotate else 0, ha="right" if rotate else "center")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _place_order(tables: Iterable[Mapping[str, Mapping]]) -> list[str]:
    """The places of several per-place tables, most significant first (clock places in CLOCK_PLACES order)."""
    rank: dict[str, float] = {}
    for table in tables:
        for name, p in table.items():
            rank[name] = -p["place"] if "place" in p else CLOCK_PLACES.index(name)
    return sorted(rank, key=rank.get)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "run"


def _confusion_plot(conf: Sequence[Sequence[int]], title: str, path: Path) -> None:
    fig, ax = _figure(5.5, 5.0)
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
    ax.set_title(title, fontsize=9, wrap=True)
    fig.colorbar(im, ax=ax, fraction=0.046)
    _save(fig, path)


def _digit_plots(parts: Mapping[str, Mapping], out: Path, prefix: str, what: str) -> dict[str, str]:
    """Per-place accuracy, |digit error| distribution and confusion matrices of numbers or clock readings."""
    files: dict[str, str] = {}
    runs = [r for r, p in parts.items() if p["places"]]
    if not runs:
        return files
    # places where only predictions have digits ("extra") have no accuracy: the table lists them
    names = [nm for nm in _place_order(parts[r]["places"] for r in runs)
             if any(parts[r]["places"].get(nm, {}).get("target_digits") for r in runs)]
    fig, ax = _figure(max(7.0, 1.2 * len(names) + 2))
    _grouped_bars(ax, names, {r: [parts[r]["places"].get(nm, {}).get("accuracy") for nm in names] for r in runs},
                  {r: [parts[r]["chance"]["places"].get(nm) for nm in names] for r in runs},
                  notes={r: [f"{p['correct']}/{p['target_digits']}" if p else "" for p in
                             (parts[r]["places"].get(nm) for nm in names)] for r in runs})
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("accuracy (correct / target digits)")
    ax.set_title(f"{what}: accuracy per place (answers holding a {'time' if prefix else 'number'})")
    _save(fig, out / f"{prefix}place_accuracy.png")
    files[f"{prefix}place_accuracy"] = f"{prefix}place_accuracy.png"

    with_digits = [r for r in runs if sum(parts[r]["digit_error_histogram"])]
    if with_digits:
        fig, ax = _figure()
        _grouped_bars(ax, [str(d) for d in range(10)],
                      {r: [c / sum(parts[r]["digit_error_histogram"]) for c in parts[r]["digit_error_histogram"]]
                       for r in with_digits},
                      {r: parts[r]["chance"]["digit_error_fractions"] for r in with_digits}, rotate=False)
        ax.set_xlabel("|predicted digit - target digit|")
        ax.set_ylabel("fraction of aligned digits")
        ax.set_title(f"{what}: |digit error| distribution")
        _save(fig, out / f"{prefix}digit_error.png")
        files[f"{prefix}digit_error"] = f"{prefix}digit_error.png"
    for i, r in enumerate(parts):
        if sum(map(sum, parts[r]["confusion"])):
            name = f"{prefix}confusion_{i}_{_safe(r)}.png"
            _confusion_plot(parts[r]["confusion"], f"{what} digit confusion, all places: {r} (row-normalised; counts)",
                            out / name)
            files[f"{prefix}confusion:{r}"] = name
    return files


def _plots(analyses: Mapping[str, dict], out: Path) -> dict[str, str]:
    """Write the PNGs that have data; {plot name: file name}."""
    files: dict[str, str] = {}
    runs = list(analyses)
    numeric = {r: a["numeric"] for r, a in analyses.items()}
    if any(n["analysed"] for n in numeric.values()):
        files.update(_digit_plots(numeric, out, "", "Numbers"))
        with_data = [r for r in runs if numeric[r]["analysed"]]
        names = [place_name(p) for p in sorted({p["place"] for r in with_data
                                                for p in numeric[r]["places"].values()}, reverse=True)]
        fig, ax = _figure()
        _grouped_bars(ax, names + ["none"], {r: [numeric[r]["first_wrong_place"].get(nm, 0) for nm in names]
                                             + [numeric[r]["all_digits_correct"]] for r in with_data})
        _integer_axis(ax)
        ax.set_ylabel("answers")
        ax.set_title("Place of the first wrong digit (most significant first; none = all right)")
        _save(fig, out / "first_wrong_place.png")
        files["first_wrong_place"] = "first_wrong_place.png"

        fig, ax = _figure()
        labels = [f"±{k}" if k else "exact" for k in ABS_WITHIN]
        _grouped_bars(ax, labels, {r: [numeric[r]["within_abs_rate"][str(k)] for k in ABS_WITHIN] for r in with_data},
                      {r: [numeric[r]["chance"].get("within_abs", {}).get(str(k)) for k in ABS_WITHIN]
                       for r in with_data}, rotate=False)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("|prediction - target| at most")
        ax.set_ylabel("fraction of numeric answers")
        ax.set_title("Absolute error (answers holding no number count as misses)")
        _save(fig, out / "abs_within.png")
        files["abs_within"] = "abs_within.png"

        rel_runs = [r for r in with_data if numeric[r]["relative_error"]["values"]]
        if rel_runs:
            fig, ax = _figure()
            for r in rel_runs:
                rel = numeric[r]["relative_error"]
                values, den = rel["values"], rel["nonzero_target_records"]
                ax.step([0.0] + values, [0.0] + [(i + 1) / den for i in range(len(values))], where="post", label=r)
            ax.set_xscale("symlog", linthresh=1e-3)
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("relative error |p - t| / |t|")
            ax.set_ylabel("fraction of answers (non-zero target)")
            ax.set_title("Relative error CDF")
            ax.legend()
            _save(fig, out / "relative_error_cdf.png")
            files["relative_error_cdf"] = "relative_error_cdf.png"

    clock = {r: a["clock"] for r, a in analyses.items()}
    if any(c["records"] for c in clock.values()):
        files.update(_digit_plots({r: c for r, c in clock.items() if c["records"]}, out, "clock_", "Clock"))
        timed = [r for r in runs if clock[r]["gaps"]]
        if timed:
            fig, ax = _figure()
            edges = list(range(0, int(WORST_GAP) + GAP_BIN, GAP_BIN))
            for r in timed:
                ax.hist(clock[r]["gaps"], bins=edges, histtype="step", linewidth=1.5, label=r,
                        weights=[1 / clock[r]["records"]] * len(clock[r]["gaps"]), color=f"C{runs.index(r)}")
            drawn = []
            for r in timed:
                fractions = clock[r]["chance"].get("gap_bin_fractions")
                if fractions and fractions not in drawn:
                    ax.stairs(fractions, edges, color="black", linestyle="--", label=None if drawn else "chance")
                    drawn.append(fractions)
            ax.set_xlabel("time gap on the 12-hour dial (minutes)")
            ax.set_ylabel("fraction of clock answers")
            ax.set_title(f"Clock time gap ({GAP_BIN}-minute bins; answers holding no time not shown)")
            ax.legend(fontsize=8)
            _save(fig, out / "clock_gap_hist.png")
            files["clock_gap_hist"] = "clock_gap_hist.png"

        cats = ("both_correct", "hour_only", "minute_only", "neither", "no_time", "swapped_hands")
        have = [r for r in runs if clock[r]["records"]]
        fig, ax = _figure()
        _grouped_bars(ax, [c.replace("_", " ") for c in cats], {r: [clock[r]["rates"][c] for c in cats] for r in have},
                      {r: [clock[r]["chance"].get("rates", {}).get(c, 0.0 if c == "no_time" else None) for c in cats]
                       for r in have})
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("fraction of clock answers")
        ax.set_title("Hour vs minute correctness")
        _save(fig, out / "clock_breakdown.png")
        files["clock_breakdown"] = "clock_breakdown.png"
    return files


def _training_curve(history: Sequence[Mapping], chance: Mapping[str, float | None], title: str, path: Path) -> bool:
    """Plot a trainer log history, one panel per kind of series; False (nothing written) without data."""
    panels = _curve_series(history)
    if not panels:
        return False
    fig, axes = _figure(5.0 * len(panels), 3.8, ncols=len(panels))
    axes = axes if isinstance(axes, list) else [axes]
    for ax, (panel, series) in zip(axes, panels.items()):
        for key, points in series.items():
            xs, ys = zip(*points)
            flat = all(y == 0 for y in ys)
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3,
                    label=key + (" (0 throughout)" if flat else ""))
            level = chance.get(key.removeprefix("eval_"))
            if level is not None:
                ax.axhline(level, color="black", linestyle="--", linewidth=1, label=f"chance: {key}")
        ax.set_xlabel("step")
        ax.set_title(panel)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    _save(fig, path)
    return True


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


def _raw(value) -> str:
    """A config value as written: text as is, everything else as JSON (0.5, true, [2.0])."""
    return value if isinstance(value, str) else json.dumps(value)


def _cell(f: Metric | None) -> str:
    """value with its numerator / denominator: "0.312 (156/500)", "1.070 (over 480 of 500)", "2.1 (n=500)"."""
    if f is None:
        return "–"
    if f.count is not None:
        return f"{_fmt(f.value)} ({f.count}/{f.n})"
    if f.total is not None and f.total != f.n:
        return f"{_fmt(f.value)} (over {f.n} of {f.total})"
    return f"{_fmt(f.value)} (n={f.n})"


def _constant_cell(f: Metric) -> str:
    if f.constant is None:
        return "–"
    return _fmt(f.constant) + (f" ({f.constant_answer!r})" if f.constant_answer is not None else "")


CHANCE_TEXT = ("**Chance** is the expected score of a predictor that ignores the input but knows the answer "
               "distribution: each record's target is scored against another record's answer, averaged over "
               "every ordered pair of distinct records. **Best constant** is the single answer that scores best "
               "on these very targets (shown in brackets), an in-sample upper bound for a model that always "
               "gives one answer. A model has learned something only where it beats both.")


def _summary(analyses: Mapping[str, dict]) -> list[str]:
    runs = list(analyses)
    figs = {r: {f.key: f for f in headline(analyses[r])} for r in runs}
    keys = list(dict.fromkeys(k for r in runs for k in figs[r]))
    chance_cols = [runs[0]] if all(
        [(f.chance, f.constant) for f in headline(analyses[r])] == [(f.chance, f.constant) for f in
                                                                    headline(analyses[runs[0]])] for r in runs) else runs
    header = ["figure", "over", *runs]
    for r in chance_cols:
        header += ["chance" if len(chance_cols) == 1 else f"chance ({r})",
                   "best constant" if len(chance_cols) == 1 else f"best constant ({r})"]
    rows = []
    for k in keys:
        first = next(figs[r][k] for r in runs if k in figs[r])
        row = [first.label + (" ↓" if first.lower_is_better else ""), first.over, *(_cell(figs[r].get(k)) for r in runs)]
        for r in chance_cols:
            f = figs[r].get(k)
            row += [_fmt(f.chance) if f else "–", _constant_cell(f) if f else "–"]
        rows.append(row)
    lines = ["## Summary", "", "Each figure with its count over its denominator (n); ↓: lower is better. "
             + CHANCE_TEXT, ""]
    lines += _table(header, rows)
    methods = {f"{what}: {part['method']}" for r in chance_cols for what, part in (
        ("answers", analyses[r]["chance"]), ("numbers", analyses[r]["numeric"]["chance"]),
        ("clocks", analyses[r]["clock"]["chance"])) if part.get("records", 2) >= 2}
    lines += [f"Chance computed {'; '.join(sorted(methods))}.", ""]
    return lines


def _run_section(runs: Sequence[str], infos: Mapping[str, Mapping | None], analyses: Mapping[str, dict],
                 out: Path, plots: dict[str, str]) -> list[str]:
    md = ["## Runs", ""]
    for i, r in enumerate(runs):
        info = infos.get(r) or {}
        md += [f"### {r}", ""]
        config, history, evaluation = info.get("config"), info.get("log_history"), info.get("evaluation")
        if info.get("run_dir"):
            md += [f"Training folder: `{info['run_dir']}`", ""]
        if config:
            shown = [k for k in IDENTITY_KEYS if k in config]
            shown += [k for k in config if k not in shown and _SIZE_KEY.search(k)]
            steps = config.get("max_steps")
            shown = [k for k in shown if config[k] is not None  # epochs do not count when max_steps is set
                     and not (k == "num_train_epochs" and isinstance(steps, int) and steps > 0)]
            md += _table(["setting", "value"], [[k, _raw(config[k])] for k in shown])
            md += ["<details><summary>every setting of the run (run_config.json)</summary>", ""]
            md += _table(["key", "value"], [[k, _raw(v)] for k, v in config.items()])
            md += ["</details>", ""]
        else:
            md += ["Run settings: not available.", ""]
        if evaluation:
            md += ["Evaluation: " + ", ".join(f"{k} {json.dumps(evaluation[k])}" for k in
                                              ("model", "data", "split", "limit", "max_new_tokens")
                                              if k in evaluation), ""]
        if history:
            chance = {f.key: f.chance for f in headline(analyses[r])}
            name = f"training_curve_{i}_{_safe(r)}.png"
            if _training_curve(history, chance, f"Training curve: {r}", out / name):
                plots[f"training_curve:{r}"] = name
                last = {}
                for entry in history:
                    last.update({k: v for k, v in entry.items() if isinstance(v, (int, float))})
                summary = [f"{k} {_fmt(float(last[k]))}" for k in ("ce", "aux", "eval_ce", "eval_loss") if k in last]
                if "train_runtime" in last:
                    summary.append(f"training time {last['train_runtime']:.0f} s")
                md += [f"Last logged values (step {last.get('step', '–')}): " + ", ".join(summary) + ".", "",
                       f"![training curve {r}]({name})", ""]
            else:
                md += ["Training curve: not available (the log history holds no loss values).", ""]
        else:
            md += ["Training curve: not available.", ""]
        if info.get("notes"):
            md += ["Not found: " + "; ".join(info["notes"]) + ".", ""]
    return md


def _collapse_section(runs: Sequence[str], analyses: Mapping[str, dict]) -> list[str]:
    col = {r: analyses[r]["collapse"] for r in runs}
    md = ["## Does the model repeat itself?", "",
          f"Flagged when the most common answer is over {COLLAPSE_SHARE:.0%} of the answers and over twice as "
          f"common as the most common target, or when there are fewer distinct answers than "
          f"{COLLAPSE_DISTINCT:.0%} of the distinct targets (with at least 10 distinct targets).", ""]
    md += _table(["", *runs], [
        ["distinct answers", *(c["distinct_predictions"] for c in col.values())],
        ["distinct targets", *(c["distinct_targets"] for c in col.values())],
        ["most common answer", *(f"{c['most_common_prediction']!r}: {c['most_common_count']}/{c['records']} "
                                 f"({_fmt(c['most_common_share'])})" for c in col.values())],
        ["share of the most common target", *(c["most_common_target_share"] for c in col.values())],
        ["five most common answers", *(", ".join(f"{p!r} x{k}" for p, k in c["top_predictions"])
                                       for c in col.values())],
        ["collapsed", *("yes" if c["collapsed"] else "no" for c in col.values())],
    ])
    return md


def _digit_tables(runs: Sequence[str], parts: Mapping[str, Mapping], plots: Mapping[str, str], prefix: str,
                  level: str) -> list[str]:
    """Per-place accuracy with chance, |digit error| histogram with chance, confusion matrices."""
    names = _place_order(parts[r]["places"] for r in runs)
    md = [f"{level} Accuracy per place", "",
          "accuracy = correct / target digits at that place (over answers holding a "
          f"{'time' if prefix else 'number'}); missing = the answer has no digit there; extra = it has a digit "
          "where the target has none.", ""]

    def place_cell(r, nm):
        p = parts[r]["places"].get(nm)
        if p is None:
            return "no data"
        return f"{_fmt(p['accuracy'])} ({p['correct']}/{p['target_digits']}; {p['missing']} missing, {p['extra']} extra)"

    md += _table(["place", *runs, "chance"],
                 [[nm, *(place_cell(r, nm) for r in runs), parts[runs[0]]["chance"]["places"].get(nm)] for nm in names])
    if f"{prefix}place_accuracy" in plots:
        md += [f"![accuracy per place]({plots[f'{prefix}place_accuracy']})", ""]
    md += [f"{level} |digit error| over aligned digits (both have a digit at that place)", ""]
    chance = parts[runs[0]]["chance"]["digit_error_fractions"]
    md += _table(["|digit error|", *runs, "chance (fraction)"],
                 [[d, *(parts[r]["digit_error_histogram"][d] for r in runs), chance[d]] for d in range(10)])
    if f"{prefix}digit_error" in plots:
        md += [f"![digit error distribution]({plots[f'{prefix}digit_error']})", ""]
    md += [f"{level} Digit confusion (rows: target digit, columns: predicted digit)", ""]
    for r in runs:
        md += [f"**{r}**", ""]
        if f"{prefix}confusion:{r}" not in plots:
            md += ["no data (no aligned digits)", ""]
            continue
        md += _table(["target \\ pred", *map(str, range(10))], [[d, *parts[r]["confusion"][d]] for d in range(10)])
        md += [f"![confusion {r}]({plots[f'{prefix}confusion:{r}']})", ""]
    return md


def write_report(analyses: Mapping[str, dict], out_dir, *, inputs: Mapping[str, str] | None = None,
                 notes: Sequence[str] = (), run_info: Mapping[str, Mapping | None] | None = None) -> Path:
    """Write report.md, analysis.json and the PNG plots for one or several runs (one table column per
    run, overlaid plots) into `out_dir`; returns the report path. `run_info`: {run: `load_run_info(...)`}
    for the run's identity and training curve; by default looked up from each run's `inputs` path (its
    folder's metrics.json names the model folder); a run without any says "not available"."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = list(analyses)
    inputs = dict(inputs or {})
    if run_info is None:
        run_info = {r: load_run_info(predictions=inputs[r]) if r in inputs else None for r in runs}
    plots = _plots(analyses, out)

    md = ["# Error analysis", ""]
    for r in runs:
        c = analyses[r]["collapse"]
        if c["collapsed"]:
            md += [f"> **Warning: {r} mostly repeats itself**: {'; and '.join(c['reasons'])}. Its figures say "
                   "little about reading the input; compare them with the best constant.", ""]
    md += _table(["run", "predictions", "records"], [[r, inputs.get(r, "–"), analyses[r]["records"]] for r in runs])
    md += [f"> {note}" for note in notes] + ([""] if notes else [])
    md += _summary(analyses)
    md += _collapse_section(runs, analyses)
    md += _run_section(runs, run_info, analyses, out, plots)

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
        md += _numeric_section(runs, numeric, plots)
    clock = {r: analyses[r]["clock"] for r in runs}
    if any(c["records"] for c in clock.values()):
        md += _clock_section(runs, clock, plots)

    (out / "analysis.json").write_text(json.dumps(
        {"runs": analyses, "comparison": compare_runs(analyses), "inputs": inputs, "notes": list(notes),
         "run_info": run_info, "plots": plots}, indent=1, default=str) + "\n", encoding="utf-8")
    report = out / "report.md"
    report.write_text("\n".join(md), encoding="utf-8")
    return report


def _numeric_section(runs, numeric, plots) -> list[str]:
    ch = numeric[runs[0]]["chance"]
    md = ["## Numeric answers", ""]
    md += _table(["", *runs], [
        ["numeric-target records", *(numeric[r]["records"] for r in runs)],
        ["answers holding no number (left out of the digit tables and the MAE)",
         *(numeric[r]["non_numeric_predictions"] for r in runs)],
        ["analysed (both numeric)", *(numeric[r]["analysed"] for r in runs)],
        ["value exactly right", *(numeric[r]["value_exact"] for r in runs)],
        ["all digits right (sign aside)", *(numeric[r]["all_digits_correct"] for r in runs)],
        ["sign errors", *(numeric[r]["sign_errors"] for r in runs)],
    ])
    md += ["### Absolute error", "",
           "Mean and median |prediction - target| over the answers that hold a number; \"within ±k\" over every "
           "numeric record (an answer holding no number is a miss).", ""]
    rows = [["mean absolute error (n)", *(f"{_fmt(numeric[r]['abs_error']['mean'])} (n={numeric[r]['analysed']} of "
                                          f"{numeric[r]['records']})" for r in runs), ch.get("mae")],
            ["median absolute error", *(numeric[r]["abs_error"]["median"] for r in runs), "–"]]
    rows += [[f"within ±{k}", *(f"{_fmt(numeric[r]['within_abs_rate'][str(k)])} ({numeric[r]['within_abs'][str(k)]}/"
                                f"{numeric[r]['records']})" for r in runs), ch.get("within_abs", {}).get(str(k))]
             for k in ABS_WITHIN]
    rows += [[f"within relative tolerance {t:g}", *(f"{_fmt(numeric[r]['within_relative_rate'][f'{t:g}'])} "
                                                    f"({numeric[r]['within_relative'][f'{t:g}']}/{numeric[r]['records']})"
                                                    for r in runs), ch.get("within_relative", {}).get(f"{t:g}")]
             for t in REL_TOLERANCES]
    md += _table(["", *runs, "chance"], rows)
    if "abs_within" in plots:
        md += ["![absolute error](abs_within.png)", ""]
    if any(numeric[r]["places"] for r in runs):
        md += _digit_tables(runs, numeric, plots, "", "###")
        names = _place_order(numeric[r]["places"] for r in runs)
        md += ["### Place of the first wrong digit", ""]
        md += _table(["first wrong place", *runs],
                     [[nm, *(numeric[r]["first_wrong_place"].get(nm, 0) for r in runs)] for nm in names]
                     + [["none (all digits right)", *(numeric[r]["all_digits_correct"] for r in runs)]])
        if "first_wrong_place" in plots:
            md += ["![first wrong place](first_wrong_place.png)", ""]
    else:
        md += ["No answer holds a number: no digit analysis.", ""]
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
           "(answers holding no number count as above every threshold); mean and median over parsed "
           "predictions.", ""]
    rel = {r: numeric[r]["relative_error"] for r in runs}
    md += _table(["", *runs],
                 [["records with non-zero target", *(rel[r]["nonzero_target_records"] for r in runs)],
                  ["records with zero target (no relative error)", *(rel[r]["zero_target_records"] for r in runs)]]
                 + [[f"<= {thr:g}", *(rel[r]["cdf"][str(thr)] for r in runs)] for thr in REL_THRESHOLDS]
                 + [["median", *(rel[r]["median"] for r in runs)], ["mean", *(rel[r]["mean"] for r in runs)]])
    if "relative_error_cdf" in plots:
        md += ["![relative error CDF](relative_error_cdf.png)", ""]
    return md


def _clock_section(runs, clock, plots) -> list[str]:
    runs = [r for r in runs if clock[r]["records"]]
    ch = clock[runs[0]]["chance"]
    rates = ch.get("rates", {})
    md = ["## Clock answers", "",
          "12-hour dial. Rates are over every clock record (an answer holding no time fails them all). "
          "Swapped hands: predicted hour == target minute // 5 (mod 12) and predicted minute within "
          f"{clock[runs[0]]['swap_tolerance_minutes']:g} minutes of where the hour hand points "
          "((hour mod 12) * 5 + minute / 12), the prediction not being right on both.", ""]
    rows = [["clock records", *(clock[r]["records"] for r in runs), "–"]]
    for key, label in [("exact", "exact time"), ("hour_correct", "hour correct"),
                       ("minute_correct", "minute correct"), ("both_correct", "hour and minute correct"),
                       ("hour_only", "hour only correct"), ("minute_only", "minute only correct"),
                       ("neither", "neither correct"), ("no_time", "no time in answer"),
                       ("swapped_hands", "swapped hands")]:
        rows.append([label, *(f"{clock[r][key]}/{clock[r]['records']} ({_fmt(clock[r]['rates'][key])})" for r in runs),
                     rates.get(key, 0.0 if key == "no_time" else None)])
    rows += [[f"within {k} min", *(f"{clock[r]['within_minutes'][str(k)]}/{clock[r]['records']} "
                                   f"({_fmt(clock[r]['within_minutes_rate'][str(k)])})" for r in runs),
              ch.get("within_minutes_rate", {}).get(str(k))] for k in WITHIN_MINUTES]
    rows += [["mean gap (min) over answers holding a time",
              *(f"{_fmt(clock[r]['mean_gap'])} (over {clock[r]['analysed']} of {clock[r]['records']} answers that "
                "hold a time)" for r in runs), ch.get("mean_gap")],
             [f"mean gap (min), an answer holding no time counted as {WORST_GAP:g}",
              *(f"{_fmt(clock[r]['mean_gap_worst_case'])} (over all {clock[r]['records']})" for r in runs),
              ch.get("mean_gap")],
             ["median gap (min) over answers holding a time", *(clock[r]["median_gap"] for r in runs), "–"]]
    md += _table(["", *runs, "chance"], rows)
    md += ["### Time-gap histogram (minutes, answers holding a time)", ""]
    fractions = ch.get("gap_bucket_fractions") or [None] * len(GAP_BUCKETS)
    md += _table(["gap", *runs, "chance (fraction)"],
                 [[b["label"], *(clock[r]["gap_buckets"][i]["count"] for r in runs), fractions[i]]
                  for i, b in enumerate(clock[runs[0]]["gap_buckets"])])
    md += ["![time-gap histogram](clock_gap_hist.png)" if "clock_gap_hist" in plots
           else "No answer holds a time: no gap histogram.", ""]
    if "clock_breakdown" in plots:
        md += ["![hour vs minute correctness](clock_breakdown.png)", ""]
    md += ["### Clock digits", "",
           "Hour written on the 12-hour dial (1..12: hours 10-12 have a tens digit), minute and second as two "
           "digits.", ""]
    if any(clock[r]["places"] for r in runs):
        md += _digit_tables(runs, clock, plots, "clock_", "####")
    else:
        md += ["No answer holds a time: no digit analysis.", ""]
    return md


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
    # the command's conventions (one-line errors, --x_y for --x-y); the analysis itself imports no CLI
    from vlm_smmd.cli import Parser, existing, fail, input_error, no_empty_folder, usage_error

    parser = Parser(
        prog="vlm-smmd analyze",
        description="Per-digit error analysis of predictions.jsonl files; several files are compared side by side.")
    parser.add_argument("predictions", nargs="+", type=Path, help="predictions.jsonl files, one per run")
    parser.add_argument("--out", required=True, type=Path, help="folder for report.md, analysis.json and PNGs")
    parser.add_argument("--overwrite", action="store_true", help="replace the report that --out already holds")
    parser.add_argument("--names", help="comma-separated run names, one per file (default: from the paths)")
    parser.add_argument("--run-dir", action="append", type=Path, metavar="DIR",
                        help="training output folder (run_config.json, trainer_state.json) of each file, in "
                             "order; repeat once per file (default: the model named in the file's metrics.json)")
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
    if args.run_dir is not None and len(args.run_dir) != len(args.predictions):
        parser.error(f"--run-dir given {len(args.run_dir)} times for {len(args.predictions)} prediction files")
    if existing(args.out, ("report.md",)) and not args.overwrite:
        return usage_error("analyze", f"--out {args.out} already holds a report.md; pass --overwrite to replace "
                           "it, or choose another --out")
    try:
        with no_empty_folder(args.out):
            runs = {name: load_predictions(path) for name, path in zip(names, args.predictions)}
            notes = []
            ids = {name: {str(r["id"]) for r in recs} for name, recs in runs.items()}
            if len({frozenset(s) for s in ids.values()}) > 1:
                notes.append("The runs do not cover the same record ids; compare their figures with care.")
            analyses = {name: analyze_records(recs, swap_tolerance=args.swap_tolerance)
                        for name, recs in runs.items()}
            run_dirs = args.run_dir or [None] * len(names)
            info = {n: load_run_info(d, predictions=p) for n, d, p in zip(names, run_dirs, args.predictions)}
            report = write_report(analyses, args.out, inputs={n: str(p) for n, p in zip(names, args.predictions)},
                                  notes=notes, run_info=info)
    except Exception as e:
        if not input_error(e):
            raise
        return fail("analyze", e)
    for name, a in analyses.items():
        figs = ", ".join(f"{f.label} {_fmt(f.value)} (chance {_fmt(f.chance)})" for f in headline(a)[:4])
        print(f"{name}: {a['records']} records; {figs}")
        if a["collapse"]["collapsed"]:
            print(f"{name}: WARNING, mostly repeats itself: {'; '.join(a['collapse']['reasons'])}")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
