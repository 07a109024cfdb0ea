"""`vlm-smmd analyze PREDICTIONS ... --out DIR`: per-digit error analysis of one or several runs
(`analysis`), side by side; writes report.md, analysis.json and plots. A file is this tool's predictions.jsonl,
an lmms-eval --log_samples file or a VLMEvalKit prediction file (`harness.predictions`, detected)."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from data_synth.args import Parser

from ..analysis import SWAP_TOLERANCE, analyze_records, headline, load_run_info, write_report
from ..analysis.formatting import fmt
from ..data.records import duplicate_note
from ..harness import read_any_predictions
from . import Output, existing


def _default_names(paths: Sequence[Path]) -> list[str]:
    """File stem, or the parent folder's name for files called predictions.jsonl; repeats get "#2", "#3"."""
    names, seen = [], Counter()
    for p in paths:
        base = p.parent.name if p.stem == "predictions" and p.parent.name else p.stem
        seen[base] += 1
        names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return names


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Parser(
        prog="vlm-smmd analyze",
        description="Per-digit error analysis of prediction files (vlm-smmd eval's predictions.jsonl, lmms-eval "
                    "--log_samples .jsonl, VLMEvalKit .tsv/.xlsx; the format is detected); several files are "
                    "compared side by side.")
    parser.add_argument("predictions", nargs="+", type=Path, help="prediction files, one per run")
    parser.add_argument("--out", required=True, type=Path, help="folder for report.md, analysis.json and PNGs")
    parser.add_argument("--overwrite", action="store_true", help="replace the report that --out already holds")
    parser.add_argument("--names", help="comma-separated run names, one per file (default: from the paths)")
    parser.add_argument("--run-dir", action="append", type=Path, metavar="DIR",
                        help="training output folder (run_config.json, trainer_state.json) of each file, in "
                             "order; repeat once per file (default: the model named in the file's metrics.json)")
    parser.add_argument("--swap-tolerance", type=float, default=SWAP_TOLERANCE,
                        help="minutes on the dial for the swapped-hands test (default %(default)s)")
    args = parser.parse_args(argv)
    if args.names is None:
        args.names = _default_names(args.predictions)
    else:
        names = [n.strip() for n in args.names.split(",")]
        if len(names) != len(args.predictions):
            parser.error(f"--names gives {len(names)} names for {len(args.predictions)} prediction files")
        if len(set(names)) != len(names) or not all(names):
            parser.error(f"--names must be distinct and non-empty, got {args.names!r}")
        args.names = names
    if args.run_dir is not None and len(args.run_dir) != len(args.predictions):
        parser.error(f"--run-dir given {len(args.run_dir)} times for {len(args.predictions)} prediction files")
    return args


def output(args) -> Output:
    return Output(args.out, existing(args.out, ("report.md",)), args.overwrite, what="a report.md")


def run(args) -> int:
    names, paths = args.names, args.predictions
    runs = {}
    for name, path in zip(names, paths):
        fmt_name, runs[name] = read_any_predictions(path)
        print(f"{name}: {path} read as a {fmt_name} prediction file ({len(runs[name])} records)")
    notes = []
    for name, path in zip(names, paths):  # repeats are kept (the figures count them): said, not dropped
        # a chart has several questions with one answer: the image repeats only with question and target
        duplicated = duplicate_note(
            runs[name], {"an id seen before": lambda r: (r["source"], r.get("split"), str(r["id"])),
                         "the image, question and target of an earlier one":
                         lambda r: (r["source"], r.get("split"), str(r["image"]), str(r.get("question")),
                                    tuple(map(str, r["targets"]))) if r.get("image") else None},
            lambda r: f"id {str(r['id'])!r}")
        if duplicated:
            print(f"{name}: note: {path}: {duplicated}")
            notes.append(f"{name}: {duplicated}.")
    ids = {name: {str(r["id"]) for r in recs} for name, recs in runs.items()}
    if len({frozenset(s) for s in ids.values()}) > 1:
        notes.append("The runs do not cover the same record ids; compare their figures with care.")
    analyses = {name: analyze_records(recs, swap_tolerance=args.swap_tolerance) for name, recs in runs.items()}
    run_dirs = args.run_dir or [None] * len(names)
    info = {n: load_run_info(d, predictions=p) for n, d, p in zip(names, run_dirs, paths)}
    report = write_report(analyses, args.out, inputs={n: str(p) for n, p in zip(names, paths)}, notes=notes,
                          run_info=info)
    for name, a in analyses.items():
        figs = ", ".join(f"{f.label} {fmt(f.value)} (chance {fmt(f.chance)})" for f in headline(a)[:4])
        print(f"{name}: {a['records']} records; {figs}")
        if a["collapse"]["collapsed"]:
            print(f"{name}: WARNING, mostly repeats itself: {'; '.join(a['collapse']['reasons'])}")
    print(f"report: {report}")
    return 0
