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
