"""The thread plan: the free cores shared among the jobs side by side, OMP_NUM_THREADS first."""

import pytest

from vlm_smmd.experiments.threads import plan_threads


@pytest.mark.parametrize("jobs, cores, load, threads", [
    (1, 2, 0.1, 2),  # idle: every core
    (1, 2, 1.2, 1),  # another job holds a core: one thread, not two spinning against it
    (2, 2, 0.0, 1),
    (2, 16, 0.0, 8),
    (3, 16, 4.4, 4),  # 12 free cores for 3 jobs
    (4, 2, 3.0, 1),  # never fewer than one
])
def test_free_cores_are_shared_among_the_jobs(jobs, cores, load, threads):
    plan = plan_threads(jobs, environ={}, cores=cores, load=load)
    assert (plan.threads, plan.chosen_by) == (threads, "load")
    assert plan.env() == {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def test_description_names_the_choice_and_warns_of_oversubscription():
    assert plan_threads(1, environ={}, cores=2, load=0.0).describe() == "threads: 1 job x 2 torch threads (2 cores, 0.0 busy)"
    crowded = plan_threads(4, environ={}, cores=2, load=0.0).describe()
    assert crowded.startswith("threads: 4 jobs x 1 torch thread (2 cores, 0.0 busy); more threads than free cores")
    assert "more threads" not in plan_threads(2, environ={}, cores=2, load=0.0).describe()


def test_omp_num_threads_wins_and_is_checked():
    plan = plan_threads(2, environ={"OMP_NUM_THREADS": "3"}, cores=2, load=1.0)
    assert (plan.threads, plan.chosen_by) == (3, "OMP_NUM_THREADS")
    assert "(set by OMP_NUM_THREADS; 2 cores, 1.0 busy)" in plan.describe()
    for bad in ("two", "0"):
        with pytest.raises(ValueError, match="OMP_NUM_THREADS"):
            plan_threads(1, environ={"OMP_NUM_THREADS": bad}, cores=2, load=0.0)


def test_busy_cores_sees_a_spinning_process():
    import subprocess
    import sys

    from vlm_smmd.experiments.threads import busy_cores

    idle_or_not = busy_cores(0.2)
    assert 0.0 <= idle_or_not <= (__import__("os").cpu_count() or 1) + 0.01
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert busy_cores(0.5) >= 0.6  # at least the spinner's share of a core, whatever else runs
    finally:
        spinner.kill()
        spinner.wait()


def test_the_plan_is_recorded_with_its_line():
    plan = plan_threads(2, environ={}, cores=16, load=4.444)
    assert plan.record() == {"jobs": 2, "threads": 6, "cores": 16, "busy": 4.44, "chosen_by": "load",
                             "line": "threads: 2 jobs x 6 torch threads (16 cores, 4.4 busy)"}


def test_use_thread_plan_sets_torch_threads_and_prints_once_per_machine(monkeypatch, capsys):
    import torch

    from vlm_smmd.experiments.threads import use_thread_plan

    was = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    try:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        plan = use_thread_plan()
        assert (plan.jobs, plan.threads, torch.get_num_threads()) == (2, 3, 3)
        assert capsys.readouterr().out.startswith("threads: 2 jobs x 3 torch threads (set by OMP_NUM_THREADS;")
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        monkeypatch.setenv("LOCAL_RANK", "1")  # another rank on this machine: planned, not printed again
        assert use_thread_plan().threads == torch.get_num_threads() == 1
        assert capsys.readouterr().out == ""
    finally:
        torch.set_num_threads(was)


def test_train_and_eval_print_and_record_their_plan(tmp_path, monkeypatch, capsys):
    """`vlm-smmd train` and `vlm-smmd eval` plan their threads as compare does: the line is printed, the plan
    kept in run_config.json and metrics.json, and torch runs with it."""
    import json

    import torch

    from vlm_smmd.cli import main

    was = torch.get_num_threads()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({
        "model_name_or_path": "scratch", "scratch_family": "qwen2", "scratch_hidden_size": 32, "scratch_layers": 1,
        "scratch_heads": 2, "dataset": "arithmetic", "data_root": str(tmp_path / "data"),
        "synthesize": "arithmetic", "synthesize_num": 40, "eval_split": None, "output_dir": str(tmp_path / "model"),
        "use_cpu": True, "max_steps": 1, "per_device_train_batch_size": 2, "report_to": "none",
        "save_strategy": "no", "disable_tqdm": True, "dataloader_num_workers": 0}))
    try:
        assert main(["train", str(config)]) == 0
        line = "threads: 1 job x 1 torch thread (set by OMP_NUM_THREADS; "
        assert line in capsys.readouterr().out
        recorded = json.loads((tmp_path / "model" / "run_config.json").read_text())["threads"]
        assert recorded["threads"] == 1 and recorded["chosen_by"] == "OMP_NUM_THREADS" and line in recorded["line"]
        assert main(["eval", "--model", str(tmp_path / "model"), "--data", f"arithmetic:{tmp_path / 'data'}",
                     "--out", str(tmp_path / "eval"), "--limit", "1", "--max-new-tokens", "2"]) == 0
        assert line in capsys.readouterr().out
        metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
        assert metrics["run"]["threads"]["line"].startswith(line) and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(was)


class FakeMachine:
    """Two CPUs whose /proc/stat ticks (100 a second per CPU), clock and own CPU time the test advances."""

    def __init__(self):
        self.t, self.own, self.busy, self.total = 0.0, 0.0, 0, 0

    def run(self, seconds: float, *, ours: float, other: float):
        self.t += seconds
        self.own += ours * seconds
        self.busy += round((ours + other) * 100 * seconds)
        self.total += 200 * round(seconds * 100) // 100


def watch(machine, plan):
    from vlm_smmd.experiments.threads import LoadWatch

    return LoadWatch(plan, every_s=2.0, ticks=lambda: (machine.busy, machine.total), clock=lambda: machine.t,
                     own_cpu=lambda: machine.own, cpus=2)


def test_load_watch_gives_a_taken_core_back_when_it_is_freed():
    machine = FakeMachine()
    replan = watch(machine, plan_threads(1, environ={}, cores=2, load=0.0))
    machine.run(1.0, ours=2.0, other=0.0)
    assert replan() is None  # not yet time to measure
    machine.run(1.5, ours=2.0, other=0.0)
    assert replan() == 2 and replan.other == pytest.approx(0.0)  # idle: both cores
    machine.run(2.0, ours=1.5, other=0.5)  # a busy loop squeezed by our two spinning threads
    assert replan() == 1 and replan.other == pytest.approx(0.5)
    machine.run(2.0, ours=1.0, other=1.0)  # with one thread, the loop has its core
    assert replan() == 1
    machine.run(2.0, ours=1.0, other=0.0)  # it ended
    assert replan() == 2


def test_load_watch_leaves_a_fixed_thread_count_alone():
    machine = FakeMachine()
    replan = watch(machine, plan_threads(1, environ={"OMP_NUM_THREADS": "2"}, cores=2, load=0.0))
    machine.run(3.0, ours=1.0, other=1.0)
    assert replan() is None  # OMP_NUM_THREADS: the count, and the run's bytes, stay


def test_thread_replan_sets_torch_threads_after_a_step(capsys):
    import torch
    from transformers import TrainerControl, TrainerState

    from vlm_smmd.training.trainer import ThreadReplan

    was = torch.get_num_threads()
    answers = iter([None, 1, 1])
    callback = ThreadReplan(lambda: next(answers))
    state = TrainerState()
    state.global_step = 7
    try:
        torch.set_num_threads(2)
        callback.on_step_end(None, state, TrainerControl())
        assert torch.get_num_threads() == 2 and capsys.readouterr().out == ""
        callback.on_step_end(None, state, TrainerControl())
        assert torch.get_num_threads() == 1
        assert capsys.readouterr().out == "threads: 1 torch thread from step 7 (the free cores changed)\n"
        callback.on_step_end(None, state, TrainerControl())
        assert capsys.readouterr().out == ""  # unchanged: not printed again
    finally:
        torch.set_num_threads(was)
