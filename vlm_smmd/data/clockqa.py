"""Published clock-reading sets in parquet: ClockQA (the clock subset of DateTimeQA, "Lost in Time", 2025) and
ClockBench's public clocks (10 of its 180, MIT).

Files: `{root}/{split}-*.parquet`, `{root}/data/{split}-*.parquet`, `{root}/{split}/*.parquet` or
`{root}/default/{split}/*.parquet` (the Hugging Face layouts). The image column is a struct with `bytes`
(the `datasets` Image feature) or plain binary; the bytes stay encoded until `load_image()`.

ClockQA columns (as the issue describes them; the public card was not at hand to check): image, question,
answer ("H:MM:SS", or "H:MM"), type (on-the-hour, black dial, Roman numerals, no second hand, arrow
hands, ...). The answer is kept as written, seconds included; `meta["type"]` breaks the figures down.

ClockBench columns (from public loaders of nmayorga7/clockbench; its only split is `train`): id, image,
question_time and target_time (a JSON string {"valid", "hours", "minutes", "seconds", ...}; minutes may be a
list of accepted values, seconds false where the clock has no second hand), and the shift / angle / zone
questions, which are no clock reading and are not read. A sample asks this tool's clock question (their
question asks for JSON, which no clock-reading fine-tune answers); their question is kept in
`meta["question_original"]`. The answer is "H:MM:SS" (seconds given) or "H:MM"; every accepted reading is
in `meta["answers"]` (eval scores against the nearest). A clock whose target says `"valid": false` (an
impossible clock) has no time to score: it is counted in `.coverage` and left out. `meta["type"]` is the id
without its trailing number ("white_circular_numbers_3" -> "white_circular_numbers").

A malformed row (null image bytes, a blank question, an answer or target that is no time) is a DataError
naming file and row, or a counted skip with on_error="skip".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .chartqa import EncodedImage, EncodedImageSample
from .records import SampleList
from .sample import DataError, SkipLog, check_on_error, is_blank

QUESTION = "What time does the clock show?"
EXAMPLES = 5
_TIME = re.compile(r"(\d{1,2}):([0-5]\d)(?::([0-5]\d))?")


class ParquetClockSamples(SampleList):
    """The samples, their skips and `coverage` (rows read, rows scored, rows left out and why)."""

    def __init__(self, samples, skip_log: SkipLog, coverage: dict):
        super().__init__(samples, skip_log)
        self.coverage = coverage


def parquet_files(root, split: str) -> list[Path]:
    """The parquet files of `split` under `root` (module docstring); DataError naming the splits found."""
    root = Path(root)
    for pattern in (f"{split}-*.parquet", f"data/{split}-*.parquet", f"{split}/*.parquet", f"default/{split}/*.parquet"):
        files = sorted(root.glob(pattern))
        if files:
            return files
    found = sorted({p.name.split("-")[0] if p.parent.name in (root.name, "data") else p.parent.name
                    for p in root.rglob("*.parquet")})
    raise DataError(f"{root}: no parquet files of split {split!r} (splits found: {', '.join(found) or 'none'})")


def _table(path: Path, columns: tuple[str, ...]):
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a file that is not parquet
        raise DataError(f"{path}: not a readable parquet file ({e})") from None
    missing = [c for c in columns if c not in pf.schema_arrow.names]
    if missing:
        raise DataError(f"{path}: missing columns {missing} (found {pf.schema_arrow.names})")
    return pf.read(columns=list(columns))


def _image_bytes(value, where: str) -> bytes:
    data = value.get("bytes") if isinstance(value, dict) else value
    if not isinstance(data, (bytes, bytearray)) or not data:
        raise DataError(f"{where}: image missing (null bytes)")
    return bytes(data)


def _answer(text, where: str) -> str:
    if not isinstance(text, str) or not _TIME.fullmatch(text.strip()):
        raise DataError(f"{where}: malformed record: answer {text!r} is not a time H:MM or H:MM:SS")
    hour = int(text.strip().split(":")[0])
    if hour > 23:
        raise DataError(f"{where}: malformed record: answer {text!r} has hour {hour} (0..23)")
    return text.strip()


def _read(root, split, on_error, source, columns, row_sample):
    """Rows of every file of `split` through `row_sample(row, where, key)` -> a Sample, or the name of a row
    left out (counted in the coverage); `key` names the row (split/file stem/row)."""
    check_on_error(on_error)
    skip_log = SkipLog(source)
    samples, left_out, rows = [], [], 0
    for path in parquet_files(root, split):
        table = _table(path, columns)
        for i, row in enumerate(table.to_pylist()):
            rows += 1
            where = f"row {i} of {path}"
            try:
                sample = row_sample(row, where, f"{split}/{path.stem}/{i}")
            except DataError as e:
                if on_error == "raise":
                    raise
                skip_log.add(e)
                continue
            if isinstance(sample, str):
                left_out.append(sample)
            else:
                samples.append(sample)
    if on_error == "skip":
        skip_log.report()
    coverage = {"rows": rows, "present": len(samples), "missing": len(left_out),
                "missing_examples": left_out[:EXAMPLES], "skipped": skip_log.total}
    return samples, skip_log, coverage


def read_clockqa(root, split: str = "test", *, on_error: str = "raise") -> ParquetClockSamples:
    """ClockQA's parquet rows of `split` as Samples (module docstring), in file and row order."""
    def sample(row, where, key):
        image = _image_bytes(row["image"], where)
        question = row["question"]
        if not isinstance(question, str) or is_blank(question):
            raise DataError(f"{where}: malformed record: blank question")
        answer = _answer(row["answer"], where)
        kind = row["type"] if isinstance(row["type"], str) and row["type"].strip() else None
        return EncodedImageSample(image=EncodedImage(image), question=question, answer=answer, source="clockqa",
                                  id=key, meta={"split": split, "type": kind}, origin=where)

    samples, skip_log, coverage = _read(root, split, on_error, "clockqa", ("image", "question", "answer", "type"),
                                        sample)
    return ParquetClockSamples(samples, skip_log, coverage)


def read_clockbench(root, split: str = "train", *, on_error: str = "raise") -> ParquetClockSamples:
    """ClockBench's time-reading rows of `split` as Samples (module docstring); impossible clocks are counted
    in `.coverage` and left out."""
    def sample(row, where, key):
        clock_id = row["id"]
        if not isinstance(clock_id, str) or is_blank(clock_id):
            raise DataError(f"{where}: malformed record: blank id")
        where = f"{where} ({clock_id})"
        try:
            target = json.loads(row["target_time"]) if isinstance(row["target_time"], str) else None
        except ValueError:
            target = None
        if not isinstance(target, dict) or not isinstance(target.get("valid"), bool):
            raise DataError(f"{where}: malformed record: target_time {row['target_time']!r} is not a JSON object "
                            "with 'valid'")
        if not target["valid"]:
            return clock_id  # an impossible clock: nothing to read
        answers = _readings(target, where)
        image = _image_bytes(row["image"], where)
        meta = {"split": split, "type": re.sub(r"_\d+$", "", clock_id), "answers": answers,
                "question_original": row["question_time"]}
        return EncodedImageSample(image=EncodedImage(image), question=QUESTION, answer=answers[0],
                                  source="clockbench", id=clock_id, meta=meta, origin=where)

    samples, skip_log, coverage = _read(root, split, on_error, "clockbench", ("id", "image", "question_time",
                                                                              "target_time"), sample)
    coverage["missing_what"] = "impossible clocks (valid: false) not scored"
    return ParquetClockSamples(samples, skip_log, coverage)


def _readings(target: dict, where: str) -> list[str]:
    """Every accepted "H:MM[:SS]" of a ClockBench target (minutes may be a list; seconds false: none)."""
    def values(key, lo, hi):
        value = target.get(key)
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi for v in items):
            raise DataError(f"{where}: malformed record: target {key} {value!r} is not an integer in {lo}..{hi} "
                            "or a list of them")
        return items

    hours, minutes = values("hours", 0, 23), values("minutes", 0, 59)
    seconds = [None] if target.get("seconds") in (None, False) else values("seconds", 0, 59)
    return [f"{h}:{m:02d}" + ("" if s is None else f":{s:02d}") for h in hours for m in minutes for s in seconds]
