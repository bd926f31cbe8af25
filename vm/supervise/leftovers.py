"""What a run may leave behind: processes in the process table, and the disks of killed runs.

Teardown asks the process table itself, not its own bookkeeping, whether
anything of the run survived: a process in the monitor's process group, or
one whose command line names the run directory.  A runner killed with
SIGKILL cannot tear down; its run directory keeps ``owner.pid``, and the
next run (``sweep_stale``) removes that run's disks once the owner is gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import List, Tuple

KEEP_RUNS = 30  # run directories kept under runs_dir; older ones are pruned
# The per-run disks a killed run leaves (system overlay, meta disk, seed).
RUN_DISKS = ("system.qcow2", "system.raw", "meta.tar", "seed.iso")


def processes() -> List[Tuple[int, int, str]]:
    """(pid, process group, command line) of every process, from /proc (or ps)."""
    out = []
    proc = Path("/proc")
    if (proc / "self" / "stat").exists():
        for d in proc.iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] == "Z":
                continue  # a zombie holds nothing
            out.append((int(d.name), int(fields[2]), cmd))
        return out
    ps = subprocess.run(["ps", "-ax", "-o", "pid=", "-o", "pgid=", "-o", "state=", "-o", "command="],
                        capture_output=True, text=True).stdout
    for line in ps.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and not parts[2].startswith("Z"):
            out.append((int(parts[0]), int(parts[1]), parts[3]))
    return out


def leftover_processes(run_dir: Path, groups: List[int]) -> List[str]:
    """Live processes of the run: in one of ``groups``, or naming ``run_dir``."""
    me = os.getpid()
    found = []
    for pid, pgid, cmd in processes():
        if pid == me:
            continue
        if pgid in groups or str(run_dir) in cmd:
            found.append(f"process {pid} ({cmd[:120]})")
    return found


def sweep_stale(runs: Path) -> List[str]:
    """Remove the disks of runs whose runner died without tearing down (SIGKILL); prune old runs."""
    removed = []
    if not runs.is_dir():
        return removed
    dirs = sorted((d for d in runs.iterdir() if d.is_dir()), key=lambda d: d.name)
    for d in dirs:
        owner = d / "owner.pid"
        if not owner.exists():
            continue
        try:
            pid = int(owner.read_text().split()[0])
            os.kill(pid, 0)
            continue  # still running
        except (ValueError, IndexError):
            pass
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        for name in RUN_DISKS:
            if (d / name).exists():
                (d / name).unlink()
                removed.append(str(d / name))
        owner.unlink()
    finished = [d for d in dirs if (d / "result.json").exists() and not (d / "owner.pid").exists()]
    for d in finished[:-KEEP_RUNS] if len(finished) > KEEP_RUNS else []:
        kept = [p for p in d.iterdir() if p.name in ("system.qcow2", "system.raw", "meta.tar")]
        if not kept:  # never prune what --keep kept
            shutil.rmtree(d, ignore_errors=True)
    return removed
