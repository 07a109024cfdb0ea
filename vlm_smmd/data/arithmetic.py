"""Reader of arithmetic datasets written by `data-synth arithmetic`.

Layout: `{root}/{split}.jsonl`, one object a line
`{"id", "question", "answer", "operation", "operands": [a, b], "split"}`, next to `{root}/generation.json`
(the writer's arguments). Answers are exact canonical strings and are kept exactly as written (a
fixed-point answer such as "1.50" keeps its places); one that is not a plain decimal number is a
malformed record, as is a line whose "split" differs from the file's.
"""

from __future__ import annotations

from pathlib import Path

from .records import JsonLines, check_problem, finish, require
from .sample import Sample, SkipLog, check_on_error

SOURCE = "arithmetic"


class ArithmeticJsonl(JsonLines):
    source = SOURCE

    def __init__(self, path: Path, split: str):
        super().__init__(path, SkipLog(SOURCE))
        self.split = split

    def _from_json(self, obj, lineno, where):
        ident = require(obj, "id", (str, int), where)
        question = require(obj, "question", str, where)
        answer = require(obj, "answer", str, where)
        operation = require(obj, "operation", str, where)
        operands = require(obj, "operands", list, where)
        split = require(obj, "split", str, where, optional=True)
        check_problem(where, question, answer, split, self.path, self.split)
        meta = {"split": self.split, "final_answer": answer, "operation": operation, "operands": operands,
                "record": lineno - 1}
        return Sample(image=None, question=question, answer=answer, source=SOURCE, id=str(ident), meta=meta)


def read_arithmetic(root, split: str, on_error: str = "raise", *, max_records: int | None = None) -> ArithmeticJsonl:
    """`root/{split}.jsonl` as a lazy sequence of text-only Samples, in file order: question, answer (as
    written), source "arithmetic", id the record's id, meta split, final_answer, operation, operands,
    record (the 0-based line). Skipped records (on_error="skip"): `.skipped`, `.skip_log`."""
    check_on_error(on_error)
    root = Path(root)
    path = root / f"{split}.jsonl"
    if not path.is_file():
        found = sorted(p.stem for p in root.glob("*.jsonl")) if root.is_dir() else []
        raise FileNotFoundError(f"arithmetic: {path} does not exist (splits found in {root}: "
                                f"{', '.join(found) or 'none'})")
    dataset = ArithmeticJsonl(path, split)
    dataset.scan(on_error, max_records)
    return finish(dataset, on_error)
