"""The argument parser every `data-synth` subcommand (and `vlm-smmd`) uses, and the integer check of their
options; imports nothing of the package."""

from __future__ import annotations

import argparse
import sys


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


def bounded_int(lo: int, hi: int):
    """An argparse `type`: an integer in lo..hi, else a usage error naming the range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in {lo}..{hi}, got {value}")
        return value
    return parse


def check_int(name: str, value, lo: int, hi: int) -> int:
    """`value` if it is an integer in lo..hi, else ValueError naming `name` and the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {value!r}")
    return value
