"""This tool's datasets as tasks of the field's harnesses: an lmms-eval task folder, a VLMEvalKit TSV.

Both carry, per record, the question as training asked it (`data.collator.build_messages`: the question,
then the instruction unless it already ends with it), every accepted label (`evaluation.sample_targets`),
the source and id, and the image as eval sees it (`Sample.load_image`: RGB, alpha on white, written as PNG).

lmms-eval (`--include_path TASKDIR --tasks NAME`): TASKDIR holds
- SPLIT.jsonl, one record a line: doc_index, id, source, question, prompt (what the model is asked), answer
  (the training target), targets (list), image (a path relative to TASKDIR, "" for text), meta (JSON text),
  category;
- images/NNNNNN.png;
- NAME.yaml: dataset_path json with dataset_kwargs.data_files {SPLIT: SPLIT.jsonl} (lmms-eval resolves it
  against the YAML's folder), test_split, output_type generate_until, the hooks of utils.py, greedy
  generation_kwargs with eval's max_new_tokens and no stop string but the model's end of turn (as eval),
  process_results and a metric_list naming eval's per-sample scores (the clock gap as mean / median over
  answers holding a time, and no_time, each with higher_is_better false);
- utils.py (`scorer.render_utils`): self-contained, scoring as eval does;
- MARKER, which says this tool wrote the folder (what --overwrite may replace).
VLMEvalKit: OUT/NAME.tsv with index, image (base64 PNG), question (the prompt), answer (the first
target), category, and source, id, targets (JSON list) that its prediction files keep, plus MARKER.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from vlm_smmd.data.sample import DataError, SkipLog, check_on_error
from vlm_smmd.data.tasks import answer_tokens, read, task
from vlm_smmd.evaluation import json_safe, sample_targets, score_prediction

from .scorer import GAP_KEY, GAP_METRICS, metric_names, render_utils

MARKER = "vlm_smmd_export.json"
EXPORT_METRICS = ("relaxed", "final_number", "clock")  # the task kinds a harness can score with utils.py
_TASK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def default_task_name(kind: str) -> str:
    return f"vlm_smmd_{kind}"


def written_by_export(folder) -> bool:
    """Whether `folder` holds this tool's export marker (the folder --overwrite may replace)."""
    return (Path(folder) / MARKER).is_file()


def _prompt(sample, instruction: str | None) -> str:
    """The user text training and eval give the model for `sample` (`build_messages`, without the image)."""
    from vlm_smmd.data.collator import build_messages

    content = build_messages(sample, instruction=instruction, with_answer=False)[-1]["content"]
    return content if isinstance(content, str) else next(c["text"] for c in content if c["type"] == "text")


def _png(sample) -> bytes:
    buffer = io.BytesIO()
    sample.load_image().save(buffer, format="PNG")
    return buffer.getvalue()


def _category(sample, kind: str) -> str:
    """The record's first breakdown value (ChartQA's subset, ...), else the task name."""
    meta = sample.meta if isinstance(sample.meta, Mapping) else {}
    keys = task(kind).breakdowns
    value = meta.get(keys[0]) if keys else None
    return str(value) if value is not None else kind


def _records(kind: str, root, split: str, instruction: str | None, limit: int | None, on_error: str):
    """(record, png bytes or None) per usable sample, the score keys, the count of records skipped (by the
    reader and here) under on_error="skip", and the reader's coverage of a published set (It's About Time:
    rows whose image is missing), or None."""
    check_on_error(on_error)
    spec = task(kind)
    if spec.metric not in EXPORT_METRICS:
        raise ValueError(f"{kind}: a {spec.metric} task cannot be exported; the harness tasks cover "
                         f"{', '.join(t for t in EXPORT_METRICS)} tasks (clocks, charts, text numbers)")
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{kind}: no such dataset folder {root}")
    dataset = read(kind, root, split, on_error=on_error)
    n = len(dataset) if limit is None else min(limit, len(dataset))
    log = SkipLog(f"export {kind}")
    out, score_keys = [], None
    for i in range(n):
        sample = dataset[i]
        try:
            targets = sample_targets(sample)
            meta = json_safe(sample.meta) if isinstance(sample.meta, Mapping) else {}
            try:  # a target eval cannot score (a clock label holding no time) is a bad record here too
                keys = list(score_prediction(targets[0], targets, kind, meta))
            except ValueError as e:
                raise DataError(f"{kind}:{root}: malformed record {sample.id!r}: cannot be scored: {e}") from None
            png = _png(sample) if sample.image is not None else None
        except DataError as e:
            if on_error == "raise":
                raise
            log.add(e)
            continue
        score_keys = score_keys or keys
        out.append(({"id": str(sample.id), "source": kind, "question": sample.question,
                     "prompt": _prompt(sample, instruction), "answer": sample.answer, "targets": targets,
                     "meta": json.dumps(meta, sort_keys=True, ensure_ascii=False),
                     "category": _category(sample, kind)}, png))
    if not out:
        raise ValueError(f"{kind}:{root}: split {split!r} holds no usable records to export")
    if log.total:
        log.report()
    return out, score_keys, log.total + int(getattr(dataset, "skipped", 0) or 0), getattr(dataset, "coverage", None)


def _prepare(out: Path, overwrite: bool) -> None:
    """Make `out`; with `overwrite`, first remove what an earlier export wrote there (listed in its MARKER)."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file, not a folder")
    if overwrite and written_by_export(out):
        for name in json.loads((out / MARKER).read_text(encoding="utf-8")).get("files", []):
            path = out / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)


def _mark(out: Path, files: list[str], info: Mapping) -> None:
    (out / MARKER).write_text(json.dumps({"written_by": "vlm-smmd export", **info, "files": sorted(files)},
                                         indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _check_name(name: str) -> str:
    if not _TASK_NAME.fullmatch(name):
        raise ValueError(f"task name {name!r}: use letters, digits and '_', starting with a letter")
    return name


def _q(text: str) -> str:
    """A YAML scalar: JSON's double-quoted string is YAML's too."""
    return json.dumps(text, ensure_ascii=False)


def _task_yaml(name: str, split: str, data_file: str, max_new_tokens: int, score_keys, info: Mapping) -> str:
    lines = [f"# lmms-eval task written by `vlm-smmd export lmms-eval` from {info['data']} ({info['split']}, "
             f"{info['count']} records)",
             f"# run: lmms-eval --model MODEL --model_args pretrained=... --include_path THIS_FOLDER --tasks {name}"
             " --log_samples --output_path OUT",
             f"task: {_q(name)}",
             "dataset_path: json",
             "dataset_kwargs:",
             "  data_files:",
             f"    {_q(split)}: {_q(data_file)}",
             f"test_split: {_q(split)}",
             "output_type: generate_until",
             "doc_to_visual: !function utils.doc_to_visual",
             "doc_to_text: !function utils.doc_to_text",
             "doc_to_target: !function utils.doc_to_target",
             "# greedy, as vlm-smmd eval generates; it stops only at the model's end of turn",
             "generation_kwargs:",
             f"  max_new_tokens: {max_new_tokens}",
             "  temperature: 0",
             "  do_sample: false",
             "  num_beams: 1",
             "  until: []",
             "process_results: !function utils.process_results",
             "metric_list:"]
    for metric in metric_names(score_keys):
        gap = metric in GAP_METRICS
        aggregation = f"!function utils.{GAP_METRICS[metric]}" if gap else "mean"
        lines += [f"  - metric: {_q(metric)}", f"    aggregation: {aggregation}",
                  f"    higher_is_better: {'false' if gap else 'true'}"]
    lines += ["metadata:", "  version: 1.0", f"  exported_from: {_q(info['data'])}"]
    return "\n".join(lines) + "\n"


def export_lmms_eval(kind: str, root, out_dir, *, split: str = "test", instruction: str | None = None,
                     max_new_tokens: int | None = None, task_name: str | None = None, limit: int | None = None,
                     on_error: str = "raise", overwrite: bool = False) -> dict:
    """Write the lmms-eval task folder of `split` of `kind` under `root` into `out_dir` (module docstring);
    returns what was written: task, count, skipped, yaml, data, metrics."""
    name = _check_name(task_name or default_task_name(kind))
    records, score_keys, skipped, coverage = _records(kind, root, split, instruction, limit, on_error)
    out = Path(out_dir)
    _prepare(out, overwrite)
    (out / "images").mkdir(exist_ok=True)
    lines = []
    for index, (record, png) in enumerate(records):
        image = ""
        if png is not None:
            image = f"images/{index:06d}.png"
            (out / image).write_bytes(png)
        lines.append(json.dumps({"doc_index": index, **record, "image": image}, ensure_ascii=False))
    data_file = f"{split}.jsonl"
    (out / data_file).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    info = {"harness": "lmms-eval", "task": name, "data": f"{kind}:{root}", "split": split, "count": len(records),
            "instruction": instruction, "skipped": skipped, **({"coverage": coverage} if coverage else {})}
    tokens = max_new_tokens or answer_tokens([kind])
    (out / f"{name}.yaml").write_text(_task_yaml(name, split, data_file, tokens, score_keys, info), encoding="utf-8")
    (out / "utils.py").write_text(render_utils(score_keys, header=f"Hooks and scorer of the lmms-eval task {name} "
                                               f"({kind}, split {split})."), encoding="utf-8")
    _mark(out, ["images", data_file, f"{name}.yaml", "utils.py"], {**info, "max_new_tokens": tokens})
    return {**info, "yaml": out / f"{name}.yaml", "data_file": out / data_file, "metrics": metric_names(score_keys),
            "max_new_tokens": tokens}


VLMEVALKIT_COLUMNS = ("index", "image", "question", "answer", "category", "source", "id", "targets")


def export_vlmevalkit(kind: str, root, out_dir, *, split: str = "test", instruction: str | None = None,
                      task_name: str | None = None, limit: int | None = None, on_error: str = "raise",
                      overwrite: bool = False) -> dict:
    """Write `out_dir`/NAME.tsv, the VLMEvalKit benchmark of `split` of `kind` under `root` (module docstring)."""
    name = _check_name(task_name or default_task_name(kind))
    records, _, skipped, coverage = _records(kind, root, split, instruction, limit, on_error)
    out = Path(out_dir)
    _prepare(out, overwrite)
    tsv = out / f"{name}.tsv"
    with tsv.open("w", encoding="utf-8", newline="") as stream:
        writer = csv.writer(stream, delimiter="\t", lineterminator="\n")
        writer.writerow(VLMEVALKIT_COLUMNS)
        for index, (record, png) in enumerate(records):
            writer.writerow([index, base64.b64encode(png).decode("ascii") if png is not None else "",
                             record["prompt"], record["targets"][0], record["category"], record["source"],
                             record["id"], json.dumps(record["targets"], ensure_ascii=False)])
    info = {"harness": "vlmevalkit", "task": name, "data": f"{kind}:{root}", "split": split, "count": len(records),
            "instruction": instruction, "skipped": skipped, **({"coverage": coverage} if coverage else {})}
    _mark(out, [tsv.name], info)
    return {**info, "tsv": tsv}


__all__ = ["EXPORT_METRICS", "GAP_KEY", "MARKER", "export_lmms_eval", "export_vlmevalkit", "written_by_export"]
