"""It's About Time (Yang et al., CVPR 2022): the published evaluation CSVs of real clock photos.

Layout: `root/` holds any of `coco_final.csv`, `openimg_final.csv`, `movies_final.csv` (columns img_id,
file_name, bbox_gt, hour, minute, bbox_det; the movies file has no bbox_gt), and the images they name,
beside the CSVs or under `root/images/`. Only the labels are published: the user downloads the COCO and
OpenImages images. Boxes are [x, y, w, h] in pixels; bbox_gt is a list of boxes; hours are 1..12.

Every CSV is the `test` split; each row is one Sample whose image is the photo cropped as the published
evaluation crops it (`crop_box`: the detector box with a 0.2 context margin, made square, clipped to the
image; `box="gt"` takes bbox_gt's first box instead). The answer is written as the clock task writes it
("12:05", "3:07"); meta["hour"] holds hour 12 as 0, as the published evaluation maps it (the clock metrics
read the dial mod 12, so "12:05" and "0:05" score alike). meta["subset"] names the CSV (coco, openimg,
movies), so eval breaks its figures down by it.

A row whose image is missing is no error (the user may hold only some of the images): it is counted and
named in `.coverage` ({"rows", "present", "missing", "missing_examples", "skipped"}), which eval writes to
metrics.json and prints as "n of N rows present". Malformed rows (a box not four numbers, a non-positive
width or height, an hour outside 1..12, a minute outside 0..59, a blank file name or one leaving the root)
raise a DataError naming the file and line, or are skipped and counted with on_error="skip".
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from .records import SampleList
from .sample import DataError, Sample, SkipLog, check_on_error, is_blank, resolve_in_root

SOURCE = "itsabouttime"
FILES = {"coco": "coco_final.csv", "openimg": "openimg_final.csv", "movies": "movies_final.csv"}
COLUMNS = ("file_name", "hour", "minute", "bbox_det")
CONTEXT = 0.2  # the published evaluation's context margin, a fraction of the box
QUESTION = "What time does the clock show?"
BOXES = ("det", "gt")
EXAMPLES = 5  # missing images named in the coverage


def crop_box(box, width: int, height: int, margin: float = CONTEXT) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) pixel bounds of the crop of `box` = [x, y, w, h] in a width x height
    image, the published evaluation's geometry: the box grown by `margin` (left and top by margin * w,
    right and bottom by margin * h, as published), clipped to the image and truncated to integers; then a
    square of that region's longer side (halved with floor division, so an odd side loses a pixel) about its
    centre (floor of the mean of the integer bounds), clipped to the image again."""
    x, y, w, h = box
    left, right = int(max(0, x - margin * w)), int(min(width, x + w + margin * h))
    top, bottom = int(max(0, y - margin * w)), int(min(height, y + h + margin * h))
    half = max(bottom - top, right - left) // 2
    cx, cy = (left + right) // 2, (top + bottom) // 2
    return max(0, cx - half), max(0, cy - half), min(width, cx + half), min(height, cy + half)


@dataclass
class CroppedSample(Sample):
    """A Sample whose image file is cropped to `box` ([x, y, w, h]) by `crop_box` when loaded."""

    box: tuple = ()

    def load_image(self):
        img = super().load_image()
        left, top, right, bottom = crop_box(self.box, img.width, img.height)
        if right <= left or bottom <= top:
            raise DataError(f"{self.image}: malformed record: box {list(self.box)} lies outside the "
                            f"{img.width}x{img.height} image (record {self.id!r} of {self.source})")
        return img.crop((left, top, right, bottom))


class ItsAboutTimeSamples(SampleList):
    """The samples, their skips, and `coverage`: how many rows of the CSVs have their image here."""

    def __init__(self, samples, skip_log: SkipLog, coverage: dict):
        super().__init__(samples, skip_log)
        self.coverage = coverage


def read_itsabouttime(root, split: str = "test", *, on_error: str = "raise", box: str = "det"
                      ) -> ItsAboutTimeSamples:
    """Samples of every published CSV under `root`, in the order coco, openimg, movies, rows in file order
    (module docstring). `box`: "det" (bbox_det, the published evaluation) or "gt" (bbox_gt's first box;
    the movies file has none, which is an error). DataError for a split other than "test", a root holding
    none of the CSVs, a CSV missing a column, and (on_error="raise") a malformed row."""
    check_on_error(on_error)
    if box not in BOXES:
        raise ValueError(f"box must be one of {', '.join(BOXES)}; got {box!r}")
    if split != "test":
        raise DataError(f"{root}: It's About Time has only the 'test' split, not {split!r}")
    root = Path(root)
    found = [(subset, root / name) for subset, name in FILES.items() if (root / name).is_file()]
    if not found:
        raise DataError(f"{root}: holds none of {', '.join(FILES.values())} (It's About Time's CSVs)")
    skip_log = SkipLog(SOURCE)
    samples, missing, rows = [], [], 0
    for subset, path in found:
        for lineno, row in _rows(path, box):
            rows += 1
            where = f"{path}:{lineno}"
            try:
                sample = _sample(row, where, root, subset, box)
            except DataError as e:
                if on_error == "raise":
                    raise
                skip_log.add(e)
                continue
            if sample is None:
                missing.append(row["file_name"])
            else:
                samples.append(sample)
    if on_error == "skip":
        skip_log.report()
    coverage = {"rows": rows, "present": len(samples), "missing": len(missing),
                "missing_examples": missing[:EXAMPLES], "skipped": skip_log.total,
                "files": [str(path) for _, path in found]}
    return ItsAboutTimeSamples(samples, skip_log, coverage)


def coverage_line(coverage: dict) -> str:
    """"n of N rows present" and, when some are not, what became of the others (for eval's report; the
    published-set readers, It's About Time and ClockBench, keep such a coverage)."""
    text = f"{coverage['present']} of {coverage['rows']} rows present"
    if coverage["missing"]:
        what = coverage.get("missing_what", "images missing")
        text += f"; {coverage['missing']} {what} (e.g. {', '.join(coverage['missing_examples'])})"
        if "missing_what" not in coverage:
            text += ": figures over a subset are not comparable with the published ones"
    if coverage["skipped"]:
        text += f"; {coverage['skipped']} malformed rows skipped"
    return text


def _rows(path: Path, box: str):
    """(line number, row dict) of each data row of one CSV; DataError for a missing column."""
    try:
        f = open(path, encoding="utf-8-sig", newline="")
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            need = COLUMNS + (("bbox_gt",) if box == "gt" else ())
            lacking = [c for c in need if header is None or c not in header]
            if lacking:
                what = " (box='gt' needs bbox_gt)" if lacking == ["bbox_gt"] else ""
                raise DataError(f"{path}: not an It's About Time CSV: missing columns {lacking}{what}")
            start = reader.line_num + 1
            for cells in reader:
                if any(c.strip() for c in cells):
                    yield start, dict(zip(header, cells))
                start = reader.line_num + 1
        except (csv.Error, UnicodeDecodeError) as e:
            raise DataError(f"{path}:{reader.line_num + 1}: malformed CSV ({e})") from None


def _sample(row: dict, where: str, root: Path, subset: str, box: str) -> CroppedSample | None:
    """The Sample of one row, or None when its image is not here; DataError for a malformed row."""
    def bad(what):
        return DataError(f"{where}: malformed record: {what}")

    file_name = row.get("file_name") or ""
    if is_blank(file_name):
        raise bad("blank file_name")
    hour, minute = _integer(row.get("hour"), "hour", 1, 12, bad), _integer(row.get("minute"), "minute", 0, 59, bad)
    if box == "gt":
        boxes = _json(row.get("bbox_gt"), "bbox_gt", bad)
        if not isinstance(boxes, list) or not boxes:
            raise bad(f"bbox_gt {row.get('bbox_gt')!r} is not a non-empty list of boxes")
        chosen = _box(boxes[0], "bbox_gt's first box", bad)
    else:
        chosen = _box(_json(row.get("bbox_det"), "bbox_det", bad), "bbox_det", bad)
    record = f"{where} ({file_name})"
    path = None
    for folder in (root, root / "images"):
        candidate = resolve_in_root(folder, file_name, record=record, source=SOURCE)
        if candidate.is_file():
            path = candidate
            break
    if path is None:
        return None
    img_id = (row.get("img_id") or "").strip()
    meta = {"split": "test", "subset": subset, "img_id": img_id, "file_name": file_name, "hour": hour % 12,
            "minute": minute, "box": list(chosen), "record": where}
    return CroppedSample(image=str(path), question=QUESTION, answer=f"{hour}:{minute:02d}", source=SOURCE,
                         id=f"{subset}/{img_id or file_name}", meta=meta, box=chosen)


def _integer(text, name, lo, hi, bad) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise bad(f"{name} {text!r} is not an integer") from None
    if not lo <= value <= hi:
        raise bad(f"{name} {value} is outside {lo}..{hi}")
    return value


def _json(text, name, bad):
    try:
        return json.loads(text or "")
    except ValueError:
        raise bad(f"{name} {text!r} is not a JSON list") from None


def _box(value, name, bad) -> tuple[float, float, float, float]:
    if (not isinstance(value, list) or len(value) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
        raise bad(f"{name} {value!r} is not four numbers [x, y, w, h]")
    x, y, w, h = (float(v) for v in value)
    if w <= 0 or h <= 0:
        raise bad(f"{name} {value!r} has a non-positive width or height")
    return x, y, w, h

