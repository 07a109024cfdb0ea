"""Answer scoring: ChartQA relaxed accuracy, exact match, number parsing for analysis, clock metrics, the
final-number metrics of the text tasks (GSM8K, SVAMP, DeepMind Mathematics, arithmetic), and points and
boxes of grounding answers (parsing, IoU, point-in-box, corner and centre errors).

Pure string functions; every metric takes `(prediction, target)` in that order.

One rule for digits, shared with training (`numeric.NumericVocab`) and the analysis: a number is written
in ASCII digits 0-9. Full-width ("１２"), Arabic-Indic ("١٢") and other Unicode digits are text: no
SMMD term in training, no number here (relaxed accuracy compares such answers as strings, although
Python's float() would read them), non-numeric in the analysis.
"""

from __future__ import annotations

import decimal
import json
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


def clock_within_minutes(prediction: str, target: str, minutes: float = 1.0) -> bool:
    """Within `minutes` of the target on the 12-hour dial, circular (It's About Time's top_1 at 1:
    11:59 vs 12:00 counts); False when the prediction holds no time."""
    gap = clock_time_gap(prediction, target)
    return gap is not None and gap <= minutes


def clock_minute_within(prediction: str, target: str, minutes: int = 1) -> bool:
    """Minute hand alone within `minutes`, wrapping at the hour (It's About Time's top_1_min at 1: 59 vs 0
    counts); False when the prediction holds no time."""
    t, p = _target_time(target), parse_time(prediction)
    if p is None:
        return False
    d = abs(p.minute - t.minute) % 60
    return min(d, 60 - d) <= minutes


# ---------------------------------------------------------------------------------------------------------
# Grounding: points and boxes

GROUNDING_KEYS = {"point": "point_2d", "box": "bbox_2d"}  # the JSON key of each question kind (Qwen VL)
_GROUNDING_SIZES = {"point": 2, "box": 4}
IOU_THRESHOLD = 0.5
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)\n?[ \t]*```", re.DOTALL)
_COORD = r"\s*(-?\d+(?:\.\d+)?)\s*"
# Qwen2-VL's box text once its special tokens are decoded away: an optional label, then (x1,y1),(x2,y2);
# a point is one pair. The label holds no digit or bracket, so nothing is read from a mangled answer.
_LABEL = r"[^\d(){}\[\]<>]*"
_PAIR_TEXT = {
    "point": re.compile(rf"{_LABEL}\({_COORD},{_COORD}\)\s*\.?", re.ASCII),
    "box": re.compile(rf"{_LABEL}\({_COORD},{_COORD}\)\s*,\s*\({_COORD},{_COORD}\)\s*\.?", re.ASCII),
}
_QWEN2_TOKENS = re.compile(r"<\|(?:object_ref_start|object_ref_end|box_start|box_end|quad_start|quad_end)\|>")


def _json_answer(text: str):
    """The JSON value an answer holds, or None: the whole text, else the text inside a ``` fence, else the
    span from the first '{' or '[' to the last '}' or ']' (an answer inside a sentence)."""
    candidates = [text]
    fenced = _FENCE.search(text)
    if fenced:
        candidates.append(fenced[1])
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    end = max(text.rfind("}"), text.rfind("]"))
    if starts and end > min(starts):
        candidates.append(text[min(starts):end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:  # not JSON (or an integer past Python's digit limit)
            continue
    return None


def _coordinates(value, size: int) -> tuple[float, ...] | None:
    """`value` as `size` finite numbers (JSON numbers, not booleans or strings), or None."""
    if not isinstance(value, list) or len(value) != size:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return None
    coords = tuple(float(v) for v in value)
    return coords if all(math.isfinite(v) for v in coords) else None


def _valid(task: str, coords: tuple[float, ...] | None) -> tuple[float, ...] | None:
    if coords is not None and task == "box" and (coords[2] < coords[0] or coords[3] < coords[1]):
        return None  # corners swapped: no box
    return coords


def parse_grounding(text: str, task: str) -> tuple[float, ...] | None:
    """The point (x, y) or box (x1, y1, x2, y2) a grounding answer gives, as floats, or None.

    `task` is "point" or "box". Accepted, surrounding whitespace aside:
    - JSON as the Qwen VL families write it: {"point_2d": [x, y], ...} or {"bbox_2d": [x1, y1, x2, y2], ...}
      (other keys such as "label" ignored), or a list holding exactly one such object; the JSON may sit in a
      ``` fence or inside a sentence ("The box is {...}.");
    - a bare JSON list of the coordinates: [x, y] or [x1, y1, x2, y2];
    - Qwen2-VL's box text: (x1,y1),(x2,y2), or (x, y) for a point, after an optional label, with or
      without its special tokens (<|box_start|>, <|object_ref_start|>, ...).
    Strict otherwise: text that is not one of these (truncated JSON such as '{"bbox_2d": [1, 2, 3, 4]',
    the wrong key for the task, the wrong number of coordinates, strings or booleans for numbers, several
    objects, non-finite values) gives None, and so does a box whose x2 < x1 or y2 < y1.
    """
    if task not in GROUNDING_KEYS:
        raise ValueError(f"task must be one of {', '.join(GROUNDING_KEYS)}, got {task!r}")
    text = text.strip()
    value = _json_answer(text)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        value = value[0] if len(value) == 1 else None
    if isinstance(value, dict):
        return _valid(task, _coordinates(value.get(GROUNDING_KEYS[task]), _GROUNDING_SIZES[task]))
    if isinstance(value, list):
        return _valid(task, _coordinates(value, _GROUNDING_SIZES[task]))
    if value is not None:
        return None
    m = _PAIR_TEXT[task].fullmatch(_QWEN2_TOKENS.sub("", text).strip())
    return None if m is None else _valid(task, tuple(float(g) for g in m.groups()))


def grounding_answer(target: str) -> tuple[str, tuple[float, ...]] | None:
    """(task, coordinates) of an answer in the JSON form {"point_2d": ...} / {"bbox_2d": ...} (the
    key says the task; `parse_grounding`'s rules), or None when it is not one."""
    value = _json_answer(target.strip())
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        return None
    found = [task for task, key in GROUNDING_KEYS.items() if key in value]
    if len(found) != 1:
        return None
    coords = parse_grounding(target, found[0])
    return None if coords is None else (found[0], coords)


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two boxes [x1, y1, x2, y2] (x2 >= x1, y2 >= y1). Two boxes without area
    have IoU 1 when they are the same box, else 0."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(0.0, w) * max(0.0, h)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    if union <= 0:
        return float(tuple(a) == tuple(b))
    return inter / union


def corner_error(a: Sequence[float], b: Sequence[float]) -> float:
    """Mean Euclidean distance between the corresponding corners (x1, y1) and (x2, y2) of two boxes."""
    return (math.dist(a[:2], b[:2]) + math.dist(a[2:], b[2:])) / 2


def point_in_box(point: Sequence[float], box: Sequence[float]) -> bool:
    """x1 <= x <= x2 and y1 <= y <= y2 (edges inside)."""
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


def grounding_scores(prediction: str, target: str, *, task: str | None = None,
                     target_box: Sequence[float] | None = None, target_point: Sequence[float] | None = None) -> dict:
    """Scores of one grounding answer, in the answer's coordinates (pixels of the resized image, or 0..1000).

    The task (point | box) and the target geometry come from the keywords when given (a reader's meta),
    else from the target text (`grounding_answer`): for a box question the target box, for a point
    question the target point and, for point_in_box, the object's box (`target_box`; without it
    point_in_box is None). Returns, with `no_valid_answer` 1.0 when `parse_grounding` finds nothing:
    - box: iou (0 for no valid answer), iou_at_0.5 (iou >= IOU_THRESHOLD), corner_error_px (None for no
      valid answer);
    - point: point_in_box (0 for no valid answer), centre_error_px (distance to the target point; None
      for no valid answer).
    ValueError when the target gives no task or geometry.
    """
    parsed = grounding_answer(target)
    if task is None:
        if parsed is None:
            raise ValueError(f"grounding target {target!r} holds no point_2d or bbox_2d answer")
        task = parsed[0]
    if task not in GROUNDING_KEYS:
        raise ValueError(f"grounding task must be one of {', '.join(GROUNDING_KEYS)}, got {task!r}")
    own = parsed[1] if parsed is not None and parsed[0] == task else None
    truth = target_box if task == "box" else target_point
    truth = tuple(float(v) for v in truth) if truth is not None else own
    if truth is None:
        raise ValueError(f"grounding target {target!r} gives no {task} to score against")
    pred = parse_grounding(prediction, task)
    scores: dict = {"no_valid_answer": float(pred is None)}
    if task == "box":
        iou = 0.0 if pred is None else box_iou(pred, truth)
        scores.update(iou=iou, **{f"iou_at_{IOU_THRESHOLD:g}": float(iou >= IOU_THRESHOLD)},
                      corner_error_px=None if pred is None else corner_error(pred, truth))
    else:
        inside = None if target_box is None else float(pred is not None and point_in_box(pred, target_box))
        scores.update(point_in_box=inside, centre_error_px=None if pred is None else math.dist(pred, truth))
    return scores
