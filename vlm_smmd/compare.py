"""`vlm-smmd compare`: the paper's loss comparison on one config, in one resumable command.

    vlm-smmd compare CONFIG.yaml --aux none,smmd,mmd,smooth,ntl_was,ntl_mse,dist2 \\
        --kernel-controls random,shuffled --seeds 0,1,2 --out DIR [--eval-limit N] [--key value ...]

Variants: each aux x each seed, plus SMMD with each control kernel (kernel_mode random | shuffled) x each
seed. Every variant gets the same config and `--key value` overrides, hence the same model, data and
steps; only aux, kernel_mode and seed (model initialisation and data order) differ. A control kernel is
drawn with kernel_seed = (the config's kernel_seed) + seed, so its spread over seeds covers several random
kernels rather than one lucky or unlucky draw. Synthetic data (`synthesize:`) is rendered once, before the
first variant, so all variants read the same files.

Each variant runs in a fresh Python process (`variant_worker`): `training.run`, then
`evaluation.evaluate_model` on the saved model (the config's eval_split, else "test"). A process per
variant isolates the global state that training leaves behind (DeepSpeed / torch.distributed groups,
CUDA memory and caches, seeded RNGs, logging handlers), and a crash, an out-of-memory kill or a hang of
one variant cannot take the others down; the price is one interpreter start (a few seconds) per variant.
With `--launcher "torchrun --nproc_per_node 8"` training runs under that launcher (`LAUNCHER -m
vlm_smmd.cli train ...`) and the worker only evaluates. The analysis runs here, in the parent.

DIR layout:
    compare.json            the shared settings; a rerun with other settings is refused
    status.json             per variant: pending | running | done | failed | interrupted, seconds, log
    runs/NAME/              one variant, NAME = GROUP-seedS (GROUP: the aux name, or smmd-random ...)
        variant.json        what the worker runs
        log.txt             the worker's stdout and stderr
        model/              training output (weights deleted once evaluated, unless --keep-models)
        train.json          training metrics: the training stage is done (a retry only evaluates)
        predictions.jsonl, metrics.json     evaluation
        analysis/           per-digit report of this run
        error.txt           a failure: exit status and the tail of the log
        done.json           the done-marker, written last: a rerun skips this variant
    results.md, results.csv per group: mean, sample std, min, max over finished seeds, n seeds
    runs.csv                per run, failed runs included
    plots/                  main_metric.png, digit_accuracy.png
    analysis/               `analysis.write_report` over the groups (each column pools its seeds)

Resumable: a variant with done.json is not rerun; a failed one is reported (in the tables, with its
error tail) and retried by the next run; the exit status is 1 while any variant has failed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .config import AUX_NAMES, ConfigError, load_config, parse_overrides, uses_deepspeed

KERNEL_CONTROLS = ("random", "shuffled")
CHART_SOURCES = ("chartqa", "plotqa", "dvqa")
# keys compare sets per variant: an override of one of them would make the variants differ in more ways
RESERVED = {"aux": "--aux", "kernel_mode": "--kernel-controls", "seed": "--seeds", "output_dir": "--out"}
ERROR_TAIL_LINES = 60
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class Variant:
    group: str  # table row: the aux name, or "smmd-random" / "smmd-shuffled"
    aux: str
    kernel_mode: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.group}-seed{self.seed}"


def plan_variants(auxes: Sequence[str], controls: Sequence[str], seeds: Sequence[int]) -> list[Variant]:
    """Every (group, seed), seed-major: after each round of seeds every group has a result."""
    groups = [(a, a, "value_distance") for a in auxes] + [(f"smmd-{c}", "smmd", c) for c in controls]
    return [Variant(g, aux, mode, s) for s in seeds for g, aux, mode in groups]


def variant_overrides(base: Mapping, variant: Variant, run_dir: Path, base_kernel_seed: int) -> dict:
    """The config overrides of one variant: the shared ones plus aux, kernel, seed and output_dir."""
    overrides = {**base, "aux": variant.aux, "kernel_mode": variant.kernel_mode, "seed": variant.seed,
                 "output_dir": str(run_dir / "model")}
    if variant.kernel_mode != "value_distance":
        overrides["kernel_seed"] = base_kernel_seed + variant.seed
    return overrides


# ---------------------------------------------------------------------------------------------------------
# Per-run metrics


def _clock_digits(field: str, value: int) -> str:
    """Digits as the answer writes them on the 12-hour dial: hour 1..12 ("3", "12"), minute/second "05"."""
    return str(value % 12 or 12) if field == "hour" else f"{value:02d}"


def clock_place_accuracy(records: Sequence[Mapping]) -> dict[str, dict]:
    """Per-place digit accuracy of clock readings: {"hour tens": {"correct", "total", "accuracy"}, ...}.

    Over clock records (`analysis.record_kind`) whose prediction holds a time (the others are counted as
    "no time" by the analysis, as non-numeric predictions are left out of its digit tables). Each field
    (hour on the 12-hour dial, minute, and second when the target has one) is written as in the answer and
    aligned from the units digit; a target digit the prediction lacks counts as wrong. A target hour
    below 10 has no tens digit and does not enter "hour tens".
    """
    from .analysis import record_kind
    from .metrics import parse_time

    counts: dict[str, list[int]] = {}
    for r in records:
        if record_kind(r) != "clock":
            continue
        target, pred = parse_time(r["targets"][0]), parse_time(r["prediction"])
        if pred is None:
            continue
        for field in ("hour", "minute", "second"):
            t_value, p_value = getattr(target, field), getattr(pred, field)
            if t_value is None:
                continue
            t_digits = _clock_digits(field, t_value)
            p_digits = "" if p_value is None else _clock_digits(field, p_value)
            for k, place in enumerate(("units", "tens")):
                if k < len(t_digits):
                    c = counts.setdefault(f"{field} {place}", [0, 0])
                    c[0] += k < len(p_digits) and p_digits[-1 - k] == t_digits[-1 - k]
                    c[1] += 1
    order = [f"{f} {p}" for f in ("hour", "minute", "second") for p in ("tens", "units")]
    return {name: {"correct": counts[name][0], "total": counts[name][1],
                   "accuracy": counts[name][0] / counts[name][1]} for name in order if name in counts}


def run_metrics(analysis: Mapping, records: Sequence[Mapping]) -> dict[str, float | None]:
    """The table's figures for one run, keyed as in results.csv (None: not applicable to this run).

    exact_match over all records; relaxed_accuracy over chart-source records; clock figures over clock
    records (mean time gap over predictions holding a time; no_time_rate the others); numeric figures
    over numeric-target records (mean relative error over parsed predictions with a non-zero target;
    non_numeric_rate the predictions that do not parse); digit accuracy per place (`analysis` for
    numbers, `clock_place_accuracy` for clock readings).
    """
    from .analysis import place_name

    m: dict[str, float | None] = {"records": analysis["records"], "exact_match": analysis["exact_match"]}
    charts = {s: v for s, v in analysis["by_source"].items() if s in CHART_SOURCES}
    n_chart = sum(v["records"] for v in charts.values())
    m["relaxed_accuracy"] = (sum(v["relaxed_accuracy"] * v["records"] for v in charts.values()) / n_chart
                             if n_chart else None)
    clock = analysis["clock"]
    if clock["records"]:
        m["clock_exact"] = clock["rates"]["exact"]
        m["within_5_min"] = clock["within_minutes_rate"]["5"]
        m["mean_time_gap_min"] = clock["mean_gap"]
        m["no_time_rate"] = clock["rates"]["no_time"]
        for name, c in clock_place_accuracy(records).items():
            m[f"digit_acc_{name.replace(' ', '_')}"] = c["accuracy"]
    numeric = analysis["numeric"]
    if numeric["records"]:
        m["mean_relative_error"] = numeric["relative_error"]["mean"]
        m["non_numeric_rate"] = numeric["non_numeric_predictions"] / numeric["records"]
        m["digit_accuracy"] = numeric["digit_accuracy"]
        for p in sorted((v["place"] for v in numeric["places"].values()), reverse=True):
            m[f"digit_acc_{place_name(p)}"] = numeric["places"][place_name(p)]["accuracy"]
    return m


# (key, label, lower is better); digit_acc_* columns are added in the order the runs give them
COLUMNS = [
    ("exact_match", "exact match", False),
    ("relaxed_accuracy", "relaxed accuracy", False),
    ("clock_exact", "clock exact", False),
    ("within_5_min", "within 5 min", False),
    ("mean_time_gap_min", "mean time gap (min)", True),
    ("no_time_rate", "no time in prediction", True),
    ("mean_relative_error", "mean relative error", True),
    ("non_numeric_rate", "non-numeric prediction", True),
    ("digit_accuracy", "digit accuracy (all places)", False),
]


def columns_for(run_figures: Sequence[Mapping]) -> list[tuple[str, str, bool]]:
    """COLUMNS that some run has a value for, then every digit_acc_<place> column in first-seen order."""
    cols = [c for c in COLUMNS if any(f.get(c[0]) is not None for f in run_figures)]
    places: list[str] = []
    for f in run_figures:
        places += [k for k in f if k.startswith("digit_acc_") and k not in places]
    return cols + [(k, "digit acc: " + k[len("digit_acc_"):].replace("_", " "), False) for k in places]


def spread(values: Sequence[float | None]) -> dict:
    """{"n", "mean", "std" (sample std, None below 2 values), "min", "max"} over the non-None values."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None}
    return {"n": len(xs), "mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else None,
            "min": min(xs), "max": max(xs)}


# ---------------------------------------------------------------------------------------------------------
# Files


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tail(path: Path, lines: int = ERROR_TAIL_LINES) -> str:
    """The last `lines` lines of a log, progress-bar carriage returns resolved to their last state."""
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.splitlines()[-lines:])


def _drop_weights(model_dir: Path) -> int:
    """Delete the weight files and checkpoint folders of a training output; returns the bytes freed."""
    freed = 0
    if not model_dir.is_dir():
        return 0
    for path in sorted(model_dir.iterdir()):
        if path.is_dir() and path.name.startswith("checkpoint-"):
            freed += sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            shutil.rmtree(path)
        elif path.is_file() and path.suffix in WEIGHT_SUFFIXES:
            freed += path.stat().st_size
            path.unlink()
    return freed


class Status:
    """status.json: {"variants": {name: {"status", "seconds", "log", "error"}}}, rewritten on each change."""

    def __init__(self, path: Path, names: Sequence[str]):
        self.path = path
        old = _read_json(path).get("variants", {}) if path.is_file() else {}
        self.variants = {**old, **{n: old.get(n, {"status": "pending"}) for n in names}}
        self.save()

    def set(self, name: str, **fields) -> None:
        # a field set to None is removed (e.g. the error of a failed run that now succeeded)
        self.variants[name] = {k: v for k, v in {**self.variants.get(name, {}), **fields}.items() if v is not None}
        self.save()

    def save(self) -> None:
        _write_json(self.path, {"variants": self.variants})


# ---------------------------------------------------------------------------------------------------------
# One variant


def variant_worker(spec_path) -> int:
    """Body of the per-variant process: train (unless train.json says it is done), then evaluate.

    `spec_path`: a variant.json written by `run_variant` ({"run_dir", "config", "overrides",
    "deepspeed", "stages", "eval": {keyword arguments of `evaluate_model` and "data"}}).
    """
    spec = _read_json(Path(spec_path))
    run_dir = Path(spec["run_dir"])
    if "train" in spec["stages"] and not (run_dir / "train.json").is_file():
        from .training import ensure_single_process_env, run

        if spec["deepspeed"]:
            ensure_single_process_env()  # before TrainingArguments initialises DeepSpeed
        metrics = run(*load_config(spec["config"], spec["overrides"]))
        _write_json(run_dir / "train.json", {k: v for k, v in metrics.items() if isinstance(v, (int, float, str))})
    if "eval" in spec["stages"]:
        from .evaluation import evaluate_model

        options = dict(spec["eval"])
        data = [tuple(d) for d in options.pop("data")]
        evaluate_model(run_dir / "model", data, run_dir, progress=False, **options)
    return 0


def _run_logged(cmd: list[str], log: Path) -> int:
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {shlex.join(cmd)}\n")
        f.flush()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL).returncode


def run_variant(variant: Variant, run_dir: Path, spec: dict, launcher: list[str] | None, keep_models: bool) -> dict:
    """Train, evaluate and analyse one variant in `run_dir`; returns done.json's content.
    Raises VariantFailed (with error.txt written) when a stage fails."""
    from .analysis import analyze_records, load_predictions, write_report

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "error.txt").unlink(missing_ok=True)
    log = run_dir / "log.txt"
    log.write_text(f"# {variant.name}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n", encoding="utf-8")
    spec = {**spec, "run_dir": str(run_dir), "stages": ["eval"] if launcher else ["train", "eval"]}
    _write_json(run_dir / "variant.json", spec)
    if launcher and not (run_dir / "train.json").is_file():
        cmd = launcher + ["-m", "vlm_smmd.cli", "train", spec["config"]]
        # text goes as is (the train command keeps command-line text verbatim); other values as JSON
        cmd += [f"--{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in spec["overrides"].items()]
        rc = _run_logged(cmd, log)
        if rc != 0:
            raise VariantFailed(run_dir, f"training ({shlex.join(launcher)}) exited with status {rc}")
        _write_json(run_dir / "train.json", {"launcher": shlex.join(launcher)})
    code = ("import sys; from vlm_smmd.compare import variant_worker; "
            "sys.exit(variant_worker(sys.argv[1]))")
    rc = _run_logged([sys.executable, "-c", code, str(run_dir / "variant.json")], log)
    if rc != 0:
        stage = "evaluation" if (run_dir / "train.json").is_file() else "training"
        raise VariantFailed(run_dir, f"{stage} exited with status {rc}")
    try:
        records = load_predictions(run_dir / "predictions.jsonl")
        analysis = analyze_records(records)
        write_report({variant.name: analysis}, run_dir / "analysis",
                     inputs={variant.name: str(run_dir / "predictions.jsonl")})
        figures = run_metrics(analysis, records)
    except Exception:  # noqa: BLE001 - any analysis error fails this variant only
        with open(log, "a", encoding="utf-8") as f:
            f.write(traceback.format_exc())
        raise VariantFailed(run_dir, "analysis failed") from None
    freed = 0 if keep_models else _drop_weights(run_dir / "model")
    return {"variant": variant.name, "group": variant.group, "aux": variant.aux,
            "kernel_mode": variant.kernel_mode, "seed": variant.seed, "figures": figures,
            "weights_deleted_mb": round(freed / 2**20, 1)}


class VariantFailed(RuntimeError):
    """A stage of a variant failed; writes error.txt. The reason ends with the log's last line (usually
    the exception), e.g. "training exited with status 1: FileExistsError: ..."."""

    def __init__(self, run_dir: Path, reason: str):
        last = [line for line in _tail(run_dir / "log.txt", 5).splitlines() if line.strip()]
        if last:
            reason = f"{reason}: {last[-1].strip()[:300]}"
        super().__init__(reason)
        self.reason = reason
        (run_dir / "error.txt").write_text(f"{reason}\n\nlast lines of {run_dir / 'log.txt'}:\n"
                                           f"{_tail(run_dir / 'log.txt')}\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------
# Results


def _fmt(value, key: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.2f}" if key == "mean_time_gap_min" else f"{value:.3f}"
    return str(value)


def _cell(s: dict, key: str) -> str:
    if s["mean"] is None:
        return "–"
    text = _fmt(s["mean"], key) + ("" if s["std"] is None else f" ± {_fmt(s['std'], key)}")
    return text


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows] + [""])


def collect(out: Path, variants: Sequence[Variant], status: Status) -> tuple[dict, dict]:
    """(figures by run name for finished runs, records by group pooled over finished seeds)."""
    from .analysis import load_predictions

    figures, pooled = {}, {}
    for v in variants:
        run_dir = out / "runs" / v.name
        if status.variants.get(v.name, {}).get("status") != "done":
            continue
        figures[v.name] = _read_json(run_dir / "done.json")["figures"]
        pooled.setdefault(v.group, []).extend(load_predictions(run_dir / "predictions.jsonl"))
    return figures, pooled


def group_table(variants: Sequence[Variant], status: Status, figures: Mapping[str, Mapping]) -> list[dict]:
    """One row per group: group, aux, kernel_mode, seeds, done, failed, status, and spread() per column."""
    cols = columns_for(list(figures.values()))
    rows = []
    for group in dict.fromkeys(v.group for v in variants):
        runs = [v for v in variants if v.group == group]
        states = [status.variants.get(v.name, {}).get("status", "pending") for v in runs]
        done = [v.name for v, s in zip(runs, states) if s == "done"]
        failed = states.count("failed")
        state = ("ok" if len(done) == len(runs) else "failed" if failed == len(runs)
                 else f"{failed} failed" if failed else "incomplete")
        row = {"group": group, "aux": runs[0].aux, "kernel_mode": runs[0].kernel_mode,
               "seeds": len(runs), "done": len(done), "failed": failed, "status": state}
        for key, _, _ in cols:
            row[key] = spread([figures[n].get(key) for n in done])
        rows.append(row)
    return rows


def _plots(out: Path, rows: Sequence[dict], variants, figures) -> list[str]:
    """plots/main_metric.png (exact match, and mean time gap or relative error, per group: bar = mean,
    error bar = sample std, dots = seeds) and plots/digit_accuracy.png (per place and group)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    plot_dir = out / "plots"
    plot_dir.mkdir(exist_ok=True)
    groups = [r["group"] for r in rows]
    written = []
    cols = {key: (label, lower) for key, label, lower in columns_for(list(figures.values()))}
    panels = [k for k in ("exact_match", "relaxed_accuracy", "mean_time_gap_min", "mean_relative_error")
              if k in cols]
    if panels:
        fig = Figure(figsize=(max(6.0, 1.0 + 0.7 * len(groups)) * len(panels), 4.2), dpi=100)
        FigureCanvasAgg(fig)
        for i, key in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            means = [r[key]["mean"] if r[key]["mean"] is not None else math.nan for r in rows]
            stds = [r[key]["std"] or 0.0 for r in rows]
            ax.bar(range(len(groups)), means, yerr=stds, capsize=4, color="#4c72b0", alpha=0.8)
            for j, g in enumerate(groups):
                seeds = [figures[v.name].get(key) for v in variants if v.group == g and v.name in figures]
                seeds = [s for s in seeds if s is not None]
                ax.scatter([j] * len(seeds), seeds, color="black", s=12, zorder=3)
            ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
            label, lower = cols[key]
            ax.set_title(f"{label} ({'lower' if lower else 'higher'} is better)")
            ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(plot_dir / "main_metric.png", format="png", metadata={"Software": None})
        written.append("plots/main_metric.png")
    places = [k for k in cols if k.startswith("digit_acc_")]
    if places:
        fig = Figure(figsize=(max(6.0, 2.0 + 0.25 * len(places) * len(groups)), 4.2), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        width = 0.8 / max(1, len(groups))
        for j, r in enumerate(rows):
            means = [r[p]["mean"] if r[p]["mean"] is not None else math.nan for p in places]
            stds = [r[p]["std"] or 0.0 for p in places]
            ax.bar([i - 0.4 + width * (j + 0.5) for i in range(len(places))], means, width, yerr=stds,
                   capsize=2, label=r["group"])
        ax.set_xticks(range(len(places)), [cols[p][0].removeprefix("digit acc: ") for p in places])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("digit accuracy")
        ax.set_title("digit accuracy per place (mean ± std over seeds)")
        ax.legend(fontsize=8, ncol=max(1, len(groups) // 5))
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(plot_dir / "digit_accuracy.png", format="png", metadata={"Software": None})
        written.append("plots/digit_accuracy.png")
    return written


def write_results(out: Path, variants: Sequence[Variant], status: Status, settings: Mapping) -> dict:
    """results.md, results.csv, runs.csv, plots/ and analysis/ from what has finished; returns the paths."""
    from .analysis import analyze_records, write_report

    figures, pooled = collect(out, variants, status)
    rows = group_table(variants, status, figures)
    cols = columns_for(list(figures.values()))

    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["group", "aux", "kernel_mode", "seeds", "done", "failed", "status"]
                   + [f"{k}_{s}" for k, _, _ in cols for s in ("mean", "std", "min", "max", "n")])
        for r in rows:
            w.writerow([r[k] for k in ("group", "aux", "kernel_mode", "seeds", "done", "failed", "status")]
                       + ["" if r[k][s] is None else r[k][s] for k, _, _ in cols
                          for s in ("mean", "std", "min", "max", "n")])
    with open(out / "runs.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["run", "group", "aux", "kernel_mode", "seed", "status", "seconds", "records"]
                   + [k for k, _, _ in cols])
        for v in variants:
            st = status.variants.get(v.name, {})
            fig = figures.get(v.name, {})
            w.writerow([v.name, v.group, v.aux, v.kernel_mode, v.seed, st.get("status", "pending"),
                        st.get("seconds", ""), fig.get("records", "")]
                       + ["" if fig.get(k) is None else fig[k] for k, _, _ in cols])

    plots = _plots(out, rows, variants, figures) if figures else []
    report = None
    if pooled:
        analyses = {g: analyze_records(recs) for g, recs in pooled.items()}
        report = write_report(analyses, out / "analysis", notes=[
            "Each column pools the predictions of every finished seed of that variant."])

    ev = settings["eval"]
    samples = "all samples" if ev["limit"] is None else f"first {ev['limit']} samples"
    md = ["# Loss comparison", ""]
    md += [f"- config: `{settings['config']}` (sha256 {settings['config_sha256'][:12]})",
           f"- shared overrides: `{json.dumps(settings['overrides'])}`" if settings["overrides"] else
           "- shared overrides: none",
           f"- evaluation: split `{ev['split']}`, {samples} of "
           f"{', '.join(f'{n}:{p}' for n, p in ev['data'])}, greedy, max_new_tokens {ev['max_new_tokens']}",
           "- variants differ only in the aux loss / kernel and the seed (model init and data order); control "
           "kernels use kernel_seed = base + seed",
           "- cells: mean ± sample std over the finished seeds (n); min and max in results.csv; "
           "rates are fractions of the evaluated records", ""]
    header = ["variant", "n"] + [label + (" ↓" if lower else "") for _, label, lower in cols]
    md += ["## Results (↓: lower is better)", ""]
    md += _md_table(header, [[r["group"] + ("" if r["status"] == "ok" else f" ({r['status']})"),
                              f"{r['done']}/{r['seeds']}"] + [_cell(r[k], k) for k, _, _ in cols] for r in rows])
    md += [f"![{p}]({p})" for p in plots] + ([""] if plots else [])
    md += ["## Runs", ""]
    run_rows = []
    for v in variants:
        st = status.variants.get(v.name, {})
        fig = figures.get(v.name, {})
        seconds = st.get("seconds")
        run_rows.append([v.name, st.get("status", "pending"), "–" if seconds is None else f"{seconds:.0f}",
                         fig.get("records", "–")] + [_fmt(fig.get(k), k) for k, _, _ in cols])
    md += _md_table(["run", "status", "seconds", "records"] + [label for _, label, _ in cols], run_rows)
    failed = [v for v in variants if status.variants.get(v.name, {}).get("status") == "failed"]
    if failed:
        md += ["## Failed runs", ""]
        md += [f"- {v.name}: {status.variants[v.name].get('error', 'failed')} — see runs/{v.name}/error.txt "
               f"and runs/{v.name}/log.txt" for v in failed] + [""]
    if report is not None:
        md += ["Full per-digit comparison (seeds pooled per variant): [analysis/report.md](analysis/report.md)", ""]
    (out / "results.md").write_text("\n".join(md), encoding="utf-8")
    return {"results_md": out / "results.md", "results_csv": out / "results.csv", "runs_csv": out / "runs.csv",
            "plots": [out / p for p in plots], "report": report}


# ---------------------------------------------------------------------------------------------------------
# Command


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
    return seeds


def eval_data(data_args) -> list[list[str]]:
    """[[source, root], ...] that evaluation reads: the dataset, or each source of a mixture once."""
    if data_args.dataset != "mixture":
        return [[data_args.dataset, str(Path(data_args.data_root).resolve())]]
    data = [[e["name"], str(Path(e["root"]).resolve())] for e in json.loads(data_args.mixture)]
    names = [d[0] for d in data]
    if len(set(names)) != len(names):
        raise ConfigError(f"mixture: compare evaluates each source once, but the mixture lists {names}")
    return data


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vlm-smmd compare", allow_abbrev=False,
        description="Train, evaluate and analyse every aux loss (and SMMD with control kernels) over several "
                    "seeds on one config; writes results.md / results.csv, plots and a comparison report. "
                    "Any further --key value is a config override applied to every variant.")
    parser.add_argument("config", type=Path, help="YAML run config (see vlm-smmd train --help)")
    parser.add_argument("--aux", default="none,smmd,mmd,smooth,ntl_was,ntl_mse,dist2",
                        help=f"comma-separated aux losses, from {', '.join(AUX_NAMES)} (default %(default)s)")
    parser.add_argument("--kernel-controls", default="random,shuffled",
                        help="SMMD with these control kernels, from random, shuffled; '' for none "
                             "(default %(default)s)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default %(default)s)")
    parser.add_argument("--out", required=True, type=Path, help="output folder (rerun it to resume)")
    parser.add_argument("--eval-limit", type=int, help="evaluate the first N samples of the eval split (default all)")
    parser.add_argument("--eval-batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--launcher", help="train under this command prefix instead of python, e.g. "
                                           "'torchrun --nproc_per_node 8' (it gets -m vlm_smmd.cli train ...)")
    parser.add_argument("--keep-models", action="store_true",
                        help="keep each variant's trained weights (default: deleted once evaluated)")
    return parser


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0].startswith("--") and argv[0] not in ("-h", "--help"):
        parser.error("CONFIG.yaml comes first: vlm-smmd compare CONFIG.yaml [options] [--key value ...]")
    args, rest = parser.parse_known_args(argv)
    for name in ("eval_limit", "eval_batch_size", "max_new_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    try:
        auxes = _names(args.aux, AUX_NAMES, "--aux")
        controls = _names(args.kernel_controls, KERNEL_CONTROLS, "--kernel-controls")
        seeds = _seeds(args.seeds)
        overrides = parse_overrides(rest)
        for key, flag in RESERVED.items():
            if key in overrides:
                raise ConfigError(f"--{key} is set per variant by compare; use {flag}")
        if not args.config.is_file():
            raise ConfigError(f"{args.config}: no such config file")
        # the shared settings, checked once here (DeepSpeed is left to the workers)
        model_args, data_args, loss_args, _ = load_config(
            args.config, {**overrides, "deepspeed": None, "output_dir": str(args.out / "runs")})
        data = eval_data(data_args)
    except ConfigError as e:
        print(f"vlm-smmd compare: {e}", file=sys.stderr)
        return 2
    if not auxes and not controls:
        parser.error("nothing to compare: --aux and --kernel-controls are both empty")

    out = args.out.resolve()
    config = args.config.resolve()
    settings = {
        "config": str(config), "config_sha256": _file_sha256(config), "overrides": overrides,
        "eval": {"data": data, "split": data_args.eval_split or "test", "limit": args.eval_limit,
                 "batch_size": args.eval_batch_size, "max_new_tokens": args.max_new_tokens,
                 "system_prompt": data_args.system_prompt, "instruction": data_args.instruction,
                 "min_pixels": model_args.min_pixels, "max_pixels": model_args.max_pixels,
                 "on_error": data_args.on_error},
    }
    out.mkdir(parents=True, exist_ok=True)
    settings_file = out / "compare.json"
    if settings_file.is_file():
        old = _read_json(settings_file)
        diff = [k for k in settings if json.dumps(old.get(k), sort_keys=True) != json.dumps(
            json.loads(json.dumps(settings[k], default=str)), sort_keys=True)]
        if diff:
            print(f"vlm-smmd compare: {out} holds runs made with other settings ({', '.join(diff)} differ; "
                  f"see {settings_file}); use another --out, or delete that folder", file=sys.stderr)
            return 2
    else:
        _write_json(settings_file, settings)

    from .training import synthesize_if_missing

    synthesize_if_missing(data_args)  # once, before any variant: all of them read the same files
    variants = plan_variants(auxes, controls, seeds)
    status = Status(out / "status.json", [v.name for v in variants])
    launcher = shlex.split(args.launcher) if args.launcher else None
    spec_base = {"config": str(config), "deepspeed": uses_deepspeed(config, overrides), "eval": settings["eval"]}
    print(f"compare: {len(variants)} variants ({len(auxes) + len(controls)} losses x {len(seeds)} seeds) "
          f"into {out}", flush=True)
    start, durations = time.monotonic(), []
    for i, v in enumerate(variants, 1):
        run_dir = out / "runs" / v.name
        head = f"[{i}/{len(variants)}] {v.name}"
        if (run_dir / "done.json").is_file():
            status.set(v.name, status="done")
            print(f"{head}: done earlier, skipped", flush=True)
            continue
        print(f"{head}: running (log {run_dir / 'log.txt'})", flush=True)
        status.set(v.name, status="running", log=str(run_dir / "log.txt"))
        t0 = time.monotonic()
        spec = {**spec_base, "overrides": variant_overrides(overrides, v, run_dir, loss_args.kernel_seed)}
        try:
            done = run_variant(v, run_dir, spec, launcher, args.keep_models)
        except KeyboardInterrupt:
            status.set(v.name, status="interrupted")
            write_results(out, variants, status, settings)
            print(f"\n{head}: interrupted; results so far in {out / 'results.md'}; rerun the same command to "
                  "resume", file=sys.stderr)
            return 130
        except VariantFailed as e:
            seconds = time.monotonic() - t0
            status.set(v.name, status="failed", seconds=round(seconds, 1), error=e.reason)
            print(f"{head}: FAILED after {_duration(seconds)}: {e.reason} (see {run_dir / 'error.txt'})\n"
                  + "\n".join("    " + line for line in _tail(run_dir / "log.txt", 8).splitlines()), flush=True)
            continue
        seconds = time.monotonic() - t0
        durations.append(seconds)
        done["seconds"] = round(seconds, 1)
        _write_json(run_dir / "done.json", done)
        status.set(v.name, status="done", seconds=round(seconds, 1), error=None)
        left = sum(1 for w in variants[i:] if not (out / "runs" / w.name / "done.json").is_file())
        eta = f", about {_duration(statistics.fmean(durations) * left)} left" if left else ""
        figures = done["figures"]
        print(f"{head}: done in {_duration(seconds)} (elapsed {_duration(time.monotonic() - start)}{eta}); "
              f"exact match {_fmt(figures['exact_match'])}", flush=True)

    paths = write_results(out, variants, status, settings)
    failed = [v.name for v in variants if status.variants[v.name]["status"] == "failed"]
    print(f"results: {paths['results_md']} and {paths['results_csv']} (per run: {paths['runs_csv']})")
    if paths["report"] is not None:
        print(f"per-digit comparison: {paths['report']}")
    if failed:
        print(f"{len(failed)} variant(s) failed: {', '.join(failed)}; rerun the same command to retry them",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
