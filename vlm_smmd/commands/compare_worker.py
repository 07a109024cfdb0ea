"""`vlm-smmd compare-worker VARIANT.json`: one variant of a comparison, in its own process (started by
`vlm-smmd compare`; `experiments.orchestrate.variant_worker`)."""

from __future__ import annotations

from pathlib import Path

from ..experiments.orchestrate import follow_parent, variant_worker
from . import UsageError


def parse(argv: list[str]) -> Path:
    if len(argv) != 1 or argv[0].startswith("-"):
        raise UsageError("usage: vlm-smmd compare-worker VARIANT.json (written by vlm-smmd compare)")
    return Path(argv[0])


def output(spec: Path) -> None:
    return None  # the compare that wrote the spec owns the folder


def run(spec: Path) -> int:
    follow_parent()  # end with the compare that started us, even where no parent-death signal is set
    return variant_worker(spec)
