"""sigterm_as_interrupt's excepthook: a forked worker whose parent left mid-handshake prints no traceback after the
parent's one line; anything else still prints, and the hook is put back on the way out."""

import multiprocessing
import sys

from data_synth.interrupts import sigterm_as_interrupt


def report(kind):
    try:
        raise kind("boom from the worker")
    except kind:
        sys.excepthook(*sys.exc_info())  # as multiprocessing's resource_sharer thread reports a failed hand-over


def run_in_fork(kind):
    child = multiprocessing.get_context("fork").Process(target=report, args=(kind,))
    child.start()
    child.join(30)
    assert child.exitcode == 0


def test_a_forked_worker_drops_broken_connections_but_reports_the_rest(capfd):
    with sigterm_as_interrupt():
        for kind in (ConnectionResetError, BrokenPipeError, EOFError):
            run_in_fork(kind)
        assert "boom" not in capfd.readouterr().err
        run_in_fork(ValueError)
        assert "ValueError: boom from the worker" in capfd.readouterr().err


def test_the_main_process_still_reports_broken_connections(capfd):
    with sigterm_as_interrupt():
        report(ConnectionResetError)
    assert "ConnectionResetError: boom from the worker" in capfd.readouterr().err


def test_the_hook_is_put_back():
    before = sys.excepthook
    with sigterm_as_interrupt():
        assert sys.excepthook is not before
    assert sys.excepthook is before
