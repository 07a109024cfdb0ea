"""Running a comparison: each variant in a fresh process (train, evaluate), analysed here, resumable.

A process per variant isolates the global state that training leaves behind (DeepSpeed / torch.distributed
groups, CUDA memory and caches, seeded RNGs, logging handlers), and a crash, an out-of-memory kill or a hang
of one variant cannot take the others down; the price is one interpreter start (a few seconds) per variant.
The process is `vlm-smmd compare-worker VARIANT.json` (`variant_worker`).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from data_synth.interrupts import interrupt_status

from .results import fmt, run_metrics, write_results
from .store import Status, drop_weights, read_json, tail, write_json
from .variants import Variant, variant_overrides


def variant_worker(spec_path) -> int:
    """Body of the per-variant process: train (unless train.json says it is done), then evaluate.

    `spec_path`: a variant.json written by `run_variant` ({"run_dir", "config", "overrides",
    "deepspeed", "stages", "eval": {keyword arguments of `evaluate_model` and "data"}}).
    """
    spec = read_json(Path(spec_path))
    run_dir = Path(spec["run_dir"])
    if "train" in spec["stages"] and not (run_dir / "train.json").is_file():
        from ..config import load_config
        from ..training import ensure_single_process_env, run

        if spec["deepspeed"]:
            ensure_single_process_env()  # before TrainingArguments initialises DeepSpeed
        import torch

        metrics = run(*load_config(spec["config"], spec["overrides"]))
        write_json(run_dir / "train.json", {**{k: v for k, v in metrics.items() if isinstance(v, (int, float, str))},
                                            "torch_threads": torch.get_num_threads()})
    if "eval" in spec["stages"]:
        from ..evaluation import evaluate_model

        options = dict(spec["eval"])
        data = [tuple(d) for d in options.pop("data")]
        for split in options.pop("splits"):
            if not (run_dir / split / "metrics.json").is_file():  # a retry evaluates what is missing
                evaluate_model(run_dir / "model", data, run_dir / split, split=split, progress=False, **options)
    return 0


_children: set[subprocess.Popen] = set()  # the running variant processes, interrupted together on Ctrl-C
_children_lock = threading.Lock()
_analysis_lock = threading.Lock()


def _run_logged(cmd: list[str], log: Path, env: dict[str, str]) -> int:
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {shlex.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **env})
        with _children_lock:
            _children.add(proc)
        try:
            return proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            with _children_lock:
                _children.discard(proc)


def _interrupt_children() -> None:
    with _children_lock:
        for proc in _children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)


def run_variant(variant: Variant, run_dir: Path, spec: dict, launcher: list[str] | None, keep_models: bool,
                env: dict[str, str] | None = None) -> dict:
    """Train, evaluate and analyse one variant in `run_dir` (its processes get `env` on top of ours, e.g. the
    thread plan's); returns done.json's content. Raises VariantFailed (with error.txt written) when a stage
    fails."""
    from ..analysis import analyze_records, load_predictions, write_report

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "error.txt").unlink(missing_ok=True)
    log = run_dir / "log.txt"
    log.write_text(f"# {variant.name}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n", encoding="utf-8")
    spec = {**spec, "run_dir": str(run_dir), "stages": ["eval"] if launcher else ["train", "eval"]}
    write_json(run_dir / "variant.json", spec)
    if launcher and not (run_dir / "train.json").is_file():
        cmd = launcher + ["-m", "vlm_smmd.cli", "train", spec["config"]]
        # text goes as is (the train command keeps command-line text verbatim); other values as JSON
        cmd += [f"--{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in spec["overrides"].items()]
        rc = _run_logged(cmd, log, env or {})
        if rc != 0:
            raise VariantFailed(run_dir, f"training ({shlex.join(launcher)}) exited with status {rc}")
        write_json(run_dir / "train.json", {"launcher": shlex.join(launcher)})
    rc = _run_logged([sys.executable, "-m", "vlm_smmd.cli", "compare-worker", str(run_dir / "variant.json")], log,
                     env or {})
    if rc != 0:
        stage = "evaluation" if (run_dir / "train.json").is_file() else "training"
        raise VariantFailed(run_dir, f"{stage} exited with status {rc}")
    figures = {}
    try:
        with _analysis_lock:  # one variant at a time: matplotlib's font and text caches are not thread-safe
            for split in spec["eval"]["splits"]:
                predictions = run_dir / split / "predictions.jsonl"
                analysis = analyze_records(load_predictions(predictions))
                write_report({variant.name: analysis}, run_dir / split / "analysis",
                             inputs={variant.name: str(predictions)})
                figures[split] = run_metrics(analysis)
    except Exception:  # noqa: BLE001 - any analysis error fails this variant only
        with open(log, "a", encoding="utf-8") as f:
            f.write(traceback.format_exc())
        raise VariantFailed(run_dir, "analysis failed") from None
    freed = 0 if keep_models else drop_weights(run_dir / "model")
    return {"variant": variant.name, "group": variant.group, "aux": variant.aux,
            "kernel_mode": variant.kernel_mode, "seed": variant.seed, "figures": figures,
            "weights_deleted_mb": round(freed / 2**20, 1)}


class VariantFailed(RuntimeError):
    """A stage of a variant failed; writes error.txt. The reason ends with the log's last line (usually
    the exception), e.g. "training exited with status 1: FileExistsError: ..."."""

    def __init__(self, run_dir: Path, reason: str):
        last = [line for line in tail(run_dir / "log.txt", 5).splitlines() if line.strip()]
        if last:
            reason = f"{reason}: {last[-1].strip()[:300]}"
        super().__init__(reason)
        self.reason = reason
        (run_dir / "error.txt").write_text(f"{reason}\n\nlast lines of {run_dir / 'log.txt'}:\n"
                                           f"{tail(run_dir / 'log.txt')}\n", encoding="utf-8")


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def run_compare(out: Path, variants: Sequence[Variant], settings: dict, spec_base: dict, *, overrides: dict,
                base_kernel_seed: int, launcher: list[str] | None = None, keep_models: bool = False,
                jobs: int = 1, env: dict[str, str] | None = None) -> int:
    """Run every variant not done yet into out/runs/NAME, `jobs` at a time (each process gets `env` on top of
    ours: the thread plan), printing progress; then write the tables. Returns 0, 1 when a variant failed (the
    others still ran), 130 (143 for SIGTERM) when interrupted (the tables so far are written; a rerun resumes)."""
    status = Status(out / "status.json", [v.name for v in variants])
    start, durations = time.monotonic(), []
    lock = threading.Lock()  # status.json, done.json, the progress lines and the analysis
    interrupted = threading.Event()
    todo = []
    for i, v in enumerate(variants, 1):
        if (out / "runs" / v.name / "done.json").is_file():
            status.set(v.name, status="done")
            print(f"[{i}/{len(variants)}] {v.name}: done earlier, skipped", flush=True)
        else:
            todo.append((i, v))

    def one(i: int, v: Variant) -> None:
        run_dir = out / "runs" / v.name
        head = f"[{i}/{len(variants)}] {v.name}"
        with lock:
            print(f"{head}: running (log {run_dir / 'log.txt'})", flush=True)
            status.set(v.name, status="running", log=str(run_dir / "log.txt"))
        t0 = time.monotonic()
        spec = {**spec_base, "overrides": variant_overrides(overrides, v, run_dir, base_kernel_seed)}
        try:
            done = run_variant(v, run_dir, spec, launcher, keep_models, env)
        except VariantFailed as e:
            seconds = time.monotonic() - t0
            with lock:
                if interrupted.is_set():  # its process was stopped by the interrupt: not a failure
                    return
                status.set(v.name, status="failed", seconds=round(seconds, 1), error=e.reason)
                print(f"{head}: FAILED after {_duration(seconds)}: {e.reason} (see {run_dir / 'error.txt'})\n"
                      + "\n".join("    " + line for line in tail(run_dir / "log.txt", 8).splitlines()), flush=True)
            return
        seconds = time.monotonic() - t0
        with lock:
            durations.append(seconds)
            done["seconds"] = round(seconds, 1)
            write_json(run_dir / "done.json", done)
            status.set(v.name, status="done", seconds=round(seconds, 1), error=None)
            left = sum(1 for w in variants if not (out / "runs" / w.name / "done.json").is_file())
            eta = (f", about {_duration(statistics.fmean(durations) * left / min(jobs, left))} left" if left else "")
            shown = ", ".join(f"{split} exact match {fmt(figs['exact_match'])}"
                              for split, figs in done["figures"].items())
            print(f"{head}: done in {_duration(seconds)} (elapsed {_duration(time.monotonic() - start)}{eta}); "
                  f"{shown}", flush=True)

    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = [pool.submit(one, i, v) for i, v in todo]
    try:
        for future in futures:
            future.result()
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (the dispatcher makes it one)
        interrupted.set()
        for future in futures:
            future.cancel()
        _interrupt_children()
        pool.shutdown(wait=True)
        for v in variants:
            if status.variants[v.name]["status"] == "running":
                status.set(v.name, status="interrupted")
        write_results(out, variants, status, settings)
        print(f"\ninterrupted; results so far in {out / 'results.md'}; rerun the same command to resume",
              file=sys.stderr)
        return interrupt_status(e)
    pool.shutdown()

    paths = write_results(out, variants, status, settings)
    failed = [v.name for v in variants if status.variants[v.name]["status"] == "failed"]
    print(f"results: {paths['results_md']} and {paths['results_csv']} (per run: {paths['runs_csv']})")
    for split, report in paths["reports"].items():
        print(f"per-digit comparison on {split}: {report}")
    if failed:
        print(f"{len(failed)} variant(s) failed: {', '.join(failed)}; rerun the same command to retry them",
              file=sys.stderr)
        return 1
    return 0


def unseen_key(data_args) -> str | None:
    """What the dataset's unseen split holds out when not the answers (`tasks.Task.unseen_key`)."""
    from ..data.tasks import TASKS

    task = TASKS.get(data_args.dataset)
    return None if task is None else task.unseen_key


def held_out_check(data_args, splits: Sequence[str], *, limit: int | None = None) -> dict[str, dict]:
    """What each evaluated split (its first `limit` records, as evaluation reads them) shares with the
    training split: {split: {"lines", "held_out", "leaks", **LeakageReport.to_dict()}} (`data.leakage`)."""
    from ..data.leakage import check_leakage
    from ..data.sample import set_max_image_pixels
    from ..training.datasets import read_split

    set_max_image_pixels(data_args.max_image_pixels)
    training = read_split(data_args, data_args.train_split)
    out = {}
    for split in splits:
        evaluated = read_split(data_args, split)
        n = len(evaluated) if limit is None else min(limit, len(evaluated))
        report = check_leakage((evaluated[i] for i in range(n)), (training[i] for i in range(len(training))),
                               unseen_key=unseen_key(data_args))
        out[split] = {"lines": report.lines(), "held_out": report.held_out, "leaks": report.leaks(split),
                      **report.to_dict()}
    return out


def split_figures(data_args, split: str, *, limit: int | None = None) -> list[str]:
    """The figure keys (results.csv columns) a run evaluated on `split` gets: the headline figures of its
    first `limit` records (all with None, as evaluation reads them) answered correctly. Which figures apply
    depends on the records' kinds (numbers, clock times, boxes), not on the predictions, so compare can
    check a declared endpoint before any run."""
    from ..analysis import analyze_records
    from ..analysis.headline_figures import headline
    from ..data.sample import set_max_image_pixels
    from ..training.datasets import read_split

    set_max_image_pixels(data_args.max_image_pixels)
    evaluated = read_split(data_args, split)
    records = []
    for i in range(len(evaluated) if limit is None else min(limit, len(evaluated))):
        s = evaluated[i]
        records.append({"id": s.id, "source": s.source, "question": s.question, "prediction": s.answer,
                        "target": s.answer, "meta": s.meta})
    return [f.key for f in headline(analyze_records(records, chance=False))]
