"""The independent counter: how often each instruction of the target really ran.

valgrind's callgrind runs the command on its own synthetic CPU and, with
``--dump-instr=yes``, writes the execution count (``Ir``) of every
instruction of every object.  Nothing of kinstkit takes part in that count:
no int3, no trampoline, no table.  The harness's per-probe hits must equal it.

Addresses: callgrind writes an instruction's address minus the load bias it
found for the object (so, link-time addresses for an ELF it has symbols for).
That is checked, not assumed: the same command runs with the harness library
preloaded in ``locate`` mode (it records the live load bias of the target and
places no probe), and of the two readings -- addresses as dumped, or less the
recorded bias -- the one that puts the target's addresses into its link-time
executable segments is used.  Addresses outside them under either reading
(code run from a second mapping of the file: libffi maps its trampoline page
twice) cannot be probe sites and are left out and counted; when no address
fits, the comparison stops with an error.  The function names callgrind
gives the probed instructions are checked against the table as well.

One correction, for the instructions the ISA's oracle quirks name
(``repeats_in_place``: amd64's ``rep``-prefixed string instructions): valgrind
runs each iteration as a re-execution of the instruction (a jump to itself),
while the CPU runs the whole loop from one fetch, and the int3 fires once.
Their count is callgrind's ``Ir`` less its self-jumps (``--collect-jumps=yes``).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .. import isa as isa_registry
from ..common.errors import UserError
from .audit import audit_env, read_dumps
from .process import run_command
from ..image import open_image

VALGRIND_FLAGS = (
    "--tool=callgrind",
    "--dump-instr=yes",
    "--collect-jumps=yes",
    "--skip-plt=no",  # else a PLT stub's cost lands on the call instruction that reached it
    "--compress-strings=no",
    "--compress-pos=no",
    "--trace-children=yes",
    # A forked child inherits its parent's counts; dumping (and so zeroing)
    # them as fork() is entered keeps every execution in exactly one dump.
    "--dump-before=fork",
    "--quiet",
)

def require_valgrind() -> str:
    path = shutil.which("valgrind")
    if path is None:
        raise UserError("valgrind not found: the independent counter is callgrind (apt-get install valgrind)")
    return path


@dataclass
class ObjectCounts:
    """Callgrind's numbers for one object in one process, by dumped address."""

    ir: Dict[int, int] = field(default_factory=dict)
    self_jumps: Dict[int, int] = field(default_factory=dict)
    jcnd: Dict[int, List[int]] = field(default_factory=dict)  # source -> [taken, executed]
    fn: Dict[int, str] = field(default_factory=dict)


@dataclass
class ProcessDump:
    pid: int
    command: str
    objects: Dict[str, ObjectCounts]


def parse(path: Path) -> ProcessDump:
    """Read one callgrind output file (any compression of names or positions)."""
    pid, command = 0, ""
    positions = ["line"]
    ir_index = 0
    names: Dict[str, Dict[str, str]] = {"ob": {}, "fl": {}, "fn": {}}
    objects: Dict[str, ObjectCounts] = {}
    ob = fn = ""
    cur: Optional[ObjectCounts] = None
    last: List[int] = []
    skip_cost = False  # the line after calls= is the call's inclusive cost
    jump: Optional[Tuple[int, int, int]] = None  # (taken, executed, target) awaiting its source line

    def name(kind: str, text: str) -> str:
        text = text.strip()
        if text.startswith("("):
            ident, _, rest = text.partition(")")
            table = names[kind]
            if rest.strip():
                table[ident] = rest.strip()
            return table.get(ident, ident)
        return text

    def pos(tokens: List[str]) -> List[int]:
        nonlocal last
        out = []
        for i, t in enumerate(tokens[: len(positions)]):
            prev = last[i] if i < len(last) else 0
            if t == "*":
                v = prev
            elif t[0] in "+-":
                v = prev + int(t, 0)
            else:
                v = int(t, 0)
            out.append(v)
        last = out
        return out

    with open(path, "r", errors="replace") as f:
        for raw in f:
            line = raw.strip()
            if not line:
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                tokens = line.split()
                p = pos(tokens)
                addr = p[0]
                if jump is not None:
                    taken, executed, target = jump
                    jump = None
                    if cur is not None:
                        if target == addr:
                            cur.self_jumps[addr] = cur.self_jumps.get(addr, 0) + taken
                        if executed >= 0:
                            j = cur.jcnd.setdefault(addr, [0, 0])
                            j[0] += taken
                            j[1] += executed
                    continue
                if skip_cost:
                    skip_cost = False
                    continue
                costs = tokens[len(positions) :]
                if cur is not None and len(costs) > ir_index:
                    cur.ir[addr] = cur.ir.get(addr, 0) + int(costs[ir_index])
                    cur.fn.setdefault(addr, fn)
                continue
            key, eq, value = line.partition("=")
            if eq:
                if key == "ob":
                    ob = name("ob", value)
                    cur = objects.setdefault(ob, ObjectCounts())
                elif key == "fn":
                    fn = name("fn", value)
                elif key in ("fl", "fi", "fe"):
                    name("fl", value)
                elif key == "cob":
                    name("ob", value)
                elif key == "cfn":
                    name("fn", value)
                elif key in ("cfi", "cfl"):
                    name("fl", value)
                elif key == "calls":
                    skip_cost = True
                elif key in ("jump", "jcnd"):
                    count, _, rest = value.partition(" ")
                    if key == "jcnd":
                        taken_s, _, exe_s = count.partition("/")
                        taken, executed = int(taken_s), int(exe_s)
                    else:
                        taken, executed = int(count), -1
                    saved = last
                    target = pos(rest.split())[0] if rest.strip() else 0
                    last = saved  # a jump's target does not move the position
                    jump = (taken, executed, target)
                continue
            key, colon, value = line.partition(":")
            if colon:
                value = value.strip()
                if key == "pid":
                    pid = int(value)
                elif key == "cmd":
                    command = value
                elif key == "positions":
                    positions = value.split()
                elif key == "events":
                    ev = value.split()
                    ir_index = ev.index("Ir") if "Ir" in ev else 0
    return ProcessDump(pid, command, objects)


def run(command: Sequence[str], env: Dict[str, str], workdir: Path, timeout: float) -> Tuple[List[ProcessDump], object]:
    """Run ``command`` under callgrind; one dump per process it ran."""
    vg = require_valgrind()
    out = workdir / "callgrind"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [vg, *VALGRIND_FLAGS, f"--callgrind-out-file={out}/cg.%p", f"--log-file={out}/vg.%p.log", "--", *command]
    r = run_command(cmd, env, timeout)
    return [parse(p) for p in sorted(out.glob("cg.*"))], r


def _same_file(a: str, b: str, cache: Dict[str, bool]) -> bool:
    if a not in cache:
        try:
            cache[a] = os.path.samefile(a, b)
        except OSError:
            cache[a] = False
    return cache[a]


def aggregate(
    dumps: List[ProcessDump], biases: Dict[int, List[int]], elf: str, exec_ranges: List[Tuple[int, int]]
) -> Tuple[ObjectCounts, int, List[str], List[str]]:
    """Sum the target's counts over every dump, at link-time addresses.

    Returns (counts, dumps used, how addresses were mapped, errors).
    """

    def in_text(a: int) -> bool:
        return any(lo <= a < hi for lo, hi in exec_ranges)

    same: Dict[str, bool] = {}
    total = ObjectCounts()
    used = 0
    outside = 0
    mapping = set()
    errors: List[str] = []
    for d in dumps:
        for ob, oc in d.objects.items():
            if not _same_file(ob, elf, same):
                continue
            used += 1
            addrs = list(oc.ir) + list(oc.jcnd)
            bs = biases.get(d.pid, [])
            readings = [(sum(1 for a in addrs if in_text(a)), 0, "link-time addresses as dumped")]
            if len(bs) == 1:
                readings.append((sum(1 for a in addrs if in_text(a - bs[0])), bs[0],
                                 "live addresses less the load bias the harness recorded"))
            fits, shift, how = max(readings, key=lambda r: r[0])
            if fits == 0 and addrs:
                errors.append(f"process {d.pid}: callgrind's addresses for {ob} fit neither the link-time "
                              f"text nor the recorded load bias {[hex(b) for b in bs]}")
                continue
            mapping.add(how)
            # Code run from another mapping of the same file (libffi maps its
            # trampoline page twice, for one) is no probe site: left out, counted.
            outside += len(addrs) - fits
            for a, n in oc.ir.items():
                if not in_text(a - shift):
                    continue
                total.ir[a - shift] = total.ir.get(a - shift, 0) + n
                total.fn.setdefault(a - shift, oc.fn.get(a, ""))
            for a, n in oc.self_jumps.items():
                total.self_jumps[a - shift] = total.self_jumps.get(a - shift, 0) + n
            for a, (tk, ex) in oc.jcnd.items():
                j = total.jcnd.setdefault(a - shift, [0, 0])
                j[0] += tk
                j[1] += ex
    if outside:
        mapping.add(f"{outside} addresses outside the target's text left out")
    return total, used, sorted(mapping), errors


def compare(build, command: Sequence[str], hits: List[int], workdir: Path, timeout: float) -> dict:
    """Count with callgrind, map to link addresses, compare with ``hits`` entry by entry.

    ``build`` is the harness's ``Build``: the plan, the library and the target's layout.
    """
    t0 = time.perf_counter()
    elf = build.elf
    quirks = isa_registry.by_name(build.plan.arch).oracle
    prefix = workdir / "locate"
    # LD_PRELOAD, not LD_AUDIT: an audit namespace maps a second libc, and
    # valgrind then loses the symbols of the first (fork() among them).
    dumps, vrun = run(command, audit_env(build.lib, prefix, "locate", var="LD_PRELOAD"), workdir, timeout)
    biases = {d.pid: [i["bias"] for i in d.instances] for d in read_dumps(prefix) if d.mode == "locate"}
    exec_ranges = [(v, v + m) for v, m, p in build.layout.segments if p & 4]
    total, used, mapping, errors = aggregate(dumps, biases, elf, exec_ranges)
    if used == 0:
        errors.append(f"callgrind saw no process run {elf}")
    mismatches = []
    names_differ = []
    executed = 0
    executions = 0
    per_entry: List[int] = []
    target = open_image(build.elf)
    for i, e in enumerate(build.probes):
        a = build.link_address(i)
        n = total.ir.get(a, 0)
        if n and quirks.repeats_in_place(target.read(a, e.length)):
            n -= total.self_jumps.get(a, 0)
        per_entry.append(n)
        if n:
            executed += 1
            executions += n
            fname = total.fn.get(a, "")
            want = build.plan.funcs[e.func].name
            if fname and not fname.startswith("0x") and fname.split("'")[0] != want:
                names_differ.append({"probe": build.probe_name(i), "callgrind_function": fname})
        if n != hits[i]:
            mismatches.append({"probe": build.probe_name(i), "address": f"{a:#x}", "kind": e.kind,
                               "harness": hits[i], "callgrind": n})
    jcc = {}
    for i, e in enumerate(build.probes):
        j = total.jcnd.get(build.link_address(i))
        if j is not None and e.kind in quirks.conditional_kinds:
            jcc[i] = j
    return {
        "equal": not mismatches and not errors,
        "compared": len(build.probes),
        "executed": executed,
        "instructions": executions,
        "mismatches": mismatches,
        "function_names_differ": names_differ,
        "dumps": used,
        "mapping": mapping,
        "load_biases": {str(pid): [hex(b) for b in bs] for pid, bs in sorted(biases.items())},
        "errors": errors,
        "exit_status": vrun.status,
        "seconds": round(time.perf_counter() - t0, 3),
        "per_entry": per_entry,
        "jcc": {build.probe_name(i): {"taken": t, "executed": x, "kind": build.probes[i].kind}
                for i, (t, x) in jcc.items()},
    }
