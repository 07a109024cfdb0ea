"""`vlm-smmd summary LABEL=DIR ... --out OUT`: one table across finished `compare` pages, each page's declared
endpoint against CE with Holm's correction across all of them and the minimal detectable differences
(`experiments.summary`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from data_synth.args import Parser

from . import Output, UsageError, existing

WRITES = ("summary.md", "summary.csv")


def _page(text: str) -> tuple[str, Path]:
    label, sep, folder = text.partition("=")
    if not sep or not label.strip() or not folder.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL=DIR, e.g. 'chart, base=outputs/confirm_chart'")
    return label.strip(), Path(folder.strip())


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog="vlm-smmd summary", description="One table across finished vlm-smmd compare pages: each "
                    "page's declared endpoint against CE (none), the difference with its 95%% paired t-interval, "
                    "Holm's correction across every test of the table, and beside each result without a finding "
                    "its minimal detectable difference at 80%% power. Writes summary.md and summary.csv.")
    parser.add_argument("pages", nargs="+", type=_page, metavar="LABEL=DIR",
                        help="a row label and the --out folder of a finished compare (repeat for each page)")
    parser.add_argument("--out", type=Path, required=True, help="folder for summary.md and summary.csv")
    parser.add_argument("--overwrite", action="store_true", help="replace the summary that --out already holds")
    args = parser.parse_args(argv)
    labels = [label for label, _ in args.pages]
    if len(set(labels)) != len(labels):
        raise UsageError(f"each page needs its own label; repeated: {', '.join(sorted({x for x in labels if labels.count(x) > 1}))}")
    for _, folder in args.pages:
        if not (folder / "paired.csv").is_file():
            raise UsageError(f"{folder}: no paired.csv (not the --out of a finished vlm-smmd compare)")
    return args


def output(args) -> Output:
    return Output(args.out, existing(args.out, WRITES), args.overwrite, what="a summary")


def run(args) -> int:
    from ..experiments.summary import SummaryError, summarize, write_summary

    try:
        rows = summarize(args.pages)
    except SummaryError as e:
        raise UsageError(e) from None
    paths = write_summary(args.out, rows)
    found = sum(r["significant"] for r in rows)
    print(f"summary: {len(rows)} tests against CE across {len(args.pages)} pages, {found} with a finding after "
          f"Holm across all; {paths['summary_md']}")
    return 0
