"""The run's datasets: synthetic sets rendered into data_root (or each mixture source's root) when missing,
the configured reader (or mixture) per split, and every record checked by the preflight before the model
loads."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from torch.utils.data import Subset

from ..config import ConfigError, evaluated_splits
from ..data import read_split
from ..data.tasks import synth_kind, synth_writer
from .guards import waiting_lock

# Bump when the renderers draw other images for the same settings: data rendered before is then refused
# (named as rendered with other settings) rather than silently reused.
RENDER_VERSION = 2  # 2: per-image render variation (bars, plain clocks) and unseen-value splits


def synthesize_if_missing(data_args) -> None:
    """Render the synthetic set named by `data_args.synthesize` into data_root, or reuse what is there
    when it was rendered with the same settings (a mismatch is an error, never silently ignored).

    How a kind is written is its row of `data.tasks.SYNTH_KINDS`: every split at once (its `splits` option),
    or one split at a time (the chart writer): the training split, the eval split and every test split
    (`test_splits`); with the option unseen_fraction, a split whose name holds "unseen" gets only the
    held-out values, the others none.

    One process at a time renders a data_root: a lock on DATA_ROOT.lock beside it; a second run waits
    for the first and then reuses (or resumes) what it rendered, never touching a folder being written.

    A mixture renders each source that names a `synthesize` kind into its own root, with that entry's
    synthesize_num / _seed / _size / _options (`source_data_args`)."""
    if data_args.dataset == "mixture":
        for entry in data_args.mixture or ():
            if entry.get("synthesize", "none") != "none":
                synthesize_if_missing(source_data_args(data_args, entry))
        return
    if data_args.synthesize == "none" or data_args.data_root is None:
        return
    kind, root = synth_kind(data_args.synthesize), Path(data_args.data_root)
    rendered = not kind.per_split and (root / "synthesize.json").exists()
    if rendered or (root.is_dir() and not os.access(root.parent, os.W_OK)):
        _synthesize(data_args, kind, root)  # only checked (or refused), no lock: a read-only parent is fine
        return
    with waiting_lock(root.parent / f"{root.name}.lock", f"rendering {root}"):
        _synthesize(data_args, kind, root)


def source_data_args(data_args, entry: dict):
    """The DataArguments of one mixture source read alone: its task, root and training split, and its own
    synthesis keys (those it does not give take the DataArguments defaults, not the mixture's top-level
    values, so a source renders the same whichever mixture it is in). Splits to render (eval_split,
    test_splits) are the mixture's: evaluation reads each of them from every source."""
    defaults = {f.name: f.default for f in dataclasses.fields(data_args) if f.name.startswith("synthesize")}
    synthesis = {key: entry.get(key, default) for key, default in defaults.items()}
    return dataclasses.replace(data_args, dataset=entry["name"], data_root=entry["root"], mixture=None,
                               train_split=entry.get("split", data_args.train_split), **synthesis)


def _synthesize(data_args, kind, root: Path) -> None:
    options = dict(data_args.synthesize_options or {})
    writer = synth_writer(kind.name)
    if not kind.per_split:
        wanted = {"kind": kind.name, "num": data_args.synthesize_num, "seed": data_args.synthesize_seed,
                  "options": options, "version": RENDER_VERSION}
        if kind.size is not None:
            wanted["size"] = data_args.synthesize_size
        record = root / "synthesize.json"
        if root.exists():
            _check_rendered(root, record, wanted)
            return
        print(f"rendering {wanted['num']} synthetic {kind.name} into {root}")
        interrupted = (root.parent / f".{root.name}.partial").exists()  # an earlier rendering was cut short
        sized = {"size": kind.size(wanted["size"])} if kind.size is not None else {}
        writer(root, wanted["num"], wanted["seed"], resume=interrupted, **sized, **options)
        record.write_text(json.dumps(wanted))
        return

    sized = {"size": kind.size(data_args.synthesize_size)} if kind.size is not None else {}
    options = {**dict(kind.fixed), **sized, **options}
    splits = [data_args.train_split, data_args.eval_split, *evaluated_splits(data_args)]
    for number, split in enumerate(dict.fromkeys(s for s in splits if s)):
        is_train = split == data_args.train_split
        wanted = {"kind": kind.name, "charts": data_args.synthesize_num if is_train else max(data_args.synthesize_num // 10, 8),
                  "seed": data_args.synthesize_seed + number, "options": options, "version": RENDER_VERSION}
        record = root / "charts_data" / f"{split}.json"
        if record.exists():
            _check_rendered(root, record, wanted)
            continue
        print(f"rendering {wanted['charts']} synthetic {kind.name} charts ({split}) into {root}")
        extra = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
        if extra.get("unseen_fraction"):
            extra["unseen_split"] = "unseen" in split
        info = writer(root, layout=kind.layout, num=wanted["charts"], seed=wanted["seed"], split=split,
                      resume=(root / f".{split}.partial").exists(), **extra)
        record.write_text(json.dumps({**wanted, "layout": kind.layout, "questions": info["questions"]}))


def _check_rendered(root: Path, record: Path, wanted: dict) -> None:
    try:
        found = json.loads(record.read_text())
    except (OSError, json.JSONDecodeError):
        raise ConfigError(f"{root} exists but was not rendered by `synthesize` ({record} is missing or unreadable); "
                          "to train on it as it is, set synthesize: none; else remove it or choose another "
                          "data_root") from None
    found.setdefault("kind", wanted["kind"])  # records of the first release name no kind and no options
    found.setdefault("options", {})
    changed = {k: (found.get(k), v) for k, v in wanted.items() if found.get(k) != v}
    if changed:
        detail = ", ".join(f"{k} {old} there, {new} asked" for k, (old, new) in changed.items())
        raise ConfigError(f"{root} was rendered with other settings ({detail}); to train on it as it is, set "
                          "synthesize: none; else remove it or choose another data_root")
    print(f"reusing the synthetic data in {root}")


def check_base_vocabulary(tokenizer, datasets, data_args, base) -> None:
    """Every character of the run's texts (each record's question and answer, the instruction, the system
    prompt) is one that the base's task vocabulary was learned from (`modeling.TASK_CHARACTERS`, kept by a
    scratch run's tokenizer). Byte-level BPE encodes any text, so an unseen character would not be an
    unknown token but bytes whose embeddings the base never trained: a DataError naming the record (a
    ConfigError naming the key) instead. Tokenizers without the list (hub models) cover any text: no check."""
    from ..data.sample import DataError
    from ..modeling import TASK_CHARACTERS

    known = (getattr(tokenizer, "init_kwargs", None) or {}).get(TASK_CHARACTERS)
    if known is None:
        return
    known = set(known)

    def unseen(text) -> str | None:
        missing = sorted(set(text or "") - known)
        if not missing:
            return None
        return f"character{'s' if len(missing) > 1 else ''} " + ", ".join(repr(c) for c in missing)

    why = (f"not in the task vocabulary of the base {base} (its texts never had it, so its embedding was never "
           "trained); fine-tune on texts it covers, or start from scratch (--model_name_or_path scratch)")
    for where, text in run_texts(data_args, datasets):
        missing = unseen(text)
        if missing and isinstance(where, str):
            raise ConfigError(f"{where}: {missing} {why}")
        if missing:
            sample, part = where
            raise DataError(f"record {sample.id!r} of {sample.source}: {part} {missing} {why}")


def run_texts(data_args, datasets):
    """(where, text) of every text a run tokenizes, in this order: the instruction and the system prompt when
    set (where: the key), then each record's question and answer (where: (sample, "question" / "answer")).
    The scratch preset learns its vocabulary from them; a fine-tune checks them against its base's."""
    for key in ("instruction", "system_prompt"):
        if getattr(data_args, key):
            yield key, getattr(data_args, key)
    for dataset in datasets:
        for i in range(len(dataset) if dataset is not None else 0):
            sample = dataset[i]
            for part in ("question", "answer"):
                yield (sample, part), getattr(sample, part)


def _limit(dataset, limit: int | None):
    return Subset(dataset, range(min(limit, len(dataset)))) if limit else dataset


def build_datasets(data_args):
    from ..data.sample import set_max_image_pixels

    set_max_image_pixels(data_args.max_image_pixels)  # before any image is opened, here and in forked workers
    synthesize_if_missing(data_args)
    train = _limit(read_split(data_args, data_args.train_split), data_args.max_train_samples)
    evaluation = None
    if data_args.eval_split:
        evaluation = _limit(read_split(data_args, data_args.eval_split), data_args.max_eval_samples)
    return train, evaluation


def checked_datasets(train_dataset, eval_dataset, collator, data_args, train_args):
    """Both sets through the preflight check (`data.preflight`): the main process checks (or reads the
    cache) first, the other ranks then read its cached result. Returns the checked sets and the records
    dropped under on_error="skip"."""
    from ..data.preflight import CheckedDataset, preflight

    out, skipped = [], 0
    for name, dataset in (("train", train_dataset), ("eval", eval_dataset)):
        if dataset is None:
            out.append(None)
            continue
        with train_args.main_process_first(desc=f"preflight {name}"):
            result = preflight(dataset, collator, name=name, max_length=data_args.max_length,
                               on_error=data_args.on_error, workers=data_args.preflight_workers,
                               progress=train_args.process_index == 0 and not train_args.disable_tqdm)
        if train_args.process_index == 0:
            print(result.summary())
        if name == "train" and not result.kept:
            from ..data.sample import DataError

            raise DataError(f"preflight train: none of the {result.checked} records is usable ({result.summary()})")
        skipped += result.total_skipped
        out.append(CheckedDataset(dataset, result.kept, result.lengths))
    return out[0], out[1], skipped
