"""Shared record helpers for the readers: numbers as answer text, a streaming JSON array parser, image
path checks, required fields, a note on duplicated records, and record sequences backed by byte ranges of one file (JSON arrays for the
chart sources, lines for the text sources), each record parsed again on access.
"""

from __future__ import annotations

import codecs
import decimal
import itertools
import json
import math
import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from PIL import Image

from .sample import (
    DataError,
    Sample,
    SkipLog,
    check_on_error,
    image_problem,
    is_blank,
    pixel_limit,
    resolve_in_root,
)

# ----------------------------------------------------------------------------------------------- numbers

NUMBER = (int, float, Decimal)  # a JSON number as `parse_json` gives it (Decimal; float for NaN / Infinity)
MAX_NUMBER_DIGITS = 4300  # longest number written out (Python's default limit for int <-> str)
_EXACT = decimal.Context(prec=MAX_NUMBER_DIGITS + 10)  # rounding that loses no digit but the ones asked


def format_number(value, round_digits: int | None = None) -> str:
    """A number as a plain decimal string (never an exponent), its value unchanged.

    Integers and Decimals are written exactly (`3` -> "3", Decimal("12345678901234567.0") ->
    "12345678901234567", Decimal("1.2E-5") -> "0.000012"); a float as its shortest text that reads back
    as the same double (`repr`: 51.67 -> "51.67", 0.1 + 0.2 -> "0.30000000000000004"). The JSON readers
    give Decimals (`parse_json`), so a label keeps the digits its file wrote. `round_digits` rounds
    half-up to that many decimals, on the decimal text ("2.675", 2 -> "2.68"): the one way a label is
    rounded, and only when asked. Trailing zeros after the point are dropped. Raises ValueError for bools,
    NaN, infinities and numbers longer than MAX_NUMBER_DIGITS digits.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise ValueError(f"not a number: {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value!r}")
        value = Decimal(repr(value))
    elif isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"not a finite number: {value!r}")
    number = Decimal(value)
    if number and max(number.adjusted() + 1, -number.as_tuple().exponent) > MAX_NUMBER_DIGITS:
        raise ValueError(f"number with more than {MAX_NUMBER_DIGITS} digits: {str(value)[:40]}...")
    if round_digits is not None:
        number = number.quantize(Decimal(1).scaleb(-round_digits), rounding=ROUND_HALF_UP,
                                 context=_EXACT)
    text = format(number, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def parse_json(data: str | bytes):
    """`json.loads` with every JSON number that has a fraction or an exponent as an exact Decimal of its
    text, so no label is rounded through a float (integers are exact ints already)."""
    return json.loads(data, parse_float=Decimal)


# ------------------------------------------------------------------------------ streaming JSON arrays

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(parse_float=Decimal)  # numbers as `parse_json` reads them
CHUNK_BYTES = 1 << 20  # read window of the streaming parser


class _JsonStream:
    """A growing text window over a UTF-8 file, with char -> byte offset bookkeeping."""

    def __init__(self, f, path: Path, chunk_bytes: int):
        self.f, self.path, self.chunk = f, path, chunk_bytes
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf, self.pos, self.eof = "", 0, False
        self.read_bytes = 0  # bytes read from the file so far
        self.ascii = True  # buf holds ASCII only: char offsets are byte offsets
        self.anchor, self.anchor_byte = 0, 0  # a buf index whose byte offset in the file is known

    def more(self, size: int | None = None) -> bool:
        """Append the next `size` bytes (a chunk); drops consumed text first. False at end of file."""
        if self.eof:
            return False
        data = self.f.read(size or self.chunk)
        pending = len(self.decoder.getstate()[0])  # bytes of a character cut at the previous chunk's end
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as e:  # e.start counts from the pending bytes
            raise DataError(f"{self.path}: not valid UTF-8 at byte {self.read_bytes - pending + e.start}: "
                            f"{e.reason} (byte 0x{e.object[e.start]:02x})") from None
        self.read_bytes += len(data)
        self.eof = not data
        if self.pos > self.chunk:
            self.anchor_byte, self.anchor = self.byte_at(self.pos), 0
            self.buf, self.pos = self.buf[self.pos:], 0
            self.ascii = self.buf.isascii()
        self.buf += text
        self.ascii = self.ascii and text.isascii()
        return True

    def byte_of(self, p: int) -> int:
        if self.ascii:
            return self.anchor_byte + p - self.anchor
        return self.anchor_byte + len(self.buf[self.anchor:p].encode("utf-8"))

    def byte_at(self, p: int) -> int:
        """Byte offset of buf[p]; calls must come with non-decreasing p (the anchor moves forward)."""
        b = self.byte_of(p)
        self.anchor, self.anchor_byte = p, b
        return b

    def peek(self) -> str:
        """The next non-whitespace character ('' at end of file), without consuming it."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def expect(self, chars: str, what: str) -> str:
        ch = self.peek()
        if not ch or ch not in chars:
            found = repr(ch) if ch else "end of file"
            raise DataError(f"{self.path}: invalid JSON: expected {what} at byte {self.byte_of(self.pos)}, found {found}")
        self.pos += 1
        return ch

    def value(self) -> tuple[int, int, object]:
        """Parse the JSON value at pos; returns (start, end) buf indices and the value."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                # Cut at the window's edge, or really malformed? A cut shows within the last token (a
                # string may be long: read on); anything further back is a real error.
                cut = e.msg.startswith("Unterminated string") or len(self.buf) - e.pos <= 64
                if self.eof or not cut:
                    raise DataError(f"{self.path}: invalid JSON at byte {self.byte_of(e.pos)}: {e.msg}") from None
                self.more(max(self.chunk, len(self.buf) - self.pos))  # long values: double the window
                continue
            except ValueError as e:  # an integer past Python's digit limit
                raise DataError(f"{self.path}: invalid JSON value at byte {self.byte_of(self.pos)}: {e}") from None
            if end == len(self.buf) and self.more():
                continue  # a number may go on in the next chunk
            start, self.pos = self.pos, end
            return start, end, value


def iter_json_array(path, key: str | None = None, *, chunk_bytes: int | None = None) -> Iterator[tuple[int, int, object]]:
    """Stream the elements of a JSON array: the whole document (`key=None`) or `document[key]`.

    Yields `(start_byte, end_byte, element)`; `file[start:end]` is the element's exact JSON text. Only one
    element is alive at a time. Syntax errors raise DataError naming the file and byte offset.
    """
    path = Path(path)
    with open(path, "rb") as f:
        s = _JsonStream(f, path, chunk_bytes or CHUNK_BYTES)
        if s.peek() == "\ufeff":  # UTF-8 byte order mark
            s.pos += 1
        if key is None:
            s.expect("[", "'[' (a top-level array)")
        else:
            s.expect("{", "'{' (a top-level object)")
            while True:
                if s.peek() != '"':
                    raise DataError(f"{path}: no {key!r} array at the top level")
                _, _, name = s.value()
                s.expect(":", "':'")
                if name == key:
                    s.expect("[", f"'[' (the {key!r} array)")
                    break
                s.value()  # another key's value, skipped
                if s.expect(",}", "',' or '}'") == "}":
                    raise DataError(f"{path}: no {key!r} array at the top level")
        if s.peek() == "]":
            s.pos += 1
        else:
            for n in itertools.count():
                try:
                    start, end, value = s.value()
                except DataError as e:
                    raise DataError(f"{e} (array element #{n})") from None
                yield s.byte_at(start), s.byte_at(end), value
                if s.expect(",]", f"',' or ']' after array element #{n}") == "]":
                    break
        if key is not None:  # the top-level object's other keys, then its '}'
            while s.expect(",}", "',' or '}'") == ",":
                s.value()
                s.expect(":", "':'")
                s.value()
        if s.peek():  # `cat a.json b.json`: json.loads refuses it, and so do we (its records are not dropped)
            raise DataError(f"{path}: invalid JSON: content after the top-level value at byte {s.byte_of(s.pos)}, "
                            f"found {s.peek()!r}")


# ---------------------------------------------------------------------------- records backed by a file


class ImageChecker:
    """Resolves image paths inside their root and checks each distinct image once: it exists (always)
    and PIL `verify()` passes (when `verify`). Resolution is cached per name: many records share an image."""

    def __init__(self, verify: bool = False):
        self.verify = verify
        self._seen: dict[Path, str | None] = {}
        self._paths: dict[tuple[Path, str], Path] = {}

    def resolve(self, folder: Path, relative: str, where: str, source: str) -> Path:
        """`folder/relative`, DataError if it leaves `folder` (escapes are not cached: they raise each time)."""
        key = (folder, relative)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = resolve_in_root(folder, relative, record=where, source=source)
        return path

    def check(self, path: Path, where: str) -> None:
        """Raise DataError ('image missing' / 'image too large' / 'unreadable image') naming the image and `where`."""
        if path not in self._seen:
            problem = None
            if not path.is_file():
                problem = "image missing"
            elif self.verify:
                try:
                    with pixel_limit(), Image.open(path) as img:
                        img.verify()
                except Exception as e:  # PIL raises many types for bad files
                    problem = image_problem(e)
            self._seen[path] = problem
        problem = self._seen[path]
        if problem:
            raise DataError(f"{path}: {problem} ({where})")


def require(obj: dict, key: str, types, where: str, *, optional: bool = False):
    """obj[key] checked against `types` (an optional key may be absent or null -> None); DataError
    'malformed record' naming `where` otherwise."""
    if key not in obj or (optional and obj[key] is None):
        if optional:
            return None
        raise DataError(f"{where}: malformed record: missing key {key!r}")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, types):
        names = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)) if t is not Decimal)
        raise DataError(f"{where}: malformed record: {key!r} should be {names}, got {type(value).__name__}")
    return value


def answer_text(value, where: str, round_digits: int | None = None) -> str:
    """A label as the training target: strings unchanged (one that shows nothing, `is_blank`, is an empty
    answer), numbers through `format_number`."""
    if isinstance(value, str):
        if is_blank(value):
            raise DataError(f"{where}: malformed record: empty answer")
        return value
    try:
        return format_number(value, round_digits)
    except ValueError as e:
        raise DataError(f"{where}: malformed record: answer {e}") from None


class ByteRecords(Sequence):
    """Records kept as byte ranges of one file (offset and length, 12 bytes a record) and read again on
    each access, so that a reader of millions of records holds no parsed record in memory. A reader's scan
    validates each record once and `_add`s the kept ones; subclasses define `_load(i, data: bytes)`."""

    def __init__(self, path: Path, skip_log: SkipLog):
        self.path = Path(path)
        self.skip_log = skip_log
        self._starts = array("q")
        self._lengths = array("I")

    def _add(self, start: int, length: int) -> None:
        self._starts.append(start)
        self._lengths.append(length)

    @property
    def skipped(self) -> int:
        return self.skip_log.total

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = check_index(i, len(self))
        with open(self.path, "rb") as f:
            f.seek(self._starts[i])
            data = f.read(self._lengths[i])
        return self._load(i, data)

    def _load(self, i: int, data: bytes) -> Sample:
        raise NotImplementedError


class JsonRecordSamples(ByteRecords):
    """Samples backed by the records of one JSON array (`iter_json_array`).

    Subclasses define `_fields(obj, where)` (validate a record -> tuple, DataError if malformed),
    `_image_ref(fields) -> (folder, relative name)` and `_sample(fields, record_no, image_path)`.
    """

    source = "json"

    def __init__(self, path: Path, skip_log: SkipLog):
        super().__init__(path, skip_log)
        self._skips: list[int] = []  # for each skipped record, the kept index that came after it

    def scan(self, key: str | None, on_error: str, checker: ImageChecker, max_records: int | None) -> None:
        """Validate every record of the array (under `key` when the file is an object) and its image."""
        for record_no, (start, end, obj) in enumerate(iter_json_array(self.path, key)):
            where = f"record #{record_no} in {self.path}"
            try:
                if not isinstance(obj, dict):
                    raise DataError(f"{where}: malformed record: expected an object, got {type(obj).__name__}")
                fields = self._fields(obj, where)
                folder, relative = self._image_ref(fields)
                checker.check(checker.resolve(folder, relative, where, self.source), where)
            except DataError as e:
                if on_error == "raise":
                    raise
                self.skip_log.add(e)
                self._skips.append(len(self._starts))
                continue
            self._add(start, end - start)
            if max_records is not None and len(self._starts) >= max_records:
                break

    @property
    def skipped(self) -> int:
        return len(self._skips)

    def record_number(self, i: int) -> int:
        """Position in the file's array of the i-th kept record."""
        return i + bisect_right(self._skips, i)

    def _load(self, i: int, data: bytes) -> Sample:
        record_no = self.record_number(i)
        where = f"record #{record_no} in {self.path}"
        try:
            obj = parse_json(data)
        except ValueError:
            raise DataError(f"{where}: no longer valid JSON (was the file changed after reading?)") from None
        fields = self._fields(obj, where)
        folder, relative = self._image_ref(fields)
        return self._sample(fields, record_no, folder / relative)  # confined to folder: checked by scan

    def _fields(self, obj: dict, where: str) -> tuple:
        raise NotImplementedError

    def _image_ref(self, fields: tuple) -> tuple[Path, str]:
        raise NotImplementedError

    def _sample(self, fields: tuple, record_no: int, image: Path) -> Sample:
        raise NotImplementedError


def finish(dataset, on_error: str):
    """Report skips to the user (a warning) and expose the count as `dataset.skipped`."""
    if on_error == "skip":
        dataset.skip_log.report()
    return dataset


# --------------------------------------------------------------------------------------- other sequences


def duplicate_note(records: Sequence, keys: Mapping[str, Callable[[object], Hashable | None]],
                   name: Callable[[object], str]) -> str | None:
    """One line counting the records that repeat an earlier one, or None when none does. `keys`: {what the
    two share ("an id seen before"): key of a record, None where it has none}; a record is counted once,
    under the first key it repeats, and every key of every record is registered. `name(record)` names a
    record in the example. Duplicates are kept (the caller decides nothing is dropped): this only tells."""
    seen: dict[str, dict] = {what: {} for what in keys}
    counts = dict.fromkeys(keys, 0)
    example = None
    for record in records:
        hit = None
        for what, key in keys.items():
            k = key(record)
            if k is None:
                continue
            if k in seen[what]:
                hit = hit or (what, seen[what][k])
            else:
                seen[what][k] = record
        if hit:
            counts[hit[0]] += 1
            example = example or f"{name(record)} repeats {name(hit[1])}"
    total = sum(counts.values())
    if not total:
        return None
    parts = ", ".join(f"{n} with {what}" for what, n in counts.items() if n)
    return f"{total} duplicated records ({parts}), kept and counted as they are; e.g. {example}"


class SampleList(list):
    """A list of Samples that keeps its reader's skips (`skip_log`, `skipped`): small sources."""

    def __init__(self, samples, skip_log: SkipLog):
        super().__init__(samples)
        self.skip_log = skip_log

    @property
    def skipped(self) -> int:
        return self.skip_log.total


class ConcatRecords(Sequence):
    """Several record sequences as one, sharing one SkipLog."""

    def __init__(self, parts: list, skip_log: SkipLog):
        self.parts, self.skip_log = parts, skip_log
        self._ends = []
        total = 0
        for part in parts:
            total += len(part)
            self._ends.append(total)

    @property
    def skipped(self) -> int:
        return self.skip_log.total

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = check_index(i, len(self))
        k = bisect_right(self._ends, i)
        return self.parts[k][i - (self._ends[k - 1] if k else 0)]


def check_index(i, n: int) -> int:
    """`i` as a non-negative index into n records (negative counts from the end); IndexError outside."""
    i = int(i)
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"index {i} out of range for {n} records")
    return i


# ------------------------------------------------------------------------------------ line-based files


def iter_lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number from 1, byte offset, bytes without the line ending) for each line of a file; a UTF-8
    byte order mark on the first line is dropped."""
    with open(path, "rb") as f:
        offset = 0
        for lineno, line in enumerate(f, 1):
            start = offset
            offset += len(line)
            body = line.rstrip(b"\r\n")
            if lineno == 1 and body.startswith(b"\xef\xbb\xbf"):
                body, start = body[3:], start + 3
            yield lineno, start, body


def read_imagefolder(root, split: str, on_error: str, source: str, required: tuple[str, ...], sample) -> SampleList:
    """The samples of an imagefolder split, root/SPLIT/metadata.jsonl, one a line. Each line must be UTF-8
    JSON: an object whose `required` keys are non-empty strings; `sample(row, where, split_dir)` builds the
    Sample from it (`where`: "FILE:LINE") or raises DataError. A DataError raises here (on_error "raise")
    or is counted and reported once ("skip"). A missing split is a DataError naming the splits the root
    holds."""
    check_on_error(on_error)
    split_dir = Path(root) / split
    meta_path = split_dir / "metadata.jsonl"
    if not meta_path.is_file():
        found = sorted(p.name for p in Path(root).iterdir() if (p / "metadata.jsonl").is_file()) \
            if Path(root).is_dir() else []
        raise DataError(f"{meta_path}: no such file (split {split!r}; splits found in {root}: "
                        f"{', '.join(found) or 'none'})")
    skipped = SkipLog(source)
    samples = []
    for lineno, start, data in iter_lines(meta_path):
        if not data.strip():
            continue
        where = f"{meta_path}:{lineno}"
        try:
            samples.append(sample(_metadata_row(data, start, where, required), where, split_dir))
        except DataError as e:
            if on_error == "raise":
                raise
            skipped.add(e)
    skipped.report()
    return SampleList(samples, skipped)


def _metadata_row(data: bytes, start: int, where: str, required: tuple[str, ...]) -> dict:
    """The JSON object of one metadata line (at byte `start` of its file); bytes, so that a line that is
    not UTF-8 is one bad record."""
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{where}: malformed record (not valid UTF-8: {e.reason} at byte {start + e.start})") from None
    try:
        row = json.loads(line)  # floats stay floats: metadata never holds the answer as a number
    except ValueError as e:  # not JSON, or an integer past Python's digit limit
        raise DataError(f"{where}: malformed record (not JSON: {getattr(e, 'msg', e)})") from None
    if not isinstance(row, dict):
        raise DataError(f"{where}: malformed record (expected a JSON object)")
    for key in required:
        if not isinstance(row.get(key), str) or is_blank(row[key]):
            raise DataError(f"{where}: malformed record ({key!r} missing or not a non-empty string)")
    return row


class LineRecords(ByteRecords):
    """Records stored as byte ranges of one text file (one or more lines each).

    One pass (`_keep` / `_drop`, called by the reader's scan) validates each record through `_sample` and
    keeps its offset, length and first line number. Subclasses define
    `_sample(lines: list[str], lineno: int) -> Sample`, raising DataError naming `self.where(lineno)`.
    """

    source = "lines"

    def __init__(self, path: Path, skip_log: SkipLog):
        super().__init__(path, skip_log)
        self._linenos = array("I")

    def where(self, lineno: int) -> str:
        return f"{self.path}:{lineno}"

    def _decode(self, data: bytes, lineno: int) -> list[str]:
        try:
            return [line.rstrip("\r") for line in data.decode("utf-8").split("\n")]
        except UnicodeDecodeError as e:
            raise DataError(f"{self.where(lineno)}: malformed record: not valid UTF-8 ({e.reason})") from None

    def _keep(self, lineno: int, start: int, data: bytes, on_error: str, length: int | None = None) -> bool:
        """Validate the record `data` (its lines joined by '\\n') that starts at byte `start` on line
        `lineno` and spans `length` bytes of the file (default len(data)); keep it, or raise / count the
        DataError. True when kept."""
        try:
            self._sample(self._decode(data, lineno), lineno)
        except DataError as e:
            self._drop(e, on_error)
            return False
        self._add(start, len(data) if length is None else length)
        self._linenos.append(lineno)
        return True

    def _drop(self, error: DataError, on_error: str) -> None:
        if on_error == "raise":
            raise error
        self.skip_log.add(error)

    def _load(self, i: int, data: bytes) -> Sample:
        return self._sample(self._decode(data, self._linenos[i]), self._linenos[i])

    def _sample(self, lines: list[str], lineno: int) -> Sample:
        raise NotImplementedError


class JsonLines(LineRecords):
    """A JSON Lines file: one object a line (blank lines are no records). Subclasses define
    `_from_json(obj: dict, lineno: int, where: str) -> Sample`."""

    def scan(self, on_error: str, max_records: int | None = None) -> None:
        for lineno, start, data in iter_lines(self.path):
            if not data.strip():
                continue
            self._keep(lineno, start, data, on_error)
            if max_records is not None and len(self) >= max_records:
                break

    def _sample(self, lines, lineno):
        where = self.where(lineno)
        try:
            obj = parse_json(lines[0])
        except ValueError as e:  # not JSON, or an integer past Python's digit limit
            raise DataError(f"{where}: malformed record: not JSON ({getattr(e, 'msg', e)})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{where}: malformed record: expected an object, got {type(obj).__name__}")
        return self._from_json(obj, lineno, where)

    def _from_json(self, obj: dict, lineno: int, where: str) -> Sample:
        raise NotImplementedError


# --------------------------------------------------------------------------------------- numeric answers

_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)", re.ASCII)
_GROUPED_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+", re.ASCII)


def number_text(text: str, *, thousands: bool = False) -> str | None:
    """The canonical decimal string of `text` when it is exactly one plain number, else None.

    Accepted: optional sign, digits, optional fraction ("-12", "0.5", ".5", "+3"); with `thousands` also
    ',' separators in groups of three ("1,234" -> "1234"; "1,23" is refused). Canonical as
    `format_number` writes it: no sign for positives, no leading or trailing zeros ("007.50" -> "7.5",
    "-0" -> "0"). Fractions ("1/2"), exponents and words give None.
    """
    text = text.strip()
    pattern = _GROUPED_NUMBER if thousands else _PLAIN_NUMBER
    if not pattern.fullmatch(text):
        return None
    return format_number(Decimal(text.replace(",", "")))


def check_problem(where: str, question: str, answer: str, split: str | None, path: Path, expected: str) -> None:
    """The checks of a line of a synthetic text-problem file (arithmetic, word problems): a question, an
    answer that is one plain decimal number as written, and the file's own split; DataError otherwise."""
    if not question.strip():
        raise DataError(f"{where}: malformed record: empty question")
    if number_text(answer) is None or answer != answer.strip():
        raise DataError(f"{where}: malformed record: answer {answer!r} is not a plain decimal number")
    if split is not None and split != expected:
        raise DataError(f"{where}: malformed record: 'split' is {split!r} in {path.name}")
