"""Preflight: check every record of a training or eval set once, before the model loads.

Each record must load (its image decodes and has a size the family can use), have a non-empty answer with
no digit other than ASCII 0-9 (eval scores "１２:３０" or "١٢" as text: `metrics`' digit rule, so training on
it would teach what eval marks wrong), no special-token text, and fit `max_length` tokens (counted as the collator would build it, without pixel
values: `VLMCollator.measure`). Under on_error="raise" the first problem stops the run with the
DataError naming the file and record; under "skip" bad records are dropped up front, counted once per
record by reason, and reported once. The surviving records' token lengths are kept, so
`train_sampling_strategy: group_by_length` works on them.

Work runs on `workers` processes (forked: the dataset and collator are inherited, not pickled) with a
progress bar, and the result is cached under `cache_dir` by a fingerprint of the records (id, question,
answer, and each image file's path, size and modification time) and the settings that decide the outcome
(family, tokenizer, chat template, image bounds, instruction, system prompt, max_length, on_error).
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .sample import DataError, SkipLog, check_on_error

CHUNK = 64  # records per task sent to a worker
VERSION = 2  # bump when the checks change (2: the digit rule)


def default_cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "vlm-smmd" / "preflight"


class CheckedDataset(Sequence):
    """The records of `dataset` that passed preflight, with their token lengths (`lengths`, one per record)."""

    def __init__(self, dataset, indices: Sequence[int], lengths: Sequence[int]):
        self.dataset, self.indices, self.lengths = dataset, list(indices), list(lengths)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.dataset[self.indices[i]]


@dataclass
class PreflightResult:
    name: str
    checked: int
    kept: list[int]
    lengths: list[int]
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    cached: bool = False

    @property
    def total_skipped(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> str:
        head = f"preflight {self.name}: {self.checked:,} records checked"
        if self.cached:
            head += " (cached)"
        if not self.total_skipped:
            return head + ", all usable"
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
        return f"{head}, {self.total_skipped} skipped ({reasons}); e.g. {self.examples[0]}"


def _image_identity(image) -> str:
    if image is None:
        return "text"
    if isinstance(image, (str, os.PathLike)):
        try:
            st = os.stat(image)
        except OSError:
            return f"{image}:missing"
        return f"{image}:{st.st_size}:{st.st_mtime_ns}"
    buf = io.BytesIO()
    image.save(buf, format="PNG")  # an in-memory image: its pixels
    return hashlib.sha256(buf.getvalue()).hexdigest()


def fingerprint(dataset, collator, max_length: int | None, on_error: str) -> str:
    """sha256 of the records and the settings the checks depend on (module docstring)."""
    tok = collator.tokenizer
    h = hashlib.sha256()
    settings = {"version": VERSION, "family": collator.family.model_type, "tokenizer": type(tok).__name__,
                "vocab": len(tok), "template": tok.chat_template, "max_length": max_length, "on_error": on_error,
                "instruction": collator.instruction, "system_prompt": collator.system_prompt,
                "pixels": [getattr(collator, "min_pixels", None), getattr(collator, "max_pixels", None)],
                "records": len(dataset)}
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for i in range(len(dataset)):
        try:
            s = dataset[i]
        except DataError as e:  # checked (and reported) below
            h.update(str(e).encode())
            continue
        h.update(json.dumps([s.id, s.source, s.question, s.answer, _image_identity(s.image)], default=str).encode())
    return h.hexdigest()


# worker state, inherited through fork
_STATE: dict = {}


def _check_digits(sample) -> None:
    """DataError naming the image file (where there is one) and the record when the answer has a Unicode
    digit that is not ASCII 0-9 (full-width, Arabic-Indic, ...)."""
    answer = sample.answer
    if not isinstance(answer, str) or answer.isascii():
        return
    bad = next((c for c in answer if c.isdigit() and not c.isascii()), None)
    if bad is None:
        return
    where = f"{sample.image}: " if isinstance(sample.image, (str, os.PathLike)) else ""
    raise DataError(f"{where}non-ASCII digits in the answer {answer!r} ({bad!r} is U+{ord(bad):04X}; eval reads "
                    f"only 0-9, so it would score this answer as text) (record {sample.id!r} of {sample.source})")


def _check_range(bounds: tuple[int, int]) -> list[tuple[int, int | None, str | None]]:
    """(index, length or None, error message or None) for records [start, stop)."""
    dataset, collator, max_length = _STATE["dataset"], _STATE["collator"], _STATE["max_length"]
    out = []
    for i in range(*bounds):
        try:
            sample = dataset[i]
            _check_digits(sample)
            length = collator.measure(sample)
            if max_length is not None and length > max_length:
                raise DataError(f"sample too long: {length} tokens > max_length {max_length} "
                                f"(record {sample.id!r} of {sample.source})")
            out.append((i, length, None))
        except DataError as e:
            out.append((i, None, str(e)))
    return out


def preflight(dataset, collator, *, name: str, max_length: int | None = None, on_error: str = "raise",
              workers: int = 1, cache_dir: str | Path | None = None, progress: bool = True) -> PreflightResult:
    """Check every record of `dataset` (module docstring); raises the first DataError under "raise"."""
    from tqdm import tqdm

    check_on_error(on_error)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = fingerprint(dataset, collator, max_length, on_error)
    cache_file = cache / f"{key}.json"
    if cache_file.is_file():
        try:
            found = json.loads(cache_file.read_text())
            return PreflightResult(**{**found, "name": name, "cached": True})
        except (OSError, ValueError, TypeError):
            pass  # unreadable cache: check again

    n = len(dataset)
    tasks = [(start, min(start + CHUNK, n)) for start in range(0, n, CHUNK)]
    _STATE.update(dataset=dataset, collator=collator, max_length=max_length)
    log = SkipLog(f"preflight {name}")
    kept, lengths = [], []
    bar = tqdm(total=n, desc=f"preflight {name}", unit="rec", disable=not progress)
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 and len(tasks) > 1 else None
    try:
        results = pool.imap(_check_range, tasks) if pool else map(_check_range, tasks)
        for chunk in results:
            for i, length, error in chunk:
                if error is not None:
                    if on_error == "raise":
                        raise DataError(error)
                    log.add(DataError(error))
                else:
                    kept.append(i)
                    lengths.append(length)
            bar.update(len(chunk))
    finally:
        bar.close()
        _STATE.clear()
        if pool is not None:
            pool.terminate()
            pool.join()
    result = PreflightResult(name, n, kept, lengths, dict(log.counts), list(log.examples))
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({k: v for k, v in result.__dict__.items() if k not in ("name", "cached")}))
        os.replace(tmp, cache_file)
    except OSError:
        pass  # a read-only cache only costs the next run a recheck
    return result
