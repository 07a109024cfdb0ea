"""`vlm-smmd`: the dispatcher. Exit codes and the output policy live here, once, for every command.

- a usage problem (bad flag, unknown config key, bad value, an output it would overwrite) is one line
  `vlm-smmd CMD: error: ...` on stderr and exit status 2;
- bad input met while running (`input_error`: a bad record, image, split or model name) is one line,
  exit status 1; any other exception is a bug and keeps its traceback;
- Ctrl-C ends a command with one line and exit status 130, SIGTERM the same way with 143 (compare
  stops its running variants first: no orphaned process);
- an output folder is never written over without --overwrite (each command declares what it would
  replace), and a run that fails leaves no empty output folder behind (`no_empty_folder`);
- a module of the `train` extra missing (the core install alone) is one line naming the extra, exit status 1.
Commands (`vlm_smmd.commands`) parse their arguments without importing torch, so `--help` and usage
errors answer at once; the library below them never parses argv, prints errors or exits.
"""

from __future__ import annotations

import contextlib
import os
import sys
from importlib import import_module
from pathlib import Path

from data_synth.cli import SYNTH_MODULES, missing_extra
from data_synth.interrupts import interrupt_status, sigterm_as_interrupt

from .commands import COMMANDS, HIDDEN, UsageError

OUR_PACKAGES = ("vlm_smmd", "data_synth")
FILE_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)
HUB_PACKAGES = ("transformers", "huggingface_hub")  # their OSErrors name an unusable checkpoint or hub id
# the top-level modules of the `train` extra, which pulls `synth` (pyproject.toml)
TRAIN_MODULES = frozenset({"torchvision", "transformers", "peft", "qwen_vl_utils", "deepspeed",
                           "accelerate", "yaml", "pyarrow", "openpyxl"}) | SYNTH_MODULES


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
    if path is None:
        yield
        return
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


def usage() -> str:
    lines = ["usage: vlm-smmd COMMAND [options]   (vlm-smmd COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def _writable(folder: Path) -> bool:
    """Whether `folder`, or the nearest folder above it that exists, takes new files (access(2) also says no
    on a read-only filesystem, for root too), so a command finds out before its work, not at its first write."""
    here = folder.absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    return os.access(here, os.W_OK | os.X_OK)


def run_command(name: str, argv: list[str]) -> int:
    """Parse, check the output, run: the whole policy of one command."""
    module = import_module(f"{__package__}.commands.{(COMMANDS | HIDDEN)[name][0]}")
    try:
        args = module.parse(argv)
        out = module.output(args)
    except UsageError as e:
        return usage_error(name, e)
    except SystemExit as e:  # argparse: --help (0) or a usage error it has printed (2)
        return e.code if isinstance(e.code, int) else 2
    if out is not None and Path(out.folder).exists() and not Path(out.folder).is_dir():
        return usage_error(name, f"{out.flag} {out.folder} exists and is not a folder; choose a new {out.flag}")
    if out is not None and not _writable(Path(out.folder)):
        return usage_error(name, f"{out.flag} {out.folder}: cannot write there (read-only, no permission, or a file in its path); "
                           f"choose another {out.flag}")
    if out is not None and out.existing and not out.overwrite:
        shown = ", ".join(out.existing[:4]) + (", ..." if len(out.existing) > 4 else "")
        return usage_error(name, f"{out.flag} {out.folder} already holds {out.what or shown}"
                           f"{f' ({shown})' if out.what else ''}; {out.advice}")
    try:
        with sigterm_as_interrupt(), no_empty_folder(None if out is None else out.folder):
            return module.run(args) or 0
    except KeyboardInterrupt as e:
        print(f"\nvlm-smmd {name}: interrupted", file=sys.stderr)
        return interrupt_status(e)
    except UsageError as e:
        return usage_error(name, e)
    except Exception as e:
        if not input_error(e):
            raise
        return fail(name, e)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the `deepspeed` launcher passes --local_rank=N first; the rank is also in the LOCAL_RANK env var
    argv = [a for a in argv if not a.startswith("--local_rank")]
    if not argv:  # no command: the help, then the usage-error status
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS and name not in HIDDEN:
        print(f"vlm-smmd: error: unknown command {name!r}; choose from {', '.join(COMMANDS)} (see vlm-smmd --help)",
              file=sys.stderr)
        return 2
    try:
        return run_command(name, rest)
    except ModuleNotFoundError as e:
        status = missing_extra(f"vlm-smmd {name}", e, TRAIN_MODULES, "train", "training extra")
        if status is None:
            raise
        return status


if __name__ == "__main__":
    sys.exit(main())
