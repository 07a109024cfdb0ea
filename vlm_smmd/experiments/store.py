"""A comparison's folder on disk: JSON files written atomically, status.json, logs, dropping weights."""

from __future__ import annotations

import hashlib
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


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
    """status.json: {"variants": {name: {"status", "seconds", "log", "error"}}}, rewritten on each change."""

    def __init__(self, path: Path, names: Sequence[str]):
        self.path = path
        old = read_json(path).get("variants", {}) if path.is_file() else {}
        self.variants = {**old, **{n: old.get(n, {"status": "pending"}) for n in names}}
        self.save()

    def set(self, name: str, **fields) -> None:
        # a field set to None is removed (e.g. the error of a failed run that now succeeded)
        self.variants[name] = {k: v for k, v in {**self.variants.get(name, {}), **fields}.items() if v is not None}
        self.save()

    def save(self) -> None:
        write_json(self.path, {"variants": self.variants})
