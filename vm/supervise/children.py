"""Child processes of the runner: started so that none can escape, stopped as ``timeout -k`` does.

A VM monitor (QEMU, bhyve) that outlives its runner holds a vmm instance, a
disk and a CPU.  So a child is started in its own session (one ``killpg``
stops everything it starts), with PR_SET_PDEATHSIG=SIGKILL on Linux (even a
runner killed with SIGKILL takes it along), and with SIGINT/SIGTERM blocked
in the runner until the caller has recorded the child: an interrupt cannot
arrive between ``fork`` and the record of the pid.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Callable, List, Optional

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _child_setup(parent: int) -> None:
    """In the child, before exec: die with the runner even if it is SIGKILLed (Linux),
    and take the stop signals the runner blocked around the fork."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the runner died before prctl took effect
            os._exit(1)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def spawn(argv: List[str], *, new_session: bool = True,
          on_started: Optional[Callable[[subprocess.Popen], None]] = None, **kw) -> subprocess.Popen:
    """Start a child with SIGINT/SIGTERM held until ``on_started`` has recorded it,
    so that an interrupt can never leave a child nobody knows about."""
    parent = os.getpid()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        proc = subprocess.Popen(argv, start_new_session=new_session, preexec_fn=lambda: _child_setup(parent), **kw)
        if on_started is not None:
            on_started(proc)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return proc


def _signal_group(proc: subprocess.Popen, sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(proc: subprocess.Popen, kill_after: float, group: bool = True) -> None:
    """``timeout -k``: SIGTERM, then SIGKILL ``kill_after`` seconds later; reap."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM, group)
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        _signal_group(proc, signal.SIGKILL, group)
        proc.wait()
    if group:
        _signal_group(proc, signal.SIGKILL, True)  # anything the monitor left in its group
