"""`vlm-smmd eval --model DIR --data NAME:PATH [--data ...] --out DIR`: greedy answers, scored
(`evaluation.evaluate_model`); writes predictions.jsonl and metrics.json."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from data_synth.args import Parser

from ..data.itsabouttime import coverage_line
from ..data.tasks import TASKS, answer_tokens
from ..evaluation import (
    PARTIAL,
    PARTIAL_RUN,
    EvalArguments,
    evaluate_model,
    format_metrics_table,
    parse_data_spec,
    training_data,
    training_prompts,
)
from ..experiments.threads import use_thread_plan
from . import Output, UsageError, existing

OUTPUTS = ("predictions.jsonl", "metrics.json")


def _spec(text: str):
    try:
        return parse_data_spec(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _train_spec(text: str) -> tuple[str, str, str]:
    """"NAME:PATH" or "NAME:PATH:SPLIT" (split default "train") -> (name, path, split)."""
    name, _, path = text.partition(":")
    split = "train"
    head, sep, tail = path.rpartition(":")
    if sep and head and "/" not in tail and not Path(path).exists():
        path, split = head, tail
    if name not in TASKS or not path:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME:PATH[:SPLIT] with NAME one of {', '.join(TASKS)}")
    return name, path, split


def build_parser() -> Parser:
    parser = Parser(
        prog="vlm-smmd eval",
        description="Generate answers greedily for datasets and score them; writes predictions.jsonl and "
                    "metrics.json.")
    parser.add_argument("--model", required=True, help="saved model directory, hub id, or a preset such as 'tiny'")
    parser.add_argument("--data", required=True, action="append", type=_spec, metavar="NAME:PATH",
                        help=f"dataset to evaluate, NAME one of {', '.join(TASKS)}; repeat for several")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the predictions.jsonl and metrics.json that --out already holds")
    parser.add_argument("--resume", action="store_true",
                        help="continue the evaluation interrupted or failed in --out (same arguments): keep its "
                             "predictions.partial.jsonl and generate only the answers it lacks")
    parser.add_argument("--split", default="test", help="split to read (default %(default)s)")
    parser.add_argument("--limit", type=int, help="evaluate the first N samples of each dataset")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int,
                        help="tokens generated per answer (default: what the tasks' answers need: 64 for grounding, "
                             "128 for RefCOCO, else 16)")
    parser.add_argument("--instruction", help="text appended to each question (default: the training run's, "
                        "from run_config.json beside the model)")
    parser.add_argument("--system-prompt", help="system turn (default: the training run's, from run_config.json)")
    parser.add_argument("--min-pixels", type=int)
    parser.add_argument("--max-pixels", type=int)
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="unusable records: stop with an error, or skip and count them")
    parser.add_argument("--train-data", action="append", type=_train_spec, metavar="NAME:PATH[:SPLIT]",
                        help="the training set to check the evaluated records against (held out?); default: the "
                             "one in the run's run_config.json; repeat for several")
    parser.add_argument("--max-image-pixels", type=int, help="largest image (width x height) accepted; larger ones "
                        "are bad records (default Pillow's 89,478,485; 0: no limit)")
    parser.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--dtype", choices=("auto", "fp32", "bf16", "fp16"),
                        help="model dtype (default: fp32 on the CPU, the checkpoint's on a GPU)")
    return parser


def flag_fields() -> list[str]:
    """The EvalArguments fields that are eval flags (`--batch-size` sets batch_size): all but those whose
    metadata says "flag": None."""
    return [f.name for f in dataclasses.fields(EvalArguments) if f.metadata.get("flag", f.name) is not None]


def eval_arguments(args: argparse.Namespace, **taken) -> EvalArguments:
    """The EvalArguments of parsed flags, with `taken` (values found elsewhere, e.g. in run_config.json)
    in place of the flags of their names."""
    return EvalArguments(**{**{name: getattr(args, name) for name in flag_fields()}, **taken})


def parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be >= 1, got {args.limit}")
    if args.max_new_tokens is None:
        args.max_new_tokens = answer_tokens(name for name, _ in args.data)
    if args.batch_size < 1 or args.max_new_tokens < 1:
        parser.error("--batch-size and --max-new-tokens must be >= 1")
    if args.max_image_pixels is not None and args.max_image_pixels < 0:
        parser.error("--max-image-pixels must be >= 0 (0: no limit)")
    if args.resume and args.overwrite:
        parser.error("--resume continues the evaluation in --out and --overwrite starts afresh: pass one")
    return args


def output(args) -> Output:
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} exists and is not a folder; choose a new --out")

    partial = existing(args.out, (PARTIAL, PARTIAL_RUN))
    if args.resume:  # continues the partial run (whose final write may have failed half way) or starts one
        finished = [] if partial else existing(args.out, OUTPUTS)
        return Output(args.out, finished, False, what="a finished evaluation",
                      advice="nothing to resume; pass --overwrite to evaluate again, or choose another --out")
    if partial:
        return Output(args.out, partial, args.overwrite, what="an interrupted evaluation",
                      advice="pass --resume to continue it, --overwrite to start afresh, or choose another --out")
    finished = existing(args.out, OUTPUTS)
    if finished and not _written_by_eval(Path(args.out)):
        raise UsageError(f"--out {args.out} holds {', '.join(finished)} that vlm-smmd eval did not write (no "
                         "metrics.json of its own); choose a new --out")
    return Output(args.out, finished, args.overwrite,
                  advice="pass --overwrite to replace them, or choose another --out")


def _written_by_eval(out: Path) -> bool:
    """Whether `out`/metrics.json is an evaluation's own (a JSON object with its "sources"): the mark
    that --overwrite may replace the folder's predictions and metrics."""
    try:
        metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(metrics, dict) and isinstance(metrics.get("sources"), dict)


def run(args) -> int:
    from ..modeling import resolve_family  # imports torch: kept here so that eval --help starts fast

    resolve_family(args.model)  # a bad name or path fails before the data is read
    system_prompt, instruction, note = training_prompts(args.model, args.system_prompt, args.instruction)
    if note:
        print(note)
    threads = use_thread_plan()  # like train and compare
    arguments = eval_arguments(args, system_prompt=system_prompt, instruction=instruction,
                               train_data=args.train_data or training_data(args.model))
    metrics = evaluate_model(args.model, args.data, args.out, arguments, threads=threads.record())
    for name, options in metrics["run"]["reader_options"].items():
        print(f"{name}: read with the training run's reader_options {json.dumps(options, sort_keys=True)}")
    print(format_metrics_table(metrics))
    for name, report in metrics["leakage"].items():
        print(f"{name} ({args.split}): " + ("; ".join(report["lines"]) if report else
                                            "not checked against training (no run_config.json naming its training "
                                            "data; pass --train-data NAME:PATH[:SPLIT])"))
        if report and report["leaks"]:
            print(f"WARNING: {name} {args.split} is not held out: it shares records with the training data "
                  f"{report['train']}")
    if metrics.get("coverage"):
        for name, coverage in metrics["coverage"].items():
            print(f"{name}: {coverage_line(coverage)}")
    for name, counts in metrics["skipped"].items():
        if counts["read"] or counts["generate"]:
            print(f"{name}: skipped {counts['read']} records at read time and {counts['generate']} at "
                  f"generation ({counts['reasons']})")
    print(f"predictions: {args.out / 'predictions.jsonl'} ({metrics['count']} records)")
    print(f"metrics: {args.out / 'metrics.json'}")
    print(f"next: vlm-smmd analyze {args.out / 'predictions.jsonl'} --out {args.out / 'analysis'}")
    return 0
