"""PlotQA reader.

Layout (as released): `{root}/{split}/qa_pairs_V1.json` or `qa_pairs_V2.json`, one object
`{"qa_pairs": [{image_index, question_string, answer, template, type, question_id, answer_bbox}, ...]}`,
images `{root}/{split}/png/{image_index}.png` (RGBA, composited on white by `Sample.load_image`).

V2 holds tens of millions of pairs, so the file is never loaded whole: one streaming pass
(`records.iter_json_array`) validates each record and keeps only its byte range (12 bytes a record);
`__getitem__` reads and parses that one record again. Memory stays O(records * 12 bytes) plus one read
buffer.

When images are checked: at read time every record's image path is confined to the dataset root and its
existence checked (one stat per distinct image); with `verify_images=True` each distinct image is also
opened once with PIL's `verify()` so unreadable files raise or are skipped at read time. Without it an
unreadable image surfaces as a DataError (naming file and record) when `Sample.load_image()` is called.
"""

from __future__ import annotations

from pathlib import Path

from .records import NUMBER, ImageChecker, JsonRecordSamples, answer_text, finish, require
from .sample import Sample, SkipLog, check_on_error

# ------------------------------------------------------------------------------------------------ PlotQA


class PlotQADataset(JsonRecordSamples):
    source = "plotqa"

    def __init__(self, path: Path, root: Path, split: str, round_digits: int | None):
        super().__init__(path, SkipLog("plotqa"))
        self.root, self.split, self.round_digits = root, split, round_digits
        self.image_dir = root / split / "png"

    def _fields(self, obj, where):
        image_index = require(obj, "image_index", (int, str), where)
        question = require(obj, "question_string", str, where)
        raw = require(obj, "answer", (str, *NUMBER), where)
        answer = answer_text(raw, where, self.round_digits)
        template = require(obj, "template", str, where, optional=True)
        qtype = require(obj, "type", str, where, optional=True)
        question_id = require(obj, "question_id", (int, str), where, optional=True)
        return image_index, question, answer, raw, template, qtype, question_id

    def _image_ref(self, fields):
        return self.image_dir, f"{fields[0]}.png"

    def _sample(self, fields, record_no, image):
        image_index, question, answer, raw, template, qtype, question_id = fields
        ident = question_id if question_id is not None else f"#{record_no}"
        meta = {"split": self.split, "template": template, "type": qtype, "question_id": question_id,
                "image_index": image_index, "raw_answer": raw, "answers": [answer], "record": record_no}
        return Sample(image=image, question=question, answer=answer, source="plotqa",
                      id=f"{self.split}/{ident}", meta=meta)


def read_plotqa(root, split: str, on_error: str = "raise", *, version: str | None = None,
                round_digits: int | None = None, verify_images: bool = False,
                max_records: int | None = None) -> PlotQADataset:
    """PlotQA question-answer pairs of `split` as a lazy sequence of Samples.

    `version` "V1" or "V2" picks `qa_pairs_{version}.json`; None takes V2 when present, else V1.
    Numeric answers become strings with the digits of their JSON text (see `format_number`: nothing
    rounded, trailing zeros dropped), rounded half-up to `round_digits` decimals only when given; the JSON
    value is kept in `meta["raw_answer"]` (a Decimal for a number with a fraction or exponent). `max_records` stops
    the scan after that many usable records (V2 is large). Skipped records: `dataset.skipped`, `.skip_log`.
    """
    check_on_error(on_error)
    root = Path(root)
    split_dir = root / split
    if version is None:
        candidates = [split_dir / "qa_pairs_V2.json", split_dir / "qa_pairs_V1.json"]
    elif version in ("V1", "V2"):
        candidates = [split_dir / f"qa_pairs_{version}.json"]
    else:
        raise ValueError(f"version must be 'V1', 'V2' or None, got {version!r}")
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise FileNotFoundError(f"PlotQA: none of {', '.join(map(str, candidates))} exists")
    dataset = PlotQADataset(path, root, split, round_digits)
    dataset.scan("qa_pairs", on_error, ImageChecker(verify_images), max_records)
    return finish(dataset, on_error)
