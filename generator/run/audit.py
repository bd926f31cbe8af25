"""The audit library's protocol: how a run tells it what to do and how it reports back.

The harness library (``templates/harness/``) is loaded with ``LD_AUDIT`` (or,
in locate mode, ``LD_PRELOAD``).  ``$KINST_HARNESS_MODE`` says what it does
(``probe``: patch and count; ``locate``: only record where the target was
mapped) and ``$KINST_HARNESS_OUT`` where it writes: one text report per
process (``<prefix>.<pid>``: where it mapped the target, what it placed and
refused) and, in probe mode, one counter file (``<prefix>.<pid>.hits``: a
little-endian u64 per table entry).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

LIB_NAME = "libkinst_harness.so"
ENV_OUT = "KINST_HARNESS_OUT"
ENV_MODE = "KINST_HARNESS_MODE"
ENV_PAD = "KINST_HARNESS_PAD"  # fills a run's environment to the size of another's (``padded_like``)
PAD_ROOM = 64  # the padding a probed run under qemu-user carries, so that a counting run can match it


def audit_env(
    lib: Path, out_prefix: Path, mode: str, base: Optional[Dict[str, str]] = None, var: str = "LD_AUDIT"
) -> Dict[str, str]:
    """The environment of a probed run: the library in ``LD_AUDIT`` (or, for locate mode only, ``LD_PRELOAD``)."""
    env = dict(os.environ if base is None else base)
    prev = env.get(var)
    env[var] = str(lib) + (":" + prev if prev else "")
    env[ENV_OUT] = str(out_prefix)
    env[ENV_MODE] = mode
    return env


def env_bytes(env: Dict[str, str]) -> int:
    """The bytes the environment's ``NAME=value`` strings take on a new process's stack."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())


def padded_like(env: Dict[str, str], like: Dict[str, str]) -> Dict[str, str]:
    """``env`` with ``ENV_PAD`` sized so that its strings take exactly the bytes ``like``'s do.

    qemu-user, as the kernel, puts the argument and environment strings at the
    top of the stack, so their total size decides where everything below them
    is; and programs do depend on addresses (Lua caches C strings by address:
    with its arguments 4 bytes lower, ``luaS_new`` misses the cache and interns
    again).  Two runs whose instruction counts are compared must therefore
    start with the same layout, which equal sizes give."""
    out = {k: v for k, v in env.items() if k != ENV_PAD}
    room = env_bytes(like) - env_bytes(out) - len(ENV_PAD) - 2
    if room < 0:
        raise ValueError(f"the environment is {-room} bytes larger than the run it must match")
    out[ENV_PAD] = "x" * room
    return out


@dataclass
class Dump:
    """One process's report from the audit library: where it mapped the target, what it refused."""

    pid: int
    mode: str
    entries: int
    instances: List[Dict[str, int]]
    refused: List[Tuple[int, int, str]]  # (entry, instance, reason)
    notes: List[str]
    complete: bool
    # per instance that placed jump probes (harness --jump): (jumps placed, probes their detours fire)
    jumps: Dict[int, Tuple[int, int]] = field(default_factory=dict)


def read_dumps(prefix: Path) -> List[Dump]:
    """The ``<prefix>.<pid>`` reports, one per process that mapped the target."""
    dumps = []
    for path in sorted(prefix.parent.glob(prefix.name + ".*")):
        if not path.name[len(prefix.name) + 1 :].isdigit():
            continue
        d = Dump(0, "", 0, [], [], [], False)
        for line in path.read_text(errors="replace").splitlines():
            word, _, rest = line.partition(" ")
            if word == "pid":
                d.pid = int(rest)
            elif word == "mode":
                d.mode = rest
            elif word == "entries":
                d.entries = int(rest)
            elif word == "instance":
                f = rest.split()
                d.instances.append(
                    {"bias": int(f[2], 16), "tramp": int(f[4], 16), "placed": int(f[6]), "closed": int(f[8])}
                )
            elif word == "jumps":
                f = rest.split()
                d.jumps[int(f[0])] = (int(f[2]), int(f[4]))
            elif word == "refused":
                idx, inst, why = rest.split(" ", 2)
                d.refused.append((int(idx), int(inst), why))
            elif word == "note":
                d.notes.append(rest)
            elif word == "end":
                d.complete = True
        dumps.append(d)
    return dumps


def read_hits(prefix: Path, entries: int) -> Tuple[List[int], List[str]]:
    """Per-entry hits summed over the ``<prefix>.<pid>.hits`` counter files, and any problems."""
    hits = [0] * entries
    problems = []
    for path in sorted(prefix.parent.glob(prefix.name + ".*.hits")):
        data = path.read_bytes()
        if len(data) != 8 * entries:
            problems.append(f"{path.name}: {len(data)} bytes, expected {8 * entries}")
            continue
        for i, n in enumerate(struct.unpack(f"<{entries}Q", data)):
            hits[i] += n
    return hits, problems
