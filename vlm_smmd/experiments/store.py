"""A comparison's folder on disk: JSON files written atomically, status.json, logs, dropping weights."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

ERROR_TAIL_LINES = 60
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def write_json(path: Path, obj) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


class StateError(ValueError):
    """A state file of a comparison (status.json, done.json, metrics.json) that cannot be read: one line."""


def read_state(path: Path) -> dict:
    """A JSON object written by compare or its workers; StateError naming `path` when it is truncated, not
    JSON or not an object (FileNotFoundError when it is missing)."""
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise StateError(f"{path} is damaged (truncated or not JSON: {e})") from None
    if not isinstance(value, dict):
        raise StateError(f"{path} is damaged (a JSON {type(value).__name__}, not an object)")
    return value


def tail(path: Path, lines: int = ERROR_TAIL_LINES) -> str:
    """The last `lines` lines of a log, progress-bar carriage returns resolved to their last state."""
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.splitlines()[-lines:])


def drop_weights(model_dir: Path) -> int:
    """Delete the weight files and checkpoint folders of a training output; returns the bytes freed."""
    freed = 0
    if not model_dir.is_dir():
        return 0
    for path in sorted(model_dir.iterdir()):
        if path.is_dir() and path.name.startswith("checkpoint-"):
            freed += sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            shutil.rmtree(path)
        elif path.is_file() and path.suffix in WEIGHT_SUFFIXES:
            freed += path.stat().st_size
            path.unlink()
    return freed


class Status:
    """status.json: {"variants": {name: {"status", "seconds", "log", "error"}}}, rewritten on each change.

    A damaged status.json (truncated, not JSON, `[]`) is rebuilt from the run folders beside it (runs/NAME:
    done.json done, error.txt failed, else pending); `rebuilt` then says so in one line (else None)."""

    def __init__(self, path: Path, names: Sequence[str]):
        self.path, self.rebuilt = path, None
        old = {}
        if path.is_file():
            try:
                old = read_state(path)["variants"]
                if not isinstance(old, dict) or not all(isinstance(v, dict) for v in old.values()):
                    raise StateError(f"{path} is damaged (\"variants\" is not an object of objects)")
            except (StateError, KeyError) as e:
                old = self._from_runs(path.parent / "runs", names)
                why = e if isinstance(e, StateError) else f"{path} is damaged (no \"variants\")"
                self.rebuilt = f"{why}; rebuilt from {path.parent / 'runs'}/*/done.json"
        self.variants = {**old, **{n: old.get(n, {"status": "pending"}) for n in names}}
        self.save()

    @staticmethod
    def _from_runs(runs: Path, names: Sequence[str]) -> dict:
        found = sorted({*names, *(p.name for p in runs.iterdir() if p.is_dir())} if runs.is_dir() else names)
        variants = {}
        for name in found:
            entry = {"status": "done" if (runs / name / "done.json").is_file() else
                     "failed" if (runs / name / "error.txt").is_file() else "pending"}
            if entry["status"] == "done":
                try:  # compare checks each done.json itself before it skips that run
                    entry["seconds"] = read_state(runs / name / "done.json")["seconds"]
                except (OSError, ValueError, KeyError):
                    pass
            variants[name] = entry
        return variants

    def set(self, name: str, **fields) -> None:
        # a field set to None is removed (e.g. the error of a failed run that now succeeded)
        self.variants[name] = {k: v for k, v in {**self.variants.get(name, {}), **fields}.items() if v is not None}
        self.save()

    def save(self) -> None:
        write_json(self.path, {"variants": self.variants})
