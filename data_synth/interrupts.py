"""SIGTERM and SIGHUP as Ctrl-C, for both commands (`data-synth`, `vlm-smmd`): a stopped run cleans up the same way
whichever signal stopped it, and exits 128 + the signal's number. Standard library only (imported before
anything heavy, so `--help` stays fast)."""

from __future__ import annotations

import multiprocessing
import signal
import sys
import threading
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP: a closed terminal), raised in the main process so that a run ends the way
    Ctrl-C ends it; `signum` says which."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__()
        self.signum = signum


# the signals that end a run like Ctrl-C; SIGHUP only where the platform has it and nohup did not ignore it
_ENDING = (signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))


@contextmanager
def sigterm_as_interrupt():
    """While inside, SIGTERM or SIGHUP raises `Terminated` (a KeyboardInterrupt) in the main thread, so worker
    pools are shut down and partial output is closed cleanly; a second one during that clean-up is ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signum)

    previous = {sig: signal.getsignal(sig) for sig in _ENDING if signal.getsignal(sig) is not signal.SIG_IGN}
    for sig in previous:
        signal.signal(sig, handler)
    old_hook, sys.excepthook = sys.excepthook, quiet_when_parent_left(sys.excepthook)
    try:
        yield
    finally:
        sys.excepthook = old_hook
        for sig, old in previous.items():
            signal.signal(sig, old)


def quiet_when_parent_left(hook):
    """`hook`, except that a forked worker (a DataLoader's, a pool's) drops an EOFError or ConnectionError: the
    parent it was handing a batch to stopped mid-handshake (multiprocessing's resource_sharer thread reports that
    through sys.excepthook), and the parent already says the run was interrupted; a stray traceback after that
    line would read as a crash. Everything else, and everything in the main process, goes to `hook`."""
    def excepthook(kind, value, traceback):
        if multiprocessing.parent_process() is not None and issubclass(kind, (EOFError, ConnectionError)):
            return
        hook(kind, value, traceback)
    return excepthook


def interrupt_status(error: KeyboardInterrupt) -> int:
    """Exit status of a command stopped by a signal: 128 + its number (SIGTERM 143, SIGHUP 129, SIGINT 130)."""
    return 128 + (error.signum if isinstance(error, Terminated) else signal.SIGINT)
