"""Evaluation: batched greedy generation, answer extraction, per-sample scores, metrics per source and split.

`vlm-smmd eval --model DIR --data clocks:PATH [--data chartqa:PATH ...] --out DIR` writes
DIR/predictions.jsonl (one record a line, the format `vlm_smmd.analysis.load_predictions` reads) and
DIR/metrics.json. The Python API (`generate_predictions`, `extract_answer`, `score_prediction`,
`summarize`, `write_outputs`, `evaluate_model`) is what the demo and `compare` call.

A prediction record: id, source, split, question, target (the training answer), targets (every accepted
label: ChartQA keeps several), prediction (the extracted answer), raw_output (the decoded new tokens),
meta (the sample's meta, JSON-safe; a string value longer than MAX_META_CHARS is cut to that many characters
plus a marker "[... cut: N characters in all]", and the record's meta_cut lists the dotted keys cut), image (the absolute path of its image file, for samples read from
one; the analysis draws a few for grounding) and scores:
- every source: exact_match (`metrics.exact_match`, case-insensitive, max over targets);
- chartqa, plotqa, dvqa: relaxed_accuracy (ChartQA convention, max over targets);
- clocks (against the target nearest the prediction, on the 12-hour dial; readers keep one, ClockBench two): time_exact, hour_correct, minute_correct,
  time_gap_minutes (None when the prediction holds no time), within_1_min (It's About Time's top_1: ±1
  minute on the dial, circular), minute_within_1 (its top_1_min: the minute alone, wrapping) and within_5_min;
- the text tasks (gsm8k, svamp, deepmind_math, arithmetic, word_problems; metric "final_number" in the task registry): the prediction is the final number of the
  generation (`metrics.extract_final_number`: after "####", else after "The answer is", else the last
  number) and the target the sample's exact final number (`meta["final_answer"]`, also when the model
  was trained on GSM8K rationales); number_exact (equal values: "1,234" == "1234.0") and within_0.001,
  within_0.01, within_0.05 (relative tolerance, exact decimal arithmetic);
- grounding (metric "grounding"): the prediction is the whole generation, stripped (answers are JSON, often
  over several lines), scored by `metrics.grounding_scores` against the reader's meta (task, target_box,
  target_point in the answer's coordinates): no_valid_answer (no point or box could be read), and for box
  questions iou (0 without a valid box), iou_at_0.5 and corner_error_px (None without one), for point
  questions point_in_box (0 without a valid point) and centre_error_px (None without one). Means of the
  pixel errors are over the answers that give a point or box (`mean_<key>`, with their count `<key>_n`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from vlm_smmd.config import ConfigError, mapping_value
from vlm_smmd.data.sample import DataError, SkipLog, check_on_error
from vlm_smmd.data.tasks import TASKS, names_with
from vlm_smmd.metrics import (
    RELATIVE_TOLERANCES,
    clock_exact,
    clock_hour_correct,
    clock_minute_correct,
    clock_minute_within,
    clock_time_gap,
    clock_within_minutes,
    exact_match,
    extract_final_number,
    final_number_match,
    final_number_within,
    grounding_scores,
    parse_time,
    relaxed_accuracy,
    score_against_targets,
)
from vlm_smmd.run_record import FILE_NAME as RUN_RECORD
from vlm_smmd.run_record import RunRecord, RunRecordError

SOURCES = tuple(TASKS)
CHART_SOURCES = names_with("relaxed")
TEXT_SOURCES = names_with("final_number")  # numeric answers scored as final numbers
CLOCK_SOURCES = names_with("clock")
GROUNDING_SOURCES = names_with("grounding")  # answers are a point or a box
WITHIN_MINUTES = 5
GROUNDING_ERRORS = ("corner_error_px", "centre_error_px")  # None where the answer gives no point or box
# clock meta keys that are no style attribute
CLOCK_NON_STYLE = {"hour", "minute", "second", "file_name", "image", "question", "answer", "answers", "split",
                   "id", "seed", "index", "record", "img_id"}
MAX_STYLE_LEVELS = 24  # a meta key with more distinct values is not treated as categorical

# ---------------------------------------------------------------------------------------------------------
# Answer extraction

_PREFIX = re.compile(
    r"^(?:(?:so|thus|therefore|hence)\s*,?\s+)?(?:the\s+)?(?:final\s+|correct\s+)?answer\s*(?:is\b|[:=])\s*:?\s*"
    r"|^a\s*:\s*",
    re.IGNORECASE,
)
_CLOCK_PREFIX = re.compile(r"^(?:the\s+)?(?:time\s+(?:shown\s+)?is|it\s+is|it's)\s+", re.IGNORECASE)
# candidate clock readings; each is validated by `metrics.parse_time(..., whole=True)`
_TIME_CANDIDATE = re.compile(r"(?<![\d:])\d{1,2}:\d{2}(?::\d{2})?(?![\d:])(?:\s*[ap]\.?\s?m\.?(?![a-z]))?",
                             re.IGNORECASE | re.ASCII)
_DOTTED_PM = re.compile(r"[ap]\.\s?m\.$", re.IGNORECASE)
_ABBREVIATION = re.compile(r"(?:^|\s)(?:[A-Za-z]\.)+$")  # "U.S." keeps its final period
_WRAPPERS = " \t\"'`*"
# markdown around an answer: a leading bullet, heading or quote marker; emphasis and code markers that
# touch no word character on their outer side ("**Answer:** 7"; "2*3" and "snake_case" keep theirs)
_BLOCK_MARK = re.compile(r"^(?:[-*+\u2022]\s+|#{1,6}\s+|>\s*)+")
_EMPHASIS = re.compile(r"(?<![\w*_`])[*_`]+|[*_`]+(?![\w*_`])")


def extract_answer(text: str, source: str) -> str:
    """The answer in generated `text`.

    For the text tasks (TEXT_SOURCES), the final number (`metrics.extract_final_number`: "#### 1,234" ->
    "1234"), or "" when the text holds none. For grounding, the whole text stripped (its JSON may span
    lines; `metrics.parse_grounding` reads the point or box). For clocks, the first valid time reading
    anywhere in the text ("It is 3:15 pm." -> "3:15 pm"), if any. Otherwise: the first non-empty line, stripped, without
    markdown (a leading "- " bullet, "#" heading or ">" quote; emphasis and code markers "**", "_", "`"
    where they touch no word character outside: "**Answer:** 7" -> "Answer: 7"); then a leading "The
    answer is", "Answer:", "Final answer:", "A:" (and, for clocks, "The time is" / "It is") removed -- a
    line that was only such a prefix gives the next non-empty line; surrounding quotes, backticks and
    asterisks removed; one trailing period removed unless the text ends in an abbreviation ("U.S.").
    Empty text gives "".
    """
    if source in TEXT_SOURCES:
        return extract_final_number(text) or ""
    if source in GROUNDING_SOURCES:
        return text.strip()
    if source in CLOCK_SOURCES:
        for m in _TIME_CANDIDATE.finditer(text):
            if parse_time(m.group(), whole=True) is not None:
                reading = m.group().strip()
                # "3:15 pm." ends a sentence; "3:15 p.m." keeps its period
                return reading[:-1] if reading.endswith(".") and not _DOTTED_PM.search(reading) else reading
    line = ""
    for candidate in (ln for ln in text.splitlines() if ln.strip()):
        plain = _EMPHASIS.sub("", _BLOCK_MARK.sub("", candidate.strip())).strip()
        line = _PREFIX.sub("", plain, count=1).strip()
        if source in CLOCK_SOURCES:
            line = _CLOCK_PREFIX.sub("", line, count=1).strip()
        if line or line == plain:  # a line that was only "Answer:" -> the next line
            break
    line = line.strip(_WRAPPERS)
    if line.endswith(".") and not _ABBREVIATION.search(line):
        line = line[:-1]
    return line.strip(_WRAPPERS)


# ---------------------------------------------------------------------------------------------------------
# Scores


def score_prediction(prediction: str, targets: Sequence[str], source: str, meta: Mapping | None = None) -> dict:
    """Per-sample scores of `prediction` against `targets` (module docstring). A clock target holding no
    time is a ValueError (it cannot be scored as a time; generation reports it as a DataError naming the
    record, or skips it under on_error="skip"), and so is a grounding target giving no point or box.
    `meta`: the sample's meta; grounding reads task, target_box and target_point from it when present."""
    scores: dict = {"exact_match": score_against_targets(exact_match, prediction, targets)}
    if source in CHART_SOURCES:
        scores["relaxed_accuracy"] = score_against_targets(relaxed_accuracy, prediction, targets)
    elif source in TEXT_SOURCES:
        scores["number_exact"] = score_against_targets(final_number_match, prediction, targets)
        for tolerance in RELATIVE_TOLERANCES:
            if tolerance:
                scores[f"within_{tolerance:g}"] = score_against_targets(final_number_within, prediction, targets,
                                                                        tolerance=tolerance)
    elif source in CLOCK_SOURCES:
        # several accepted readings (ClockBench's minute hand between two marks): the one nearest the prediction
        gaps = [clock_time_gap(prediction, t) for t in targets]
        nearest = min(range(len(targets)), key=lambda i: math.inf if gaps[i] is None else gaps[i])
        target, gap = targets[nearest], gaps[nearest]
        scores.update(
            time_exact=float(clock_exact(prediction, target)),
            hour_correct=float(clock_hour_correct(prediction, target)),
            minute_correct=float(clock_minute_correct(prediction, target)),
            time_gap_minutes=gap,
            within_1_min=float(clock_within_minutes(prediction, target)),  # the scorer checked at 720 x 720
            minute_within_1=float(clock_minute_within(prediction, target)),
            within_5_min=float(gap is not None and gap <= WITHIN_MINUTES),
        )
    elif source in GROUNDING_SOURCES:
        meta = meta if isinstance(meta, Mapping) else {}
        scores.update(grounding_scores(prediction, targets[0], task=meta.get("task"),
                                       target_box=meta.get("target_box"), target_point=meta.get("target_point")))
    return scores


# ---------------------------------------------------------------------------------------------------------
# Generation


def json_safe(value):
    """`value` as plain JSON types: dict keys as strings, tuples as lists, numpy/torch scalars as Python
    numbers, paths and other objects as strings; non-finite floats become None."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    if hasattr(value, "tolist"):  # numpy / torch scalars and arrays
        return json_safe(value.tolist())
    return str(value)


MAX_META_CHARS = 10_000  # a longer string meta value is cut in the prediction record (a 1 GiB field once killed eval)


def _bounded(value, key: str, cut: list[str]):
    """`value` (JSON-safe) with every string over MAX_META_CHARS cut and marked; the dotted keys go to `cut`."""
    if isinstance(value, str) and len(value) > MAX_META_CHARS:
        cut.append(key)
        return f"{value[:MAX_META_CHARS]}[... cut: {len(value)} characters in all]"
    if isinstance(value, dict):
        return {k: _bounded(v, f"{key}.{k}" if key else k, cut) for k, v in value.items()}
    if isinstance(value, list):
        return [_bounded(v, f"{key}.{i}", cut) for i, v in enumerate(value)]
    return value


def sample_targets(sample) -> list[str]:
    """Every accepted label of a sample: for the text tasks [meta["final_answer"]] (the exact final number,
    whatever the training target), else `meta["answers"]` when the reader kept several, else [answer]."""
    if sample.source in TEXT_SOURCES and isinstance(sample.meta, Mapping) and sample.meta.get("final_answer") is not None:
        return [str(sample.meta["final_answer"])]
    answers = sample.meta.get("answers") if isinstance(sample.meta, Mapping) else None
    if isinstance(answers, (list, tuple)) and answers:
        return [str(a) for a in answers]
    return [sample.answer]


def _stop_ids(model, tokenizer, family) -> list[int]:
    """The model's end-of-sequence ids plus the family's end-of-turn token (<|im_end|>, <|eot_id|>)."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    end = tokenizer.convert_tokens_to_ids(family.end_of_turn)
    if isinstance(end, int) and end != tokenizer.unk_token_id and end not in ids:
        ids.append(end)
    if not ids:
        raise ValueError("the model and tokenizer define no end-of-sequence token")
    return ids


def _prompt_batches(collator, samples, batch_size: int, on_error: str, skip_log):
    """(kept samples, prompt batch) per chunk of `samples`; under on_error="skip" a chunk that fails is
    retried sample by sample and the unusable samples are counted in `skip_log`."""
    for start in range(0, len(samples), batch_size):
        chunk = list(samples[start:start + batch_size])
        try:
            yield chunk, collator.prompt_batch(chunk)
            continue
        except DataError:
            if on_error == "raise":
                raise
        kept = []
        for sample in chunk:
            try:
                collator.prompt_batch([sample])
            except DataError as e:
                skip_log.add(e)
                continue
            kept.append(sample)
        yield kept, (collator.prompt_batch(kept) if kept else None)


def generate_predictions(model, processor, samples, *, batch_size: int = 8, max_new_tokens: int = 16,
                         system_prompt: str | None = None, instruction: str | None = None,
                         min_pixels: int | None = None, max_pixels: int | None = None, progress: bool = True,
                         on_error: str = "raise", skip_log=None, desc: str = "eval", sink=None) -> list[dict]:
    """Greedy answers for `samples`, one scored record per sample, in order (module docstring).

    Batches of `batch_size` are built left-padded by `VLMCollator.prompt_batch` (the same chat as in
    training, ending with the assistant header) and passed whole (input_ids, attention_mask and the
    family's image inputs) to `model.generate` with do_sample=False; only the new tokens [B, T_new] are
    decoded, without special tokens. Generation stops at the model's EOS or the family's end-of-turn token. Under on_error="skip" samples whose image or text cannot be used are left out and
    counted in `skip_log` (a `SkipLog`); under "raise" the DataError naming the record propagates.
    `sink`, when given, is called with each batch's records as soon as they are scored (streaming).
    """
    import torch
    from tqdm import tqdm
    from transformers import GenerationConfig

    from vlm_smmd.data.collator import VLMCollator
    from vlm_smmd.families import family_of

    check_on_error(on_error)
    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size and max_new_tokens must be >= 1, got {batch_size} and {max_new_tokens}")
    skip_log = skip_log if skip_log is not None else SkipLog(desc)
    family = family_of(model)
    collator = VLMCollator(processor, family=family, system_prompt=system_prompt, instruction=instruction,
                           min_pixels=min_pixels, max_pixels=max_pixels)
    tokenizer = collator.tokenizer
    generation_config = GenerationConfig(
        do_sample=False, num_beams=1, max_new_tokens=max_new_tokens, eos_token_id=_stop_ids(model, tokenizer, family),
        pad_token_id=tokenizer.pad_token_id, bos_token_id=getattr(model.generation_config, "bos_token_id", None),
    )
    device = model.device
    was_training = model.training
    model.eval()
    records = []
    bar = tqdm(total=math.ceil(len(samples) / batch_size), desc=desc, unit="batch", disable=not progress)
    try:
        for kept, batch in _prompt_batches(collator, samples, batch_size, on_error, skip_log):
            bar.update()
            if batch is None:
                continue
            inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            with torch.inference_mode():
                out = model.generate(**inputs, generation_config=generation_config)
            new_tokens = out[:, inputs["input_ids"].shape[1]:].cpu()  # [B, T_new]
            texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            scored = []
            for sample, raw in zip(kept, texts, strict=True):
                try:
                    scored.append(_record(sample, raw))
                except DataError as e:  # a target that cannot be scored
                    if on_error == "raise":
                        raise
                    skip_log.add(e)
            records += scored
            if sink is not None:
                sink(scored)
    finally:
        bar.close()
        if was_training:
            model.train()
    if skip_log.total:
        skip_log.report()
    return records


def _record(sample, raw_output: str) -> dict:
    targets = sample_targets(sample)
    prediction = extract_answer(raw_output, sample.source)
    try:
        scores = score_prediction(prediction, targets, sample.source, sample.meta)
    except ValueError as e:
        raise DataError(f"malformed record: cannot score record {sample.id!r} of {sample.source}: {e}") from None
    cut: list[str] = []
    meta = _bounded(json_safe(sample.meta), "", cut) if isinstance(sample.meta, Mapping) else {}
    record = {
        "id": str(sample.id), "source": sample.source, "split": meta.get("split"), "question": sample.question,
        "target": sample.answer, "targets": targets, "prediction": prediction, "raw_output": raw_output,
        "meta": meta, "scores": scores,
    }
    if cut:
        record["meta_cut"] = cut
    if isinstance(sample.image, (str, os.PathLike)):  # where the analysis finds the image for its example plots
        record["image"] = os.path.abspath(sample.image)
    return record


# ---------------------------------------------------------------------------------------------------------
# Metrics


def _aggregate(records: Sequence[Mapping]) -> dict:
    """{"count", <mean of each score>, ...}; a time gap gives mean/median over records holding a time and
    `no_time` (records whose prediction holds none); a grounding pixel error (GROUNDING_ERRORS) gives
    `mean_<key>` over the answers giving a point or box and `<key>_n`, their count; other scores that are
    None for some records are averaged over the others."""
    out: dict = {"count": len(records)}
    keys: list[str] = []
    for r in records:
        keys += [k for k in r["scores"] if k not in keys]
    for key in keys:
        values = [r["scores"][key] for r in records if key in r["scores"]]
        if key == "time_gap_minutes":
            gaps = [float(v) for v in values if v is not None]
            out["mean_time_gap_minutes"] = statistics.fmean(gaps) if gaps else None
            out["median_time_gap_minutes"] = statistics.median(gaps) if gaps else None
            out["no_time"] = sum(v is None for v in values)
        elif key in GROUNDING_ERRORS:
            errors = [float(v) for v in values if v is not None]
            out[f"mean_{key}"] = statistics.fmean(errors) if errors else None
            out[f"{key}_n"] = len(errors)
        else:
            values = [v for v in values if v is not None]
            out[key] = statistics.fmean(float(v) for v in values) if values else None
    return out


def _flat_meta(meta: Mapping, prefix: str = "") -> dict:
    """Nested dicts flattened to dotted keys ({"style": {"face": "round"}} -> {"style.face": "round"})."""
    flat = {}
    for key, value in meta.items():
        if isinstance(value, Mapping):
            flat.update(_flat_meta(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _level(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def style_keys(records: Sequence[Mapping]) -> list[str]:
    """The categorical meta keys of clock records: every value a string, bool or None, 2 to
    MAX_STYLE_LEVELS distinct values, and not one of CLOCK_NON_STYLE (hour, minute, second, file name,
    question, ...). Nested dicts count by dotted key. Sorted."""
    values: dict[str, set] = {}
    bad: set[str] = set()
    for r in records:
        for key, value in _flat_meta(r.get("meta") or {}).items():
            if key.rsplit(".", 1)[-1] in CLOCK_NON_STYLE:
                continue
            if value is None or isinstance(value, (str, bool)):
                values.setdefault(key, set()).add(_level(value))
            else:
                bad.add(key)
    return sorted(k for k, v in values.items() if k not in bad and 2 <= len(v) <= MAX_STYLE_LEVELS)


def _breakdown(records: Sequence[Mapping], key: str) -> dict:
    """{level: aggregate} of `records` grouped by meta[key] (dotted for nested; missing -> "null")."""
    groups: dict[str, list] = {}
    for r in records:
        groups.setdefault(_level(_flat_meta(r.get("meta") or {}).get(key)), []).append(r)
    return {level: _aggregate(groups[level]) for level in sorted(groups)}


def summarize(records: Sequence[Mapping]) -> dict:
    """Metrics of scored records as a JSON-ready dict:

    {"count", "exact_match" (all records),
     "sources": {source: {split: {"count", <mean scores>, "by": {meta key: {value: {"count", ...}}}}}}}

    Breakdowns: ChartQA by subset (human / augmented), DVQA by template_id and question_type, PlotQA by
    template and type, grounding by task (point / box) and coords, clocks by every style attribute in meta
    (`style_keys`). A record without a split is counted under "unknown".
    """
    if not records:
        raise ValueError("summarize got no records")
    by_source: dict[str, dict[str, list]] = {}
    for r in records:
        by_source.setdefault(r["source"], {}).setdefault(r.get("split") or "unknown", []).append(r)
    sources = {}
    for source in sorted(by_source):
        sources[source] = {}
        for split in sorted(by_source[source]):
            recs = by_source[source][split]
            keys = style_keys(recs) if source in CLOCK_SOURCES else (TASKS[source].breakdowns if source in TASKS else ())
            sources[source][split] = {**_aggregate(recs), "by": {key: _breakdown(recs, key) for key in keys}}
    return {
        "count": len(records),
        "exact_match": statistics.fmean(float(r["scores"]["exact_match"]) for r in records),
        "sources": sources,
    }


class OutputError(ValueError):
    """An output file could not be written (a full disk, a folder made read-only): one line naming it."""


def _write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file; a failed write (a full disk) leaves no temporary
    file and raises an OutputError naming `path`."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None


# the predictions of an evaluation still running, one record a line, appended batch by batch, and the
# arguments it was started with; `eval --resume` continues from them, the finished run removes both
PARTIAL = "predictions.partial.jsonl"
PARTIAL_RUN = "predictions.partial.json"
# the arguments a resumed evaluation must share with the interrupted one (the others only report)
RESUME_KEYS = ("model", "data", "split", "limit", "batch_size", "max_new_tokens", "system_prompt", "instruction",
               "min_pixels", "max_pixels", "on_error", "max_image_pixels", "reader_options")


def check_writable(out_dir) -> None:
    """OSError naming `out_dir` when it is not a folder this process can create files in (checked before
    the model loads, so a read-only or wrong --out costs nothing)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise PermissionError(f"--out {out} is not writable: {e.strerror or e}") from None


def _read_partial(out: Path, run: Mapping) -> list[dict]:
    """The records an interrupted evaluation in `out` kept, after checking it ran with `run`'s arguments;
    [] when there is none. A torn last line (a write cut off) is dropped; any other bad line is an error."""
    partial, run_file = out / PARTIAL, out / PARTIAL_RUN
    if not partial.exists() or not run_file.exists():
        return []
    try:
        before = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{run_file}: unreadable ({e}); remove {partial} and {run_file} to start afresh") from None
    changed = [k for k in RESUME_KEYS if json_safe(run.get(k)) != before.get(k)]
    if changed:
        raise ValueError(f"--resume: {out} holds an evaluation started with other arguments "
                         f"({', '.join(changed)}); rerun with the same ones, or pass --overwrite to start afresh")
    text = partial.read_text(encoding="utf-8")
    lines = text.split("\n")
    if lines[-1]:
        print(f"{partial}: dropped a torn last line (a write cut off); it is generated again")
    records = []
    for number, line in enumerate(lines[:-1], 1):
        try:
            records.append(json.loads(line))
        except ValueError:
            raise ValueError(f"{partial} line {number}: not a JSON record; remove {partial} and {run_file} "
                             "to start afresh") from None
    return records


def _keys(pairs) -> list[tuple]:
    """(source, id, occurrence) per (source, id) pair: what matches a kept record to its sample, repeated
    ids included."""
    seen: dict[tuple, int] = {}
    keys = []
    for pair in pairs:
        seen[pair] = seen.get(pair, 0) + 1
        keys.append((*pair, seen[pair]))
    return keys


def write_outputs(records: Sequence[Mapping], metrics: Mapping, out_dir) -> tuple[Path, Path]:
    """Write `out_dir`/predictions.jsonl (one record a line) and metrics.json; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    predictions = out / "predictions.jsonl"
    metrics_path = out / "metrics.json"
    lines = [json.dumps(json_safe(r), ensure_ascii=False, allow_nan=False) for r in records]
    _write_atomic(predictions, "".join(line + "\n" for line in lines))
    _write_atomic(metrics_path, json.dumps(json_safe(metrics), indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    return predictions, metrics_path


TABLE_COLUMNS = (("exact", "exact_match"), ("relaxed", "relaxed_accuracy"), ("time exact", "time_exact"),
                 ("<=1 min", "within_1_min"), (f"<={WITHIN_MINUTES} min", "within_5_min"), ("mean gap", "mean_time_gap_minutes"),
                 ("num exact", "number_exact"), ("rel 0.1%", "within_0.001"), ("rel 1%", "within_0.01"),
                 ("rel 5%", "within_0.05"), ("IoU", "iou"), ("IoU>=0.5", "iou_at_0.5"),
                 ("corner px", "mean_corner_error_px"), ("in box", "point_in_box"),
                 ("centre px", "mean_centre_error_px"), ("no answer", "no_valid_answer"))


def format_metrics_table(metrics: Mapping) -> str:
    """A short text table: one row per source and split; a column only when some row has its metric
    (exact match always)."""
    rows_in = [(source, split, m) for source, splits in metrics["sources"].items() for split, m in splits.items()]
    columns = [(title, key) for title, key in TABLE_COLUMNS
               if key == "exact_match" or any(m.get(key) is not None for _, _, m in rows_in)]
    header = ("source", "split", "count", *(title for title, _ in columns))
    rows = [header]
    for source, split, m in rows_in:
        cells = [source, split, str(m["count"])]
        for _, key in columns:
            value = m.get(key)
            cells.append("-" if value is None else (f"{value:.1f}" if key.startswith("mean") else f"{value:.3f}"))
        rows.append(tuple(cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


# ---------------------------------------------------------------------------------------------------------
# Data specs and the whole run


class DataSpec(NamedTuple):
    name: str
    path: Path


def parse_data_spec(spec) -> DataSpec:
    """"NAME:PATH" (NAME one of SOURCES) or a (name, path) pair -> DataSpec; ValueError explaining a bad spec."""
    if isinstance(spec, DataSpec):
        name, path = spec
    elif isinstance(spec, str):
        name, sep, path = spec.partition(":")
        if not sep or not path:
            raise ValueError(f"data spec {spec!r} is not NAME:PATH (NAME one of {', '.join(SOURCES)})")
    elif isinstance(spec, (tuple, list)) and len(spec) == 2:
        name, path = spec
    else:
        raise ValueError(f"data spec {spec!r} is not NAME:PATH or a (name, path) pair")
    if name not in SOURCES:
        raise ValueError(f"data spec {spec!r}: unknown source {name!r}; choose from {', '.join(SOURCES)}")
    return DataSpec(name, Path(path))


def read_source(spec: DataSpec, split: str, on_error: str = "raise", options: Mapping | None = None):
    """The reader of `spec.name` on `spec.path` with its keyword `options` (a sequence of Samples; `.skipped`
    when the reader counts)."""
    from vlm_smmd.data.tasks import read

    return read(spec.name, spec.path, split, on_error=on_error, **(options or {}))


@dataclasses.dataclass
class EvalArguments:
    """The settings of one evaluation (`evaluate_model`): the single list behind the eval command's flags
    (each field is the flag of its name, `--batch-size` for batch_size, unless its metadata says "flag":
    None), compare's eval settings, variant.json and the compare worker (`to_dict` / `from_dict`)."""

    split: str = "test"
    limit: int | None = None
    batch_size: int = 8
    max_new_tokens: int = 16
    system_prompt: str | None = None
    instruction: str | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None
    on_error: str = "raise"
    max_image_pixels: int | None = None
    device: str | None = None
    dtype: str | None = None
    # (task, root, split) sets the model was trained on; eval's --train-data
    train_data: tuple[tuple[str, str, str], ...] = ()
    # {source: reader keyword options}; None takes the training run's (no flag: run_config.json holds them)
    reader_options: dict[str, dict] | None = dataclasses.field(default=None, metadata={"flag": None})
    resume: bool = False

    def __post_init__(self):
        self.train_data = tuple(tuple(t) for t in self.train_data)  # JSON gives lists

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping, source) -> EvalArguments:
        """The arguments `values` holds (as `to_dict` wrote them, e.g. in variant.json); a ValueError naming
        `source` (the file) for a key that is no field: settings written by another version are refused,
        never dropped."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"{source}: unknown evaluation setting(s) {', '.join(unknown)} (known: "
                             f"{', '.join(sorted(names))})")
        return cls(**values)


def evaluate_model(model_name_or_path, data_specs, out_dir, arguments: EvalArguments | None = None, *,
                   progress: bool = True, threads: Mapping | None = None, **settings) -> dict:
    """Load a model, generate for the first `limit` samples (all when None) of `split` of each data spec,
    score, write predictions.jsonl + metrics.json to `out_dir`, and return the metrics.

    `model_name_or_path`: a saved model directory, a hub id or a preset (`modeling.load_model_and_processor`,
    no trust_remote_code). `data_specs`: "NAME:PATH" strings or (name, path) pairs, each source at most once.
    `device` defaults to cuda when available, else cpu; `dtype` defaults to fp32 on the CPU and the
    checkpoint's own dtype ("auto") on a GPU. metrics["skipped"] counts, per source, the records the reader
    ("read"; None when the reader keeps no count) and the generation ("generate") skipped under
    on_error="skip", with the reasons; metrics["run"] records the arguments. `train_data`: the (task, root,
    split) sets the model was trained on (`training_data`); each evaluated source is checked against the
    one of its name (`data.leakage`): metrics["leakage"][source], None when there is none to check.
    `max_image_pixels`: the largest image accepted (`data.set_max_image_pixels`; None: Pillow's default).
    `reader_options`: {source name: keyword options of its reader}; None takes the training run's own
    (`training_reader_options`), so a reader whose targets depend on its options (RefCOCO's coordinate
    convention and pixel limits, DeepMind modules) reads the test split as training read the train split.
    metrics["coverage"][source], for readers of published sets the user may hold only part of (It's About
    Time): the rows of its files and how many are present (`data.itsabouttime.coverage_line`).
    `threads`: the caller's thread plan, kept in metrics["run"] (without one, the torch threads found).

    Predictions are streamed to `out_dir`/PARTIAL batch by batch (an interrupted or failed run keeps them);
    `resume` continues from them (the same arguments, RESUME_KEYS, or a ValueError listing the changed
    ones) and generates only the samples they lack. The finished run writes predictions.jsonl and
    metrics.json and removes the partial files.

    `arguments`: the settings (`EvalArguments`); or give its fields as keywords (`split="val"`), not both.
    """
    import torch

    from vlm_smmd.modeling import load_model_and_processor

    if arguments is not None and settings:
        raise TypeError(f"evaluate_model: pass the EvalArguments or its fields as keywords, not both "
                        f"({', '.join(settings)})")
    a = arguments if arguments is not None else EvalArguments(**settings)
    split, limit, on_error, reader_options = a.split, a.limit, a.on_error, a.reader_options
    check_on_error(on_error)
    specs = [parse_data_spec(s) for s in data_specs]
    if not specs:
        raise ValueError("no data specs given")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"each source may be given once, got {', '.join(names)}")
    for s in specs:
        if not s.path.exists():
            raise FileNotFoundError(f"{s.name}: no such dataset folder {s.path}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    out = Path(out_dir)
    check_writable(out)

    from vlm_smmd.data.sample import set_max_image_pixels

    set_max_image_pixels(a.max_image_pixels)
    # read every dataset before the (slow) model load so that data errors surface first
    if reader_options is None:
        reader_options = training_reader_options(model_name_or_path)
    reader_options = {s.name: dict(reader_options.get(s.name) or {}) for s in specs}
    datasets = [(s, read_source(s, split, on_error, reader_options[s.name])) for s in specs]
    for s, ds in datasets:
        if len(ds) == 0:
            raise ValueError(f"{s.name}:{s.path}: split {split!r} holds no usable samples")

    run = {"model": str(model_name_or_path), "data": {s.name: str(s.path) for s in specs},
           "split": split, "limit": limit, "batch_size": a.batch_size, "max_new_tokens": a.max_new_tokens,
           "system_prompt": a.system_prompt, "instruction": a.instruction, "min_pixels": a.min_pixels,
           "max_pixels": a.max_pixels, "on_error": on_error,
           "train_data": [list(t) for t in a.train_data], "max_image_pixels": a.max_image_pixels,
           "reader_options": {name: opts for name, opts in reader_options.items() if opts},
           "threads": dict(threads) if threads is not None else {"threads": torch.get_num_threads()}}
    kept = _read_partial(out, run) if a.resume else []
    if kept:
        print(f"--resume: {len(kept)} predictions kept from {out / PARTIAL}; generating the rest")
    done = dict(zip(_keys((r["source"], str(r["id"])) for r in kept), kept, strict=True))

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = a.dtype or ("fp32" if str(device).startswith("cpu") else "auto")
    model, processor = load_model_and_processor(str(model_name_or_path), dtype=dtype, verbose=False)
    _refuse_nonfinite(model, model_name_or_path)
    model.to(device)

    partial = out / PARTIAL
    _write_atomic(out / PARTIAL_RUN, json.dumps(json_safe(run), ensure_ascii=False) + "\n")
    _write_atomic(partial, "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in kept))
    records, skipped, leakage = [], {}, {}
    # readers of published sets the user holds part of (It's About Time) say how many rows are present
    coverage = {s.name: ds.coverage for s, ds in datasets if isinstance(getattr(ds, "coverage", None), dict)}
    with partial.open("a", encoding="utf-8") as stream:
        def sink(batch):
            for r in batch:
                r["split"] = r["split"] or split
            try:
                stream.write("".join(json.dumps(json_safe(r), ensure_ascii=False, allow_nan=False) + "\n"
                                     for r in batch))
                stream.flush()  # a killed process keeps every finished batch
            except OSError as e:
                raise OutputError(f"cannot write {partial}: {e.strerror or e}") from None

        try:
            for s, ds in datasets:
                n = len(ds) if limit is None else min(limit, len(ds))
                samples = [ds[i] for i in range(n)]
                leakage[s.name] = _leakage(samples, s.name, split, a.train_data, on_error, progress)
                keys = _keys((sample.source, str(sample.id)) for sample in samples)
                todo = [sample for sample, key in zip(samples, keys, strict=True) if key not in done]
                log = SkipLog(f"eval {s.name}")
                recs = generate_predictions(model, processor, todo, batch_size=a.batch_size,
                                            max_new_tokens=a.max_new_tokens, system_prompt=a.system_prompt,
                                            instruction=a.instruction, min_pixels=a.min_pixels,
                                            max_pixels=a.max_pixels,
                                            progress=progress, on_error=on_error, skip_log=log,
                                            desc=f"eval {s.name}", sink=sink) if todo else []
                new = dict(zip(_keys((r["source"], str(r["id"])) for r in recs), recs, strict=True))
                records += [new[key] if key in new else done[key] for key in keys if key in new or key in done]
                read_log = getattr(ds, "skip_log", None)
                read_skips = getattr(ds, "skipped", None)  # None: the reader does not count (it warns instead)
                skipped[s.name] = {"read": None if read_skips is None else int(read_skips), "generate": log.total,
                                   "reasons": {**(read_log.counts if read_log is not None else {}), **log.counts}}
        except KeyboardInterrupt:
            if _drop_empty_partial(out):
                raise
            print(f"the predictions generated so far are kept in {partial}; rerun the same eval with --resume "
                  "to continue", file=sys.stderr)
            raise
        except BaseException:
            _drop_empty_partial(out)
            raise
    if not records:
        _drop_empty_partial(out)
        raise ValueError("every sample was skipped; nothing to score")
    metrics = summarize(records)
    metrics["skipped"] = skipped
    metrics["leakage"] = leakage
    if coverage:
        metrics["coverage"] = coverage
    metrics["run"] = run
    try:
        write_outputs(records, metrics, out)
    except OutputError as e:
        raise OutputError(f"{e}; the predictions are kept in {partial}: free space and rerun the same eval "
                          "with --resume") from None
    partial.unlink()
    (out / PARTIAL_RUN).unlink()
    return metrics


def _drop_empty_partial(out: Path) -> bool:
    """Remove the partial files of a run that stopped before its first prediction (nothing to resume, and a
    leftover would make the next eval into `out` ask for --resume); True when they were removed."""
    partial = out / PARTIAL
    try:
        if partial.stat().st_size:
            return False
    except FileNotFoundError:
        pass
    partial.unlink(missing_ok=True)
    (out / PARTIAL_RUN).unlink(missing_ok=True)
    return True


def _refuse_nonfinite(model, name) -> None:
    """ModelLoadError when a weight of `model` is NaN or infinite (a diverged run): it would answer noise.
    One foreach norm over all weights; the names are looked up only when it is not finite."""
    import torch

    from vlm_smmd.modeling import ModelLoadError

    params = [p.detach() for p in model.parameters() if p.numel()]
    if params and bool(torch.isfinite(torch.nn.utils.get_total_norm(params, 2.0))):
        return
    bad = [n for n, p in model.named_parameters() if p.numel() and not bool(torch.isfinite(p).all())]
    if bad:
        raise ModelLoadError(f"{name}: {len(bad)} of {len(params)} weight tensors hold NaN or infinite values (e.g. "
                             f"{bad[0]}), as a diverged training run leaves them; not evaluated")


def _leakage(samples, name: str, split: str, train_data, on_error: str, progress: bool) -> dict | None:
    """What `samples` (split `split` of task `name`) share with the training set of that task, if known."""
    from vlm_smmd.data.leakage import check_leakage
    from vlm_smmd.data.tasks import read, task

    sets = [(root, train_split) for task, root, train_split in train_data if task == name]
    if not sets:
        return None
    root, train_split = sets[0]
    if not Path(root).exists():
        return {"train": f"{name}:{root}:{train_split}", "lines": [f"training data {root} not found: not checked"],
                "held_out": None, "leaks": None}
    training = read(name, root, train_split, on_error=on_error)
    report = check_leakage(samples, (training[i] for i in range(len(training))), progress=progress,
                           unseen_key=task(name).unseen_key)
    return {"train": f"{name}:{root}:{train_split}", "lines": report.lines(), "held_out": report.held_out,
            "leaks": report.leaks(split), **report.to_dict()}


def find_run_config(model) -> Path | None:
    """The run_config.json `vlm-smmd train` saved for `model`: in its folder, or, for a checkpoint-N folder,
    in the run's output_dir above it; None for a hub id, a preset or a folder without one."""
    folder = Path(model)
    candidates = [folder] + ([folder.parent] if folder.name.startswith("checkpoint-") else [])
    return next((c / RUN_RECORD for c in candidates if (c / RUN_RECORD).is_file()), None)


def _read_run_config(path: Path | None) -> RunRecord:
    """The run's record; an empty one when there is none (a hub id, a preset, a folder without one). A
    malformed run_config.json is a RunRecordError in one line naming it, never taken as no record."""
    return (RunRecord.read(path, missing_ok=True) if path is not None else None) or RunRecord()


def training_prompts(model, system_prompt: str | None, instruction: str | None) -> tuple[str | None, str | None, str]:
    """(system_prompt, instruction, note): each one not given is taken from the run's run_config.json
    (`find_run_config`), so a model is asked as it was trained; the note says what was taken, or that a
    model folder has no run_config.json to take them from ("" when there is nothing to say). An empty
    instruction means none; an empty system prompt is an empty system turn, which differs from None (the
    family's default turn, e.g. Qwen's "You are Qwen, ..."), and is kept as trained or given."""
    path = find_run_config(model)
    taken = []
    if system_prompt is None or instruction is None:
        config = _read_run_config(path)
        if system_prompt is None and config.get("system_prompt") is not None:
            system_prompt = config.get("system_prompt")
            taken.append(f"system prompt {system_prompt!r}")
        if instruction is None and config.get("instruction"):
            instruction = config.get("instruction")
            taken.append(f"instruction {instruction!r}")
        if path is None and Path(model).is_dir():
            return system_prompt, instruction or None, (
                f"{model} has no run_config.json (nor its parent, for a checkpoint folder): asking without the "
                "training run's instruction and system prompt; pass --instruction / --system-prompt to set them")
    note = f"asking as in training ({path}): {', '.join(taken)}; pass --instruction '' for none, " \
           "--system-prompt '' for an empty system turn" if taken else ""
    return system_prompt, instruction or None, note


def training_reader_options(model) -> dict[str, dict]:
    """{dataset: reader_options} of the run behind `model`, from its run_config.json ({} when it has none)."""
    path = find_run_config(model)
    config = _read_run_config(path)
    try:  # a mapping; JSON text in the run_config.json of runs before the typed settings
        options = mapping_value("reader_options", config.get("reader_options"))
    except ConfigError as e:  # a record that cannot say how its run read the data: never taken as none
        raise RunRecordError(f"{path}: {e}") from None
    return {config.get("dataset"): options} if options and isinstance(options, dict) and config.get("dataset") else {}


def training_data(model) -> list[tuple[str, str, str]]:
    """[(task, root, split)] the run behind `model` trained on, from its run_config.json ([] when unknown)."""
    path = find_run_config(model)
    config = _read_run_config(path)
    if config.get("dataset") == "mixture":
        try:
            entries = mapping_value("mixture", config.get("mixture")) or []
        except ConfigError as e:  # the leakage check would silently check nothing
            raise RunRecordError(f"{path}: {e}") from None
        return [(e["name"], str(e["root"]), e.get("split", config.get("train_split") or "train"))
                for e in entries if isinstance(e, dict) and "name" in e and "root" in e]
    if config.get("dataset") and config.get("data_root"):
        return [(config.get("dataset"), str(config.get("data_root")), config.get("train_split") or "train")]
    return []
