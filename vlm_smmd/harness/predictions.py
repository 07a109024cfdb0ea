"""Prediction files of the field's harnesses read as this tool's prediction records (what `analyze` reads).

Formats (`FORMATS`), detected from the file:
- "vlm-smmd": this tool's predictions.jsonl (`analysis.load_predictions`);
- "lmms-eval": a `--log_samples` file, one JSON record a line (or, from older versions, one JSON list or
  {"logs": [...]}) with doc_id, doc, target and filtered_resps (resps where filtered_resps is missing);
- "vlmevalkit": a VLMEvalKit prediction file, .tsv (or .csv) or .xlsx (needs openpyxl), with index,
  question, answer and prediction columns (category optional).
A record of a task this tool exported (`export`: doc / columns carry source, id and targets) keeps them;
otherwise the source is the harness's name ("lmms-eval", "vlmevalkit": scored by exact match, and as a
clock where the target is a time), the targets are [target] and the id is doc_id / index. The prediction is
the answer `evaluation.extract_answer` finds in the generated text (clock extraction where the target is a
time), as eval extracts it; raw_output keeps the text. A file of neither layout is one ValueError naming
the file, the record and the missing fields.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path

from vlm_smmd.analysis import load_predictions
from vlm_smmd.data.records import iter_lines
from vlm_smmd.data.tasks import TASKS
from vlm_smmd.evaluation import extract_answer
from vlm_smmd.metrics import parse_time

FORMATS = ("vlm-smmd", "lmms-eval", "vlmevalkit")
OWN_FIELDS = ("id", "source", "question", "prediction")  # with target or targets (`analysis.load_predictions`)
LMMS_FIELDS = ("doc_id", "doc", "target", "filtered_resps")
VLMEVALKIT_FIELDS = ("index", "question", "answer", "prediction")
TABLE_SUFFIXES = (".tsv", ".csv", ".xlsx")


def _first_text(value) -> str:
    """The first response of an lmms-eval resps / filtered_resps value (a string, or nested lists of them)."""
    while isinstance(value, list):
        value = value[0] if value else ""
    return "" if value is None else str(value)


def _record(source: str, record_id, question, targets: list[str], raw: str, meta=None) -> dict:
    extract_as = source if source in TASKS else ("clocks" if parse_time(targets[0], whole=True) else source)
    return {"id": str(record_id), "source": source, "question": "" if question is None else str(question),
            "target": targets[0], "targets": targets, "prediction": extract_answer(raw, extract_as),
            "raw_output": raw, "meta": meta if isinstance(meta, Mapping) else {}}


def _targets(value, where: str) -> list[str]:
    if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return [str(value)]
    raise ValueError(f"{where}: target {value!r} is not a string or a non-empty list of strings")


def _lmms_record(record, where: str) -> dict:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    responses = "filtered_resps" if "filtered_resps" in record else "resps"
    missing = [k for k in LMMS_FIELDS if k not in record and not (k == "filtered_resps" and "resps" in record)]
    if missing:
        raise ValueError(f"{where}: not an lmms-eval --log_samples record: missing {', '.join(missing)}")
    doc = record["doc"] if isinstance(record["doc"], dict) else {}
    raw = _first_text(record[responses])
    if isinstance(doc.get("source"), str) and isinstance(doc.get("targets"), list) and doc["targets"]:
        try:
            meta = json.loads(doc["meta"]) if isinstance(doc.get("meta"), str) else None
        except ValueError:
            meta = None
        return _record(doc["source"], doc.get("id", record["doc_id"]), doc.get("question"),
                       _targets(doc["targets"], where), raw, meta)
    return _record("lmms-eval", record["doc_id"], doc.get("question", record.get("input")),
                   _targets(record["target"], where), raw)


def _json_records(path: Path):
    """(where, record) of a .jsonl file, or of a .json file holding a list or {"logs": [...]}."""
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path}: not a JSON file ({e})") from None
        items = data.get("logs") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise ValueError(f"{path}: expected a list of records or {{\"logs\": [...]}}")
        yield from ((f"{path} record {i}", r) for i, r in enumerate(items))
        return
    for lineno, _start, data in iter_lines(path):
        if not data.strip():
            continue
        try:
            yield f"{path}:{lineno}", json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path}:{lineno}: not a JSON record ({e})") from None


def _cell(value) -> str:
    """A spreadsheet cell as text: integral numbers without '.0' (a label 12 stored as a number is "12")."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _table_rows(path: Path) -> list[dict]:
    if path.suffix == ".xlsx":
        try:
            import openpyxl
        except ModuleNotFoundError:
            raise ValueError(f"{path}: reading VLMEvalKit .xlsx files needs openpyxl: pip install openpyxl "
                             "(or pass the .tsv prediction file)") from None
        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
        try:
            rows = list(workbook.worksheets[0].iter_rows(values_only=True))
        finally:
            workbook.close()
        if not rows:
            raise ValueError(f"{path}: empty spreadsheet")
        header = [_cell(h) for h in rows[0]]
        return [dict(zip(header, (_cell(v) for v in row))) for row in rows[1:] if any(v is not None for v in row)]
    csv.field_size_limit(2**31 - 1)  # base64 images and long generations exceed the 128 KiB default
    try:
        with path.open(encoding="utf-8", newline="") as stream:
            return list(csv.DictReader(stream, delimiter="\t" if path.suffix == ".tsv" else ","))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason})") from None


def _vlmevalkit_records(path: Path) -> list[dict]:
    rows = _table_rows(path)
    if not rows:
        raise ValueError(f"{path}: no rows")
    missing = [k for k in VLMEVALKIT_FIELDS if k not in rows[0]]
    if missing:
        raise ValueError(f"{path}: not a VLMEvalKit prediction file: missing column {', '.join(missing)}")
    records = []
    for number, row in enumerate(rows, 2):  # row 1 is the header
        where = f"{path} row {number} (index {row['index']!r})"
        targets = [row["answer"]]
        if row.get("targets"):
            try:
                targets = _targets(json.loads(row["targets"]), where)
            except ValueError:
                raise ValueError(f"{where}: column targets is not a JSON list of labels: {row['targets']!r}") from None
        source = row["source"] if row.get("source") in TASKS else "vlmevalkit"
        meta = {"category": row["category"]} if row.get("category") else {}
        records.append(_record(source, row.get("id") or row["index"], row["question"], targets,
                               row["prediction"], meta))
    return records


def detect_format(path) -> str:
    """One of FORMATS for the file at `path` (the suffix, then the first record's fields)."""
    path = Path(path)
    if path.suffix.lower() in TABLE_SUFFIXES:
        return "vlmevalkit"
    for where, record in _json_records(path):
        if isinstance(record, dict) and ("doc_id" in record or "doc" in record):
            return "lmms-eval"
        if isinstance(record, dict) and any(k in record for k in OWN_FIELDS):
            return "vlm-smmd"
        keys = ", ".join(sorted(record)[:6]) if isinstance(record, dict) else type(record).__name__
        raise ValueError(f"{where}: neither a vlm-smmd prediction (needs {', '.join(OWN_FIELDS)}, target) nor an "
                         f"lmms-eval --log_samples record (needs {', '.join(LMMS_FIELDS)}); it has {keys}")
    raise ValueError(f"{path}: no records")


def read_any_predictions(path) -> tuple[str, list[dict]]:
    """(format, prediction records) of a vlm-smmd, lmms-eval or VLMEvalKit prediction file (module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such prediction file {path}")
    fmt = detect_format(path)
    if fmt == "vlm-smmd":
        return fmt, load_predictions(path)
    if fmt == "vlmevalkit":
        return fmt, _vlmevalkit_records(path)
    records = [_lmms_record(record, where) for where, record in _json_records(path)]
    if not records:
        raise ValueError(f"{path}: no records")
    return fmt, records
