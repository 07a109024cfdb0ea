"""`data-synth` command: each subcommand lives in the module that does the work.

Every subcommand parses with `Parser` (data_synth/args.py): a usage error is one line on stderr (exit
status 2), and options are taken spelt with underscores too (--answer_format for --answer-format).
`vlm-smmd` uses the same class, imported from here (which loads nothing heavy).
"""

from __future__ import annotations

import sys
from importlib import import_module

from .args import Parser
from .interrupts import interrupt_status, sigterm_as_interrupt

__all__ = ["COMMANDS", "SYNTH_MODULES", "Parser", "main", "missing_extra", "usage"]

# name -> (module, function taking argv, one-line help)
COMMANDS = {
    "clocks": ("data_synth.writer", "clocks_main", "render an analog-clock dataset (HF imagefolder per split)"),
    "charts": ("data_synth.charts", "main", "render charts with known values in ChartQA / PlotQA / DVQA layout"),
    "arithmetic": ("data_synth.arithmetic", "main", "arithmetic problems with exact answers (JSONL per split)"),
    "word-problems": ("data_synth.word_problems", "main", "templated math word problems (JSONL per split)"),
    "grounding": ("data_synth.grounding", "main", "shapes with point / box questions (HF imagefolder per split)"),
    "gallery": ("data_synth.clock_gallery", "gallery_main", "a labelled grid of varied clocks as one PNG"),
}


# the top-level modules of the `synth` extra (pyproject.toml): a command that misses one says what to install
SYNTH_MODULES = frozenset({"PIL", "numpy", "matplotlib", "tqdm"})


def missing_extra(program: str, error: ModuleNotFoundError, modules, extra: str, what: str) -> int | None:
    """For a module of `extra` missing: one line on stderr naming the extra to install; returns exit status 1.
    None for any other missing module (a bug or a broken install: the caller re-raises it)."""
    module = (error.name or "").partition(".")[0]
    if module not in modules:
        return None
    print(f"{program}: error: needs the {what} (missing module {module!r}): pip install 'vlm-smmd[{extra}]'",
          file=sys.stderr)
    return 1


def usage() -> str:
    lines = ["usage: data-synth COMMAND [options]   (data-synth COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<13} {text}" for name, (_, _, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # no command: the help, then the usage-error status
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in COMMANDS:
        print(f"data-synth: error: unknown command {argv[0]!r}; choose from {', '.join(COMMANDS)} (see data-synth "
              "--help)", file=sys.stderr)
        return 2
    try:
        return _run(argv)
    except ModuleNotFoundError as e:
        status = missing_extra(f"data-synth {argv[0]}", e, SYNTH_MODULES, "synth", "synth extra")
        if status is None:
            raise
        return status


def _run(argv: list[str]) -> int:
    module, func, _ = COMMANDS[argv[0]]
    try:
        with sigterm_as_interrupt():  # SIGTERM ends a command like Ctrl-C: workers stopped, one line said
            return getattr(import_module(module), func)(argv[1:]) or 0
    except KeyboardInterrupt as e:
        return interrupt_status(e)


if __name__ == "__main__":
    sys.exit(main())
