"""Running a command under supervision: its own process group, a time limit, its output captured.

The harness runs the same command plain, probed and under callgrind, and the
benchmarks time it; all of them need the same guarantees: a command that
hangs is killed with everything it started, and a missing or unexecutable
command is one line, not a traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Dict, Sequence

from ..common.defaults import RUN_TIMEOUT as DEFAULT_TIMEOUT
from ..common.errors import UserError


@dataclass(frozen=True)
class Run:
    stdout: bytes
    stderr: bytes
    status: int  # exit status; -N: killed by signal N (a timeout kills with SIGKILL)
    seconds: float
    timed_out: bool = False


def run_command(command: Sequence[str], env: Dict[str, str], timeout: float = DEFAULT_TIMEOUT) -> Run:
    """Run ``command`` in its own process group; kill the group on timeout."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(
            list(command), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
    except FileNotFoundError:
        raise UserError(f"{command[0]}: command not found")
    except PermissionError:
        raise UserError(f"{command[0]}: not executable")
    try:
        out, err = proc.communicate(timeout=timeout)
        return Run(out, err, proc.returncode, time.perf_counter() - t0)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return Run(out, err, proc.returncode, time.perf_counter() - t0, timed_out=True)
