"""The utils.py of an exported lmms-eval task, rendered from this tool's own source.

lmms-eval users do not have vlm_smmd installed, so the file must stand alone; and its figures must be
eval's figures. Both hold by construction: the file is `vlm_smmd.metrics` verbatim (a pure, standard-library
module) followed by eval's answer extraction and per-sample scoring (`evaluation.extract_answer`,
`evaluation.score_prediction`) with the constants and patterns they read, written out from the live objects,
then the task hooks lmms-eval calls (doc_to_visual, doc_to_text, doc_to_target, process_results and the
gap aggregations). tests/test_harness.py checks that it imports nothing outside the standard library
(Pillow only inside doc_to_visual) and scores as eval does.
"""

from __future__ import annotations

import ast
import inspect
import re

from vlm_smmd import evaluation, metrics

GAP_KEY = "time_gap_minutes"  # the per-sample score that metrics.json aggregates as mean / median / no_time
# the metric names the gap gives, with their aggregation function in utils.py (eval's `_aggregate`)
GAP_METRICS = {"mean_time_gap_minutes": "mean_of_times", "median_time_gap_minutes": "median_of_times",
               "no_time": "total"}
# what evaluation.extract_answer and score_prediction read at module level, in dependency order
_EVALUATION_NAMES = ("CHART_SOURCES", "TEXT_SOURCES", "CLOCK_SOURCES", "GROUNDING_SOURCES", "WITHIN_MINUTES",
                     "_PREFIX", "_CLOCK_PREFIX", "_TIME_CANDIDATE", "_DOTTED_PM", "_ABBREVIATION", "_WRAPPERS",
                     "_BLOCK_MARK", "_EMPHASIS")
_EVALUATION_FUNCTIONS = ("extract_answer", "score_prediction")


def metric_names(score_keys) -> list[str]:
    """The lmms-eval metric names of a task whose per-sample scores have `score_keys` (eval's keys; the gap
    becomes GAP_METRICS, as metrics.json names its aggregates)."""
    names = []
    for key in score_keys:
        names += list(GAP_METRICS) if key == GAP_KEY else [key]
    return names


def _module_body(module) -> str:
    """A module's source without its docstring and `from __future__` import (they must open the file)."""
    source = inspect.getsource(module)
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop = set()
    for node in tree.body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(
            node.value.value, str)
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if docstring or future:
            drop.update(range(node.lineno - 1, node.end_lineno))
    return "".join(line for i, line in enumerate(lines) if i not in drop).strip() + "\n"


def _literal(name: str, value) -> str:
    """`name = <value>` as Python source: compiled patterns as re.compile(pattern, flags), the rest by repr."""
    if isinstance(value, re.Pattern):
        return f"{name} = re.compile({value.pattern!r}, {int(value.flags)})"
    if not isinstance(value, (str, int, float, tuple)):
        raise TypeError(f"{name}: cannot write a {type(value).__name__} into utils.py")
    return f"{name} = {value!r}"


_HOOKS = '''
# ---------------------------------------------------------------------------------------------------------
# The task hooks lmms-eval calls (the YAML names them with !function utils.NAME)

TASK_DIR = os.path.dirname(os.path.abspath(__file__))
METRICS = {metrics!r}  # process_results returns exactly these keys, the YAML's metric_list
GAP_KEY = {gap_key!r}
GAP_METRICS = {gap_metrics!r}


def doc_to_visual(doc):
    """The record's image (written by the export beside this file, RGB as vlm-smmd eval sees it); [] for
    a text-only record."""
    if not doc.get("image"):
        return []
    from PIL import Image

    with Image.open(os.path.join(TASK_DIR, doc["image"])) as image:
        return [image.convert("RGB")]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    """The question with the training run's instruction (as vlm-smmd's chat asks it), between the optional
    pre_prompt and post_prompt of lmms_eval_specific_kwargs (empty by default)."""
    kwargs = lmms_eval_specific_kwargs or {{}}
    return f"{{kwargs.get('pre_prompt', '')}}{{doc['prompt']}}{{kwargs.get('post_prompt', '')}}"


def doc_to_target(doc):
    return doc["answer"]


def process_results(doc, results):
    """This tool's per-sample scores of the generated text results[0]: the answer extracted and scored
    as vlm-smmd eval does (extract_answer, score_prediction), one value per name in METRICS."""
    raw = results[0] if results else ""
    while isinstance(raw, list):  # some harness versions nest the responses
        raw = raw[0] if raw else ""
    prediction = extract_answer(str(raw), doc["source"])
    scores = score_prediction(prediction, list(doc["targets"]), doc["source"], json.loads(doc["meta"]))
    out = {{}}
    for name in METRICS:
        if name == "no_time":
            out[name] = float(scores[GAP_KEY] is None)
        elif name in GAP_METRICS:
            out[name] = scores[GAP_KEY]  # None: the prediction holds no time
        else:
            out[name] = scores[name]
    return out


def mean_of_times(gaps):
    """Mean gap over the predictions holding a time (None without any), as metrics.json's mean."""
    gaps = [float(g) for g in gaps if g is not None]
    return statistics.fmean(gaps) if gaps else None


def median_of_times(gaps):
    gaps = [float(g) for g in gaps if g is not None]
    return statistics.median(gaps) if gaps else None


def total(flags):
    """Predictions holding no time (metrics.json's no_time, a count)."""
    return int(sum(flags))
'''


def render_utils(score_keys, *, header: str) -> str:
    """The text of utils.py for a task whose per-sample scores have `score_keys`; `header` opens its docstring."""
    parts = [f'"""{header}\n\nWritten by `vlm-smmd export lmms-eval`: self-contained (the standard library; Pillow '
             'to open images).\nBelow: vlm_smmd.metrics verbatim, then eval\'s answer extraction and scoring, then '
             'the task hooks.\n"""\n',
             "from __future__ import annotations\n",
             "import json\nimport os\nimport statistics\nfrom collections.abc import Mapping, Sequence\n",
             "# ---------------------------------------------------------------------------------------------------------\n"
             "# vlm_smmd.metrics\n",
             _module_body(metrics),
             "\n# ---------------------------------------------------------------------------------------------------------\n"
             "# vlm_smmd.evaluation: answer extraction and per-sample scores\n",
             "\n".join(_literal(name, getattr(evaluation, name)) for name in _EVALUATION_NAMES) + "\n",
             *("\n\n" + inspect.getsource(getattr(evaluation, name)) for name in _EVALUATION_FUNCTIONS),
             "\n" + _HOOKS.format(metrics=metric_names(score_keys), gap_key=GAP_KEY, gap_metrics=GAP_METRICS)]
    return "\n".join(part.rstrip("\n") + "\n" for part in parts)
