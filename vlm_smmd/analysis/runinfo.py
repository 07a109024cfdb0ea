"""The run behind a predictions file: its training folder, settings and log history."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from vlm_smmd.run_record import FILE_NAME as RUN_RECORD
from vlm_smmd.run_record import RunRecord, RunRecordError


def find_run_dir(predictions) -> Path | None:
    """The training output folder of the model that wrote `predictions`: the folder's metrics.json names it
    (run.model); None when that file, key or folder is missing."""
    metrics = Path(predictions).parent / "metrics.json"
    try:
        model = json.loads(metrics.read_text(encoding="utf-8"))["run"]["model"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(model, str):
        return None
    for candidate in (Path(model), metrics.parent / model):  # as given (relative to the cwd), or to the file
        if candidate.is_dir():
            return candidate
    return None


def _read_json_file(path: Path, notes: list[str]):
    if not path.is_file():
        notes.append(f"no {path.name} in {path.parent}")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        notes.append(f"{path} unreadable ({e})")
        return None


def _read_record(run_dir: Path, notes: list[str]) -> dict | None:
    """run_config.json as the flat dict a report shows; a missing or malformed one is a note, not an error."""
    try:
        record = RunRecord.read(run_dir / RUN_RECORD, missing_ok=True)
    except RunRecordError as e:
        notes.append(str(e))
        return None
    if record is None:
        notes.append(f"no {RUN_RECORD} in {run_dir}")
    return None if record is None else record.to_dict()


def load_run_info(run_dir=None, *, predictions=None) -> dict:
    """What a report says about the run: {"run_dir", "config" (run_config.json, a flat dict), "log_history"
    (trainer_state.json's list), "evaluation" (metrics.json's "run" beside `predictions`), "notes" (what
    was not found)}. `run_dir` defaults to `find_run_dir(predictions)`. Never raises on missing or bad files."""
    notes: list[str] = []
    evaluation = None
    if predictions is not None:
        metrics = _read_json_file(Path(predictions).parent / "metrics.json", notes)
        evaluation = metrics.get("run") if isinstance(metrics, dict) else None
        if run_dir is None:
            run_dir = find_run_dir(predictions)
    config = history = None
    if run_dir is None:
        notes.append("no training folder found (pass --run-dir)")
    else:
        run_dir = Path(run_dir)
        config = _read_record(run_dir, notes)
        state = _read_json_file(run_dir / "trainer_state.json", notes)
        history = state.get("log_history") if isinstance(state, dict) else None
        if state is not None and not isinstance(history, list):
            notes.append(f"{run_dir / 'trainer_state.json'} has no log_history list")
            history = None
    return {"run_dir": None if run_dir is None else str(run_dir), "config": config, "log_history": history,
            "evaluation": evaluation, "notes": notes}


_EVAL_SKIP = re.compile(r"runtime|per_second|epoch|numeric_tokens")  # bookkeeping, not a metric


def curve_series(history: Sequence[Mapping]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """{"training": {key: [(step, value)]}, "evaluation losses": ..., "evaluation metrics": ...} from a
    log history; non-numeric and non-finite values skipped."""
    panels: dict[str, dict[str, list]] = {"training": {}, "evaluation losses": {}, "evaluation metrics": {}}
    for entry in history:
        step = entry.get("step")
        if not isinstance(step, (int, float)):
            continue
        for key, value in entry.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                continue
            if key.startswith("eval_"):
                if _EVAL_SKIP.search(key):
                    continue
                panel = "evaluation losses" if re.search(r"loss|_ce$|_aux$|_total$", key) else "evaluation metrics"
            elif key in ("loss", "ce", "aux", "total"):
                panel = "training"
            else:
                continue
            panels[panel].setdefault(key, []).append((float(step), float(value)))
    return {p: s for p, s in panels.items() if s}
