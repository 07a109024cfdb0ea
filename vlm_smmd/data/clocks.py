"""Reader of clock datasets written by `data-synth clocks` (an imagefolder per split)."""

from __future__ import annotations

import warnings
from pathlib import Path

from .records import SampleList, duplicate_note, read_imagefolder
from .sample import DataError, Sample, resolve_in_root

SOURCE = "clocks"
_REQUIRED = ("file_name", "question", "answer")


def read_clocks(root, split: str, on_error: str = "raise") -> SampleList:
    """Samples of `root/split/metadata.jsonl`, in file order.

    Sample: image = path of the PNG (opened lazily), question, answer = the metadata answer string
    ("3:07"), source "clocks", id = the image's file stem, meta = the row's other fields (hour, minute,
    second, index, render_seed and the style attributes). A malformed line (not UTF-8, not JSON, a required
    field missing or blank), a path outside the split folder or a missing image raises DataError naming
    the file and line; with on_error="skip" such records are skipped, counted and reported once.
    Duplicated records (an id seen before, or the image file and answer of an earlier record) are kept
    and counted in one warning line.
    """
    samples = read_imagefolder(root, split, on_error, SOURCE, _REQUIRED, _sample)
    note = duplicate_note(samples, {"an id seen before": lambda s: s.id,
                                    "the image and answer of an earlier one": lambda s: (s.image, s.answer)},
                          lambda s: f"record {s.id!r} ({s.image})")
    if note:
        warnings.warn(f"{SOURCE}: {Path(root) / split / 'metadata.jsonl'}: {note}", stacklevel=2)
    return samples


def _sample(row: dict, where: str, split_dir: Path) -> Sample:
    """The Sample of metadata line `where` (`row`: its JSON object, the _REQUIRED strings checked)."""
    record = f"{where} ({row['file_name']})"
    path = resolve_in_root(split_dir, row["file_name"], record=record, source=SOURCE)
    if not path.is_file():
        raise DataError(f"{path}: image missing (record {record!r} of {SOURCE})")
    meta = {k: v for k, v in row.items() if k not in _REQUIRED}
    return Sample(image=str(path), question=row["question"], answer=row["answer"], source=SOURCE,
                  id=Path(row["file_name"]).stem, meta=meta)
