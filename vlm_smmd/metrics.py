"""Answer scoring: ChartQA relaxed accuracy, exact match, number parsing for analysis, clock metrics, and
the final-number metrics of the text tasks (GSM8K, SVAMP, DeepMind Mathematics, arithmetic).

Pure string functions; every metric takes `(prediction, target)` in that order.

One rule for digits, shared with training (`numeric.NumericVocab`) and the analysis: a number is written
in ASCII digits 0-9. Full-width ("１２"), Arabic-Indic ("١٢") and other Unicode digits are text: no
SMMD term in training, no number here (relaxed accuracy compares such answers as strings, although
Python's float() would read them), non-numeric in the analysis.
"""

from __future__ import annotations

import decimal
import math
import re
import string
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import NamedTuple

# ---------------------------------------------------------------------------------------------------------
# ChartQA relaxed accuracy


def _chartqa_float(text: str) -> float | None:
    """ChartQA's `_to_float`: Python float(); trailing '%' characters are stripped and the value divided by 100.
    Text with any non-ASCII character is no number (the digit rule of the module docstring)."""
    if not text.isascii():
        return None
    try:
        if text.endswith("%"):
            return float(text.rstrip("%")) / 100.0
        return float(text)
    except ValueError:
        return None


def relaxed_accuracy(prediction: str, target: str, tolerance: float = 0.05) -> bool:
    """ChartQA relaxed correctness, quirks included (the pix2struct reference, arguments swapped).

    Both strings are stripped of surrounding whitespace. Each side is parsed with Python `float()` on its
    own: a trailing '%' is removed and that side (only) divided by 100, so "45%" vs "45" is 0.45 vs 45.
    If both parse and the target is non-zero: |pred - target| / |target| <= tolerance (binary floats, so
    "1.05" vs "1" gives 0.05000000000000004 and fails, as in the reference). Otherwise (either side does
    not parse, or the target is 0) the stripped strings are compared case-insensitively.
    What float() accepts in ASCII is accepted: "1e3", "+5", "1_000", "inf", "nan" parse; "1,234" and "$5"
    do not, nor do Unicode digits ("１２" vs "12" is a string comparison, hence wrong; module docstring).
    A "nan" or "inf" target parses and is truthy, so the relative change is nan (or inf - inf = nan) and the
    answer is never correct, not even "nan" vs "nan" -- the reference behaves the same.
    """
    pred, tgt = prediction.strip(), target.strip()
    pred_value, target_value = _chartqa_float(pred), _chartqa_float(tgt)
    if pred_value is not None and target_value:  # None or 0.0 -> string comparison
        return abs(pred_value - target_value) / abs(target_value) <= tolerance
    return pred.lower() == tgt.lower()


def score_against_targets(metric: Callable[..., bool | float], prediction: str, targets: Sequence[str],
                          **kwargs) -> float:
    """max over `targets` of `metric(prediction, target, **kwargs)` as a float (ChartQA keeps several labels)."""
    if isinstance(targets, str) or len(targets) == 0:
        raise ValueError(f"targets must be a non-empty list of strings, got {targets!r}")
    return max(float(metric(prediction, t, **kwargs)) for t in targets)


# ---------------------------------------------------------------------------------------------------------
# Exact match


def normalize_answer(text: str, *, ignore_case: bool = True, collapse_whitespace: bool = True,
                     strip_punctuation: bool = False) -> str:
    """Normalised answer text. Surrounding whitespace is always removed; `collapse_whitespace` turns inner
    runs into one space; `strip_punctuation` removes ASCII punctuation from both ends only ("12." -> "12",
    '"yes"' -> "yes"), never inside, so "1.5" and "3:15" keep their meaning."""
    text = text.strip()
    if collapse_whitespace:
        text = " ".join(text.split())
    if strip_punctuation:
        text = text.strip(string.punctuation + " ")
    return text.lower() if ignore_case else text


def exact_match(prediction: str, target: str, *, ignore_case: bool = True, collapse_whitespace: bool = True,
                strip_punctuation: bool = False, numeric: bool = False) -> bool:
    """Normalised strings equal (see `normalize_answer`). With `numeric`, two answers that both parse as
    numbers (`parse_decimal`) match when their values are equal: "1,234" == "1234.0", "$5" == "5"."""
    if numeric:
        p, t = parse_decimal(prediction), parse_decimal(target)
        if p is not None and t is not None:
            return p == t
    kw = dict(ignore_case=ignore_case, collapse_whitespace=collapse_whitespace, strip_punctuation=strip_punctuation)
    return normalize_answer(prediction, **kw) == normalize_answer(target, **kw)


# ---------------------------------------------------------------------------------------------------------
# Numbers for analysis (more forgiving than ChartQA's float())

_SCALES = {
    "k": 3, "thousand": 3,
    "m": 6, "mn": 6, "million": 6,
    "b": 9, "bn": 9, "billion": 9,
    "t": 12, "tn": 12, "trillion": 12,
}
_NUMBER = re.compile(
    r"""(?P<sign1>[-+\u2212])?\s*(?P<currency>[$\u20ac\u00a3\u00a5])?\s*(?P<sign2>[-+\u2212])?
    (?P<mantissa>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)
    (?P<exponent>[eE][-+]?\d{1,3})?
    \s*(?P<suffix>%|percent|[a-zA-Z]+)?""",
    re.VERBOSE | re.ASCII,
)
_CONTEXT = decimal.Context(prec=200)


def parse_decimal(text: str) -> Decimal | None:
    """The number written in `text` as an exact Decimal, or None.

    The whole string (surrounding whitespace aside) must be one number:
    - optional sign (+, -, Unicode minus) before or after an optional currency symbol ($, EUR, GBP, JPY signs):
      "-3.5", "$12", "-$12", "$-12";
    - digits with an optional '.' fraction (".5", "12." too); thousands separators only as ',' in valid groups
      of three ("1,234,567"; "1,23" and the European "12,5" are rejected, not guessed);
    - an optional exponent "1e3";
    - an optional suffix: '%' or "percent" (dropped: "45%" is 45, the number as written, not 0.45), or a
      scale word, case-insensitive: k / thousand (1e3), m / mn / million (1e6), b / bn / billion (1e9),
      t / tn / trillion (1e12): "1.5k" is 1500, "12 million" is 12000000. Other suffixes ("12 apples") -> None.
    Non-finite values ("inf", "nan", or an exponent that overflows a float) give None.
    """
    m = _NUMBER.fullmatch(text.strip())
    if m is None or (m["sign1"] and m["sign2"]):
        return None
    suffix = (m["suffix"] or "").lower()
    if suffix not in ("", "%", "percent") and suffix not in _SCALES:
        return None
    value = Decimal(m["mantissa"].replace(",", "") + (m["exponent"] or ""))
    if suffix in _SCALES:
        value = value.scaleb(_SCALES[suffix], _CONTEXT)
    if (m["sign1"] or m["sign2"] or "+") in "-\u2212":
        value = value.copy_negate()
    if not math.isfinite(float(value)):
        return None
    return value


# ---------------------------------------------------------------------------------------------------------
# Final numbers of generated solutions (text tasks)

RELATIVE_TOLERANCES = (0.0, 1e-3, 1e-2, 5e-2)  # the tolerances the text tasks report
# a number in running text: optional sign (not a binary minus: no word character or ')' before it),
# optional '$', digits with ',' thousands groups or without, optional fraction; never inside a longer number
# (ASCII digits; one touching any other Unicode digit, as in "1２", is no number)
_TEXT_NUMBER = re.compile(
    r"(?:(?<![\w)])(?P<sign>[-\u2212]))?(?:\$\s?)?"
    r"(?<![\d.,])(?P<number>(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+)(?!\d|,\d)",
)
_HASHES = re.compile(r"####")
_ANSWER_IS = re.compile(r"the\s+(?:final\s+)?answer\s+is", re.IGNORECASE)


def _numbers(text: str, start: int = 0) -> list[str]:
    found = []
    for m in _TEXT_NUMBER.finditer(text, start):
        sign = "-" if m["sign"] else ""
        found.append(sign + m["number"].replace(",", ""))
    return found


def extract_final_number(text: str) -> str | None:
    """The final answer of a generated solution, GSM8K convention, as a plain number string, or None.

    The first number after the last "####" if one follows it; else the first number after the last
    "The answer is" (or "The final answer is", any case) if one follows it; else the last number of the
    text. Numbers may carry a sign, a "$", ',' thousands separators in groups of three and a fraction;
    the result drops '$' and ',' ("$1,234." -> "1234", "-5" stays "-5", a Unicode minus becomes '-',
    "1234.0" stays "1234.0"). A '-' right after a word character or ')', or followed by a space, is no
    sign ("10-5" -> "5", "- 5" -> "5"); "1/2" gives "2", "3.5." gives "3.5"; commas that do not group
    by three ("12,5", "1,2345") leave those digits unread rather than guessed.
    """
    for anchor in (_HASHES, _ANSWER_IS):
        marks = list(anchor.finditer(text))
        after = _numbers(text, marks[-1].end()) if marks else []
        if after:
            return after[0]
    numbers = _numbers(text)
    return numbers[-1] if numbers else None


def _final_target(target: str) -> Decimal:
    value = parse_decimal(target)
    if value is None:
        raise ValueError(f"target {target!r} is not a number")
    return value


def final_number_match(prediction: str, target: str) -> bool:
    """The final number of `prediction` (`extract_final_number`) equals the target's value: "1,234",
    "1234" and "1234.0" all match a target "1234". False when the prediction holds no number; ValueError
    when the target is not a number (`parse_decimal`)."""
    t = _final_target(target)
    p = extract_final_number(prediction)
    return p is not None and Decimal(p) == t


def final_number_within(prediction: str, target: str, tolerance: float) -> bool:
    """|p - t| <= tolerance * |t| for the prediction's final number p and the target's value t, in exact
    decimal arithmetic (tolerance 0 is `final_number_match`; a zero target needs p == 0). False when the
    prediction holds no number; ValueError when the target is not a number or the tolerance is negative."""
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    t = _final_target(target)
    p = extract_final_number(prediction)
    return p is not None and abs(Decimal(p) - t) <= Decimal(str(tolerance)) * abs(t)


# ---------------------------------------------------------------------------------------------------------
# Clocks


class ClockTime(NamedTuple):
    """A clock reading: hour 0..23 (am/pm already applied), minute 0..59, second 0..59 or None."""

    hour: int
    minute: int
    second: int | None = None

    def dial_minutes(self, with_seconds: bool = True) -> float:
        """Position on the 12-hour dial in minutes after 12:00, in [0, 720)."""
        pos = (self.hour % 12) * 60 + self.minute
        if with_seconds and self.second is not None:
            pos += self.second / 60
        return float(pos)


_TIME = re.compile(
    r"(?<![\d:])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])(?:\s*([ap])\.?\s?m\.?(?![a-z]))?", re.IGNORECASE | re.ASCII
)


def parse_time(text: str, *, whole: bool = False) -> ClockTime | None:
    """The first valid time "H:MM", "HH:MM" or "H:MM:SS" in `text`, with optional am/pm ("3:15 pm",
    "3:15PM", "3:15 p.m."), or None. Hours 0..23 without am/pm, 0..12 with it (12 am is 0, 12 pm is 12);
    minutes and seconds 0..59; out-of-range candidates are skipped. With `whole`, the stripped text must
    be exactly one time."""
    matches = [_TIME.fullmatch(text.strip())] if whole else _TIME.finditer(text)
    for m in matches:
        if m is None:
            continue
        hour, minute = int(m[1]), int(m[2])
        second = int(m[3]) if m[3] is not None else None
        if minute > 59 or (second is not None and second > 59):
            continue
        if m[4]:
            if hour > 12:
                continue
            hour = hour % 12 + (12 if m[4].lower() == "p" else 0)
        elif hour > 23:
            continue
        return ClockTime(hour, minute, second)
    return None


def _target_time(target: str) -> ClockTime:
    t = parse_time(target)
    if t is None:
        raise ValueError(f"clock target {target!r} holds no time")
    return t


def dial_gap(a: ClockTime, b: ClockTime) -> float:
    """Circular distance in minutes on the 12-hour dial; seconds count only when both readings have them."""
    both = a.second is not None and b.second is not None
    d = abs(a.dial_minutes(both) - b.dial_minutes(both)) % 720.0
    return min(d, 720.0 - d)


def clock_time_gap(prediction: str, target: str) -> float | None:
    """Minutes between the two readings on the 12-hour dial, circular (11:58 vs 12:03 -> 5.0, 1:00 vs
    13:00 -> 0.0); seconds count when both have them. None when the prediction holds no time; ValueError
    when the target holds none."""
    t = _target_time(target)
    p = parse_time(prediction)
    return None if p is None else dial_gap(p, t)


def readings_match(prediction: ClockTime, target: ClockTime) -> bool:
    """Same reading on the 12-hour dial: hour mod 12 and minute equal, and, when the target has seconds,
    the prediction has the same seconds (a prediction's seconds are ignored when the target has none)."""
    if prediction.hour % 12 != target.hour % 12 or prediction.minute != target.minute:
        return False
    return target.second is None or prediction.second == target.second


def clock_exact(prediction: str, target: str) -> bool:
    """Exact time on the 12-hour dial (`readings_match`); False when the prediction holds no time."""
    t, p = _target_time(target), parse_time(prediction)
    return p is not None and readings_match(p, t)


def clock_hour_correct(prediction: str, target: str) -> bool:
    """Hour equal on the 12-hour dial (minutes ignored); False when the prediction holds no time."""
    t, p = _target_time(target), parse_time(prediction)
    return p is not None and p.hour % 12 == t.hour % 12


def clock_minute_correct(prediction: str, target: str) -> bool:
    """Minute equal (hour ignored); False when the prediction holds no time."""
    t, p = _target_time(target), parse_time(prediction)
    return p is not None and p.minute == t.minute
