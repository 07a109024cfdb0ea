"""`vlm-smmd compare CONFIG.yaml --aux ... --seeds ... --out DIR [--key value ...]`: the loss comparison on
one config, in one resumable command (`experiments`).

Variants: each aux x each seed, plus SMMD with each control kernel (kernel_mode random | shuffled) x each
seed. Every variant gets the same config and `--key value` overrides, hence the same model, data and
steps; only aux, kernel_mode and seed (model initialisation and data order) differ. A control kernel is
drawn with kernel_seed = (the config's kernel_seed) + seed, so its spread over seeds covers several random
kernels rather than one lucky or unlucky draw. Synthetic data (`synthesize:`) is rendered once, before the
first variant, so all variants read the same files.

Two stages choose and confirm a weight: `--grid KEY=V1,...` on development seeds writes selection.json (not
evidence); `--selection DIR/selection.json` on fresh seeds runs each loss at its own chosen values (a control
kernel at smmd's), the groups keeping their plain names, and refuses a selection made on another config file.

Each variant runs in a fresh process (`vlm-smmd compare-worker`): training, then evaluation on the saved
model (the config's eval_split, else "test"). With `--launcher "torchrun --nproc_per_node 8"` training runs
under that launcher (`LAUNCHER -m vlm_smmd.cli train ...`) and the worker only evaluates. The analysis runs
in the parent.

DIR layout:
    .lock                   held while a compare runs in DIR (its pid): a second one is refused
    compare.json            the shared settings and a fingerprint of the evaluated records; a rerun with
                            other settings or changed evaluation data is refused
    status.json             per variant: pending | running | done | failed | interrupted, seconds, log
                            (rebuilt from the runs' done.json files when damaged)
    runs/NAME/              one variant, NAME = GROUP-seedS (GROUP: the aux name, or smmd-random ...)
        variant.json        what the worker runs
        log.txt             the worker's stdout and stderr
        model/              training output (weights deleted once evaluated, unless --keep-models)
        train.json          training metrics: the training stage is done (a retry only evaluates)
        predictions.jsonl, metrics.json     evaluation
        analysis/           per-digit report of this run
        error.txt           a failure: how the process ended, its error line and the tail of the log
        worker_error.json   the error line a failing worker wrote
        done.json           the done-marker, written last: a rerun skips this variant
    results.md, results.csv per group: mean, sample std, min, max over finished seeds, n seeds, the
                            chance level, and the paired difference to CE only (aux none, same seed)
    runs.csv                per run, failed runs included
    plots/                  main_metric.png, digit_accuracy.png, paired_differences.png
    analysis/               `analysis.write_report` over the groups (each column pools its seeds)

Resumable: a variant with done.json is not rerun; a failed one is reported (in the tables, with its
error tail) and retried by the next run; the exit status is 1 while any variant has failed. The tables
recompute each finished run's figures from its predictions.jsonl (`analysis.headline`), so they cover
figures added after a run finished.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from data_synth.args import Parser

from ..config import (
    AUX_NAMES,
    ConfigError,
    LossArguments,
    check_config,
    check_seeds,
    evaluated_splits,
    load_config,
    parse_overrides,
    uses_deepspeed,
)
from ..data.tasks import answer_tokens
from ..evaluation import EvalArguments
from ..experiments.store import StateError, read_state, write_json
from ..experiments.threads import plan_threads
from ..experiments.variants import (
    BASELINE,
    KERNEL_CONTROLS,
    RESERVED,
    GridError,
    check_grid,
    parse_grid,
    plan_variants,
)
from ..run_record import file_sha256
from . import Output, UsageError

DEFAULT_AUX = "none,smmd,mmd,smooth,ntl_was,ntl_mse,dist2"


def build_parser() -> Parser:
    parser = Parser(
        prog="vlm-smmd compare", allow_abbrev=False,
        description="Train, evaluate and analyse every aux loss (and SMMD with control kernels) over several "
                    "seeds on one config; writes results.md / results.csv, plots and a comparison report. "
                    "Any further --key value is a config override applied to every variant.")
    parser.add_argument("config", type=Path, help="YAML run config (see vlm-smmd train --help)")
    parser.add_argument("--aux", help=f"comma-separated aux losses, from {', '.join(AUX_NAMES)} (default "
                                      f"{DEFAULT_AUX}; with --selection the losses its file lists)")
    parser.add_argument("--kernel-controls", default="random,shuffled",
                        help="SMMD with these control kernels, from random, shuffled; '' for none "
                             "(default %(default)s)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default %(default)s)")
    parser.add_argument("--out", required=True, type=Path,
                        help="output folder: a new or empty one, or one of an earlier compare with the same "
                             "settings, which is resumed (a folder holding anything else is refused)")
    parser.add_argument("--eval-limit", type=int, help="evaluate the first N samples of the eval split (default all)")
    parser.add_argument("--eval-batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int,
                        help="tokens generated per answer (default: what the tasks' answers need: 64 for grounding, "
                             "128 for RefCOCO, else 16)")
    parser.add_argument("--launcher", help="train under this command prefix instead of python, e.g. "
                                           "'torchrun --nproc_per_node 8' (it gets -m vlm_smmd.cli train ...)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="variants trained side by side, each in its own process with its share of the free "
                             "cores as torch threads (see the 'threads:' line it prints; default %(default)s)")
    parser.add_argument("--keep-models", action="store_true",
                        help="keep each variant's trained weights (default: deleted once evaluated)")
    parser.add_argument("--contrast", action="append", default=[], metavar="A:B",
                        help="also test group A against group B directly (e.g. smmd:smmd-shuffled); repeatable")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                        help="the selection stage: every loss at each value of this config key (repeatable: the "
                             "product), on development seeds; writes selection.json, per loss the value with the "
                             "best primary_metric on the val split (ties to the smaller value)")
    parser.add_argument("--selection", type=Path, metavar="SELECTION.json",
                        help="the confirmation: each loss runs at the values a compare --grid chose for it (its "
                             "selection.json, made on this config file), on fresh seeds (none a development seed "
                             "or one the selection chose on); the page shows the selection's validation table, "
                             "marked not evidence")
    parser.add_argument("--dev-seeds", help="seeds used while building the setting (default: the config's "
                        "dev_seeds): shown, left out of every aggregate and test")
    parser.add_argument("--curve", metavar="P1,P2,...",
                        help="learning curve: also evaluate the primary_metric on val at these percents of max_steps "
                             "(e.g. 25,50,75; 100 is the final model), from checkpoints saved there; needs "
                             "primary_metric and 'val' among test_splits; exploratory, on the page and in curve.json")
    parser.add_argument("--curve-limit", type=int, default=200,
                        help="val samples evaluated per curve point: the first N (at most --eval-limit; "
                             "default %(default)s)")
    parser.add_argument("--allow-overlap", action="store_true",
                        help="write the results even when an evaluated split shares images (or, for an unseen-values "
                             "split, answers) with training; the page then says so")
    return parser


def _names(text: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in allowed]
    if bad:
        raise ConfigError(f"{what}: unknown {', '.join(map(repr, bad))}; choose from {', '.join(allowed)}")
    if len(set(items)) != len(items):
        raise ConfigError(f"{what}: {text!r} names one twice")
    return items


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds: expected comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds: expected distinct integers, got {text!r}")
    for seed in seeds:  # the range train's seed has (config._check), caught here rather than in every variant
        try:
            check_seeds({"seed": seed})
        except ConfigError as e:
            raise ConfigError(f"--seeds: {e}") from None
    return seeds


def eval_data(data_args) -> list[list[str]]:
    """[[source, root], ...] that evaluation reads: the dataset, or each source of a mixture once."""
    if data_args.dataset != "mixture":
        return [[data_args.dataset, str(Path(data_args.data_root).resolve())]]
    data = [[e["name"], str(Path(e["root"]).resolve())] for e in data_args.mixture]
    names = [d[0] for d in data]
    if len(set(names)) != len(names):
        raise ConfigError(f"mixture: compare evaluates each source once, but the mixture lists {names}")
    return data


def parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    if argv and argv[0].startswith("--") and argv[0] not in ("-h", "--help"):
        parser.error("CONFIG.yaml comes first: vlm-smmd compare CONFIG.yaml [options] [--key value ...]")
    args, rest = parser.parse_known_args(argv)
    for name in ("eval_limit", "eval_batch_size", "max_new_tokens", "jobs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.selection is not None and args.grid:
        parser.error("--selection (the confirmation) and --grid (the selection stage) exclude each other: choose "
                     "with --grid on development seeds, then confirm with --selection on fresh ones")
    try:
        args.selection_data = _load_selection(args.selection) if args.selection is not None else None
        if args.aux is None:  # a confirmation runs CE and the losses its selection chose for, unless told otherwise
            controls = {f"smmd-{c}" for c in KERNEL_CONTROLS}
            args.aux = (",".join(dict.fromkeys([BASELINE, *(k for k in args.selection_data["losses"]
                                                            if k not in controls)]))
                        if args.selection_data else DEFAULT_AUX)
        args.auxes = _names(args.aux, AUX_NAMES, "--aux")
        args.controls = _names(args.kernel_controls, KERNEL_CONTROLS, "--kernel-controls")
        args.seed_list = _seeds(args.seeds)
        args.overrides = parse_overrides(rest)
        for key, flag in RESERVED.items():
            if key in args.overrides:
                raise ConfigError(f"--{key} is set per variant by compare; use {flag}")
        if not args.config.is_file():
            raise ConfigError(f"{args.config}: no such config file")
        args.model_args, args.data_args, args.loss_args, _ = check_config(args.config, args.overrides)
        args.data = eval_data(args.data_args)
        if args.max_new_tokens is None:
            args.max_new_tokens = answer_tokens(name for name, _ in args.data)
    except ConfigError as e:
        raise UsageError(e) from None
    if not args.auxes and not args.controls:
        parser.error("nothing to compare: --aux and --kernel-controls are both empty")
    groups = [*args.auxes, *(f"smmd-{c}" for c in args.controls)]
    args.contrasts = []
    for text in args.contrast:
        pair = tuple(p.strip() for p in text.split(":"))
        if len(pair) != 2 or not all(pair) or pair[0] == pair[1] or any(p not in groups for p in pair):
            parser.error(f"--contrast {text!r}: expected A:B, two different groups of this comparison "
                         f"({', '.join(groups)})")
        args.contrasts.append(pair)
    try:
        args.dev_seed_list = _seeds(args.dev_seeds) if args.dev_seeds else list(args.data_args.dev_seeds)
    except ConfigError as e:
        raise UsageError(str(e).replace("--seeds", "--dev-seeds")) from None
    _grid(args)
    _selection(args)
    _curve(args)
    return args


def _curve(args) -> None:
    """args.curve_settings (compare.json's "curve", None without --curve) from --curve and --curve-limit."""
    from ..experiments.curves import SPLIT, parse_percents

    args.curve_settings = None
    if args.curve is None:
        return
    try:
        percents = parse_percents(args.curve)
    except ValueError as e:
        raise UsageError(e) from None
    if args.curve_limit < 1:
        raise UsageError(f"--curve-limit must be >= 1, got {args.curve_limit}")
    if args.data_args.primary_metric is None or SPLIT not in evaluated_splits(args.data_args):
        raise UsageError(f"--curve evaluates the primary_metric on the {SPLIT} split: {args.config} needs "
                         f"primary_metric and '{SPLIT}' among test_splits (see docs/guide/comparing.md)")
    if args.launcher:
        raise UsageError("--curve needs the compare worker to train (it adds the checkpoints); drop --launcher")
    args.curve_settings = {"percents": percents, "split": SPLIT, "metric": args.data_args.primary_metric,
                           "limit": min(args.curve_limit, args.eval_limit or args.curve_limit)}


def _load_selection(path: Path) -> dict:
    from ..experiments.selection import (  # numpy: compare --help starts without it
        SelectionError,
        load_selection,
    )

    try:
        return load_selection(path)
    except SelectionError as e:
        raise ConfigError(f"--selection {e}") from None


def _loss_options() -> list[str]:
    """The loss options (LossArguments): a grid over them leaves the CE-only baseline unchanged."""
    return [f.name for f in dataclasses.fields(LossArguments)]


def _selection(args) -> None:
    """args.chosen (aux -> its overrides) for a confirmation from args.selection_data, checked against this
    config, its seeds and overrides; None without --selection."""
    args.chosen = None
    if args.selection_data is None:
        return
    from ..experiments.selection import SelectionError, confirmation_overrides

    try:
        args.chosen = confirmation_overrides(args.selection_data, args.selection, args.auxes, args.controls,
                                             args.seed_list, args.dev_seed_list, file_sha256(args.config),
                                             loss_options=_loss_options())
    except SelectionError as e:
        raise UsageError(e) from None
    for aux, values in args.chosen.items():
        both = [k for k in values if k in args.overrides]
        if both:
            raise UsageError(f"--{both[0]}: {args.selection} chose it per loss ({aux}: {values[both[0]]}); drop "
                             f"--{both[0]}, or choose again")
        try:  # a chosen key or value the config no longer takes (one line naming it)
            check_config(args.config, {**args.overrides, **values})
        except ConfigError as e:
            raise UsageError(f"--selection {args.selection}: {aux}'s chosen {values}: {e}") from None


def _grid(args) -> None:
    """args.grid_values from --grid, each value checked against the config; the selection stage runs on
    development seeds only and tests nothing (no --contrast)."""
    try:
        args.grid_values = parse_grid(args.grid)
        check_grid(args.grid_values, args.config, args.overrides)
    except GridError as e:
        raise UsageError(e) from None
    if not args.grid_values:
        return
    fresh = [s for s in args.seed_list if s not in args.dev_seed_list]
    if fresh:
        raise UsageError(f"--grid chooses on development seeds only; seed(s) {', '.join(map(str, fresh))} are not "
                         f"among them ({args.dev_seed_list or 'none declared'}): pass --dev-seeds or the config's "
                         "dev_seeds, and confirm the chosen values on fresh seeds with --selection")
    if args.contrasts:
        raise UsageError("--grid is the selection stage, which tests nothing: drop --contrast")
    if args.data_args.primary_metric is None or "val" not in evaluated_splits(args.data_args):
        raise UsageError(f"--grid chooses on the primary_metric of the val split: {args.config} needs "
                         "primary_metric and 'val' among test_splits (see docs/guide/comparing.md)")


def output(args) -> Output:
    # compare resumes its own folder; `run` refuses any other non-empty one before writing
    return Output(args.out)


def run(args) -> int:
    from ..training.guards import (  # imports torch: --help starts fast
        LOCK_FILE,
        OutputLockedError,
        output_lock,
    )

    out = args.out.resolve()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; use a new or empty folder")
    with contextlib.ExitStack() as stack:
        try:  # held for the whole run, so two compares never write one folder
            stack.enter_context(output_lock(out))
        except OutputLockedError:
            holder = (out / LOCK_FILE).read_text(errors="replace").strip() or "pid not written yet"
            raise UsageError(f"--out {out} is in use by another compare ({holder}); wait for it to end or "
                             "choose another --out") from None
        return _run(args, out, LOCK_FILE)


def _run(args, out: Path, lock_file: str) -> int:
    # numpy (the statistics) and torch (training): compare --help starts without them
    from ..experiments.orchestrate import (
        data_fingerprints,
        eval_settings,
        held_out_check,
        run_compare,
        split_figures,
    )
    from ..training import synthesize_if_missing

    config = args.config.resolve()
    try:  # the shared settings, every TrainingArguments value checked once here (DeepSpeed left to the workers)
        load_config(args.config, {**args.overrides, "deepspeed": None, "output_dir": str(out / "runs")})
    except ConfigError as e:
        raise UsageError(e) from None
    data_args, model_args = args.data_args, args.model_args
    splits = evaluated_splits(data_args)
    arguments = EvalArguments(limit=args.eval_limit, batch_size=args.eval_batch_size,
                              max_new_tokens=args.max_new_tokens, system_prompt=data_args.system_prompt,
                              instruction=data_args.instruction, min_pixels=model_args.min_pixels,
                              max_pixels=model_args.max_pixels, on_error=data_args.on_error,
                              max_image_pixels=data_args.max_image_pixels)
    # the selection file a confirmation runs (None: not one): a resume with another file is refused below
    selection = ({"file": str(args.selection.resolve()), "sha256": file_sha256(args.selection)}
                 if args.selection is not None else None)
    settings = {"config": str(config), "config_sha256": file_sha256(config), "overrides": args.overrides,
                "eval": eval_settings(args.data, splits, arguments), "selection": selection}
    settings["curve"] = args.curve_settings  # a resume with other curve points (or none) is refused below
    settings_file = out / "compare.json"
    # --out is new, empty, or an earlier compare with the same settings (resumed); results.md, plots/ and
    # analysis/ would overwrite whatever else a folder holds
    old = None
    if settings_file.is_file():
        try:
            old = read_state(settings_file)
        except StateError as e:
            raise UsageError(f"{e}; use another --out") from None
        if isinstance(old.get("eval"), dict):  # written before compare kept every EvalArguments field: defaults
            old = {**old, "eval": {**json.loads(json.dumps(EvalArguments().to_dict())), **old["eval"]}}
        diff = [k for k in settings if json.dumps(old.get(k), sort_keys=True) != json.dumps(
            json.loads(json.dumps(settings[k], default=str)), sort_keys=True)]
        if diff:
            raise UsageError(f"{out} holds runs made with other settings ({', '.join(diff)} differ; see "
                             f"{settings_file}); use another --out, or delete that folder")
    elif any(p.name != lock_file for p in out.iterdir()):
        raise UsageError(f"--out {out} already holds files of something other than a compare (no compare.json) "
                         "that the results would overwrite; use a new or empty --out")
    synthesize_if_missing(data_args)  # once, before any variant: all of them read the same files
    leakage = held_out_check(data_args, splits, limit=args.eval_limit)
    for split, report in leakage.items():
        print(f"{split}: " + "; ".join(report["lines"]), flush=True)
    leaking = [split for split, report in leakage.items() if report["leaks"]]
    if leaking and not args.allow_overlap:
        raise ValueError(f"split(s) {', '.join(leaking)} presented as held out share records with the training "
                         f"split {data_args.train_split!r} (see the lines above); fix the data, or pass "
                         "--allow-overlap to compare anyway (the results page then says so)")
    # the evaluated records: runs evaluated on other ones must not be pooled with the earlier seeds
    fingerprint = data_fingerprints(data_args, splits, limit=args.eval_limit)
    changed = [s for s in splits if old and old.get("data_fingerprint", fingerprint).get(s) != fingerprint[s]]
    if changed:
        raise UsageError(f"the {', '.join(changed)} records differ from those the earlier runs in {out} were "
                         f"evaluated on (data_fingerprint in {settings_file}); restore that data, or use another --out")
    metric, primary_split = data_args.primary_metric, data_args.primary_split or splits[0]
    if metric and metric not in (figures := split_figures(data_args, primary_split, limit=args.eval_limit)):
        # caught here, not on the page after every run: a misspelt endpoint would leave the page without one
        raise UsageError(f"primary_metric {metric!r} ({config}) is not a figure of split {primary_split!r}; "
                         f"its figures: {', '.join(figures)}")
    if old is None or "data_fingerprint" not in old:  # new, or made before compare kept the fingerprint
        write_json(settings_file, {**(old or settings), "data_fingerprint": fingerprint})
    # what the page says beyond the runs' settings (these may change between reruns of one comparison)
    settings = {**settings, "primary": {"metric": data_args.primary_metric, "split": data_args.primary_split},
                "dev_seeds": args.dev_seed_list, "contrasts": args.contrasts, "leakage": leakage,
                "allow_overlap": args.allow_overlap, "grid": args.grid_values}
    if args.chosen is not None:  # the page shows the selection's table (not evidence) and each group's values
        settings["confirmation"] = {
            **selection, **{k: args.selection_data.get(k) for k in ("metric", "split", "seeds", "lower_is_better",
                                                                    "overrides", "losses")},
            "chosen": {**{a: args.chosen[a] for a in args.auxes},
                       **{f"smmd-{c}": args.chosen["smmd"] for c in args.controls}}}
    variants = plan_variants(args.auxes, args.controls, args.seed_list, args.grid_values,
                             ungridded=_loss_options(), chosen=args.chosen)
    spec_base = {"config": str(config), "deepspeed": uses_deepspeed(config, args.overrides), "eval": settings["eval"]}
    spec_base["curve"] = settings["curve"]  # the worker's checkpoints and curve.json
    if args.jobs > 1 and (args.launcher or spec_base["deepspeed"]):
        raise UsageError("--jobs > 1 runs single-process variants side by side; a --launcher or DeepSpeed run "
                         "takes the machine to itself (use --jobs 1)")
    try:
        threads = plan_threads(args.jobs)
    except ValueError as e:
        raise UsageError(e) from None
    groups = len({v.group for v in variants})  # a loss at each grid point is a group of its own
    print(f"compare: {len(variants)} variants ({groups} group{'s' * (groups != 1)} x {len(args.seed_list)} "
          f"seed{'s' * (len(args.seed_list) != 1)}) into {out}", flush=True)
    print(threads.describe(), flush=True)
    if args.chosen is not None:
        print(f"confirmation of {args.selection}: " + "; ".join(
            f"{group} at {', '.join(f'{k}={v}' for k, v in values.items()) or 'the config values'}"
            for group, values in settings["confirmation"]["chosen"].items()), flush=True)
    rc = run_compare(out, variants, settings, spec_base, overrides=args.overrides,
                     base_kernel_seed=args.loss_args.kernel_seed,
                     launcher=shlex.split(args.launcher) if args.launcher else None, keep_models=args.keep_models,
                     jobs=args.jobs, env=threads.env())
    if args.grid_values:  # the selection stage: the page wrote the choice per loss from the val table
        chosen = json.loads((out / "selection.json").read_text(encoding="utf-8"))["losses"]
        print(f"selection (not evidence) in {out / 'selection.json'}: " + "; ".join(
            f"{loss} {e['chosen'] if e['chosen'] is not None else e.get('why')}" for loss, e in chosen.items()
            if e["chosen"] != {}), flush=True)  # {}: a group the grid leaves alone (CE only)
    return rc
