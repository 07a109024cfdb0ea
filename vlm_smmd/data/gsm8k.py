"""GSM8K reader (Cobbe et al., 2021): grade-school math word problems with worked solutions.

Layouts:
- github.com/openai/grade-school-math: `{root}/{split}.jsonl` (the repo's `grade_school_math/data/`:
  train, test, and train_socratic / test_socratic), one `{"question", "answer"}` object a line;
- Hugging Face (openai/gsm8k): `{root}/main/{split}-*.parquet`, or `{root}/{split}-*.parquet` (so
  `root=".../gsm8k/socratic"` reads the socratic variant), columns question and answer.

`answer` is the worked solution; its last line is "#### N", the final number, which may have thousands
separators ("#### 1,234" is 1234). The sample's target is either the final number alone
(`target="final"`, default) or the solution (`target="rationale"`): its lines with the calculator
annotations removed ("48/2 = <<48/2=24>>24 clips" -> "48/2 = 24 clips": they are tool calls, not
reasoning a model writes) and the last line written "#### N" with N canonical, so the target ends in
exactly the final number. Either way `meta["final_answer"]` holds that number ("1234"), which evaluation
scores against, and `meta["solution"]` the solution as published. A record without a "####" line, or whose
final answer is not one number, is malformed.
"""

from __future__ import annotations

import re
from pathlib import Path

from .records import JsonLines, SampleList, finish, number_text, require
from .sample import DataError, Sample, SkipLog, check_on_error

SOURCE = "gsm8k"
TARGETS = ("final", "rationale")
_ANNOTATION = re.compile(r"<<[^<>\n]*>>")


def parse_solution(solution: str, where: str) -> tuple[str, str]:
    """(worked steps without calculator annotations, canonical final number) of a GSM8K answer text."""
    steps, sep, final = solution.rpartition("####")
    if not sep:
        raise DataError(f"{where}: malformed record: no '####' line with the final answer")
    number = number_text(final, thousands=True)
    if number is None:
        raise DataError(f"{where}: malformed record: the final answer {final.strip()!r} after '####' is not a number")
    return _ANNOTATION.sub("", steps).rstrip(), number


def _sample(question, solution, split: str, index: int, target: str, where: str) -> Sample:
    fields = {"question": question, "answer": solution}
    question = require(fields, "question", str, where)
    solution = require(fields, "answer", str, where)
    if not question.strip():
        raise DataError(f"{where}: malformed record: empty question")
    steps, final = parse_solution(solution, where)
    answer = final if target == "final" else (f"{steps}\n#### {final}" if steps else f"#### {final}")
    meta = {"split": split, "final_answer": final, "solution": solution, "target": target, "record": index}
    return Sample(image=None, question=question, answer=answer, source=SOURCE, id=f"{split}/{index}", meta=meta)


class GSM8KJsonl(JsonLines):
    source = SOURCE

    def __init__(self, path: Path, split: str, target: str):
        super().__init__(path, SkipLog(SOURCE))
        self.split, self.target = split, target

    def _from_json(self, obj, lineno, where):
        missing = [k for k in ("question", "answer") if k not in obj]
        if missing:
            raise DataError(f"{where}: malformed record: missing key {missing[0]!r}")
        return _sample(obj["question"], obj["answer"], self.split, lineno - 1, self.target, where)


def _read_parquet(files: list[Path], split: str, target: str, on_error: str, max_records: int | None) -> SampleList:
    import pyarrow.parquet as pq

    skip_log, samples, index = SkipLog(SOURCE), [], 0
    for path in files:
        names = pq.ParquetFile(path).schema_arrow.names
        missing = [c for c in ("question", "answer") if c not in names]
        if missing:
            raise DataError(f"{path}: not a GSM8K parquet file: missing columns {missing}")
        table = pq.read_table(path, columns=["question", "answer"])
        for row, (question, solution) in enumerate(zip(table.column("question").to_pylist(),
                                                       table.column("answer").to_pylist())):
            try:
                samples.append(_sample(question, solution, split, index, target, f"row {row} of {path}"))
            except DataError as e:
                if on_error == "raise":
                    raise
                skip_log.add(e)
            index += 1
            if max_records is not None and len(samples) >= max_records:
                return SampleList(samples, skip_log)
    return SampleList(samples, skip_log)


def read_gsm8k(root, split: str, on_error: str = "raise", *, target: str = "final", max_records: int | None = None):
    """GSM8K `split` (train, test, ...) as a lazy sequence of text-only Samples (module docstring).

    Sample: image None, question, answer = the final number or the rationale without annotations (`target`),
    source "gsm8k", id "{split}/{n}" (n: the problem's 0-based position in the split), meta split,
    final_answer, solution, target, record. Skipped records (on_error="skip"): `.skipped`, `.skip_log`.
    """
    check_on_error(on_error)
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    root = Path(root)
    jsonl = root / f"{split}.jsonl"
    if jsonl.is_file():
        dataset = GSM8KJsonl(jsonl, split, target)
        dataset.scan(on_error, max_records)
        return finish(dataset, on_error)
    parquet = sorted((root / "main").glob(f"{split}-*.parquet")) or sorted(root.glob(f"{split}-*.parquet"))
    if not parquet:
        raise FileNotFoundError(f"GSM8K: found neither {jsonl} (openai/grade-school-math layout) nor "
                                f"{root / 'main'}/{split}-*.parquet (Hugging Face layout)")
    return finish(_read_parquet(parquet, split, target, on_error, max_records), on_error)
