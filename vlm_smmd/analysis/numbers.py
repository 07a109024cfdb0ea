"""Numeric answers: digit statistics, absolute and relative error, and their chance and best constant
(definitions in the `vlm_smmd.analysis` docstring)."""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal

from vlm_smmd.metrics import parse_decimal

from .chance import record_pairs
from .digits import DigitTally, align_digits, canonical_digits, digit_places, place_chance, place_name, rate

ABS_WITHIN = (0, 1, 2, 5, 10)  # |prediction - target| <= k
REL_THRESHOLDS = (0.0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0)
REL_TOLERANCES = (0.0, 0.001, 0.01, 0.05)  # "within relative tolerance" for text answers


def numeric_analysis(pairs: Sequence[tuple[str, str]]) -> dict:
    """Digit statistics of (prediction, target) pairs whose target is a number."""
    tally = DigitTally()
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
        "value_exact_rate": rate(counts["value_exact"], n),
        "abs_error": {"mean": statistics.fmean(abs_errors) if abs_errors else None,
                      "median": statistics.median(abs_errors) if abs_errors else None, "n": analysed},
        "within_abs": {str(k): within_abs[k] for k in ABS_WITHIN},
        "within_abs_rate": {str(k): rate(within_abs[k], n) for k in ABS_WITHIN},
        "within_relative": {f"{t:g}": within_rel[t] for t in REL_TOLERANCES},
        "within_relative_rate": {f"{t:g}": rate(within_rel[t], n) for t in REL_TOLERANCES},
        "digit_accuracy": tally.overall(),
        "places": tally.table(order, {name: {"place": place_of[name]} for name in order}),
        "confusion": tally.confusion,
        "digit_error_histogram": tally.digit_error,
        "first_wrong_place": {place_name(p): first_wrong[p] for p in sorted(first_wrong, reverse=True)},
        "all_digits_correct": counts["all_digits_correct"],
        "sign_errors": counts["sign_errors"],
        "length_errors": {k: counts[k] for k in ("int_too_many", "int_too_few", "frac_too_many", "frac_too_few")},
        "magnitude_errors": counts["magnitude_errors"],
        "magnitude_error_rate": rate(counts["magnitude_errors"], analysed),
        "relative_error": {
            "nonzero_target_records": rel_den,
            "zero_target_records": counts["zero_target"],
            "cdf": {str(thr): rate(bisect_right(rel_sorted, thr), rel_den) for thr in REL_THRESHOLDS},
            "median": statistics.median(rel_sorted) if rel_sorted else None,
            "mean": statistics.fmean(rel_sorted) if rel_sorted else None,
            "values": rel_sorted,
        },
    }


def _magnitude(value) -> int | None:
    return None if value == 0 else abs(value).adjusted()


def numeric_chance(targets: Sequence[str]) -> dict:
    """Chance and best constant of the numeric figures over the (first) targets of numeric records."""
    values = [parse_decimal(t) for t in targets]
    tolerances = [Decimal(str(t)) for t in REL_TOLERANCES]
    chance = {"records": len(values), "method": record_pairs(values)[2],
              **place_chance([{place_name(p): d for p, d in digit_places(t).items()} for t in targets])}
    if len(values) >= 2:
        pairs, total, _ = record_pairs(values)
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
