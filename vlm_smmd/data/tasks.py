"""Every dataset the pipeline knows, named once: its reader, how its answers are scored, the meta keys
its results are broken down by, and the synthetic sets that render it.

Config validation, training, evaluation, analysis and the mixture all read `TASKS`; adding a reader costs
the reader's module plus one entry here, a synthetic kind its data_synth writer plus one `SYNTH_KINDS` row
(training, the dry run, compare and eval read the same row). Light on purpose (no torch, no reader imported until `read`), so
that the command line checks names before anything heavy loads.

Metric kinds (`Task.metric`):
- "relaxed": chart QA; exact match plus relaxed accuracy (ChartQA's 5% rule), max over the labels.
- "final_number": text problems; the final number of the generation against the exact final answer.
- "clock": clock readings on the 12-hour dial (time exact, hour / minute correct, gap in minutes).
- "grounding": a point or a box of a named object (IoU, IoU >= 0.5, point-in-box, corner and centre errors
  in the answer's coordinates, answers giving no valid point or box).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

METRIC_KINDS = ("relaxed", "final_number", "clock", "grounding")


@dataclass(frozen=True)
class Task:
    name: str
    reader: str  # "module:function" under vlm_smmd.data; called as reader(root, split, on_error=..., **options)
    metric: str  # one of METRIC_KINDS
    breakdowns: tuple[str, ...] = ()  # meta keys results are grouped by (clocks: every style key instead)
    image: bool = True  # False: text-only samples (image None)
    unseen_key: str | None = None  # what its unseen split holds out, when not the answers: a meta key
    answer_tokens: int = 16  # eval's default --max-new-tokens: enough for its answers (a cut answer scores 0)


TASKS = {t.name: t for t in (
    Task("clocks", "clocks:read_clocks", "clock"),
    Task("itsabouttime", "itsabouttime:read_itsabouttime", "clock", ("subset",)),  # real photos, test split only
    Task("clockqa", "clockqa:read_clockqa", "clock", ("type",)),  # answers H:MM:SS
    Task("clockbench", "clockqa:read_clockbench", "clock", ("type",)),  # its public 10 clocks: split train
    Task("chartqa", "chartqa:read_chartqa", "relaxed", ("subset",)),
    Task("plotqa", "plotqa:read_plotqa", "relaxed", ("template", "type")),
    Task("dvqa", "dvqa:read_dvqa", "relaxed", ("template_id", "question_type")),
    Task("gsm8k", "gsm8k:read_gsm8k", "final_number", image=False),
    Task("svamp", "svamp:read_svamp", "final_number", ("type",), image=False),
    Task("deepmind_math", "deepmind_math:read_deepmind_math", "final_number", ("module",), image=False),
    Task("arithmetic", "arithmetic:read_arithmetic", "final_number", ("operation",), image=False),
    Task("word_problems", "word_problems:read_word_problems", "final_number", ("template", "steps", "distractor"),
         image=False, unseen_key="template"),  # its test_unseen holds out templates; answers recur
    # JSON points and boxes: '{"bbox_2d": [197, 175, 279, 257], "label": "red triangle"}' is 35 Qwen tokens
    Task("grounding", "grounding:read_grounding", "grounding", ("task", "coords"),
         unseen_key="position", answer_tokens=64),  # its test_unseen holds out the target's grid cells
    Task("refcoco", "refcoco:read_refcoco", "grounding", ("dataset", "category"),
         answer_tokens=128),  # RefCOCO/+/g boxes: the label is the whole expression (RefCOCOg's run long)
)}

@dataclass(frozen=True)
class SynthKind:
    """One `synthesize:` kind: the data_synth writer that renders it into data_root and how it is called.

    Two writer contracts: every split at once, `writer(out, num, seed, resume=..., **options)` with a
    `splits` option, recorded in out/synthesize.json; or (`per_split`, the chart writer) one split at a time,
    `writer(out, layout=, num=, seed=, split=, resume=, **options)`, recorded in out/charts_data/SPLIT.json.
    The options a config may set are the writer's keywords (`synth_options`), less those the recipe sets."""

    name: str
    writer: str  # "module:function" of data_synth
    layout: str  # the task (TASKS) whose reader reads what it writes
    per_split: bool = False
    size: Callable[[int], object] | None = None  # the writer's `size` from synthesize_size; None: not sized
    fixed: tuple[tuple[str, object], ...] = ()  # options set before the user's (who may override them)
    nested: tuple[tuple[str, str], ...] = ()  # option -> "module:Dataclass" whose fields its mapping takes


_CHARTS = "data_synth.charts:write_chart_dataset"
SYNTH_KINDS = {k.name: k for k in (
    SynthKind("clocks", "data_synth.writer:write_clock_dataset", "clocks", size=int,
              nested=(("style", "data_synth.clocks:ClockStyle"),)),
    SynthKind("chartqa", _CHARTS, "chartqa", per_split=True),  # the default chart mix in that layout
    SynthKind("plotqa", _CHARTS, "plotqa", per_split=True),
    SynthKind("dvqa", _CHARTS, "dvqa", per_split=True),
    # unlabelled bars against an axis, one question per chart (the bar's value), in ChartQA's layout
    SynthKind("bars", _CHARTS, "chartqa", per_split=True, size=lambda side: [side, side],
              fixed=(("kinds", ["bars_axis"]), ("questions_per_chart", 1))),
    SynthKind("arithmetic", "data_synth.arithmetic:write_arithmetic_dataset", "arithmetic"),
    SynthKind("word_problems", "data_synth.word_problems:write_word_problem_dataset", "word_problems"),
    SynthKind("grounding", "data_synth.grounding:write_grounding_dataset", "grounding"),
)}

# the kinds synthesize_size applies to (what a report shows it for)
SIZED_SYNTHESIZERS = tuple(name for name, k in SYNTH_KINDS.items() if k.size is not None)


def synth_kind(name: str) -> SynthKind:
    """The synthetic kind called `name`; ValueError naming the known ones otherwise."""
    try:
        return SYNTH_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown synthesize kind {name!r}; choose from none, {', '.join(SYNTH_KINDS)}") from None


def _load(spec: str):
    module, _, name = spec.partition(":")
    return getattr(import_module(module), name)


def synth_writer(kind: str):
    """The data_synth function that renders `synthesize: kind` (imports its module)."""
    return _load(synth_kind(kind).writer)


SET_BY_RECIPE = frozenset({"out", "num", "seed", "resume", "overwrite", "layout", "split", "unseen_split"})


def synth_options(kind: str) -> dict[str, inspect.Parameter] | None:
    """{option: the writer's parameter (annotation, default)} that `synthesize_options` of `kind` may set;
    None when the writer takes any keyword (**kwargs)."""
    row = synth_kind(kind)
    params = inspect.signature(synth_writer(kind)).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    recipe = SET_BY_RECIPE | ({"size"} if row.size is not None and not row.per_split else set())
    return {name: p for name, p in params.items() if p.kind is not p.VAR_POSITIONAL and name not in recipe}


def synth_nested(kind: str) -> dict[str, type]:
    """{option: the dataclass whose field names its mapping value takes} for `kind` (clocks: style)."""
    return {option: _load(spec) for option, spec in synth_kind(kind).nested}


def answer_tokens(names) -> int:
    """New tokens that the longest answers of these tasks need (eval's and compare's default)."""
    return max(task(name).answer_tokens for name in names)


def task(name: str) -> Task:
    """The task called `name`; ValueError naming the known ones otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose from {', '.join(TASKS)}") from None


def names_with(metric: str) -> tuple[str, ...]:
    """The task names scored with `metric`."""
    return tuple(name for name, t in TASKS.items() if t.metric == metric)


def reader(name: str):
    """The reader function of task `name` (imports its module)."""
    module, function = task(name).reader.split(":")
    return getattr(import_module(f"{__package__}.{module}"), function)


def read(name: str, root, split: str, *, on_error: str = "raise", **options):
    """Samples of `split` of task `name` under `root` (a sequence; `.skipped` when the reader counts)."""
    return reader(name)(root, split, on_error=on_error, **options)
