"""Reader of templated word problems written by `data-synth word-problems`.

Layout: `{root}/{split}.jsonl`, one object a line `{"id", "question", "answer", "equation", "operands",
"distractors", "template", "operations", "split"}`, next to `{root}/generation.json` (the writer's
arguments). The answer is kept exactly as written; one that is not a plain decimal number is a malformed
record, as is a line whose "split" differs from the file's, or whose "operations" is not a non-empty list
of names.
"""

from __future__ import annotations

from pathlib import Path

from .records import JsonLines, check_problem, finish, require
from .sample import DataError, Sample, SkipLog, check_on_error

SOURCE = "word_problems"


class WordProblemsJsonl(JsonLines):
    source = SOURCE

    def __init__(self, path: Path, split: str):
        super().__init__(path, SkipLog(SOURCE))
        self.split = split

    def _from_json(self, obj, lineno, where):
        ident = require(obj, "id", (str, int), where)
        question = require(obj, "question", str, where)
        answer = require(obj, "answer", str, where)
        equation = require(obj, "equation", str, where)
        operands = require(obj, "operands", list, where)
        distractors = require(obj, "distractors", list, where, optional=True) or []
        template = require(obj, "template", str, where)
        operations = require(obj, "operations", list, where)
        split = require(obj, "split", str, where, optional=True)
        check_problem(where, question, answer, split, self.path, self.split)
        if not operations or not all(isinstance(op, str) and op for op in operations):
            raise DataError(f"{where}: malformed record: 'operations' should be a non-empty list of names")
        meta = {"split": self.split, "final_answer": answer, "template": template, "operations": operations,
                "steps": len(operations), "distractor": bool(distractors), "equation": equation,
                "operands": operands, "distractors": distractors, "record": lineno - 1}
        return Sample(image=None, question=question, answer=answer, source=SOURCE, id=str(ident), meta=meta)


def read_word_problems(root, split: str, on_error: str = "raise", *,
                       max_records: int | None = None) -> WordProblemsJsonl:
    """`root/{split}.jsonl` as a lazy sequence of text-only Samples, in file order: question, answer (as
    written), source "word_problems", id the record's id, meta split, final_answer, template, operations
    (in the order computed), steps (how many), distractor (whether a distractor sentence is in the
    question), equation, operands, distractors, record (the 0-based line). Skipped records
    (on_error="skip"): `.skipped`, `.skip_log`."""
    check_on_error(on_error)
    root = Path(root)
    path = root / f"{split}.jsonl"
    if not path.is_file():
        found = sorted(p.stem for p in root.glob("*.jsonl")) if root.is_dir() else []
        raise FileNotFoundError(f"word_problems: {path} does not exist (splits found in {root}: "
                                f"{', '.join(found) or 'none'})")
    dataset = WordProblemsJsonl(path, split)
    dataset.scan(on_error, max_records)
    return finish(dataset, on_error)
