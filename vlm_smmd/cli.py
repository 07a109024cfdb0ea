"""`vlm-smmd` command: each subcommand lives in the module that does the work.

What every subcommand does the same way (the helpers below; stdlib only, so that `--help` and usage
errors answer before torch or transformers is imported):
- a usage error (bad flag, unknown config key, bad value, an output it would overwrite) is one line
  `vlm-smmd CMD: error: ...` on stderr and exit status 2;
- bad input met while running (`input_error`: a bad record, image, split or model name) is one line,
  exit status 1; any other exception is a bug and keeps its traceback;
- options are spelt with dashes (--max-new-tokens) and taken with underscores too (`Parser`); config
  keys are YAML keys, spelt with underscores (--max_steps), and taken with dashes too;
- a run that fails leaves no empty output folder behind (`no_empty_folder`).
"""

from __future__ import annotations

import contextlib
import sys
from importlib import import_module
from pathlib import Path

from data_synth.cli import Parser  # noqa: F401  (one-line usage errors, --x_y for --x-y; data-synth's too)

# name -> (module with a `main(argv)`, one-line help)
COMMANDS = {
    "train": ("vlm_smmd.training", "fine-tune on a YAML config (CE + lambda * aux at numeric answer tokens)"),
    "eval": ("vlm_smmd.evaluation", "generate answers for a dataset and score them"),
    "analyze": ("vlm_smmd.analysis", "per-digit error analysis of predictions.jsonl files, with plots"),
    "compare": ("vlm_smmd.compare", "train, evaluate and analyse several aux losses / seeds on one config"),
    "demo": ("vlm_smmd.demo", "offline CPU demo: clocks -> tiny Qwen2.5-VL + SMMD -> eval -> report"),
}

OUR_PACKAGES = ("vlm_smmd", "data_synth")
FILE_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)
HUB_PACKAGES = ("transformers", "huggingface_hub")  # their OSErrors name an unusable checkpoint or hub id


def one_line(error) -> str:
    """An exception's message on one line."""
    return " ".join(str(error).split()) or type(error).__name__


def _raised_in(error: BaseException) -> str:
    """Top-level package of the innermost frame outside the standard library that `error` passed
    through: the code that raised it (json.loads called by a reader counts as the reader)."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_globals.get("__name__") or "")
        tb = tb.tb_next
    for name in reversed(frames):
        top = name.partition(".")[0]
        if top not in sys.stdlib_module_names:
            return top
    return ""


def input_error(error: BaseException) -> bool:
    """Whether `error` reports bad input (say it in one line) rather than a bug (show the traceback):
    the project's own errors (DataError, ModelLoadError, ConfigError are ValueErrors), a ValueError or a
    missing or unreadable file raised by our code (readers, data-synth), and the OSErrors transformers
    and huggingface_hub raise for a checkpoint or hub id they cannot use."""
    if isinstance(error, ValueError) and type(error).__module__.partition(".")[0] in OUR_PACKAGES:
        return True
    where = _raised_in(error)
    if isinstance(error, (ValueError, *FILE_ERRORS)) and where in OUR_PACKAGES:
        return True
    return isinstance(error, OSError) and where in HUB_PACKAGES


def fail(command: str, error: BaseException) -> int:
    """Report bad input met while running: one line on stderr; returns exit status 1."""
    print(f"vlm-smmd {command}: error: {one_line(error)}", file=sys.stderr)
    return 1


def usage_error(command: str, message) -> int:
    """Report a usage error: one line on stderr; returns exit status 2."""
    print(f"vlm-smmd {command}: error: {one_line(message)}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def no_empty_folder(path):
    """Remove `path` when the body fails and leaves it holding no file, if it did not exist before."""
    path = Path(path)
    existed = path.exists()
    try:
        yield
    except BaseException:
        if not existed and path.is_dir() and not any(p.is_file() or p.is_symlink() for p in path.rglob("*")):
            with contextlib.suppress(OSError):  # another rank of the same run may be removing it too
                for folder in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                    folder.rmdir()
                path.rmdir()
        raise


# what marks a folder as holding a trained model (train refuses to write over one without --overwrite)
TRAINED_MODEL = ("config.json", "adapter_config.json", "trainer_state.json", "*.safetensors", "*.bin", "*.pt",
                 "*.pth", "*.index.json", "checkpoint-*")


def existing(folder, patterns) -> list[str]:
    """Names of the entries of `folder` that match any of the glob `patterns`, sorted."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted({p.name for pattern in patterns for p in folder.glob(pattern)})


def usage() -> str:
    lines = ["usage: vlm-smmd COMMAND [options]   (vlm-smmd COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def wants_help(argv: list[str]) -> bool:
    return not argv or "-h" in argv or "--help" in argv


def _train_precheck(argv: list[str]) -> int | None:
    """`train --help`, the checks of the config that need no transformers (key names, our own values) and a
    path-like model name that does not exist, answered before the training stack is imported (seconds):
    an exit status, or None to go on."""
    from .config import ConfigError, check_config, looks_like_path, train_command_line, train_help

    if wants_help(argv):
        print(train_help())
        return 0
    try:
        path, overrides, _ = train_command_line(argv)
        model_args, _, _ = check_config(path, overrides)
    except ConfigError as e:
        return usage_error("train", e)
    model = model_args.model_name_or_path
    if looks_like_path(model) and not Path(model).exists():  # what modeling.resolve_family says, seconds later
        return fail("train", f"{model}: no such model directory")
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the `deepspeed` launcher passes --local_rank=N first; the rank is also in the LOCAL_RANK env var
    argv = [a for a in argv if not a.startswith("--local_rank")]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"vlm-smmd: error: unknown command {name!r}; choose from {', '.join(COMMANDS)} (see vlm-smmd --help)",
              file=sys.stderr)
        return 2
    if name == "train" and (status := _train_precheck(rest)) is not None:
        return status
    module = import_module(COMMANDS[name][0])
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
