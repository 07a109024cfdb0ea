"""The run record: what `vlm-smmd train` writes to run_config.json beside the trained model, and the one
place that knows its layout. On disk it is one flat JSON object (as every earlier release wrote it): every
model / data / loss key as used plus the trainer keys that shape the run (`settings`), then the family,
the V_num size, the thread plan, the training records' fingerprint, for a resumed run `resumed` and, for a
run that starts from a trained local folder (a fine-tune of a base), `base`: that folder and the sha256 of
its weights (`weights_identity`; `base_line` says it in one line for a report).
Keys this release does not name (an older or newer release's) stay in `settings`, so a read-write round
trip keeps them. Stdlib only: training, evaluation and analysis all import it."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

FILE_NAME = "run_config.json"


class RunRecordError(ValueError):
    """A run_config.json that cannot be read as a run record; the message is one line naming the file."""


# the record's own keys beside the settings: key -> (accepted JSON types, what the error calls it)
_META = {"family": (str, "a string"), "numeric_vocab_size": (int, "an integer"), "threads": (dict, "an object"),
         "data_fingerprint": (str, "a string"), "resumed": (list, "a list"), "base": (dict, "an object")}


@dataclass
class RunRecord:
    settings: dict = field(default_factory=dict)  # flat {key: value}: model / data / loss / trainer keys and unknown ones
    family: str | None = None
    numeric_vocab_size: int | None = None
    threads: dict | None = None
    data_fingerprint: str | None = None
    resumed: list[dict] = field(default_factory=list)  # each resume: {checkpoint, step, changed, ...}
    base: dict | None = None  # the trained folder it started from: {folder, sha256, files} (weights_identity)

    def get(self, key: str, default=None):
        """A setting by its config key (e.g. "instruction", "dataset", "data_root", "reader_options")."""
        return self.settings.get(key, default)

    def to_dict(self) -> dict:
        """The flat object run_config.json holds; unset record keys are left out, as earlier releases did."""
        out = dict(self.settings)
        for key in ("family", "numeric_vocab_size", "threads", "data_fingerprint", "base"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.resumed:
            out["resumed"] = self.resumed
        return json.loads(json.dumps(out, default=str))  # paths and other objects as text, as ever

    @classmethod
    def from_dict(cls, data, *, source: str = "run record") -> RunRecord:
        """The record of a flat object; a RunRecordError naming `source` for a wrong shape."""
        if not isinstance(data, dict):
            raise RunRecordError(f"{source}: not a run record (a JSON object expected, found {type(data).__name__})")
        for key, (kind, said) in _META.items():
            value = data.get(key)
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise RunRecordError(f"{source}: {key} must be {said}, found {json.dumps(value)[:60]}")
        resumed = data.get("resumed") or []
        if not all(isinstance(r, dict) for r in resumed):
            raise RunRecordError(f"{source}: resumed must be a list of objects")
        return cls(settings={k: v for k, v in data.items() if k not in _META},
                   **{k: data.get(k) for k in _META if k != "resumed"}, resumed=list(resumed))

    def write(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, path, *, missing_ok: bool = False) -> RunRecord | None:
        """The record in `path`; None for a missing file when `missing_ok` (the record is optional there).
        A file that is unreadable, not JSON or of the wrong shape is a RunRecordError in one line naming it."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            if missing_ok:
                return None
            raise RunRecordError(f"{path}: no such run record") from None
        except (OSError, UnicodeDecodeError) as e:
            raise RunRecordError(f"{path}: unreadable run record ({e})") from None
        try:
            data = json.loads(text)
        except ValueError as e:
            raise RunRecordError(f"{path}: not valid JSON ({e})") from None
        return cls.from_dict(data, source=str(path))


def _weights_files(folder: Path) -> list[Path]:
    """The weights files `from_pretrained` reads in a saved folder: *.safetensors (one file or the shards of
    an index), else pytorch_model*.bin; by name."""
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    return [f for f in files if f.is_file()]


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in 1 MB blocks (weights files are gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_identity(folder) -> dict:
    """{"folder": as given, "files": {name: sha256}, "sha256": ...} of a saved model folder's weights: the one
    file's sha256, or for several (shards) the sha256 of their `sha256sum` lines ("HASH  NAME\n", by name),
    so either is checked with sha256sum. RunRecordError when the folder holds no weights file."""
    path = Path(folder)
    files = _weights_files(path)
    if not files:
        raise RunRecordError(f"{folder}: no weights file (*.safetensors or pytorch_model*.bin) to identify the base by")
    hashes = {f.name: file_sha256(f) for f in files}
    if len(hashes) == 1:
        combined = next(iter(hashes.values()))
    else:
        combined = hashlib.sha256("".join(f"{h}  {n}\n" for n, h in hashes.items()).encode()).hexdigest()
    return {"folder": str(folder), "files": hashes, "sha256": combined}


def base_line(record: RunRecord) -> str | None:
    """"starts from FOLDER (sha256 FIRST-12)" for a run that started from a trained folder, else None (a
    run from a preset, a hub id or scratch)."""
    base = record.base
    if not base or not base.get("sha256"):
        return None
    return f"starts from {base.get('folder')} (sha256 {str(base['sha256'])[:12]})"
