"""Reader of grounding datasets written by `data-synth grounding` (an imagefolder per split; the row layout
is in `data_synth.grounding`'s docstring)."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

from data_synth.grounding_format import COORDS

from ..metrics import GROUNDING_KEYS, parse_grounding
from .records import SampleList, read_imagefolder
from .sample import DataError, Sample, resolve_in_root

SOURCE = "grounding"
_REQUIRED = ("file_name", "question", "answer")
_SIZES = ("width", "height", "resized_width", "resized_height")
# a grounding key's coordinate list ('"bbox_2d": [197, 175, 279, 257]'), and one number inside it
_KEYS = "|".join(map(re.escape, GROUNDING_KEYS.values()))
_COORD_LIST = re.compile(rf'"(?:{_KEYS})"\s*:\s*\[([^\[\]]*)\]')
_COORD_NUMBER = re.compile(r"\d+(?:\.\d+)?", re.ASCII)


def coordinate_spans(answer: str) -> tuple[tuple[int, int], ...]:
    """Character spans [start, end) of the coordinate numbers in a grounding answer, in text order: the
    numbers inside the list of every "point_2d" / "bbox_2d" key ('{"point_2d": [34, 21], "label": "object 2"}'
    -> ((14, 16), (18, 20))); not the "2" of the key, not a digit of a label. A minus sign is left out (it
    is no numeric token). For `Sample.numeric_spans`, so the aux loss sees the coordinates only."""
    return tuple((m.start() + found.start(1), m.end() + found.start(1))
                 for found in _COORD_LIST.finditer(answer) for m in _COORD_NUMBER.finditer(found[1]))


def read_grounding(root, split: str, on_error: str = "raise") -> SampleList:
    """Samples of `root/split/metadata.jsonl`, in file order.

    Sample: image = path of the PNG (opened lazily), question, answer = the metadata answer text
    ('{"bbox_2d": [197, 175, 279, 257], "label": "red triangle"}'), source "grounding", id = the image's
    file stem, meta = the row's other fields (task, coords, label, answer_coords, target, position, objects,
    sizes, ...) plus, in the answer's coordinates, `target_box` (the target's box scaled and rounded
    outward, as the writer rounds a box answer) and `target_point` (its centre scaled and rounded half up,
    as a point answer), so that scoring needs no parsing: for a box question target_box is the answer, for a
    point question target_point is, and target_box is the box a point must fall in. numeric_spans =
    `coordinate_spans(answer)`: the aux loss applies to the coordinate tokens only.

    A malformed line raises DataError naming the file and line: not UTF-8 or not JSON; file_name, question
    or answer missing or blank; task not point | box; coords not absolute | norm1000; a size not a positive
    integer; target.box or target.point not numbers (x2 >= x1, y2 >= y1); answer_coords not the answer
    text's coordinates, or not the target's geometry in the answer's convention. So does a path outside
    the split folder or a missing image. With on_error="skip" such records are skipped, counted and
    reported once.
    """
    return read_imagefolder(root, split, on_error, SOURCE, _REQUIRED, _sample)


def answer_scale(row: dict) -> tuple[Fraction, Fraction]:
    """(x, y) factors from original pixels to the answer's convention: resized / original for "absolute",
    1000 / side for "norm1000" (as the writer scales)."""
    if row["coords"] == "absolute":
        return Fraction(row["resized_width"], row["width"]), Fraction(row["resized_height"], row["height"])
    return Fraction(1000, row["width"]), Fraction(1000, row["height"])


def scaled_box(box, scale) -> list[int]:
    """A box in original pixels in the answer's integers: scaled, corners rounded outward."""
    (sx, sy), (x1, y1, x2, y2) = scale, (Fraction(v) for v in box)
    return [math.floor(x1 * sx), math.floor(y1 * sy), math.ceil(x2 * sx), math.ceil(y2 * sy)]


def scaled_point(point, scale) -> list[int]:
    """A point in original pixels in the answer's integers: scaled, rounded half up."""
    return [math.floor(Fraction(v) * s + Fraction(1, 2)) for v, s in zip(point, scale)]


def _numbers(value, size: int) -> bool:
    return isinstance(value, list) and len(value) == size and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)


def _geometry(row: dict, where: str) -> tuple[list[int], list[int]]:
    """(target_box, target_point) in the answer's coordinates; DataError for a field that does not fit."""
    def bad(what: str):
        return DataError(f"{where}: malformed record ({what})")

    if row.get("task") not in GROUNDING_KEYS:
        raise bad(f"'task' must be one of {', '.join(GROUNDING_KEYS)}, got {row.get('task')!r}")
    if row.get("coords") not in COORDS:
        raise bad(f"'coords' must be one of {', '.join(COORDS)}, got {row.get('coords')!r}")
    for key in _SIZES:
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad(f"{key!r} must be a positive integer, got {value!r}")
    target = row.get("target")
    box = target.get("box") if isinstance(target, dict) else None
    point = target.get("point") if isinstance(target, dict) else None
    if not _numbers(box, 4) or box[2] < box[0] or box[3] < box[1]:
        raise bad(f"'target.box' must be [x1, y1, x2, y2] with x2 >= x1 and y2 >= y1, got {box!r}")
    if not _numbers(point, 2):
        raise bad(f"'target.point' must be [x, y], got {point!r}")
    scale = answer_scale(row)
    target_box, target_point = scaled_box(box, scale), scaled_point(point, scale)
    answer = parse_grounding(row["answer"], row["task"])
    coords = row.get("answer_coords")
    if answer is None or not _numbers(coords, len(answer)) or list(answer) != coords:
        raise bad(f"'answer' {row['answer']!r} does not give the {row['task']} in 'answer_coords' {coords!r}")
    expected = target_box if row["task"] == "box" else target_point
    if coords != expected:
        raise bad(f"'answer_coords' {coords} is not the target's {row['task']} {expected} in {row['coords']} "
                  "coordinates")
    return target_box, target_point


def _sample(row: dict, where: str, split_dir: Path) -> Sample:
    """The Sample of metadata line `where` (`row`: its JSON object, the _REQUIRED strings checked)."""
    target_box, target_point = _geometry(row, where)
    record = f"{where} ({row['file_name']})"
    path = resolve_in_root(split_dir, row["file_name"], record=record, source=SOURCE)
    if not path.is_file():
        raise DataError(f"{path}: image missing (record {record!r} of {SOURCE})")
    meta = {k: v for k, v in row.items() if k not in _REQUIRED}
    meta.update(target_box=target_box, target_point=target_point)
    spans = coordinate_spans(row["answer"])
    if len(spans) != len(row["answer_coords"]):  # e.g. a second coordinate list hidden in the label
        raise DataError(f"{where}: malformed record ('answer' {row['answer']!r} holds {len(spans)} coordinate "
                        f"numbers, 'answer_coords' {len(row['answer_coords'])})")
    return Sample(image=str(path), question=row["question"], answer=row["answer"], source=SOURCE,
                  id=Path(row["file_name"]).stem, meta=meta, numeric_spans=spans)
