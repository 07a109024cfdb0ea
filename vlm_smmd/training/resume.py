"""A resumed run continues the run its checkpoint came from, or is refused.

Every checkpoint-N keeps the settings it was trained with (`SETTINGS_FILE`: the model / data / loss keys,
the trainer keys that shape the update, and a fingerprint of the training records), written before the
Trainer saves into that folder, so a complete checkpoint (trainer_state.json, written last) always has it.
A resume compares them with its own: a key that changes the trained model is refused in one line listing
old -> new; the keys of `MAY_CHANGE` (cadence, paths, reporting) and a larger step or epoch budget are
allowed, and the final run_config.json lists the resumes (from which checkpoint, what changed).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from transformers import TrainerCallback

from ..config import MAPPING_KEYS, mapping_value
from .checkpoints import CheckpointError

SETTINGS_FILE = "run_settings.json"
CADENCE = ("output_dir", "logging_steps", "logging_strategy", "save_strategy", "save_steps", "save_total_limit",
           "eval_strategy", "eval_steps", "report_to", "run_name")  # recorded, and may change
# trainer keys recorded beside every model / data / loss key (all but CADENCE change the update)
TRAIN_KEYS = ("seed", "data_seed", "max_steps", "num_train_epochs", "per_device_train_batch_size",
              "gradient_accumulation_steps", "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs",
              "warmup_steps", "warmup_ratio", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
              "max_grad_norm", "optim", "optim_args", "label_smoothing_factor", "train_sampling_strategy",
              "group_by_length", "bf16", "fp16", "deepspeed", "world_size", *CADENCE)
# keys that do not change the trained model: cadence, paths, evaluation and reporting (the data fingerprint
# still covers the training records), the save format, the preflight's processes
MAY_CHANGE = frozenset({*CADENCE, "eval_split", "max_eval_samples", "test_splits", "primary_metric",
                        "primary_split", "dev_seeds", "merge_lora", "preflight_workers"})
BUDGET = ("max_steps", "num_train_epochs")  # may grow on resume, never shrink


def settings(model_args, data_args, loss_args, train_args) -> dict:
    """The run's model, data and loss keys and the trainer keys of `TRAIN_KEYS`, as JSON values."""
    info = {**asdict(model_args), **asdict(data_args), **asdict(loss_args),
            **{k: getattr(train_args, k, None) for k in TRAIN_KEYS}}
    return json.loads(json.dumps(info, default=str))


def data_fingerprint(dataset) -> str:
    """sha256 of the training records as the run reads them: id, source, question, answer and the image
    (a file's path and size, an in-memory image's pixels). Sizes rather than modification times, so data
    rendered again with the same settings is the same data."""
    h = hashlib.sha256(str(len(dataset)).encode())
    for i in range(len(dataset)):
        s = dataset[i]
        image = s.image
        if image is None:
            identity = "text"
        elif isinstance(image, (str, os.PathLike)):
            try:
                identity = f"{image}:{os.stat(image).st_size}"
            except OSError:
                identity = f"{image}:missing"
        else:
            identity = hashlib.sha256(image.tobytes()).hexdigest()
        h.update(json.dumps([s.id, s.source, s.question, s.answer, identity], default=str).encode())
    return h.hexdigest()


def recorded(checkpoint) -> dict | None:
    """The settings checkpoint-N was trained with, or None when it keeps none (saved by an older release)."""
    path = Path(checkpoint) / SETTINGS_FILE
    try:
        found = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise CheckpointError(f"resume_from_checkpoint: {path} does not parse; the checkpoint's settings cannot "
                              "be compared with this run's") from None
    if not isinstance(found, dict) or not isinstance(found.get("settings"), dict):
        raise CheckpointError(f"resume_from_checkpoint: {path} is not a settings record")
    return found


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _grows(old, new) -> bool:
    """Whether a step or epoch budget grows: from a positive budget to a larger one (-1, no step budget,
    to a step budget changes the schedule)."""
    return _number(old) > 0 and _number(new) >= _number(old)


def changes(old: dict, new: dict) -> tuple[dict, dict]:
    """({key: (old, new)} refused, {key: (old, new)} allowed) between two `settings` dicts."""
    refused, allowed = {}, {}
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if key in MAPPING_KEYS and isinstance(before, str):  # checkpoints made before the typed settings: JSON text
            before = mapping_value(key, before)
        if before == after:
            continue
        # under a step budget the epoch count is not used
        unused = key == "num_train_epochs" and _number(old.get("max_steps")) > 0 and _number(new.get("max_steps")) > 0
        if key in MAY_CHANGE or unused or (key in BUDGET and _grows(before, after)):
            allowed[key] = (before, after)
        else:
            refused[key] = (before, after)
    return refused, allowed


def _listed(diff: dict) -> str:
    return ", ".join(f"{k} {json.dumps(a)} -> {json.dumps(b)}" for k, (a, b) in diff.items())


def check_settings(checkpoint, now: dict, *, announce: bool = True) -> dict:
    """The resume's entry for run_config.json ({checkpoint, step, changed}); a CheckpointError in one line
    listing the keys when `now` differs from what `checkpoint` was trained with in a key that changes the
    trained model. A checkpoint that keeps no settings is named in one printed line and not compared."""
    folder = Path(checkpoint)
    entry = {"checkpoint": str(folder), "step": _step(folder), "changed": {}, "history": []}
    found = recorded(folder)
    if found is None:
        if announce:
            print(f"resume_from_checkpoint: {folder} keeps no {SETTINGS_FILE} (saved by an older release): its "
                  "settings are not compared with this run's")
        entry["compared"] = False
        return entry
    refused, allowed = changes(found["settings"], now)
    if refused:
        budget = [k for k in refused if k in BUDGET]
        note = f" ({', '.join(budget)} may only grow)" if budget else ""
        raise CheckpointError(f"resume_from_checkpoint: {folder} was trained with other settings: {_listed(refused)}"
                              f"{note}; resume with the checkpoint's values, or start a new run in another "
                              "output_dir")
    if allowed and announce:
        print(f"resume_from_checkpoint: continuing {folder} with {_listed(allowed)}")
    entry.update(changed={k: list(v) for k, v in allowed.items()}, history=found.get("resumed", []),
                 fingerprint=found.get("data_fingerprint"))
    return entry


def check_data(entry: dict, fingerprint: str) -> None:
    """CheckpointError when the training records differ from those the checkpoint was trained on."""
    before = entry.pop("fingerprint", None)
    if before is not None and before != fingerprint:
        raise CheckpointError(f"resume_from_checkpoint: {entry['checkpoint']} was trained on other data (the "
                              "training records differ: ids, questions, answers or image files); resume on the "
                              "data it was trained on, or start a new run in another output_dir")


def _step(folder: Path) -> int | None:
    name = folder.name.removeprefix("checkpoint-")
    return int(name) if name.isdigit() else None


def resumes(entry: dict | None) -> list[dict]:
    """Every resume of the run so far, this one last: run_config.json's `resumed`."""
    if entry is None:
        return []
    return [*entry.get("history", []), {k: v for k, v in entry.items() if k != "history"}]


class SettingsRecorder(TrainerCallback):
    """Writes the run's settings, data fingerprint and resumes into checkpoint-N before the Trainer saves
    there (on_step_end / on_epoch_end, when the step will be saved), and again on_save for a save decided
    later (save_strategy best)."""

    def __init__(self, settings: dict, fingerprint: str, resumed: list[dict]):
        self.record = {"settings": settings, "data_fingerprint": fingerprint, "resumed": resumed}

    def _write(self, args, state) -> None:
        if not args.should_save:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{SETTINGS_FILE}.tmp"
        tmp.write_text(json.dumps(self.record, indent=1) + "\n")
        os.replace(tmp, folder / SETTINGS_FILE)

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save:
            self._write(args, state)

    def on_epoch_end(self, args, state, control, **kwargs):
        if control.should_save:
            self._write(args, state)

    def on_save(self, args, state, control, **kwargs):
        if not (Path(args.output_dir) / f"checkpoint-{state.global_step}" / SETTINGS_FILE).is_file():
            self._write(args, state)
