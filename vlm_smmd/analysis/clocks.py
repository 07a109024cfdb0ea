"""Clock answers on the 12-hour dial: hour and minute correctness, time gap, swapped hands, clock digits,
and their chance and best constant (definitions in the `vlm_smmd.analysis` docstring)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from vlm_smmd.metrics import ClockTime, dial_gap, parse_time, readings_match

from .chance import record_pairs
from .digits import CLOCK_PLACES, DigitTally, clock_digit_pairs, place_chance, rate

SWAP_TOLERANCE = 5.0
WORST_GAP = 360.0  # minutes: the largest gap on a 12-hour dial, charged to answers holding no time
WITHIN_MINUTES = (0, 1, 5, 10, 15, 30, 60)
GAP_BUCKETS = ((0, 0), (0, 1), (1, 5), (5, 15), (15, 30), (30, 60), (60, 180), (180, 360))  # (lo, hi]; first is == 0
GAP_BIN = 10  # minutes per bin of the gap histogram plot


def swapped_hands(prediction: ClockTime, target: ClockTime, tolerance: float = SWAP_TOLERANCE) -> bool:
    """The prediction reads the target's hands the wrong way round (definition in the package docstring)."""
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


def clock_analysis(pairs: Sequence[tuple[str, ClockTime]], swap_tolerance: float) -> dict:
    """Clock statistics of (prediction, target time) pairs."""
    counts: Counter = Counter()
    within: Counter = Counter()
    gaps: list[float] = []
    tally = DigitTally()
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
        "rates": {k: rate(counts[k], n) for k in keys},
        "swap_tolerance_minutes": swap_tolerance,
        "within_minutes": {str(k): within[k] for k in WITHIN_MINUTES},
        "within_minutes_rate": {str(k): rate(within[k], n) for k in WITHIN_MINUTES},
        "gap_buckets": [{"label": "0" if hi == 0 else f"({lo}, {hi}]", "count": buckets[i]}
                        for i, (lo, hi) in enumerate(GAP_BUCKETS)],
        "mean_gap": statistics.fmean(gaps) if gaps else None,
        "median_gap": statistics.median(gaps) if gaps else None,
        "mean_gap_worst_case": rate(sum(gaps) + WORST_GAP * counts["no_time"], n),
        "digit_accuracy": tally.overall(),
        "places": tally.table(CLOCK_PLACES),
        "confusion": tally.confusion,
        "digit_error_histogram": tally.digit_error,
        "gaps": gaps,
    }


def clock_chance(targets: Sequence[ClockTime], swap_tolerance: float) -> dict:
    """Chance and best constant of the clock figures over the target times of clock records."""
    chance = {"records": len(targets), "method": record_pairs(targets)[2],
              **place_chance([{pl: td for pl, td, _ in clock_digit_pairs(t, t)} for t in targets])}
    if len(targets) >= 2:
        pairs, total, _ = record_pairs(targets)
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
