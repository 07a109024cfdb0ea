"""DVQA reader (Kafle et al., CVPR 2018).

Layout (as released): `{root}/qa/{split}_qa.json` (or `{root}/{split}_qa.json`), a list of
{question_id, image, question, answer, template_id, answer_bbox}; images `{root}/images/{image}`
(`bar_{split}_xxxxxxxx.png`); splits train, val_easy, val_hard. Answers are strings: numbers denoting a
value are digits ("7"), counts are words ("three"); both are kept unchanged (numbers given as JSON numbers
are written with the digits of their JSON text, `records.format_number`). `meta["template_id"]` is kept as
given and `meta["question_type"]` is structure | data | reasoning, named by the template id (None if it
names none of them).

The file is streamed and indexed like PlotQA's (see `vlm_smmd.data.records`): records are parsed again on
access. Image checks: confinement to `images/` and existence at read time; PIL `verify()` too with
`verify_images=True`; otherwise an unreadable image raises DataError from `Sample.load_image()`.
"""

from __future__ import annotations

from pathlib import Path

from .records import NUMBER, ImageChecker, JsonRecordSamples, answer_text, finish, require
from .sample import Sample, SkipLog, check_on_error

QUESTION_TYPES = ("structure", "data", "reasoning")


def question_type(template_id: str | None) -> str | None:
    """'structure' | 'data' | 'reasoning' from a DVQA template id ("data", "reasoning_3", ...)."""
    if not template_id:
        return None
    tid = template_id.lower()
    return next((t for t in QUESTION_TYPES if tid.startswith(t)), None)


class DVQADataset(JsonRecordSamples):
    source = "dvqa"

    def __init__(self, path: Path, root: Path, split: str):
        super().__init__(path, SkipLog("dvqa"))
        self.root, self.split = root, split
        self.image_dir = root / "images"

    def _fields(self, obj, where):
        image = require(obj, "image", str, where)
        question = require(obj, "question", str, where)
        answer = answer_text(require(obj, "answer", (str, *NUMBER), where), where)
        template_id = require(obj, "template_id", str, where, optional=True)
        question_id = require(obj, "question_id", (int, str), where, optional=True)
        qtype = require(obj, "question_type", str, where, optional=True)  # the README's name for it
        bbox = obj.get("answer_bbox", obj.get("bbox_answer"))
        return image, question, answer, template_id, question_id, qtype, bbox

    def _image_ref(self, fields):
        return self.image_dir, fields[0]

    def _sample(self, fields, record_no, image):
        name, question, answer, template_id, question_id, qtype, bbox = fields
        ident = question_id if question_id is not None else f"#{record_no}"
        meta = {"split": self.split, "template_id": template_id,
                "question_type": question_type(template_id) or question_type(qtype),
                "question_id": question_id, "image_name": name, "answer_bbox": bbox, "answers": [answer],
                "record": record_no}
        return Sample(image=image, question=question, answer=answer, source="dvqa", id=f"{self.split}/{ident}",
                      meta=meta)


def read_dvqa(root, split: str, on_error: str = "raise", *, verify_images: bool = False,
              max_records: int | None = None) -> DVQADataset:
    """DVQA `split` as a lazy sequence of Samples; skipped records in `.skipped` and `.skip_log`."""
    check_on_error(on_error)
    root = Path(root)
    candidates = [root / "qa" / f"{split}_qa.json", root / f"{split}_qa.json"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise FileNotFoundError(f"DVQA: none of {', '.join(map(str, candidates))} exists")
    dataset = DVQADataset(path, root, split)
    dataset.scan(None, on_error, ImageChecker(verify_images), max_records)
    return finish(dataset, on_error)
