"""SIGINT and SIGTERM around a run: they raise while the VM runs, and wait while teardown runs.

A Ctrl-C must stop the VM and still tear down; a second Ctrl-C must not cut
the teardown short.  Handlers can only be set in the main thread; elsewhere
(a run started from a worker thread) both context managers do nothing.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the runner."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted while the VM runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Teardown must finish: a second Ctrl-C is ignored while it runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
