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
    results.md, results.csv per group: mean, sample std, min, max over finished seeds, n seeds, the
                            chance level, and the paired difference to CE only (aux none, same seed) with
                            its bootstrap 95% interval (`paired_bootstrap`)
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
from typing import NamedTuple

from .config import AUX_NAMES, ConfigError, load_config, parse_overrides, uses_deepspeed

KERNEL_CONTROLS = ("random", "shuffled")
BASELINE = "none"  # the CE-only group every other group is paired with
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
# figures plotted per group, in this order of preference (the first four the runs have)
PANEL_KEYS = ("exact_match", "mae", "within_2", "relaxed_accuracy", "hour_correct", "mean_time_gap_min",
              "minute_correct", "within_5_min", "value_exact", "within_rel_0.01")
WIDE_KEYS = {"mae", "mean_time_gap_min", "mean_time_gap_worst_min"}  # written with 2 decimals
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
# Per-run figures


def run_metrics(analysis: Mapping) -> dict[str, float | int | None]:
    """The table's figures for one run, keyed as in results.csv: "records" and every `analysis.headline`
    figure (None: not applicable to this run). Clock digit places come from the analysis too."""
    from .analysis import headline

    return {"records": analysis["records"], **{f.key: f.value for f in headline(analysis)}}


def spread(values: Sequence[float | None]) -> dict:
    """{"n", "mean", "std" (sample std, None below 2 values), "min", "max"} over the non-None values."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None}
    return {"n": len(xs), "mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else None,
            "min": min(xs), "max": max(xs)}


def paired_bootstrap(diffs: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                     level: float = 0.95) -> dict:
    """Mean of paired differences and its percentile bootstrap interval: {"n", "mean", "low", "high"}.

    The n pairs are resampled with replacement `resamples` times (`numpy.random.default_rng(seed)
    .integers(0, n, size=(resamples, n))`, row r = the pair indices of resample r); low / high are the
    (1 - level) / 2 and (1 + level) / 2 quantiles of the resample means (numpy's default linear
    interpolation between order statistics). Fewer than 2 pairs give no interval (None)."""
    import numpy as np

    n = len(diffs)
    if n == 0:
        return {"n": 0, "mean": None, "low": None, "high": None}
    d = np.asarray(diffs, dtype=float)
    if n == 1:
        return {"n": 1, "mean": float(d[0]), "low": None, "high": None}
    means = d[np.random.default_rng(seed).integers(0, n, size=(resamples, n))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return {"n": n, "mean": float(d.mean()), "low": float(low), "high": float(high)}


def paired_differences(variants: Sequence[Variant], figures: Mapping[str, Mapping], keys: Sequence[str],
                       baseline: str = BASELINE) -> dict[str, dict]:
    """Per group other than `baseline`: {"seeds": paired seeds, "no_baseline": seeds the group finished but
    the baseline did not, "no_variant": baseline seeds the group did not finish, "figures": {key:
    paired_bootstrap(group - baseline over the paired seeds where both have the figure)}}. {} when the
    baseline group is not among the variants."""
    by_group: dict[str, dict[int, Mapping]] = {}
    for v in variants:
        by_group.setdefault(v.group, {})
        if v.name in figures:
            by_group[v.group][v.seed] = figures[v.name]
    if baseline not in by_group:
        return {}
    base = by_group[baseline]
    out = {}
    for group, runs in by_group.items():
        if group == baseline:
            continue
        seeds = sorted(runs.keys() & base.keys())
        result = {}
        for key in keys:
            diffs = [runs[s][key] - base[s][key] for s in seeds
                     if runs[s].get(key) is not None and base[s].get(key) is not None]
            result[key] = paired_bootstrap(diffs)
        out[group] = {"seeds": seeds, "no_baseline": sorted(runs.keys() - base.keys()),
                      "no_variant": sorted(base.keys() - runs.keys()), "figures": result}
    return out


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
        figures = run_metrics(analysis)
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


def _fmt(value, key: str = "", signed: bool = False) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        digits = 2 if key in WIDE_KEYS else 3
        return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return str(value)


def _cell(s: dict, key: str, done: int) -> str:
    """mean ± std, with (n=k) when fewer seeds than the row's finished ones have the figure."""
    if s["mean"] is None:
        return "–"
    text = _fmt(s["mean"], key) + ("" if s["std"] is None else f" ± {_fmt(s['std'], key)}")
    return text + (f" (n={s['n']})" if s["n"] != done else "")


def _diff_cell(d: dict, key: str, seeds: int) -> str:
    """+0.012 [-0.004, +0.030], bold when the interval excludes 0; (n=k) when fewer pairs than seeds."""
    if d["mean"] is None:
        return "–"
    text = _fmt(d["mean"], key, signed=True)
    if d["low"] is not None:
        text += f" [{_fmt(d['low'], key, signed=True)}, {_fmt(d['high'], key, signed=True)}]"
        if d["low"] > 0 or d["high"] < 0:
            text = f"**{text}**"
    return text + (f" (n={d['n']})" if d["n"] != seeds else "")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows] + [""])


class Collected(NamedTuple):
    figures: dict  # run name -> run_metrics
    pooled: dict  # group -> records of every finished seed
    columns: list  # (key, label, lower is better) in headline order, the union over runs
    reference: Mapping | None  # the analysis (with chance) of the first finished run
    reference_run: str | None
    notes: list


def collect(out: Path, variants: Sequence[Variant], status: Status) -> Collected:
    """Figures of the finished runs, recomputed from each run's predictions.jsonl (so a table written after a
    figure was added covers earlier runs too; done.json's copy when the file cannot be read), records
    pooled per group, the table's columns, and chance from the first finished run's evaluation set."""
    from .analysis import analyze_records, headline, load_predictions

    figures, pooled, columns, notes = {}, {}, {}, []
    reference = reference_run = reference_ids = None
    for v in variants:
        run_dir = out / "runs" / v.name
        if status.variants.get(v.name, {}).get("status") != "done":
            continue
        try:
            records = load_predictions(run_dir / "predictions.jsonl")
        except (OSError, ValueError) as e:
            figures[v.name] = _read_json(run_dir / "done.json")["figures"]
            notes.append(f"{v.name}: figures from done.json ({e})")
            continue
        analysis = analyze_records(records, chance=False)
        figures[v.name] = run_metrics(analysis)
        for f in headline(analysis):
            columns.setdefault(f.key, (f.key, f.label, f.lower_is_better))
        pooled.setdefault(v.group, []).extend(records)
        ids = sorted((r["source"], str(r["id"])) for r in records)
        if reference is None:
            reference, reference_run, reference_ids = analyze_records(records), v.name, ids
        elif ids != reference_ids:
            notes.append(f"{v.name} was evaluated on other records than {reference_run}: its chance level differs")
    return Collected(figures, pooled, list(columns.values()), reference, reference_run, notes)


def group_table(variants: Sequence[Variant], status: Status, figures: Mapping[str, Mapping],
                keys: Sequence[str]) -> list[dict]:
    """One row per group: group, aux, kernel_mode, seeds, done, failed, status, and spread() per key."""
    rows = []
    for group in dict.fromkeys(v.group for v in variants):
        runs = [v for v in variants if v.group == group]
        states = [status.variants.get(v.name, {}).get("status", "pending") for v in runs]
        done = [v.name for v, s in zip(runs, states) if s == "done" and v.name in figures]
        failed = states.count("failed")
        state = ("ok" if len(done) == len(runs) else "failed" if failed == len(runs)
                 else f"{failed} failed" if failed else "incomplete")
        row = {"group": group, "aux": runs[0].aux, "kernel_mode": runs[0].kernel_mode,
               "seeds": len(runs), "done": len(done), "failed": failed, "status": state}
        for key in keys:
            row[key] = spread([figures[n].get(key) for n in done])
        rows.append(row)
    return rows


def _panel_keys(cols: Mapping[str, tuple]) -> list[str]:
    return [k for k in PANEL_KEYS if k in cols][:4]


def _plots(out: Path, rows: Sequence[dict], variants, figures, cols: Mapping[str, tuple],
           chance: Mapping[str, tuple], paired: Mapping[str, dict]) -> list[str]:
    """plots/main_metric.png (per group: bar = mean, error bar = sample std, dots = seeds; chance dashed,
    best constant dotted), plots/digit_accuracy.png (per place and group, chance as black dashes) and
    plots/paired_differences.png (group - none per seed pair: mean and bootstrap 95% interval)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    plot_dir = out / "plots"
    plot_dir.mkdir(exist_ok=True)
    groups = [r["group"] for r in rows]
    written = []
    panels = _panel_keys(cols)
    if panels:
        fig = Figure(figsize=(max(5.0, 1.0 + 0.55 * len(groups)) * len(panels), 4.4), dpi=100)
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
            level, constant = chance.get(key, (None, None))
            if level is not None:
                ax.axhline(level, color="black", linestyle="--", linewidth=1, label=f"chance {_fmt(level, key)}")
            if constant is not None:
                ax.axhline(constant, color="0.4", linestyle=":", linewidth=1.5,
                           label=f"best constant {_fmt(constant, key)}")
            ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
            label, lower = cols[key][1], cols[key][2]
            ax.set_title(f"{label} ({'lower' if lower else 'higher'} is better)", fontsize=10)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
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
            if all(r[p]["mean"] is None for p in places):
                continue  # no bars, no legend entry
            means = [r[p]["mean"] if r[p]["mean"] is not None else math.nan for p in places]
            stds = [r[p]["std"] or 0.0 for p in places]
            ax.bar([i - 0.4 + width * (j + 0.5) for i in range(len(places))], means, width, yerr=stds,
                   capsize=2, label=r["group"], color=f"C{j}")
        for i, p in enumerate(places):
            level = chance.get(p, (None, None))[0]
            if level is not None:
                ax.hlines(level, i - 0.4, i + 0.4, colors="black", linestyles="--", linewidth=1.5,
                          label="chance" if i == 0 or "chance" not in ax.get_legend_handles_labels()[1] else None)
        ax.set_xticks(range(len(places)), [cols[p][1].split(": ", 1)[-1] for p in places])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("digit accuracy")
        ax.set_title("digit accuracy per place (mean ± std over seeds)")
        ax.legend(fontsize=8, ncol=max(1, len(groups) // 5))
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(plot_dir / "digit_accuracy.png", format="png", metadata={"Software": None})
        written.append("plots/digit_accuracy.png")
    others = [g for g in groups if g in paired]
    if panels and others and any(paired[g]["figures"][k]["mean"] is not None for g in others for k in panels):
        fig = Figure(figsize=(4.2 * len(panels), 1.6 + 0.45 * len(others)), dpi=100)
        FigureCanvasAgg(fig)
        for i, key in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            for y, g in enumerate(others):
                d = paired[g]["figures"][key]
                if d["mean"] is None:
                    continue
                if d["low"] is not None:
                    ax.plot([d["low"], d["high"]], [y, y], color="#4c72b0", linewidth=2)
                ax.plot([d["mean"]], [y], "o", color="#4c72b0")
                if d["n"] < len(paired[g]["seeds"]) or d["low"] is None:
                    ax.annotate(f"n={d['n']}", (d["mean"], y), textcoords="offset points", xytext=(0, 5),
                                ha="center", fontsize=7)
            ax.axvline(0, color="black", linewidth=1)
            ax.margins(x=0.15, y=0.3)
            ax.set_yticks(range(len(others)), others if i == 0 else [""] * len(others))
            ax.invert_yaxis()
            label, lower = cols[key][1], cols[key][2]
            ax.set_title(f"{label}\n(variant - {BASELINE}; {'left' if lower else 'right'} is better)", fontsize=9)
            ax.grid(axis="x", alpha=0.3)
        fig.suptitle(f"Paired difference to {BASELINE} (same seed): mean and bootstrap 95% interval", fontsize=10)
        fig.tight_layout()
        fig.savefig(plot_dir / "paired_differences.png", format="png", metadata={"Software": None})
        written.append("plots/paired_differences.png")
    return written


def write_results(out: Path, variants: Sequence[Variant], status: Status, settings: Mapping) -> dict:
    """results.md, results.csv, runs.csv, plots/ and analysis/ from what has finished; returns the paths."""
    from .analysis import CHANCE_TEXT, analyze_records, headline, write_report

    got = collect(out, variants, status)
    figures, cols = got.figures, got.columns
    keys = [k for k, _, _ in cols]
    col = {k: c for k, c in zip(keys, cols)}
    rows = group_table(variants, status, figures, keys)
    paired = paired_differences(variants, figures, keys)
    chance = ({f.key: (f.chance, f.constant) for f in headline(got.reference)} if got.reference is not None else {})
    stats = ("mean", "std", "min", "max", "n")

    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["group", "aux", "kernel_mode", "seeds", "done", "failed", "status"]
                   + [f"{k}_{s}" for k in keys for s in (*stats, "chance", "diff", "low", "high", "pairs")])
        for r in rows:
            d = paired.get(r["group"], {}).get("figures", {})
            cells = [r[k] for k in ("group", "aux", "kernel_mode", "seeds", "done", "failed", "status")]
            for k in keys:
                cells += ["" if r[k][s] is None else r[k][s] for s in stats]
                cells.append(_blank(chance.get(k, (None, None))[0]))
                cells += [_blank(d[k]["mean"]), _blank(d[k]["low"]), _blank(d[k]["high"]), d[k]["n"]] \
                    if k in d else ["", "", "", ""]
            w.writerow(cells)
    with open(out / "runs.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["run", "group", "aux", "kernel_mode", "seed", "status", "seconds", "records"] + keys)
        for v in variants:
            st = status.variants.get(v.name, {})
            fig = figures.get(v.name, {})
            w.writerow([v.name, v.group, v.aux, v.kernel_mode, v.seed, st.get("status", "pending"),
                        st.get("seconds", ""), fig.get("records", "")] + [_blank(fig.get(k)) for k in keys])

    plots = _plots(out, rows, variants, figures, col, chance, paired) if figures else []
    report = None
    if got.pooled:
        analyses = {g: analyze_records(recs) for g, recs in got.pooled.items()}
        report = write_report(analyses, out / "analysis", notes=[
            "Each column pools the predictions of every finished seed of that variant; chance is over the "
            "distinct records (by source and id)."], run_info={g: None for g in analyses})

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
           "- cells: mean ± sample std over the finished seeds (n = seeds, written when a figure has fewer); "
           "min and max in results.csv; rates are fractions of the evaluated records, each figure over the "
           "denominator its name says (see analysis/report.md)",
           f"- chance and best constant: from the evaluation records of {got.reference_run or '–'} "
           f"({got.reference['records'] if got.reference else 0} records). " + CHANCE_TEXT, ""]
    md += [f"> {note}" for note in got.notes] + ([""] if got.notes else [])
    main_keys = [k for k in keys if not k.startswith("digit_acc_")]
    place_keys = [k for k in keys if k.startswith("digit_acc_")]
    for title, ks in (("Results (↓: lower is better)", main_keys), ("Per-place digit accuracy", place_keys)):
        if not ks:
            continue
        md += [f"## {title}", ""]
        table = [[r["group"] + ("" if r["status"] == "ok" else f" ({r['status']})"), f"{r['done']}/{r['seeds']}"]
                 + [_cell(r[k], k, r["done"]) for k in ks] for r in rows]
        table.append(["*chance*", ""] + [_fmt(chance.get(k, (None, None))[0], k) for k in ks])
        if any(chance.get(k, (None, None))[1] is not None for k in ks):
            table.append(["*best constant*", ""] + [_fmt(chance.get(k, (None, None))[1], k) for k in ks])
        md += _md_table(["variant", "n"] + [col[k][1] + (" ↓" if col[k][2] else "") for k in ks], table)
    md += [f"![{p}]({p})" for p in plots if "paired" not in p] + [""]
    md += _paired_section(rows, paired, keys, col, [p for p in plots if "paired" in p])
    md += ["## Runs", ""]
    run_rows = []
    for v in variants:
        st = status.variants.get(v.name, {})
        fig = figures.get(v.name, {})
        seconds = st.get("seconds")
        run_rows.append([v.name, st.get("status", "pending"), "–" if seconds is None else f"{seconds:.0f}",
                         fig.get("records", "–")] + [_fmt(fig.get(k), k) for k in keys])
    md += _md_table(["run", "status", "seconds", "records"] + [col[k][1] for k in keys], run_rows)
    failed = [v for v in variants if status.variants.get(v.name, {}).get("status") == "failed"]
    if failed:
        md += ["## Failed runs", ""]
        md += [f"- {v.name}: {status.variants[v.name].get('error', 'failed')} — see runs/{v.name}/error.txt "
               f"and runs/{v.name}/log.txt" for v in failed] + [""]
    if report is not None:
        md += ["Full per-digit comparison (seeds pooled per variant): [analysis/report.md](analysis/report.md)", ""]
    (out / "results.md").write_text("\n".join(md), encoding="utf-8")
    return {"results_md": out / "results.md", "results_csv": out / "results.csv", "runs_csv": out / "runs.csv",
            "plots": [out / p for p in plots], "report": report, "paired": paired}


def _blank(value):
    return "" if value is None else value


def _paired_section(rows, paired, keys, col, plots) -> list[str]:
    md = [f"## Paired difference to CE only (aux `{BASELINE}`)", ""]
    if not paired:
        return md + [f"No `{BASELINE}` variant in this comparison: no paired differences can be given.", ""]
    md += [f"Each cell: the mean over seeds of (variant - {BASELINE}) on the same seed (same initialisation "
           f"and data order), and its 95% interval by a percentile bootstrap: the seed pairs resampled with "
           f"replacement {BOOTSTRAP_RESAMPLES:,} times (numpy default_rng, seed {BOOTSTRAP_SEED}), the 2.5% and "
           "97.5% quantiles of the resampled means. **Bold**: the interval excludes 0 (for ↓ figures a negative "
           "difference is an improvement). With few seeds the interval is coarse and tends to be too narrow; "
           "read it as the spread over these seeds, not as a test.", ""]
    for ks in ([k for k in keys if not k.startswith("digit_acc_")], [k for k in keys if k.startswith("digit_acc_")]):
        if not ks:
            continue
        table = [[r["group"], str(len(paired[r["group"]]["seeds"]))]
                 + [_diff_cell(paired[r["group"]]["figures"][k], k, len(paired[r["group"]]["seeds"])) for k in ks]
                 for r in rows if r["group"] in paired]
        md += _md_table(["variant", "pairs"] + [col[k][1] + (" ↓" if col[k][2] else "") for k in ks], table)
    for g, p in paired.items():
        if p["no_baseline"]:
            md.append(f"- {g}: seed(s) {', '.join(map(str, p['no_baseline']))} dropped: no finished "
                      f"{BASELINE} run with that seed")
        if p["no_variant"]:
            md.append(f"- {g}: seed(s) {', '.join(map(str, p['no_variant']))} dropped: no finished {g} run "
                      "with that seed")
    md += [""] + [f"![{p}]({p})" for p in plots] + ([""] if plots else [])
    return md


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
    from .cli import Parser

    parser = Parser(
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
    parser.add_argument("--out", required=True, type=Path,
                        help="output folder: a new or empty one, or one of an earlier compare with the same "
                             "settings, which is resumed (a folder holding anything else is refused)")
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
    from .cli import fail, input_error, no_empty_folder, usage_error

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
        return usage_error("compare", e)
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
    settings_file = out / "compare.json"
    # --out is new, empty, or an earlier compare with the same settings (resumed); results.md, plots/ and
    # analysis/ would overwrite whatever else a folder holds
    if settings_file.is_file():
        try:
            old = _read_json(settings_file)
        except ValueError as e:
            return usage_error("compare", f"{settings_file}: unreadable ({e}); use another --out")
        diff = [k for k in settings if json.dumps(old.get(k), sort_keys=True) != json.dumps(
            json.loads(json.dumps(settings[k], default=str)), sort_keys=True)]
        if diff:
            return usage_error("compare", f"{out} holds runs made with other settings ({', '.join(diff)} differ; "
                               f"see {settings_file}); use another --out, or delete that folder")
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        return usage_error("compare", f"--out {out} already holds files of something other than a compare (no "
                           "compare.json) that the results would overwrite; use a new or empty --out")
    try:
        with no_empty_folder(out):
            from .training import synthesize_if_missing

            synthesize_if_missing(data_args)  # once, before any variant: all of them read the same files
    except Exception as e:
        if not input_error(e):
            raise
        return fail("compare", e)
    out.mkdir(parents=True, exist_ok=True)
    if not settings_file.is_file():
        _write_json(settings_file, settings)
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
