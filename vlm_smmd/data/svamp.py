"""SVAMP reader (Patel et al., NAACL 2021): 1000 one-unknown arithmetic word problems.

Layout (github.com/arkilpatel/SVAMP): `{root}/SVAMP.json`, a JSON list of
`{"ID", "Body", "Question", "Equation", "Answer", "Type"}`. The question is Body + " " + Question (each
stripped); Answer is a JSON number, written as the target with the digits of its JSON text (8.0 -> "8",
0.5 -> "0.5": trailing zeros dropped, nothing rounded; see `records.format_number`). SVAMP is a challenge
set with no train/test division: split "all" is the whole file, and "test" names the same 1000 problems
(SVAMP is evaluated whole); other splits are refused.
"""

from __future__ import annotations

from pathlib import Path

from .records import NUMBER, SampleList, answer_text, finish, parse_json, require
from .sample import DataError, Sample, SkipLog, check_on_error

SOURCE = "svamp"
SPLITS = ("all", "test")


def _sample(obj, split: str, index: int, where: str) -> Sample:
    if not isinstance(obj, dict):
        raise DataError(f"{where}: malformed record: expected an object, got {type(obj).__name__}")
    body = require(obj, "Body", str, where)
    question = require(obj, "Question", str, where)
    if not question.strip():
        raise DataError(f"{where}: malformed record: empty 'Question'")
    raw = require(obj, "Answer", NUMBER, where)
    answer = answer_text(raw, where)
    ident = require(obj, "ID", (str, int), where, optional=True)
    meta = {"split": split, "final_answer": answer, "raw_answer": raw, "svamp_id": ident,
            "equation": require(obj, "Equation", str, where, optional=True),
            "type": require(obj, "Type", str, where, optional=True), "record": index}
    text = f"{body.strip()} {question.strip()}".strip()
    return Sample(image=None, question=text, answer=answer, source=SOURCE,
                  id=f"{split}/{ident if ident is not None else f'#{index}'}", meta=meta)


def read_svamp(root, split: str = "all", on_error: str = "raise") -> SampleList:
    """SVAMP as a list of text-only Samples (module docstring): answer the canonical number, source
    "svamp", id "{split}/{ID}", meta split, final_answer, raw_answer (the JSON number), svamp_id,
    equation, type, record. Skipped records (on_error="skip"): `.skipped`, `.skip_log`."""
    check_on_error(on_error)
    if split not in SPLITS:
        raise ValueError(f"SVAMP has no split {split!r}: it is one test set; use 'all' (or 'test', the same)")
    path = Path(root) / "SVAMP.json"
    if not path.is_file():
        raise FileNotFoundError(f"SVAMP: {path} does not exist (root is the arkilpatel/SVAMP folder)")
    try:
        with open(path, encoding="utf-8-sig") as f:
            records = parse_json(f.read())
    except ValueError as e:  # not JSON, not UTF-8, or an integer past Python's digit limit
        raise DataError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(records, list):
        raise DataError(f"{path}: expected a JSON list of problems, got {type(records).__name__}")
    skip_log, samples = SkipLog(SOURCE), []
    for index, obj in enumerate(records):
        try:
            samples.append(_sample(obj, split, index, f"record #{index} in {path}"))
        except DataError as e:
            if on_error == "raise":
                raise
            skip_log.add(e)
    return finish(SampleList(samples, skip_log), on_error)
