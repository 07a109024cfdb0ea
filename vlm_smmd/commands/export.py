"""`vlm-smmd export lmms-eval|vlmevalkit --data KIND:DIR --out DIR`: a dataset as a task of the field's
harnesses (`harness.export`): an lmms-eval task folder (`--include_path DIR`) or a VLMEvalKit TSV."""

from __future__ import annotations

import argparse
from pathlib import Path

from data_synth.args import Parser

from ..data.itsabouttime import coverage_line
from ..data.tasks import TASKS
from ..evaluation import training_prompts
from ..harness import export_lmms_eval, export_vlmevalkit
from . import Output, UsageError, existing

HARNESSES = ("lmms-eval", "vlmevalkit")
WRITES = ("vlm_smmd_export.json", "images", "*.jsonl", "*.yaml", "utils.py", "*.tsv")  # what an export leaves


def _spec(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition(":")
    if not sep or not path or name not in TASKS:
        raise argparse.ArgumentTypeError(f"{text!r} is not KIND:DIR with KIND one of {', '.join(TASKS)}")
    return name, Path(path)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Parser(
        prog="vlm-smmd export",
        description="Write a dataset as a task of an evaluation harness: an lmms-eval task folder (load it with "
                    "lmms-eval --include_path OUT --tasks NAME) or a VLMEvalKit benchmark TSV. Questions carry the "
                    "training instruction; the lmms-eval task scores with this tool's metrics.")
    parser.add_argument("harness", choices=HARNESSES, help="the harness to write the task for")
    parser.add_argument("--data", required=True, type=_spec, metavar="KIND:DIR",
                        help=f"dataset to export, KIND one of {', '.join(TASKS)} (clock, chart and text-number tasks)")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--split", default="test", help="split to export (default %(default)s)")
    parser.add_argument("--model", help="trained model folder: ask with its run's instruction (run_config.json), "
                        "as vlm-smmd eval does")
    parser.add_argument("--instruction", help="text appended to each question (default: the --model run's; "
                        "'' for none)")
    parser.add_argument("--max-new-tokens", type=int, help="lmms-eval generation length (default: eval's for the task)")
    parser.add_argument("--task", help="task name (default vlm_smmd_KIND)")
    parser.add_argument("--limit", type=int, help="export the first N records")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="unusable records: stop with an error, or skip and count them")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier export in --out")
    args = parser.parse_args(argv)
    for flag in ("limit", "max_new_tokens"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    return args


def output(args) -> Output:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a folder; choose a new --out")
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if held and not (out / WRITES[0]).is_file():
        raise UsageError(f"--out {out} holds files vlm-smmd export did not write ({', '.join(held[:4])}); "
                         "choose a new --out")
    return Output(out, existing(out, WRITES), args.overwrite, what="an export")


def run(args) -> int:
    kind, root = args.data
    instruction = args.instruction
    if args.model is not None:
        _, instruction, note = training_prompts(args.model, "", args.instruction)
        if note:
            print(note)
    options = dict(split=args.split, instruction=instruction or None, task_name=args.task, limit=args.limit,
                   on_error=args.on_error, overwrite=args.overwrite)
    if args.harness == "lmms-eval":
        done = export_lmms_eval(kind, root, args.out, max_new_tokens=args.max_new_tokens, **options)
    else:
        done = export_vlmevalkit(kind, root, args.out, **options)
    skipped = f", {done['skipped']} skipped" if done["skipped"] else ""
    asked = repr(done["instruction"]) if done["instruction"] else "none (the question as it is)"
    print(f"{kind}:{root} ({args.split}): {done['count']} records{skipped}; instruction {asked}")
    if "coverage" in done:  # a published set held in part: the harness's figures cover these rows only
        print(f"{kind}: {coverage_line(done['coverage'])}")
    if args.harness == "lmms-eval":
        print(f"task {done['task']}: {done['yaml']}, {done['data_file']} (max_new_tokens {done['max_new_tokens']}; "
              f"metrics {', '.join(done['metrics'])})")
        print(f"next: lmms-eval --model MODEL --model_args pretrained=... --include_path {args.out} --tasks "
              f"{done['task']} --log_samples --output_path OUT; then vlm-smmd analyze OUT/*/*_samples_"
              f"{done['task']}.jsonl --out ANALYSIS")
    else:
        print(f"benchmark: {done['tsv']}")
        print(f"next: copy {done['tsv'].name} into $LMUData, run VLMEvalKit's run.py --data {done['task']} --model "
              "MODEL; then vlm-smmd analyze its prediction .xlsx/.tsv --out ANALYSIS")
    return 0
