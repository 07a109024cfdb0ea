"""Checkpoints: which one to resume from, loading its weights with every key checked, and the final save
(atomic: a save that fails leaves the output folder as it was)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

from ..run_record import FILE_NAME as RUN_RECORD
from ..run_record import RunRecord
from .guards import DivergedError, check_finite_weights

TRAINER_STATE = "trainer_state.json"
MODEL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
DEEPSPEED_TAG = "latest"  # DeepSpeed's own checkpoint (its ZeRO shards in global_stepN/)
STAGING = ".saving"  # the final save is written here, inside output_dir, then moved up
# every loader looks for these first (from_pretrained, the family lookup, peft): they arrive last, so a
# folder that holds one holds a whole model
SAVED_LAST = ("config.json", "adapter_config.json")
FULL_BELOW = 1 << 20  # bytes free under which a failed write is taken for a full disk (torch.save names no errno)


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: missing, incomplete, or holding weights that do not fit the model."""


class SaveError(ValueError):
    """A save that failed for want of space; the output folder keeps what it held before."""


def checkpoint_problem(folder: Path) -> str | None:
    """Why `folder` is not a complete Trainer checkpoint, or None when it is one. The Trainer writes
    trainer_state.json last (after weights, optimizer, scheduler, RNG states), so a save killed halfway
    leaves it missing or partly written."""
    try:
        json.loads((folder / TRAINER_STATE).read_text())
    except FileNotFoundError:
        return f"no {TRAINER_STATE}"
    except (OSError, ValueError):
        return f"{TRAINER_STATE} does not parse"
    if not any((folder / name).is_file() for name in (*MODEL_WEIGHTS, *ADAPTER_WEIGHTS, DEEPSPEED_TAG)):
        return "no weights"
    return None


def _checkpoints(out: Path) -> dict[int, Path]:
    """{N: folder} of the checkpoint-N folders of `out`."""
    return {int(p.name.removeprefix("checkpoint-")): p for p in (out.iterdir() if out.is_dir() else ())
            if p.is_dir() and p.name.startswith("checkpoint-") and p.name.removeprefix("checkpoint-").isdigit()}


def newest_checkpoint(output_dir) -> Path | None:
    """The newest complete checkpoint-N folder of `output_dir`, or None."""
    steps = _checkpoints(Path(output_dir))
    return next((steps[n] for n in sorted(steps, reverse=True) if checkpoint_problem(steps[n]) is None), None)


def resume_checkpoint(output_dir, wanted, *, announce: bool = True) -> str | None:
    """The checkpoint folder `resume_from_checkpoint` (`wanted`) names, or None for a fresh start.

    True / "true": the newest complete checkpoint-N in output_dir; newer incomplete ones (a save that was
    killed) are named in one printed line (when `announce`) and left in place: the run overwrites such a
    folder when it saves that step again. A path must be a complete checkpoint. Anything else is a
    CheckpointError in one line."""
    if wanted is None or wanted is False or str(wanted).lower() in ("", "false"):
        return None
    if wanted is True or str(wanted).lower() == "true":
        out = Path(output_dir)
        steps = _checkpoints(out)
        passed = []
        for step in sorted(steps, reverse=True):
            problem = checkpoint_problem(steps[step])
            if problem is None:
                if passed and announce:
                    names = ", ".join(f"{p.name} ({why})" for p, why in passed)
                    it = "it is" if len(passed) == 1 else "they are"
                    print(f"resume_from_checkpoint: passing over the incomplete {names} in {out} (a save that "
                          f"was interrupted) and resuming from {steps[step].name}; {it} left in place and "
                          "overwritten when this run saves that step again")
                return str(steps[step])
            passed.append((steps[step], problem))
        if not passed:
            raise CheckpointError(f"resume_from_checkpoint: no checkpoint-N folder in {out} to resume from")
        names = ", ".join(f"{p.name} ({why})" for p, why in passed)
        raise CheckpointError(f"resume_from_checkpoint: no complete checkpoint in {out}: {names}")
    folder = Path(wanted)
    if not folder.is_dir():
        raise CheckpointError(f"resume_from_checkpoint: {folder} is not a folder")
    problem = checkpoint_problem(folder)
    if problem is not None:
        raise CheckpointError(f"resume_from_checkpoint: {folder} is an incomplete checkpoint ({problem}; its save "
                              "was interrupted); name a complete one, or set resume_from_checkpoint: true to take "
                              "the newest complete checkpoint")
    return str(folder)


def _is_peft_model(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def _key_summary(problems: dict[str, list]) -> str:
    return "; ".join(f"{len(keys)} {kind.replace('_', ' ')} (e.g. {sorted(map(str, keys))[0]})"
                     for kind, keys in problems.items() if keys)


def load_checkpoint_weights(model, checkpoint) -> None:
    """Load the weights of a Trainer checkpoint into `model` in place, every key checked.

    A full model: its class's `from_pretrained` reads the checkpoint, mapping saved key names onto the
    module's (Qwen2.5-VL and Qwen2-VL save model.layers.*, the module has model.language_model.layers.*;
    Mllama likewise), and the result goes in with load_state_dict(strict=True). A peft model: its adapter
    through `load_adapter`, refusing missing or unexpected adapter keys. Anything that does not fit is a
    CheckpointError, never a warning."""
    folder = Path(checkpoint)
    if _is_peft_model(model):
        if not any((folder / name).is_file() for name in ADAPTER_WEIGHTS):
            raise CheckpointError(f"{folder}: no adapter weights ({' or '.join(ADAPTER_WEIGHTS)}) for this LoRA "
                                  "model")
        adapter = model.active_adapters[0]  # our runs train one adapter
        result = model.load_adapter(str(folder), adapter, is_trainable=True)
        problems = {"missing_keys": result.missing_keys, "unexpected_keys": result.unexpected_keys}
        if any(problems.values()):
            raise CheckpointError(f"{folder}: its adapter does not fit the model ({_key_summary(problems)})")
        return
    if not any((folder / name).is_file() for name in MODEL_WEIGHTS):
        raise CheckpointError(f"{folder}: no model weights ({' or '.join(MODEL_WEIGHTS)})")
    try:
        loaded, info = type(model).from_pretrained(str(folder), dtype=model.dtype, output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{folder}: could not read its weights as a {type(model).__name__} ({e})") from None
    if any(info.values()):
        raise CheckpointError(f"{folder}: its weights do not fit the model ({_key_summary(info)})")
    try:
        model.load_state_dict(loaded.state_dict(), strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"{folder}: its weights do not fit the model ({str(e).splitlines()[0]})") from None


def out_of_space(error: BaseException, folder) -> bool:
    """Whether `error` (or one it came from) says the disk is full; or, for an OSError or RuntimeError
    that does not say why (torch.save's short write), whether `folder`'s filesystem is nearly full now."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(seen) or "os error 28" in str(seen):  # safetensors, tokenizers
            return True
        seen = seen.__cause__ or seen.__context__
    if not isinstance(error, (OSError, RuntimeError)):
        return False
    try:
        return shutil.disk_usage(folder).free < FULL_BELOW
    except OSError:
        return False


def _kept(out: Path) -> str:
    newest = newest_checkpoint(out)
    if newest is None:
        return ""
    return (f"; the checkpoints in {out} are kept (newest: {newest.name}; free some space and resume it with "
            "resume_from_checkpoint: true)")


def stopped_run_error(error: BaseException, output_dir, step: int, *, main: bool) -> ValueError | None:
    """The one-line error for a training run that `error` stopped at `step`, naming what of the run is
    kept; None when `error` is neither a divergence nor a full disk (it goes on as it is).

    A full disk while the Trainer wrote checkpoint-`step` (in place) leaves that one incomplete: the main
    process removes it (resuming would pass over it anyway)."""
    out = Path(output_dir)
    if isinstance(error, DivergedError):
        newest = newest_checkpoint(out)
        if newest is None:
            return DivergedError(f"{error}; no checkpoint in {out} to go back to")
        return DivergedError(f"{error}; the last good checkpoint is {newest}")
    if not out_of_space(error, out):
        return None
    folder = out / f"checkpoint-{step}"
    if not (folder.is_dir() and checkpoint_problem(folder)):
        return SaveError(f"no space left on device while training into {out}{_kept(out)}")
    if main:
        shutil.rmtree(folder, ignore_errors=True)
    return SaveError(f"no space left on device while saving {folder.name} to {out}; the half-written {folder.name} "
                     f"was removed{_kept(out) or '; no earlier checkpoint is there'}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_tree(folder: Path) -> None:
    """fsync every file under `folder`, then the folders (their entries), deepest first."""
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [folder]:
        _fsync(path)


def _move_up(staging: Path, out: Path) -> None:
    """Move every entry of `staging` into `out` (each rename atomic), SAVED_LAST after the rest: an earlier
    save's config.json goes first, so no moment shows new weights under an old config."""
    names = sorted(p.name for p in staging.iterdir())
    last = [n for n in names if n in SAVED_LAST]
    for name in SAVED_LAST:
        (out / name).unlink(missing_ok=True)
    for name in [n for n in names if n not in last] + last:
        target = out / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(staging / name, target)
    staging.rmdir()
    _fsync(out)


def save_final(trainer, processor, *, merge_lora: bool, run_config: RunRecord | dict | None = None) -> None:
    """Save model + processor to output_dir so that it loads with `from_pretrained`, with the trainer's
    state (trainer_state.json: the log history) and `run_config` (run_config.json) beside them.

    Refused (DivergedError) when a weight is not finite. Atomic: everything is written to
    output_dir/.saving and fsynced, then moved up, config.json last (`SAVED_LAST`). A save that fails
    removes .saving, so output_dir keeps what it held (the checkpoints); on a full disk the error is a
    SaveError in one line."""
    out = Path(trainer.args.output_dir)
    main = trainer.args.should_save
    check_finite_weights(trainer.accelerator.unwrap_model(trainer.model), out)
    staging = out / STAGING
    try:
        if main:
            shutil.rmtree(staging, ignore_errors=True)  # left by a run killed while saving
            staging.mkdir(parents=True)
        _write_final(trainer, processor, staging, merge_lora=merge_lora, run_config=run_config)
        if main:
            _sync_tree(staging)
            _move_up(staging, out)
    except BaseException as e:
        full = isinstance(e, Exception) and out_of_space(e, out)  # before the partial files are removed
        if main:
            shutil.rmtree(staging, ignore_errors=True)
        if full:
            raise SaveError(f"no space left on device while saving the model to {out}; nothing was left "
                            f"half-written there{_kept(out)}") from None
        raise


def _write_final(trainer, processor, folder: Path, *, merge_lora: bool, run_config: RunRecord | dict | None) -> None:
    out = str(folder)
    if not merge_lora:
        trainer.save_model(out)  # gathers ZeRO-3 shards; a peft model saves its adapter
    else:
        model = trainer.accelerator.unwrap_model(trainer.model)
        if trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
                merged = model.merge_and_unload()
                if trainer.args.should_save:
                    merged.save_pretrained(out, state_dict={k: v.clone() for k, v in merged.state_dict().items()})
        else:
            merged = model.merge_and_unload()
            if trainer.args.should_save:
                merged.save_pretrained(out)
    if trainer.args.should_save:
        processor.save_pretrained(out)
        trainer.state.save_to_json(str(folder / "trainer_state.json"))
        if run_config is not None:  # a flat dict too (callers before the record type), checked on the way
            record = run_config if isinstance(run_config, RunRecord) else RunRecord.from_dict(run_config)
            record.write(folder / RUN_RECORD)
