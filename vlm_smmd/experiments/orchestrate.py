"""Running a comparison: each variant in a fresh process (train, evaluate), analysed here, resumable.

A process per variant isolates the global state that training leaves behind (DeepSpeed / torch.distributed
groups, CUDA memory and caches, seeded RNGs, logging handlers), and a crash, an out-of-memory kill or a hang
of one variant cannot take the others down; the price is one interpreter start (a few seconds) per variant.
The process is `vlm-smmd compare-worker VARIANT.json` (`variant_worker`).

The processes end with compare however it ends: each child runs in its own session (compare forwards
Ctrl-C and SIGTERM to its whole process group, then SIGKILL after STOP_GRACE_S), SIGTERM is restored to its
default in the child whatever compare inherited (a script's `trap '' TERM`), on Linux the kernel sends it
SIGTERM when compare dies (PR_SET_PDEATHSIG, even after kill -9), and the worker also watches its parent
(`follow_parent`) where that is not available. A failing worker writes its own error line (WORKER_ERROR).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import json
import os
import re
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

from data_synth.interrupts import Terminated, interrupt_status

from ..evaluation import EvalArguments, evaluate_model
from .results import fmt, run_metrics, write_results
from .selection import write_selection
from .store import WEIGHT_SUFFIXES, StateError, Status, drop_weights, read_json, read_state, tail, write_json
from .variants import Variant, variant_overrides

WORKER_ERROR = "worker_error.json"  # {"error": "Type: message"}, written by a worker that fails
PARENT_ENV = "VLM_SMMD_COMPARE_PID"  # the compare a worker belongs to (`follow_parent`)
STOP_GRACE_S = 10.0  # how long stopped processes may clean up before they are killed
_PR_SET_PDEATHSIG = 1
try:
    _libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _libc = None


def variant_worker(spec_path) -> int:
    """Body of the per-variant process: train (unless train.json says it is done), then evaluate.

    `spec_path`: a variant.json written by `run_variant` ({"run_dir", "config", "overrides",
    "deepspeed", "stages", "eval": `eval_settings`}).
    """
    spec = read_json(Path(spec_path))
    run_dir = Path(spec["run_dir"])
    try:
        _work(spec, run_dir, spec_path)
    except Exception as e:  # the reason compare reports, whatever the log prints after it (a warning at exit)
        write_json(run_dir / WORKER_ERROR, {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:1000]}"})
        raise
    return 0


def eval_settings(data, splits: Sequence[str], arguments: EvalArguments) -> dict:
    """compare's evaluation settings (compare.json's and variant.json's "eval"): the evaluated data
    ([name, path] pairs), the splits (each in place of arguments.split) and every EvalArguments field."""
    return {"data": [[name, str(path)] for name, path in data], "splits": list(splits), **arguments.to_dict()}


def read_eval_settings(settings: dict, source) -> tuple[list[tuple[str, str]], list[str], EvalArguments]:
    """(data, splits, arguments) of `eval_settings`'s dict; a ValueError naming `source` (the file) when
    data or splits is missing or a key is no EvalArguments field."""
    options = dict(settings)
    if not isinstance(options.get("data"), list) or not isinstance(options.get("splits"), list):
        raise ValueError(f"{source}: the eval settings need the lists data and splits")
    data, splits = options.pop("data"), options.pop("splits")
    return [tuple(d) for d in data], splits, EvalArguments.from_dict(options, source)


def _evaluated(split_dir: Path) -> bool:
    """Whether a split's evaluation is complete: predictions.jsonl and a readable metrics.json."""
    try:
        read_state(split_dir / "metrics.json")
    except (OSError, StateError):
        return False
    return (split_dir / "predictions.jsonl").is_file()


def _work(spec: dict, run_dir: Path, spec_path) -> None:
    if "train" in spec["stages"] and not (run_dir / "train.json").is_file():
        from ..config import load_config
        from ..training import ensure_single_process_env, run

        if spec["deepspeed"]:
            ensure_single_process_env()  # before TrainingArguments initialises DeepSpeed
        import torch

        metrics = run(*load_config(spec["config"], spec["overrides"]), callbacks=_curve_callbacks(spec))
        write_json(run_dir / "train.json", {**{k: v for k, v in metrics.items() if isinstance(v, (int, float, str))},
                                            "torch_threads": torch.get_num_threads()})
    if "eval" in spec["stages"]:
        data, splits, arguments = read_eval_settings(spec["eval"], spec_path)
        for split in splits:
            if not _evaluated(run_dir / split):  # a retry evaluates what is missing or damaged
                evaluate_model(run_dir / "model", data, run_dir / split, dataclasses.replace(arguments, split=split),
                               progress=False)
        if spec.get("curve"):  # after the val evaluation, whose first records give the 100 % point
            from .curves import write_curve

            write_curve(run_dir, data, arguments, spec["curve"])


def _curve_callbacks(spec: dict) -> list:
    """`compare --curve`: a checkpoint at each curve step (`curves.checkpoint_steps` of the Trainer's
    max_steps), evaluated after training and deleted with the other weights unless --keep-models."""
    if not spec.get("curve"):
        return []
    from ..training.trainer import SaveAtSteps
    from .curves import checkpoint_steps

    return [SaveAtSteps(functools.partial(checkpoint_steps, spec["curve"]["percents"]))]


def follow_parent() -> None:
    """In a worker: end like SIGTERM ends it once the compare that started it is gone (a watch on the
    parent pid, the fallback to PR_SET_PDEATHSIG), and exit STOP_GRACE_S later if that clean-up hangs."""
    try:
        parent = int(os.environ.get(PARENT_ENV, ""))
    except ValueError:
        return

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(STOP_GRACE_S)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="follow-parent", daemon=True).start()


def _child_setup(parent: int) -> None:
    """Run in the child between fork and exec: SIGTERM at its default (so the worker's own handler is
    installed even under an inherited `trap '' TERM`); SIGTERM when its parent dies (Linux)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(128 + signal.SIGTERM)


_children: set[subprocess.Popen] = set()  # the running variant processes, interrupted together on Ctrl-C
_children_lock = threading.Lock()
_analysis_lock = threading.Lock()


def _run_logged(cmd: list[str], log: Path, env: dict[str, str]) -> int:
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {shlex.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid()), **env},
                                start_new_session=True, preexec_fn=functools.partial(_child_setup, os.getpid()))
        with _children_lock:
            _children.add(proc)
        try:
            return proc.wait()
        except BaseException:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            with _children_lock:
                _children.discard(proc)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the child leads its own process group (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_children(sig: int) -> None:
    """Send `sig` to every running child's process group, wait up to STOP_GRACE_S for them to end, then
    SIGKILL what is left (at once on a further Ctrl-C)."""
    with _children_lock:
        procs = list(_children)
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, sig)
    deadline = time.monotonic() + STOP_GRACE_S
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        for proc in procs:
            _signal_group(proc, signal.SIGKILL)  # also any process a finished child left in its group


def _failure(run_dir: Path, stage: str, rc: int) -> VariantFailed:
    """VariantFailed for a stage's process that ended with `rc`: how it ended, then the worker's own error
    line (WORKER_ERROR) or, for a launcher's process, the last error line of the log."""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "unknown"
        return VariantFailed(run_dir, f"{stage} was killed by signal {-rc} ({name})")
    reason = f"{stage} exited with status {rc}"
    try:
        error = read_state(run_dir / WORKER_ERROR).get("error")
    except (OSError, StateError):
        error = None
    if error is None:
        lines = [m.group(0) for line in tail(run_dir / "log.txt", 40).splitlines()
                 if (m := _ERROR_LINE.search(line.strip()))]
        error = lines[-1] if lines else None
    if error is None and rc > 128 and rc - 128 in signal.valid_signals():
        error = f"stopped by {signal.Signals(rc - 128).name}"
    return VariantFailed(run_dir, f"{reason}: {str(error)[:300]}" if error else reason)


# an error line of a process we did not write the marker for: the dispatcher's, or an exception's last line
_ERROR_LINE = re.compile(r"vlm-smmd [\w-]+: error: .*|\b[A-Z]\w*(Error|Exception)\b: .*|\b[A-Z]\w*(Error|Exception)$")


def _unfinishable(run_dir: Path, splits: Sequence[str]) -> str | None:
    """Why a variant cannot be finished without training again: its weights were dropped after it was
    trained, and a split's evaluation is missing or damaged."""
    model = run_dir / "model"
    weights = model.is_dir() and any(p.suffix in WEIGHT_SUFFIXES or p.name.startswith("checkpoint-")
                                     for p in model.iterdir())
    missing = [str(run_dir / s) for s in splits if not _evaluated(run_dir / s)]
    if not (run_dir / "train.json").is_file() or weights or not missing:
        return None
    return (f"cannot be finished: its trained weights were deleted and the evaluation in {', '.join(missing)} is "
            f"missing or damaged; remove the folder {run_dir} to train and evaluate it again")


def finished(run_dir: Path, splits: Sequence[str]) -> tuple[bool, str | None]:
    """(whether the run is done, why a run marked done is not): done.json and each split's metrics.json
    must be readable (a missing metrics.json is allowed: a copied comparison may lack files)."""
    try:
        read_state(run_dir / "done.json")
        for split in splits:
            if (run_dir / split / "metrics.json").exists():
                read_state(run_dir / split / "metrics.json")
    except FileNotFoundError:
        return False, None
    except StateError as e:
        return False, str(e)
    return True, None


def run_variant(variant: Variant, run_dir: Path, spec: dict, launcher: list[str] | None, keep_models: bool,
                env: dict[str, str] | None = None) -> dict:
    """Train, evaluate and analyse one variant in `run_dir` (its processes get `env` on top of ours, e.g. the
    thread plan's); returns done.json's content. Raises VariantFailed (with error.txt written) when a stage
    fails."""
    from ..analysis import analyze_records, load_predictions, write_report

    run_dir.mkdir(parents=True, exist_ok=True)
    if (why := _unfinishable(run_dir, spec["eval"]["splits"])) is not None:
        raise VariantFailed(run_dir, why, retry=False)
    (run_dir / "error.txt").unlink(missing_ok=True)
    (run_dir / WORKER_ERROR).unlink(missing_ok=True)
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
            raise _failure(run_dir, f"training ({shlex.join(launcher)})", rc)
        write_json(run_dir / "train.json", {"launcher": shlex.join(launcher)})
    rc = _run_logged([sys.executable, "-m", "vlm_smmd.cli", "compare-worker", str(run_dir / "variant.json")], log,
                     env or {})
    if rc != 0:
        raise _failure(run_dir, "evaluation" if (run_dir / "train.json").is_file() else "training", rc)
    for split in spec["eval"]["splits"]:  # what the worker wrote, checked before the run is marked done
        try:
            read_state(run_dir / split / "metrics.json")
        except (OSError, StateError) as e:
            raise VariantFailed(run_dir, f"evaluation left no readable metrics: {e}") from None
    figures = {}
    try:
        with _analysis_lock:  # one variant at a time: matplotlib's font and text caches are not thread-safe
            for split in spec["eval"]["splits"]:
                predictions = run_dir / split / "predictions.jsonl"
                analysis = analyze_records(load_predictions(predictions))
                write_report({variant.name: analysis}, run_dir / split / "analysis",
                             inputs={variant.name: str(predictions)})
                figures[split] = run_metrics(analysis)
    except Exception as e:  # noqa: BLE001 - any analysis error fails this variant only
        with open(log, "a", encoding="utf-8") as f:
            f.write(traceback.format_exc())
        raise VariantFailed(run_dir, f"analysis failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
    freed = 0 if keep_models else drop_weights(run_dir / "model")
    return {"variant": variant.name, "group": variant.group, "aux": variant.aux,
            "kernel_mode": variant.kernel_mode, "seed": variant.seed, "figures": figures,
            "weights_deleted_mb": round(freed / 2**20, 1)}


class VariantFailed(RuntimeError):
    """A stage of a variant failed; writes error.txt with the reason (`_failure`: how the process ended and
    its own error line, e.g. "training exited with status 1: FileExistsError: ...") and the log's end."""

    def __init__(self, run_dir: Path, reason: str, *, retry: bool = True):
        super().__init__(reason)
        self.retry = retry  # False: a rerun fails the same way until the user removes what the reason names
        self.reason = reason
        (run_dir / "error.txt").write_text(f"{reason}\n\nlast lines of {run_dir / 'log.txt'}:\n"
                                           f"{tail(run_dir / 'log.txt')}\n", encoding="utf-8")


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def write_page(out: Path, variants: Sequence[Variant], status: Status, settings: dict) -> dict:
    """The comparison's page (`write_results`); for a selection stage (`--grid`) selection.json first, from the
    same finished runs, so the page shows the choice and the table it was made on."""
    if settings.get("grid") and (settings.get("primary") or {}).get("metric"):
        settings = {**settings, "selection": write_selection(out, variants, settings, settings.get("dev_seeds") or [])}
    return write_results(out, variants, status, settings)


def run_compare(out: Path, variants: Sequence[Variant], settings: dict, spec_base: dict, *, overrides: dict,
                base_kernel_seed: int, launcher: list[str] | None = None, keep_models: bool = False,
                jobs: int = 1, env: dict[str, str] | None = None) -> int:
    """Run every variant not done yet into out/runs/NAME, `jobs` at a time (each process gets `env` on top of
    ours: the thread plan), printing progress; then write the tables. Returns 0, 1 when a variant failed (the
    others still ran), 130 (143 for SIGTERM) when interrupted (the tables so far are written; a rerun resumes)."""
    status = Status(out / "status.json", [v.name for v in variants])
    if status.rebuilt:
        print(status.rebuilt, flush=True)
    splits = settings.get("eval", {}).get("splits", ())
    start, durations = time.monotonic(), []
    lock = threading.Lock()  # status.json, done.json, the progress lines and the analysis
    interrupted = threading.Event()
    todo, stuck = [], []  # stuck: failed variants a plain rerun cannot finish
    for i, v in enumerate(variants, 1):
        done, problem = finished(out / "runs" / v.name, splits)
        if done:
            status.set(v.name, status="done")
            print(f"[{i}/{len(variants)}] {v.name}: done earlier, skipped", flush=True)
        else:
            if problem:  # a damaged done.json or metrics.json: run again (its finished stages are kept)
                status.set(v.name, status="pending")
                print(f"[{i}/{len(variants)}] {v.name}: {problem}; running it again", flush=True)
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
                if not e.retry:
                    stuck.append(v.name)
                print(f"{head}: FAILED after {_duration(seconds)}: {e.reason} (see {run_dir / 'error.txt'})"
                      + "".join("\n    " + line for line in (tail(run_dir / "log.txt", 8).splitlines() if e.retry
                                                             else ())), flush=True)
            return
        seconds = time.monotonic() - t0
        with lock:
            durations.append(seconds)
            done["seconds"] = round(seconds, 1)
            write_json(run_dir / "done.json", done)
            status.set(v.name, status="done", seconds=round(seconds, 1), error=None)
            left = sum(1 for w in variants if status.variants[w.name]["status"] != "done")
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
        # the signal compare got goes on to its workers (SIGHUP as SIGTERM), which may ignore SIGINT
        _stop_children(signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
        pool.shutdown(wait=True)
        for v in variants:
            if status.variants[v.name]["status"] == "running":
                status.set(v.name, status="interrupted")
        write_page(out, variants, status, settings)
        print(f"\ninterrupted; results so far in {out / 'results.md'}; rerun the same command to resume",
              file=sys.stderr)
        return interrupt_status(e)
    pool.shutdown()

    paths = write_page(out, variants, status, settings)
    failed = [v.name for v in variants if status.variants[v.name]["status"] == "failed"]
    print(f"results: {paths['results_md']} and {paths['results_csv']} (per run: {paths['runs_csv']})")
    for split, report in paths["reports"].items():
        print(f"per-digit comparison on {split}: {report}")
    if failed:
        print(f"{len(failed)} variant(s) failed: {', '.join(failed)}; rerun the same command to retry them"
              + (f" ({', '.join(stuck)} only once the folders named above are removed)" if stuck else ""),
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
    from ..data import read_split  # imports torch: the worker and compare --help start without it
    from ..data.leakage import check_leakage
    from ..data.sample import set_max_image_pixels

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
    from ..data import read_split  # imports torch: the worker and compare --help start without it
    from ..data.sample import set_max_image_pixels

    set_max_image_pixels(data_args.max_image_pixels)
    evaluated = read_split(data_args, split)
    records = []
    for i in range(len(evaluated) if limit is None else min(limit, len(evaluated))):
        s = evaluated[i]
        records.append({"id": s.id, "source": s.source, "question": s.question, "prediction": s.answer,
                        "target": s.answer, "meta": s.meta})
    return [f.key for f in headline(analyze_records(records, chance=False))]


def data_fingerprints(data_args, splits: Sequence[str], *, limit: int | None = None) -> dict[str, str]:
    """{split: sha256 of its first `limit` records as evaluation reads them} (`training.resume.data_fingerprint`:
    id, source, question, answer, each image file's path and size): compare.json keeps it, so a rerun on a
    split edited on disk is refused rather than pooled with the earlier seeds."""
    from torch.utils.data import Subset

    from ..data import read_split  # imports torch: the worker and compare --help start without it
    from ..data.sample import set_max_image_pixels
    from ..training.resume import data_fingerprint

    set_max_image_pixels(data_args.max_image_pixels)
    out = {}
    for split in splits:
        evaluated = read_split(data_args, split)
        out[split] = data_fingerprint(evaluated if limit is None else Subset(evaluated, range(min(limit, len(evaluated)))))
    return out
