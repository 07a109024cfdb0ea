"""`data-synth` command: each subcommand lives in the module that does the work.

Every subcommand parses with `Parser`: a usage error is one line on stderr (exit status 2), and options
are taken spelt with underscores too (--answer_format for --answer-format). `vlm-smmd` uses the same class.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

# name -> (module, function taking argv, one-line help)
COMMANDS = {
    "clocks": ("data_synth.writer", "clocks_main", "render an analog-clock dataset (HF imagefolder per split)"),
    "charts": ("data_synth.charts", "main", "render charts with known values in ChartQA / PlotQA / DVQA layout"),
    "arithmetic": ("data_synth.arithmetic", "main", "arithmetic problems with exact answers (JSONL per split)"),
    "gallery": ("data_synth.clocks", "gallery_main", "a labelled grid of varied clocks as one PNG"),
}


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line (exit status 2) and which takes every option also
    spelt with underscores (--max_new_tokens for --max-new-tokens; --help shows the dash form)."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args([self._dashed(a) for a in args], namespace)

    def _dashed(self, arg: str) -> str:
        if not arg.startswith("--") or "_" not in arg:
            return arg
        name, eq, value = arg.partition("=")
        dashed = "--" + name[2:].replace("_", "-")
        return dashed + eq + value if dashed in self._option_string_actions else arg

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def usage() -> str:
    lines = ["usage: data-synth COMMAND [options]   (data-synth COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<11} {text}" for name, (_, _, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in COMMANDS:
        print(f"data-synth: error: unknown command {argv[0]!r}; choose from {', '.join(COMMANDS)} (see data-synth "
              "--help)", file=sys.stderr)
        return 2
    from .writer import interrupt_status, sigterm_as_interrupt

    module, func, _ = COMMANDS[argv[0]]
    try:
        with sigterm_as_interrupt():  # SIGTERM ends a command like Ctrl-C: workers stopped, one line said
            return getattr(import_module(module), func)(argv[1:]) or 0
    except KeyboardInterrupt as e:
        return interrupt_status(e)


if __name__ == "__main__":
    sys.exit(main())
