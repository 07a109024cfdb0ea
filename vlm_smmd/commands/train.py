"""`vlm-smmd train CONFIG.yaml [--key value ...] [--overwrite] [--dry-run]`: one training run (`training.run`),
or with --dry-run the config's real architecture at truncated depth trained 2 steps in a temporary folder
(`experiments.dry_run`), which never touches output_dir.

Keys and our own values are checked before transformers is imported (`config.check_config`), so a typo
is answered at once; the training stack loads in `run`.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import (
    DEFAULT_OUTPUT_DIR,
    ConfigError,
    check_config,
    load_config,
    train_command_line,
    train_help,
    uses_deepspeed,
)
from ..experiments.dry_run import dry_run
from ..experiments.threads import LoadWatch, use_thread_plan
from ..families import looks_like_path
from ..run_record import FILE_NAME as RUN_RECORD
from . import TRAINED_MODEL, Output, UsageError, existing


@dataclass
class Args:
    config: str | None
    overrides: dict
    overwrite: bool
    model: str
    output_dir: Path
    resume: bool
    dry_run: bool = False


def parse(argv: list[str]) -> Args:
    if not argv:  # no config: the help, then the usage-error status
        print(train_help(), file=sys.stderr)
        raise SystemExit(2)
    if "-h" in argv or "--help" in argv:
        print(train_help())
        raise SystemExit(0)
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    try:
        path, overrides, overwrite = train_command_line(argv)
        model_args, _, _, train_values = check_config(path, overrides)
    except ConfigError as e:
        raise UsageError(e) from None
    resume = train_values.get("resume_from_checkpoint")
    return Args(path, overrides, overwrite, model_args.model_name_or_path,
                Path(str(train_values.get("output_dir") or DEFAULT_OUTPUT_DIR)),
                bool(resume) and str(resume).strip().lower() not in ("false", "none", "null", ""), dry_run)


def output(args: Args) -> Output | None:
    if args.dry_run:  # writes only into a temporary folder
        return None
    if args.output_dir.exists() and not args.output_dir.is_dir():
        raise UsageError(f"output_dir {args.output_dir} exists and is not a folder; choose a new output_dir")
    earlier = [] if args.resume else existing(args.output_dir, TRAINED_MODEL)
    if earlier and RUN_RECORD not in earlier:
        # --overwrite replaces only a run this tool wrote (its run_config.json says so), never, say, a
        # downloaded model's folder
        raise UsageError(f"output_dir {args.output_dir} holds a model that vlm-smmd train did not write (no "
                         f"run_config.json; {', '.join(earlier[:4])}); choose a new output_dir")
    return Output(args.output_dir, earlier, args.overwrite, flag="output_dir", what="a trained model",
                  advice="pass --overwrite to replace it, set resume_from_checkpoint to continue it, or choose "
                         "another output_dir")


def remove_earlier(args: Args) -> None:
    """--overwrite: remove the earlier run's model and checkpoints, once the new run has its data and model
    (`training.run` calls this just before the first step), so a run that cannot start leaves them."""
    out, earlier = args.output_dir, output(args).existing
    for path in (out / name for name in earlier):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    if earlier:
        print(f"--overwrite: removed the earlier run's {', '.join(earlier)} from {out}")


def run(args: Args) -> int:
    if args.dry_run:
        dry_run(args.config, args.overrides)  # prints its summary; DryRunError is one line
        return 0

    if looks_like_path(args.model) and not Path(args.model).exists():  # before seconds of imports
        raise FileNotFoundError(f"{args.model}: no such model directory")
    if uses_deepspeed(args.config, args.overrides):
        from ..training import ensure_single_process_env  # imports torch: train --help starts fast

        ensure_single_process_env()  # before TrainingArguments initialises DeepSpeed
    # torch and transformers: train --help and a misspelt key answer without them
    from ..modeling import SCRATCH, resolve_family
    from ..training import run as train

    try:
        configs = load_config(args.config, args.overrides)
    except ConfigError as e:
        raise UsageError(e) from None
    if args.model != SCRATCH:  # a bad name or path fails before the data is read
        resolve_family(args.model)
    threads = use_thread_plan()  # like compare: one thread where other work keeps a core busy
    metrics = train(*configs, on_ready=lambda: remove_earlier(args), threads=threads.record(),
                    replan=LoadWatch(threads))  # and again when other work takes or frees a core
    print(json.dumps({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, indent=1))
    return 0
