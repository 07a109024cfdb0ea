"""SIGTERM as Ctrl-C, for both commands (`data-synth`, `vlm-smmd`): a stopped run cleans up the same way
whichever signal stopped it, and exits 128 + the signal's number. Standard library only (imported before
anything heavy, so `--help` stays fast)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main process so that a run ends the way Ctrl-C ends it."""


@contextmanager
def sigterm_as_interrupt():
    """While inside, SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main thread, so worker pools
    are shut down and partial output is closed cleanly; a second SIGTERM during that clean-up is ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupt_status(error: KeyboardInterrupt) -> int:
    """Exit status of a command stopped by a signal: 128 + SIGTERM (143) or 128 + SIGINT (130)."""
    return 128 + (signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT)
