"""Foreign programs: running an ISA's code under qemu-user, and QEMU's own count of what it ran.

The harness probes arm64 and riscv64 code on an x86-64 host by running the
command under ``qemu-aarch64`` / ``qemu-riscv64`` (Debian's
qemu-user-static) with the cross C library's root (``-L``, the ISA's
``OracleQuirks.sysroot``).  binfmt_misc is not relied on: the emulator is
called explicitly, for the plain run and the probed one alike, so that both
see the same machine.

The independent counter is QEMU itself.  With one guest instruction per
translation block (``-singlestep``, called ``-one-insn-per-tb`` since QEMU
8.1) and block chaining off (``-d exec,nochain``), QEMU logs every block it
enters, that is every instruction it executes, with its guest address; the
count of a probe's address in that log is how often the instruction ran.
Nothing of kinstkit takes part: the run is plain, no breakpoint, no
trampoline, no table, and QEMU's own decoder decides where instructions
are.  valgrind, the amd64 counter, does not run foreign code.

To keep the log small, ``-dfilter`` limits it to the target's executable
segments.  Their live addresses come from a first run with the harness
library in ``locate`` mode (it records where the target was mapped and
places nothing); the counting run loads the library the same way, records
the address again, and the two must agree -- qemu-user lays a process out
the same way each time, and a different layout stops the comparison
instead of mis-attributing counts.  A conditional branch's log line is
followed by the next instruction executed in the target, its fall-through
or its target: that says which way it went.

The counting runs must execute what the probed run did, and programs depend
on addresses (Lua's string cache is keyed by the address of a C string), so
each gets an environment of exactly the probed run's size: the stack, argv
and everything below them then lie where they lay (``audit.padded_like``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .. import isa as isa_registry
from ..common.errors import UserError
from ..isa.contract import OracleQuirks
from .audit import audit_env, padded_like, read_dumps
from .process import run_command
from ..image import open_image

_PACKAGE = "qemu-user-static"
_TRACE = re.compile(rb"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/", re.M)


def emulator(quirks: OracleQuirks) -> str:
    """The qemu-user binary for the ISA (qemu-X or qemu-X-static); UserError naming the package if absent."""
    for name in (quirks.qemu, quirks.qemu + "-static"):
        path = shutil.which(name)
        if path:
            return path
    raise UserError(f"{quirks.qemu} not found: foreign programs run under qemu-user (apt-get install {_PACKAGE})")


def one_insn_flag(qemu: str) -> str:
    """QEMU's option for one instruction per translation block, by its version's name."""
    out = subprocess.run([qemu, "-h"], capture_output=True, text=True).stdout
    return "-one-insn-per-tb" if "-one-insn-per-tb" in out else "-singlestep"


def wrap(quirks: OracleQuirks, command: Sequence[str], extra: Sequence[str] = ()) -> List[str]:
    """``command`` run under the ISA's qemu-user with its cross C library."""
    return [emulator(quirks), "-L", quirks.sysroot, *extra, *command]


def check_program(quirks: OracleQuirks, isa_name: str, e_machine: str, program: str) -> None:
    """The command's program must be one of the ISA's ELF files: qemu runs nothing else."""
    path = shutil.which(program) or program
    try:
        img = open_image(path)
    except UserError as e:
        raise UserError(f"{program}: the command must be a {isa_name} program run under {quirks.qemu} ({e})")
    if img.machine != e_machine:
        raise UserError(f"{program}: a {img.machine} program; the target is {isa_name} code, so the command must "
                        f"be a {isa_name} program (run under {quirks.qemu})")


def _bias(prefix: Path) -> Tuple[Optional[int], List[str]]:
    """The one load bias the locate-mode reports under ``prefix`` give, and problems."""
    dumps = [d for d in read_dumps(prefix) if d.mode == "locate"]
    biases = sorted({i["bias"] for d in dumps for i in d.instances})
    if len(dumps) != 1 or len(biases) != 1:
        return None, [f"the QEMU count follows one process mapping the target once; {len(dumps)} processes mapped it "
                      f"at {[hex(b) for b in biases]}"]
    return biases[0], []


def count(build, command: Sequence[str], workdir: Path, timeout: float,
          like: Dict[str, str]) -> Tuple[Counter, List[int], int, List[str]]:
    """QEMU's executions per link-time address of the target's text, the PCs in order, the bias, and errors.

    Both runs get an environment of exactly the size of ``like``, the probed
    run's (``audit.padded_like`` says why)."""
    quirks = isa_registry.by_name(build.plan.arch).oracle
    qemu = emulator(quirks)
    first = workdir / "locate1"
    run_command(wrap(quirks, command), padded_like(audit_env(build.lib, first, "locate"), like), timeout)
    bias, errors = _bias(first)
    if bias is None:
        return Counter(), [], 0, errors
    text = [(v + bias, m) for v, m, p in build.layout.segments if p & 4]
    log = workdir / "qemu-exec.log"
    second = workdir / "locate2"
    flags = [one_insn_flag(qemu), "-d", "exec,nochain", "-dfilter", ",".join(f"{a:#x}+{m:#x}" for a, m in text),
             "-D", str(log)]
    run_command(wrap(quirks, command, flags), padded_like(audit_env(build.lib, second, "locate"), like), timeout)
    again, errors = _bias(second)
    if errors or again != bias:
        return Counter(), [], bias, errors or [f"the target moved from {bias:#x} to {again:#x} between the QEMU runs"]
    data = log.read_bytes() if log.exists() else b""
    pcs = [int(m, 16) - bias for m in _TRACE.findall(data)]
    return Counter(pcs), pcs, bias, []


def compare(build, command: Sequence[str], hits: List[int], workdir: Path, timeout: float,
            probed_env: Dict[str, str]) -> dict:
    """Count with QEMU, compare with ``hits`` entry by entry; the shape ``callgrind.compare`` gives."""
    t0 = time.perf_counter()
    quirks = isa_registry.by_name(build.plan.arch).oracle
    counts, pcs, bias, errors = count(build, command, workdir, timeout, probed_env)
    if not errors and not pcs:
        errors.append(f"QEMU's log shows no instruction of {build.elf} executed")
    mismatches, per_entry = [], []
    for i, e in enumerate(build.probes):
        n = counts.get(build.link_address(i), 0)
        per_entry.append(n)
        if n != hits[i]:
            mismatches.append({"probe": build.probe_name(i), "address": f"{build.link_address(i):#x}",
                               "kind": e.kind, "harness": hits[i], "qemu": n})
    return {
        "counter": "qemu",
        "equal": not mismatches and not errors,
        "compared": len(build.probes),
        "executed": sum(1 for n in per_entry if n),
        "instructions": sum(per_entry),
        "mismatches": mismatches,
        "load_bias": hex(bias),
        "logged": len(pcs),
        "errors": errors,
        "seconds": round(time.perf_counter() - t0, 3),
        "per_entry": per_entry,
        "jcc": _directions(build, pcs, quirks),
    }


def _directions(build, pcs: List[int], quirks: OracleQuirks) -> Dict[str, Dict[str, object]]:
    """For each conditional probe: how often it ran and how often it went to its target (the next PC
    logged in the target is not its fall-through)."""
    cond = {build.link_address(i): i for i, e in enumerate(build.probes) if e.kind in quirks.conditional_kinds}
    out: Dict[str, Dict[str, object]] = {}
    for k in range(len(pcs) - 1):
        i = cond.get(pcs[k])
        if i is None:
            continue
        d = out.setdefault(build.probe_name(i), {"taken": 0, "executed": 0, "kind": build.probes[i].kind})
        d["executed"] += 1
        if pcs[k + 1] != pcs[k] + build.probes[i].length:
            d["taken"] += 1
    return out
