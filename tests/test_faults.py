"""Fault tests: `vlm-smmd train` in real processes killed with SIGKILL, then resumed.

One uninterrupted run (8 steps of 2 samples over 8 records, so two epochs; checkpoints at steps 3, 6 and
8) is the reference. The same run killed at a chosen moment and resumed with `resume_from_checkpoint`
must end on the reference's weights (same seed, same data order; on CPU the resumed run is bit-exact).

How the kill lands during a save: the test watches the output folder and kills as soon as
`checkpoint-6/optimizer.pt` appears. The Trainer writes a checkpoint in place, in the order config and
weights, processor files, optimizer.pt (here 158 MB, about half a second), scheduler.pt, rng_state.pth
and last trainer_state.json, so the kill lands with the weights complete, the optimizer state half
written and no trainer_state.json: the most misleading half-written checkpoint (its weights load). The
test checks afterwards that the folder really is incomplete. A hook inside the run would be exact but
is no part of the product, and a larger model would only make the run slower.

Then a run in skip mode with a corrupt image and batches of one record finishes and reports that one
record, once.

Last, the other ways a run can end early, each in real processes: a diverged run (one line naming the
step and the last good checkpoint, no model saved), a full disk (a tmpfs sized from a reference run of
the scratch preset: the failed save leaves only the complete checkpoints, and resuming after space is
freed ends on the reference model), two runs on one output_dir (the second is refused, naming the
first's pid) and Ctrl-C (SIGINT to the whole process group, as a terminal sends it, DataLoader workers
included: exit 130, one line, no traceback, no half-written output).
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from data_synth.writer import write_clock_dataset

REPO = Path(__file__).resolve().parent.parent
STEPS, SAVE_STEPS = 8, 3

@pytest.fixture(scope="module")
def clock_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fault_clocks") / "data"
    write_clock_dataset(root, num=16, seed=0, size=64, splits="train=0.5,test=0.5", progress=False)
    return root


@pytest.fixture(scope="module")
def config(tmp_path_factory, clock_root):
    settings = {
        "model_name_or_path": "tiny", "dataset": "clocks", "data_root": str(clock_root), "max_pixels": 112 * 112,
        "aux": "smmd", "aux_lambda": 0.5, "use_cpu": True, "seed": 0, "max_steps": STEPS,
        "per_device_train_batch_size": 2, "learning_rate": 0.005, "logging_steps": 1, "save_strategy": "steps",
        "save_steps": SAVE_STEPS, "disable_tqdm": True, "dataloader_num_workers": 0,
    }
    path = tmp_path_factory.mktemp("fault_config") / "run.yaml"
    path.write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in settings.items()))
    return path


def child_env(cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", XDG_CACHE_HOME=str(cache))  # the preflight cache stays in the test's folder
    return env


def train_args(config, out, *overrides):
    return [sys.executable, "-m", "vlm_smmd.cli", "train", str(config), "--output_dir", str(out), *overrides]


def train(config, out, *overrides, timeout=120):
    proc = subprocess.run(train_args(config, out, *overrides), cwd=REPO, env=child_env(out.parent / "cache"),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def train_and_kill(config, out, ready, timeout=90):
    """Start a run and SIGKILL it the moment `ready()` holds (polled every 2 ms). Harness problems are
    RuntimeErrors, so they are never taken for product failures (AssertionErrors)."""
    log = (out.parent / f"{out.name}.log").open("w")
    proc = subprocess.Popen(train_args(config, out), cwd=REPO, env=child_env(out.parent / "cache"),
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended (exit {proc.returncode}) before it could be killed; see {log.name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the run did not reach the kill point in {timeout} s")
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.close()
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the run was not killed by SIGKILL (exit {proc.returncode})")


def trainer_state(checkpoint: Path) -> dict | None:
    """The checkpoint's trainer_state.json, or None while it is missing or partly written."""
    try:
        return json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def assert_same_weights(a: dict, b: dict, atol=1e-6):
    assert a.keys() == b.keys() and len(a) > 10
    worst = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
    assert worst <= atol, f"weights differ by up to {worst:.3g}"


def logged_steps(out: Path) -> list[int]:
    return [h["step"] for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in h]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, config):
    out = tmp_path_factory.mktemp("fault_reference") / "out"
    train(config, out)
    assert logged_steps(out) == list(range(1, STEPS + 1))
    yield out
    shutil.rmtree(out.parent, ignore_errors=True)  # about 1 GB of checkpoints


@pytest.fixture
def run_dir(tmp_path):
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.slow
def test_kill_after_second_checkpoint_then_resume_ends_on_the_uninterrupted_weights(config, reference, run_dir):
    out = run_dir / "out"
    second = out / f"checkpoint-{2 * SAVE_STEPS}"
    # killed once the second checkpoint is complete (its trainer_state.json, written last, parses)
    train_and_kill(config, out, lambda: (trainer_state(second) or {}).get("global_step") == 2 * SAVE_STEPS)
    assert not (out / "model.safetensors").exists()  # the run never reached its end
    assert not (out / f"checkpoint-{STEPS}").exists()
    train(config, out, "--resume_from_checkpoint", "true")
    assert logged_steps(out) == list(range(1, STEPS + 1))  # 1-6 kept from the checkpoint's state, 7-8 resumed
    assert_same_weights(weights(out), weights(reference))


@pytest.fixture(scope="module")
def killed_during_save(tmp_path_factory, config):
    """A run killed while it writes its second checkpoint: (output dir, the complete checkpoint, the
    incomplete one). Shared: the next two tests only read it, the third resumes it."""
    out = tmp_path_factory.mktemp("fault_killed_during_save") / "out"
    previous, newest = out / f"checkpoint-{SAVE_STEPS}", out / f"checkpoint-{2 * SAVE_STEPS}"
    train_and_kill(config, out, lambda: (newest / "optimizer.pt").exists())
    if trainer_state(newest) is not None:
        raise RuntimeError(f"the kill landed after {newest.name} was complete: no half-written checkpoint to test")
    yield out, previous, newest
    shutil.rmtree(out.parent, ignore_errors=True)


@pytest.mark.slow
def test_kill_during_save_leaves_the_previous_checkpoint_whole(killed_during_save, reference):
    from vlm_smmd.modeling import load_model_and_processor

    out, previous, newest = killed_during_save
    assert not (newest / "scheduler.pt").exists()  # killed mid-save: the files after optimizer.pt are missing
    assert trainer_state(previous)["global_step"] == SAVE_STEPS
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        assert (previous / name).is_file(), name
    assert_same_weights(weights(previous), weights(reference / previous.name), atol=0.0)
    model, _ = load_model_and_processor(str(previous), verbose=False)  # loads like any saved model
    saved = weights(previous)["model.layers.0.mlp.up_proj.weight"]  # checkpoints keep Qwen2.5-VL's key names
    assert torch.equal(model.model.language_model.layers[0].mlp.up_proj.weight.detach(), saved)


@pytest.mark.slow
def test_resume_from_the_half_written_checkpoint_by_name_is_a_one_line_error(killed_during_save, config):
    out, _, newest = killed_during_save
    before = sorted(p.name for p in newest.iterdir())
    proc = subprocess.run(train_args(config, out, "--resume_from_checkpoint", str(newest)), cwd=REPO,
                          env=child_env(out.parent / "cache"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-4000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("vlm-smmd train: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert f"{newest} is an incomplete checkpoint (no trainer_state.json" in errors[0]
    assert sorted(p.name for p in newest.iterdir()) == before  # refused, not touched


@pytest.mark.slow
def test_kill_during_save_then_resume_continues_from_the_previous_checkpoint(killed_during_save, config, reference):
    out, previous, newest = killed_during_save
    printed = train(config, out, "--resume_from_checkpoint", "true").stdout
    passed_over = [line for line in printed.splitlines() if newest.name in line]  # named once, not deleted
    assert len(passed_over) == 1 and "incomplete" in passed_over[0] and f"from {previous.name}" in passed_over[0]
    assert logged_steps(out) == list(range(1, STEPS + 1))  # 1-3 from checkpoint-3, 4-8 after resuming
    assert trainer_state(newest)["global_step"] == 2 * SAVE_STEPS  # the half-written folder was saved again, whole
    assert_same_weights(weights(newest), weights(reference / newest.name))
    assert_same_weights(weights(out), weights(reference))


@pytest.mark.slow
def test_corrupt_image_with_batches_of_one_is_skipped_once(tmp_path_factory, clock_root, config, run_dir):
    """Skip mode with per_device_train_batch_size 1: the corrupt image is dropped before training (the
    preflight), so no batch is left empty; over two epochs of the 7 usable records it is counted once."""
    data = tmp_path_factory.mktemp("fault_corrupt") / "data"
    shutil.copytree(clock_root, data)
    rows = [json.loads(line) for line in (data / "train" / "metadata.jsonl").read_text().splitlines()]
    image = data / "train" / rows[3]["file_name"]
    image.write_bytes(image.read_bytes()[:200])  # a truncated download: the PNG header is there, the pixels are not
    out = run_dir / "out"
    printed = train(config, out, "--data_root", str(data), "--on_error", "skip", "--per_device_train_batch_size", "1",
                    "--max_steps", "10", "--save_strategy", "no").stdout
    preflight = [line for line in printed.splitlines() if line.startswith("preflight train:")]
    assert len(preflight) == 1 and "8 records checked, 1 skipped" in preflight[0] and image.name in preflight[0]
    assert json.loads((out / "all_results.json").read_text())["skipped_samples"] == 1
    assert logged_steps(out) == list(range(1, 11))  # 10 steps of one record each: the 7 kept ones, then again
    shutil.rmtree(data.parent, ignore_errors=True)


# ---------------------------------------------------------------- runs that end early: one line, nothing half-written


def run_cli(args, cache: Path, timeout=180):
    return subprocess.run([sys.executable, "-m", "vlm_smmd.cli", *map(str, args)], cwd=REPO, env=child_env(cache),
                          capture_output=True, text=True, timeout=timeout)


def error_line(proc, command="train") -> str:
    """The one error line of a failed command (no traceback)."""
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith(f"vlm-smmd {command}: error: "), proc.stderr[-4000:]
    return errors[0].removeprefix(f"vlm-smmd {command}: error: ")


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.slow
def test_diverged_run_stops_with_one_line_and_saves_no_model(config, run_dir):
    """learning_rate 1e30 (a legal value), at once and behind a warmup (step 1 runs at lr 0 and is saved): the
    run stops at the step that diverged, names it and the last good checkpoint, and saves nothing after it."""
    from safetensors.torch import load_file

    from vlm_smmd.training import checkpoint_problem

    out = run_dir / "at_once"
    proc = run_cli(train_args(config, out, "--learning_rate", "1e30")[3:], run_dir / "cache")
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert error_line(proc) == ("training diverged at step 1: the update made weights non-finite (learning_rate "
                                f"1e+30); stopped before logging or saving that step; no checkpoint in {out} to go "
                                "back to")
    assert not out.exists()  # nothing saved, and no empty folder left behind

    out = run_dir / "warmup"
    proc = run_cli(train_args(config, out, "--learning_rate", "1e30", "--lr_scheduler_type", "linear",
                              "--warmup_steps", "10", "--save_steps", "1", "--save_only_model", "true")[3:],
                   run_dir / "cache")
    assert proc.returncode == 1, proc.stderr[-4000:]
    line = error_line(proc)
    assert line.startswith("training diverged at step 2: the update made weights non-finite (learning_rate 1e+29)")
    assert line.endswith(f"the last good checkpoint is {out / 'checkpoint-1'}")
    assert entries(out) == ["checkpoint-1"]  # no model, no checkpoint-2, no lock file
    assert checkpoint_problem(out / "checkpoint-1") is None
    assert all(bool(torch.isfinite(t).all()) for t in load_file(out / "checkpoint-1" / "model.safetensors").values())


@pytest.fixture(scope="module")
def scratch_config(tmp_path_factory, clock_root):
    """The scratch preset (a 1.5 MB model, checkpoints of 4.4 MB) on the clocks: one step, one checkpoint."""
    settings = {
        "model_name_or_path": "scratch", "scratch_family": "qwen2_5_vl", "scratch_hidden_size": 64,
        "scratch_layers": 2, "scratch_heads": 4, "scratch_vision_hidden_size": 64, "scratch_vision_depth": 2,
        "scratch_vision_heads": 4, "min_pixels": 3136, "max_pixels": 3136, "dataset": "clocks",
        "data_root": str(clock_root), "instruction": "Answer in H:MM format.", "use_cpu": True, "seed": 0,
        "max_steps": 1, "per_device_train_batch_size": 2, "learning_rate": 0.001, "logging_steps": 1,
        "save_strategy": "steps", "save_steps": 1, "disable_tqdm": True, "dataloader_num_workers": 0,
    }
    path = tmp_path_factory.mktemp("scratch_config") / "run.yaml"
    path.write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in settings.items()))
    return path


PAGE = 4096  # tmpfs charges whole pages


def pages(paths) -> int:
    return sum(-(-p.stat().st_size // PAGE) * PAGE for p in paths if p.is_file())


@pytest.fixture(scope="module")
def scratch_reference(tmp_path_factory, scratch_config):
    """The run on an ample disk: (output dir, bytes of checkpoint-1, bytes of the final model files)."""
    out = tmp_path_factory.mktemp("scratch_reference") / "out"
    train(scratch_config, out)
    checkpoint = pages((out / "checkpoint-1").rglob("*"))
    final = pages(p for p in out.iterdir() if p.name not in ("checkpoint-1", "all_results.json"))
    return out, checkpoint, final


@contextlib.contextmanager
def small_filesystem(folder: Path, size: int):
    """A tmpfs of `size` bytes mounted on `folder` for the body (skipped where it cannot be mounted)."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.mark.slow
def test_full_disk_during_the_final_save_keeps_the_checkpoints(scratch_config, scratch_reference, run_dir):
    """Room for checkpoint-1 and half the model: the final save fails, leaving checkpoint-1 alone (no config
    only, no weights without their tokenizer); with space freed, resuming ends on the reference model."""
    from safetensors.torch import load_file

    from vlm_smmd.training import checkpoint_problem

    reference, checkpoint, final = scratch_reference
    with small_filesystem(run_dir / "disk", checkpoint + PAGE + final // 2) as disk:
        out = disk / "out"
        proc = run_cli(train_args(scratch_config, out)[3:], run_dir / "cache")
        assert proc.returncode == 1, proc.stderr[-4000:]
        assert error_line(proc) == (
            f"no space left on device while saving the model to {out}; nothing was left half-written there; the "
            f"checkpoints in {out} are kept (newest: checkpoint-1; free some space and resume it with "
            "resume_from_checkpoint: true)")
        assert entries(out) == ["checkpoint-1"]
        assert checkpoint_problem(out / "checkpoint-1") is None
        assert_same_weights(weights(out / "checkpoint-1"), weights(reference / "checkpoint-1"), atol=0.0)

        subprocess.run(["mount", "-o", f"remount,size={2 * (checkpoint + final)}", str(disk)], check=True)
        train(scratch_config, out, "--resume_from_checkpoint", "true")
        assert_same_weights(load_file(out / "model.safetensors"), load_file(reference / "model.safetensors"), atol=0.0)
        assert (out / "tokenizer.json").read_bytes() == (reference / "tokenizer.json").read_bytes()
        assert json.loads((out / "run_config.json").read_text())["instruction"] == "Answer in H:MM format."


@pytest.mark.slow
def test_full_disk_during_a_checkpoint_save_removes_the_half_written_one(scratch_config, scratch_reference, run_dir):
    _, checkpoint, _ = scratch_reference
    with small_filesystem(run_dir / "disk", checkpoint + checkpoint // 2) as disk:
        out = disk / "out"
        proc = run_cli(train_args(scratch_config, out, "--max_steps", "2")[3:], run_dir / "cache")
        assert proc.returncode == 1, proc.stderr[-4000:]
        assert error_line(proc) == (
            f"no space left on device while saving checkpoint-2 to {out}; the half-written checkpoint-2 was removed; "
            f"the checkpoints in {out} are kept (newest: checkpoint-1; free some space and resume it with "
            "resume_from_checkpoint: true)")
        assert entries(out) == ["checkpoint-1"]


class Running:
    """A command in its own process group (so SIGINT reaches it as Ctrl-C does: DataLoader workers too),
    its stdout and stderr read as they come."""

    def __init__(self, args, cache: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "vlm_smmd.cli", *map(str, args)], cwd=REPO,
                                     env=child_env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                        for stream, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, into):
        while chunk := stream.read(1):
            into.append(chunk)

    def wait_for(self, text: str, where: str = "out", timeout=150):
        deadline = time.monotonic() + timeout
        while text not in "".join(getattr(self, where)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the command ended (exit {self.proc.returncode}) before printing {text!r}: "
                                   f"{''.join(self.err)[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {text!r} in {timeout} s")
            time.sleep(0.05)

    def interrupt(self, sig=signal.SIGINT, group=True):
        """Ctrl-C reaches the whole group; a scheduler's SIGTERM (`kill PID`) only the command's process."""
        (os.killpg if group else os.kill)(self.proc.pid, sig)

    def finish(self, timeout=120) -> tuple[int, str, str]:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for reader in self.readers:
            reader.join(10)
        return self.proc.returncode, "".join(self.out), "".join(self.err)


def assert_interrupted(rc: int, err: str, command: str, status: int = 130):
    """Exit 130 (SIGTERM: 143) and one line for it: no traceback, from the main process or any worker."""
    assert rc == status, err[-4000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-4000:]
    assert [line for line in err.splitlines() if "interrupt" in line.lower()] == [f"vlm-smmd {command}: interrupted"]


@pytest.mark.slow
def test_second_run_on_the_same_output_dir_is_refused_naming_the_first(config, run_dir):
    out = run_dir / "out"
    first = Running(train_args(config, out, "--max_steps", "500", "--save_strategy", "no")[3:], run_dir / "cache")
    try:
        first.wait_for("'loss'")  # training: the folder is locked (it holds no model yet for the dispatcher to see)
        second = run_cli(train_args(config, out, "--max_steps", "1", "--save_strategy", "no")[3:], run_dir / "cache")
        assert second.returncode == 1, second.stderr[-4000:]
        assert error_line(second).startswith(f"{out} is being written by another run (pid {first.proc.pid} on ")
        assert first.proc.poll() is None  # the first goes on
        assert (out / ".lock").read_text().startswith(f"pid {first.proc.pid} ")
    finally:
        first.interrupt()
        rc, _, err = first.finish()
    assert_interrupted(rc, err, "train")
    assert not out.exists()  # the lock file goes with the run that held it


@pytest.mark.slow
@pytest.mark.parametrize("sig, group", [(signal.SIGINT, True), (signal.SIGTERM, False)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_during_training_is_one_line_and_saves_nothing(config, run_dir, sig, group):
    out = run_dir / "out"
    run = Running(train_args(config, out, "--max_steps", "500", "--save_strategy", "no",
                             "--dataloader_num_workers", "2")[3:], run_dir / "cache")
    try:
        run.wait_for("'loss'")
    finally:
        run.interrupt(sig, group)
        rc, printed, err = run.finish()
    assert "'loss'" in printed  # it was training
    assert_interrupted(rc, err, "train", 128 + sig)
    assert not out.exists()


def processes_mentioning(text: str) -> list[int]:
    """Pids of the live processes whose command line holds `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                found.append(int(proc.name))
    return found


@pytest.mark.slow
def test_sigterm_to_compare_stops_its_running_variant_and_keeps_the_tables(config, run_dir):
    out = run_dir / "cmp"
    run = Running(["compare", config, "--aux", "none", "--kernel-controls", "", "--seeds", "0", "--out", out,
                   "--eval-limit", "2", "--max-new-tokens", "4", "--max_steps", "500", "--save_strategy", "no"],
                  run_dir / "cache")
    log = out / "runs" / "none-seed0" / "log.txt"
    try:
        run.wait_for("none-seed0: running")
        deadline = time.monotonic() + 150
        while "'loss'" not in (log.read_text() if log.is_file() else ""):  # the variant's process is training
            if time.monotonic() > deadline or run.proc.poll() is not None:
                raise RuntimeError(f"the variant never trained: {''.join(run.err)[-3000:]}")
            time.sleep(0.1)
        assert processes_mentioning(str(out / "runs" / "none-seed0" / "variant.json"))
    finally:
        run.interrupt(signal.SIGTERM, group=False)  # as `kill PID` or a scheduler would: the parent alone
        rc, _, err = run.finish()
    assert rc == 143, err[-4000:]
    assert "Traceback" not in err, err[-4000:]
    assert "interrupted; results so far in" in err
    assert processes_mentioning(str(out / "runs" / "none-seed0" / "variant.json")) == []  # nothing orphaned
    assert json.loads((out / "status.json").read_text())["variants"]["none-seed0"]["status"] == "interrupted"
    assert (out / "results.md").is_file()


@pytest.mark.slow
def test_ctrl_c_during_generation_is_one_line_and_keeps_only_the_partial(tmp_path_factory, run_dir):
    data = write_clock_dataset(tmp_path_factory.mktemp("ctrl_c_clocks") / "data", num=80, seed=0, size=64,
                               splits="train=0.2,test=0.8", progress=False)
    out = run_dir / "eval"
    run = Running(["eval", "--model", "tiny", "--data", f"clocks:{data}", "--out", out, "--batch-size", "1",
                   "--max-new-tokens", "16", "--min-pixels", "3136", "--max-pixels", "4096"], run_dir / "cache")
    try:
        run.wait_for("eval clocks:", where="err")
        time.sleep(0.5)
    finally:
        run.interrupt()
        rc, _, err = run.finish()
    assert "eval clocks: 100%" not in err  # stopped during generation
    assert_interrupted(rc, err, "eval")
    # what was generated is kept for `eval --resume`; no predictions.jsonl or metrics.json that look finished
    assert entries(out) in ([], ["predictions.partial.json", "predictions.partial.jsonl"])
