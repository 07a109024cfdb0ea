"""`vlm-smmd demo [--out DIR]`: the research settings end to end (`experiments.demo`), offline on a CPU."""

from __future__ import annotations

import argparse
from pathlib import Path

from data_synth.args import Parser

from . import TRAINED_MODEL, Output, existing


def parse(argv: list[str]) -> argparse.Namespace:
    from ..experiments.demo import CONFIGS, DEFAULT, SETTINGS

    parser = Parser(prog="vlm-smmd demo", description="The research settings end to end, offline on a CPU: "
                    "render the data, train the scratch model with CE + SMMD, evaluate, report.")
    parser.add_argument("--out", type=Path, default=Path("outputs/demo"), help="folder for everything (%(default)s)")
    parser.add_argument("--settings", default=",".join(DEFAULT),
                        help=f"comma-separated settings to run, from {', '.join(SETTINGS)} (default %(default)s)")
    parser.add_argument("--num", type=int, help="samples to render per setting (default: each config's synthesize_num)")
    parser.add_argument("--steps", type=int, help="training steps per setting (default: each config's max_steps)")
    parser.add_argument("--eval-limit", type=int, help="held-out samples to evaluate per setting (default all)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the models, predictions and reports of an earlier demo in --out (its data "
                             "is reused when rendered with the same settings)")
    args = parser.parse_args(argv)
    args.settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in args.settings if s not in SETTINGS]
    if unknown or not args.settings:
        parser.error(f"--settings: choose from {', '.join(SETTINGS)}, got {','.join(args.settings)!r}")
    for name, _, _ in SETTINGS.values():
        if not (CONFIGS / name).is_file():
            parser.error(f"{CONFIGS / name}: config not found (the demo runs from a source checkout)")
    for flag in ("num", "steps", "eval_limit"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    return args


def output(args) -> Output:
    earlier = [f"{s}/{part}/{name}" for s in args.settings
               for part, patterns in (("model", TRAINED_MODEL), ("eval", ("*",)), ("report", ("report.md",)))
               for name in existing(args.out / s / part, patterns)]
    return Output(args.out, earlier, args.overwrite, what="an earlier demo")


def run(args) -> int:
    from ..experiments.demo import run_demo

    run_demo(args.out, settings=args.settings, num=args.num, steps=args.steps, eval_limit=args.eval_limit,
             overwrite=bool(output(args).existing))
    return 0
