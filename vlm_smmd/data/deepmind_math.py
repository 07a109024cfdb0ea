"""DeepMind Mathematics reader (Saxton et al., ICLR 2019).

Layout (the released mathematics_dataset-v1.0.tar.gz): `{root}/{split}/{module}.txt` with split one of
train-easy, train-medium, train-hard, interpolate, extrapolate (root may also be the folder holding
`mathematics_dataset-v1.0/`). Each file alternates a question line and its answer line. `modules` picks
files by glob ("arithmetic__*", the default, or a list such as ["arithmetic__add_or_sub", "arithmetic__mul"]).

With `numeric_only` (default) an answer must be one plain decimal number ("-12", "0.25"); anything else
("1/2", "-3*sqrt(7)", "True") is a record with a "non-numeric answer": counted and skipped under
on_error="skip", a DataError under "raise". Numeric answers become canonical text (`records.number_text`;
the dataset already writes them so), kept in `meta["final_answer"]`; the line as written is in
`meta["raw_answer"]`. Note that `arithmetic__add_or_sub_in_base` answers are digits in another base
("-11101" in base 2): numeric to this check, but their value is not the decimal one (`meta["module"]`
says where a record comes from). A question without an answer line (the file ends after it) or an empty
question or answer is a malformed record; a blank line breaks the question/answer alternation of the rest
of the file, so it is an error whatever `on_error`.

Files hold up to 666,666 pairs (about 2.7 million in the train-easy arithmetic modules): records are kept
as byte ranges (16 bytes each) and read again on access; the scan shows a progress bar.
"""

from __future__ import annotations

from pathlib import Path

from .records import ConcatRecords, LineRecords, finish, iter_lines, number_text
from .sample import DataError, Sample, SkipLog, check_on_error, is_blank

SOURCE = "deepmind_math"
SPLITS = ("train-easy", "train-medium", "train-hard", "interpolate", "extrapolate")
FOLDER = "mathematics_dataset-v1.0"


class ModuleFile(LineRecords):
    """The question/answer pairs of one `{module}.txt`."""

    source = SOURCE

    def __init__(self, path: Path, split: str, numeric_only: bool, skip_log: SkipLog):
        super().__init__(path, skip_log)
        self.split, self.module, self.numeric_only = split, path.stem, numeric_only

    def scan(self, on_error: str, max_records: int | None, bar) -> None:
        pending = None  # (lineno, start, bytes) of a question waiting for its answer line
        done = 0  # bytes read since the progress bar was last updated
        for lineno, start, data in iter_lines(self.path):
            done += len(data) + 1
            if done >= 1 << 20:
                bar.update(done)
                done = 0
            if not data.strip():
                raise DataError(f"{self.where(lineno)}: blank line: the file no longer alternates question and "
                                f"answer lines after it")
            if pending is None:
                pending = (lineno, start, data)
                continue
            q_line, q_start, question = pending
            pending = None
            self._keep(q_line, q_start, question + b"\n" + data, on_error, length=start + len(data) - q_start)
            if max_records is not None and len(self) >= max_records:
                break
        else:
            if pending is not None:
                self._keep(*pending, on_error)  # a question alone: malformed
        bar.update(done)

    def _sample(self, lines, lineno):
        where = self.where(lineno)
        if len(lines) < 2:
            raise DataError(f"{where}: malformed record: the question has no answer line (the file ends after it)")
        question, raw = lines[0].strip(), lines[1].strip()
        if is_blank(question) or is_blank(raw):
            raise DataError(f"{where}: malformed record: empty question or answer")
        answer = number_text(raw)
        if answer is None:
            if self.numeric_only:
                raise DataError(f"{where}: non-numeric answer {raw!r} (numeric_only=True; pass numeric_only=False "
                                f"to keep it, or on_error='skip' to skip such records)")
            answer = raw
        pair = (lineno - 1) // 2
        meta = {"split": self.split, "module": self.module, "final_answer": answer, "raw_answer": raw,
                "record": pair}
        return Sample(image=None, question=question, answer=answer, source=SOURCE,
                      id=f"{self.split}/{self.module}/{pair}", meta=meta)


def read_deepmind_math(root, split: str, modules="arithmetic__*", numeric_only: bool = True,
                       on_error: str = "raise", *, max_records: int | None = None, progress: bool = True):
    """The `modules` of `split` as one lazy sequence of text-only Samples, files in name order (module
    docstring). Sample: image None, question, answer (the canonical number), source "deepmind_math", id
    "{split}/{module}/{n}" (n: the pair's 0-based position in its file), meta split, module, final_answer,
    raw_answer, record. `max_records` caps the usable records read per file. Skipped records: `.skipped`,
    `.skip_log`.
    """
    from tqdm import tqdm

    check_on_error(on_error)
    root = Path(root)
    if not (root / split).is_dir() and (root / FOLDER).is_dir():
        root = root / FOLDER
    split_dir = root / split
    if not split_dir.is_dir():
        found = [s for s in SPLITS if (root / s).is_dir()]
        raise FileNotFoundError(f"DeepMind Mathematics: no split folder {split_dir} (splits found in {root}: "
                                f"{', '.join(found) or 'none'}; the dataset has {', '.join(SPLITS)})")
    patterns = [modules] if isinstance(modules, str) else list(modules)
    if not patterns:
        raise ValueError("modules must name at least one module or glob")
    files = sorted({p for pattern in patterns for p in split_dir.glob(f"{pattern}.txt") if p.is_file()})
    if not files:
        available = sorted(p.stem for p in split_dir.glob("*.txt"))
        shown = ", ".join(available[:8]) + (", ..." if len(available) > 8 else "")
        raise FileNotFoundError(f"DeepMind Mathematics: no module in {split_dir} matches {patterns} "
                                f"({len(available)} modules there: {shown or 'none'})")
    skip_log = SkipLog(SOURCE)
    parts = []
    with tqdm(total=sum(p.stat().st_size for p in files), unit="B", unit_scale=True, desc=f"{SOURCE} {split}",
              disable=not progress, leave=False) as bar:
        for path in files:
            part = ModuleFile(path, split, numeric_only, skip_log)
            part.scan(on_error, max_records, bar)
            parts.append(part)
    return finish(ConcatRecords(parts, skip_log), on_error)
