"""Digits of numbers and clock readings aligned by place, their per-place tally and its chance level
(definitions in the `vlm_smmd.analysis` docstring)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from vlm_smmd.metrics import ClockTime, parse_decimal

CLOCK_PLACES = tuple(f"{f} {p}" for f in ("hour", "minute", "second") for p in ("tens", "units"))

_PLACE_NAMES = {6: "millions", 5: "hundred-thousands", 4: "ten-thousands", 3: "thousands", 2: "hundreds",
                1: "tens", 0: "units", -1: "tenths", -2: "hundredths", -3: "thousandths"}


def place_name(place: int) -> str:
    """0 -> "units", 1 -> "tens", -1 -> "tenths", ...; beyond the named ones "10^7", "10^-4"."""
    return _PLACE_NAMES.get(place, f"10^{place}")


def rate(count: int | float, total: int) -> float | None:
    """count / total; None when total is 0 (a rate over nothing)."""
    return None if total == 0 else count / total


class DigitPair(NamedTuple):
    """The digits of target and prediction at one place value (None where that number has no digit)."""

    place: int
    target: int | None
    prediction: int | None


def canonical_digits(text: str) -> tuple[str, str, bool] | None:
    """(integer digits, fraction digits, negative) of the number in `text`, canonical as described in the
    package docstring ("-012.50" -> ("12", "5", True), "1.5k" -> ("1500", "", False)); None if no number."""
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
    (package docstring): 1:07 vs target 10:07 -> [("hour tens", 1, None), ("hour units", 0, 1),
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


class DigitTally:
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
                       "accuracy": rate(self.places[name]["correct"], self.places[name]["target_digits"])}
                for name in order if name in self.places}

    def overall(self) -> float | None:
        return rate(sum(c["correct"] for c in self.places.values()),
                    sum(c["target_digits"] for c in self.places.values()))


def place_chance(target_digits: Sequence[Mapping[str, int]]) -> dict:
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
        places[place] = rate(correct, pairs)
        correct_total, pairs_total = correct_total + correct, pairs_total + pairs
        for d, kd in c.items():
            for e, ke in c.items():
                error[abs(d - e)] += kd * ke - (kd if d == e else 0)
    both = sum(error)
    return {"places": places, "digit_accuracy": rate(correct_total, pairs_total),
            "digit_error_fractions": [rate(e, both) for e in error]}
