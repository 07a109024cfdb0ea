"""ChartQA reader: the official repository layout and the Hugging Face parquet layout.

Official (github.com/vis-nlp/ChartQA, "ChartQA Dataset/"): `{root}/{split}/{split}_human.json` and
`{split}_augmented.json`, lists of {imgname, query, label}; images `{root}/{split}/png/{imgname}`.
Parquet (HuggingFaceM4/ChartQA): `{root}/data/{split}-*.parquet` (or `{root}/{split}-*.parquet`) with
columns image {bytes, path}, query, label (list of strings), human_or_machine (ClassLabel human/machine).

Every label is kept in `meta["answers"]` (the answer is the first); `meta["subset"]` is "human" or
"augmented" (the parquet "machine"). Image checks at read time: path confinement and existence (official
layout), null image bytes (parquet, from the column statistics); `verify_images=True` also opens each
image with PIL's `verify()`. Otherwise an unreadable image raises DataError from `Sample.load_image()`.
Parquet image bytes stay on disk: `__getitem__` reads the row group holding the row (two row groups
cached per process) and returns an `EncodedImageSample` whose image is those bytes (an `EncodedImage`,
file-like), decoded only by `load_image()`.
"""

from __future__ import annotations

import io
import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from .records import (
    NUMBER,
    ConcatRecords,
    ImageChecker,
    JsonRecordSamples,
    answer_text,
    check_index,
    finish,
    require,
)
from .sample import DataError, Sample, SkipLog, check_on_error, decode_image, image_problem, pixel_limit

SUBSETS = ("human", "augmented")


class ChartQAJson(JsonRecordSamples):
    """One `{split}_{subset}.json` file of the official layout."""

    source = "chartqa"

    def __init__(self, path: Path, root: Path, split: str, subset: str, skip_log: SkipLog):
        super().__init__(path, skip_log)
        self.root, self.split, self.subset = root, split, subset
        self.image_dir = root / split / "png"

    def _fields(self, obj, where):
        imgname = require(obj, "imgname", str, where)
        query = require(obj, "query", str, where)
        label = require(obj, "label", (str, *NUMBER, list), where)
        labels = label if isinstance(label, list) else [label]
        if not labels:
            raise DataError(f"{where}: malformed record: empty label list")
        answers = []
        for item in labels:
            if isinstance(item, bool) or not isinstance(item, (str, *NUMBER)):
                raise DataError(f"{where}: malformed record: label {item!r} is not a string or number")
            answers.append(answer_text(item, where))
        return imgname, query, answers

    def _image_ref(self, fields):
        return self.image_dir, fields[0]

    def _sample(self, fields, record_no, image):
        imgname, query, answers = fields
        meta = {"split": self.split, "subset": self.subset, "answers": answers, "imgname": imgname,
                "record": record_no}
        return Sample(image=image, question=query, answer=answers[0], source="chartqa",
                      id=f"{self.split}/{self.subset}/{record_no}", meta=meta)


class EncodedImage(io.BytesIO):
    """Encoded image bytes (PNG, JPEG...) not yet decoded; file-like, so `Image.open` takes it too."""


@dataclass
class EncodedImageSample(Sample):
    """A Sample whose image is an EncodedImage, decoded only by `load_image()` (DataError if it cannot be)."""

    origin: str = ""

    def load_image(self) -> Image.Image:
        if not isinstance(self.image, EncodedImage):
            return super().load_image()
        return decode_image(io.BytesIO(self.image.getvalue()), self.origin, f"record {self.id!r} of {self.source}")


def _bytes_field(table):
    """The image.bytes column as one array, null where the bytes or the whole image struct are null."""
    image = table.column("image")
    return image.flatten()[image.type.get_field_index("bytes")].combine_chunks()


def _class_names(schema, column: str) -> list[str]:
    """ClassLabel names that `datasets` stores in the parquet schema metadata (default human, machine)."""
    try:
        info = json.loads(schema.metadata[b"huggingface"])
        names = info["info"]["features"][column]["names"]
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return names
    except (TypeError, KeyError, ValueError):
        pass
    return ["human", "machine"]


class ChartQAParquet(Sequence):
    """Rows of the HF parquet files of one split; question and labels in memory, images on disk."""

    source = "chartqa"

    def __init__(self, files: list[Path], split: str, subsets, on_error: str, verify: bool,
                 max_records: int | None, skip_log: SkipLog):
        import pyarrow.parquet as pq

        self.files, self.split, self.skip_log = files, split, skip_log
        self._rg_starts: list[list[int]] = []  # per file: first row of each row group
        self._keys: list[tuple[int, int]] = []  # (file index, row in file) of each kept record
        self._rows: list[tuple[str, list[str], str]] = []  # (query, answers, subset)
        self._cache: dict = {}
        for fi, path in enumerate(files):
            pf = pq.ParquetFile(path)
            names = pf.schema_arrow.names
            missing = [c for c in ("image", "query", "label", "human_or_machine") if c not in names]
            if missing:
                raise DataError(f"{path}: not a ChartQA parquet file: missing columns {missing}")
            image_type = pf.schema_arrow.field("image").type
            if not hasattr(image_type, "get_field_index") or image_type.get_field_index("bytes") < 0:
                raise DataError(f"{path}: column 'image' should be a struct with 'bytes', got {image_type}")
            starts, total = [], 0
            for rg in range(pf.num_row_groups):
                starts.append(total)
                total += pf.metadata.row_group(rg).num_rows
            self._rg_starts.append(starts)
            problems = self._image_problems(pf, path, verify)
            table = pf.read(columns=["query", "label", "human_or_machine"])
            classes = _class_names(pf.schema_arrow, "human_or_machine")
            queries = table.column("query").to_pylist()
            labels = table.column("label").to_pylist()
            kinds = table.column("human_or_machine").to_pylist()
            for row in range(table.num_rows):
                where = f"row {row} of {path}"
                try:
                    record = self._record(queries[row], labels[row], kinds[row], classes, where)
                    if record[2] not in subsets:
                        continue  # not selected (not a skip)
                    if problems.get(row):
                        raise DataError(f"{path}: {problems[row]} ({where})")
                except DataError as e:
                    if on_error == "raise":
                        raise
                    skip_log.add(e)
                    continue
                self._keys.append((fi, row))
                self._rows.append(record)
                if max_records is not None and len(self._keys) >= max_records:
                    return

    @staticmethod
    def _record(query, label, kind, classes, where):
        if not isinstance(query, str):
            raise DataError(f"{where}: malformed record: 'query' should be str, got {type(query).__name__}")
        labels = label if isinstance(label, list) else [label]
        if not labels or not all(isinstance(x, str) for x in labels):
            raise DataError(f"{where}: malformed record: 'label' should be a non-empty list of strings, got {label!r}")
        answers = [answer_text(x, where) for x in labels]
        if isinstance(kind, int) and not isinstance(kind, bool) and 0 <= kind < len(classes):
            kind = classes[kind]
        if kind not in ("human", "machine", "augmented"):
            raise DataError(f"{where}: malformed record: 'human_or_machine' should be human/machine, got {kind!r}")
        return query, answers, "human" if kind == "human" else "augmented"

    @staticmethod
    def _image_problems(pf, path: Path, verify: bool) -> dict[int, str]:
        """row -> problem for rows whose image bytes are null (or unreadable, when verifying)."""
        leaf = next((j for j in range(pf.metadata.num_columns)
                     if pf.metadata.schema.column(j).path == "image.bytes"), None)
        problems, start = {}, 0
        for rg in range(pf.num_row_groups):
            meta = pf.metadata.row_group(rg)
            stats = meta.column(leaf).statistics if leaf is not None else None
            clean = stats is not None and stats.has_null_count and stats.null_count == 0
            if verify or not clean:
                images = _bytes_field(pf.read_row_group(rg, columns=["image"]))
                for k, data in enumerate(images.to_pylist()):
                    if data is None:
                        problems[start + k] = "image missing (null bytes)"
                    elif verify:
                        try:
                            with pixel_limit(), Image.open(io.BytesIO(data)) as img:
                                img.verify()
                        except Exception as e:  # PIL raises many types for bad data
                            problems[start + k] = image_problem(e)
            start += meta.num_rows
        return problems

    @property
    def skipped(self) -> int:
        return self.skip_log.total

    def __len__(self) -> int:
        return len(self._keys)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    def _image_bytes(self, fi: int, row: int) -> bytes | None:
        import pyarrow.parquet as pq

        starts = self._rg_starts[fi]
        rg = bisect_right(starts, row) - 1
        column = self._cache.get((fi, rg))
        if column is None:
            table = pq.ParquetFile(self.files[fi], memory_map=True).read_row_group(rg, columns=["image"])
            column = _bytes_field(table)
            if len(self._cache) >= 2:
                self._cache.pop(next(iter(self._cache)))
            self._cache[(fi, rg)] = column
        return column[row - starts[rg]].as_py()

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = check_index(i, len(self))
        fi, row = self._keys[i]
        query, answers, subset = self._rows[i]
        path = self.files[fi]
        ident = f"{self.split}/{path.name}#{row}"
        data = self._image_bytes(fi, row)
        if data is None:
            raise DataError(f"{path}: image missing (null bytes) (record {ident!r} of chartqa)")
        meta = {"split": self.split, "subset": subset, "answers": answers, "file": path.name, "row": row}
        return EncodedImageSample(image=EncodedImage(data), question=query, answer=answers[0], source="chartqa", id=ident,
                                  meta=meta, origin=f"{path} row {row}")


def read_chartqa(root, split: str, on_error: str = "raise", *, subsets=SUBSETS, verify_images: bool = False,
                 max_records: int | None = None):
    """ChartQA `split` (train/val/test) as a lazy sequence of Samples, from either layout.

    `subsets` picks the official files to read (both by default; each must exist). `max_records` caps the
    usable records read (per subset file in the official layout). Skipped records: `.skipped`, `.skip_log`.
    """
    check_on_error(on_error)
    root = Path(root)
    subsets = (subsets,) if isinstance(subsets, str) else tuple(subsets)
    bad = [s for s in subsets if s not in SUBSETS]
    if bad or not subsets:
        raise ValueError(f"subsets must be a non-empty selection of {SUBSETS}, got {subsets!r}")
    skip_log = SkipLog("chartqa")
    official = [root / split / f"{split}_{subset}.json" for subset in subsets]
    parquet = sorted((root / "data").glob(f"{split}-*.parquet")) or sorted(root.glob(f"{split}-*.parquet"))
    if any(p.is_file() for p in official):
        missing = [str(p) for p in official if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"ChartQA: missing {', '.join(missing)} (pass subsets= to read fewer)")
        checker = ImageChecker(verify_images)
        parts = []
        for subset, path in zip(subsets, official):
            part = ChartQAJson(path, root, split, subset, skip_log)
            part.scan(None, on_error, checker, max_records)
            parts.append(part)
        dataset = ConcatRecords(parts, skip_log)
    elif parquet:
        dataset = ChartQAParquet(parquet, split, subsets, on_error, verify_images, max_records, skip_log)
    else:
        raise FileNotFoundError(
            f"ChartQA: found neither {root / split}/{split}_human.json (official layout) nor "
            f"{root / 'data'}/{split}-*.parquet (Hugging Face layout)")
    return finish(dataset, on_error)

