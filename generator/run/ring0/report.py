"""The ring-0 run's verdict: per probe, the module's hits against the QEMU plugin's count, and the rest.

The run passes only when every check holds:

- both boots passed vm-test's own checks (boot, module load, arm, workload,
  disarm, unload, power-off, teardown);
- for every armed probe the module's hits equal the plugin's int3
  executions there inside the arm windows, and the plugin saw nothing else
  executed at an armed address inside a window; for every probe, no int3
  executed there outside the windows (none left behind by a disarm or the
  unload); the windows came in pairs, as many as the module armed;
- the workload printed exactly what it printed in the unprobed boot;
- no console line of the probed boot shows an oops, a BUG or a WARN;
- at least one probe was armed.

Any difference names the probe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ... import isa as isa_registry
from ...analysis.plan import TableProbe
from ...common.errors import UserError
from . import oracle
from .records import Session

# Console lines of a kernel in trouble (the kernel's own wording: oops, BUG(), WARN(), die(), panic()).
OOPS = re.compile(r"Oops|BUG:|WARNING:|kernel BUG at|general protection fault|invalid opcode|"
                  r"\bint3: 0000|Kernel panic|double fault|stack guard page|RIP: 00[0-9a-f]{2}:")
# The module's own reasons, by the number /proc/kinst/hits gives (sys/modules/kinst/linux/kinst_linux.c).
MODULE_STATES = ("armed", "digest", "derive", "range", "byte", "place")
MISMATCHES_SHOWN = 20
# Where the kernel says it stopped: a symbol and offset (kallsyms knows the module's trampoline array) or
# an address.
RIP = re.compile(r"RIP: 0010:(?:kinst_linux_tramps\+(0x[0-9a-f]+)|(?:0x)?([0-9a-f]{16})\b)")


@dataclass
class ProbeLine:
    """One probe of the table, as both counters saw it."""

    index: int
    function: str  # qualified name
    offset: int
    address: int
    kind: str
    state: str  # "armed", or the module's reason for not arming it
    hits: int  # the module's
    oracle_hits: int  # the plugin's int3 executions inside the windows
    oracle_other: int  # other executions at the address inside the windows
    oracle_stray: int  # int3 executions outside the windows

    def to_json(self) -> Dict[str, object]:
        return {"probe": self.index, "function": self.function, "offset": self.offset,
                "address": f"{self.address:#x}", "kind": self.kind, "state": self.state, "hits": self.hits,
                "oracle_hits": self.oracle_hits, "oracle_other": self.oracle_other,
                "oracle_stray": self.oracle_stray}


@dataclass
class Report:
    session: Session
    probes: List[ProbeLine]
    mismatches: List[str]  # one line per probe that differs, and why
    oops: List[str]  # console lines
    workload_identical: bool
    workload_diff: str  # the first difference, when not identical
    windows: int
    rearmed: int  # disarm/re-arm cycles the guest ran during the workload
    module_info: Dict[str, str]  # /proc/kinst/info after the run
    errors: List[str] = field(default_factory=list)  # what stopped a comparison

    @property
    def armed(self) -> int:
        return sum(1 for p in self.probes if p.state == "armed")

    @property
    def hit(self) -> int:
        return sum(1 for p in self.probes if p.state == "armed" and p.hits)

    @property
    def ok(self) -> bool:
        b = self.session.probe
        return (b is not None and b.status == "pass" and not self.mismatches and not self.oops
                and self.workload_identical and self.armed > 0 and not self.errors)

    def kinds(self) -> Dict[str, Dict[str, int]]:
        """Per table kind of the ISA: probes armed, armed probes hit, hits."""
        g = self.session.guest
        assert g is not None
        out = {k.kind: {"armed": 0, "hit": 0, "hits": 0} for k in isa_registry.by_name(g.plan.arch).table_kinds}
        for p in self.probes:
            if p.state == "armed":
                out[p.kind]["armed"] += 1
                out[p.kind]["hit"] += p.hits > 0
                out[p.kind]["hits"] += p.hits
        return out

    def summary(self) -> Dict[str, object]:
        s = self.session
        g, b = s.guest, s.probe
        assert g is not None
        kinds = self.kinds()
        return {
            "summary": True,
            "ok": self.ok,
            "kernel": s.assets.release if s.assets else "",
            "functions_requested": len(g.requested),
            "functions": g.functions,
            "functions_tabled": len(g.plan.funcs),
            "functions_refused_by_kernel": g.refused_by_kernel,
            "functions_of_target": g.target_functions,
            "refusals": len(g.plan.refused),
            "sites_refused": g.sites_refused,
            "prologue_rule": g.rule,
            "probes": g.plan.nprobes,
            "probes_armed": self.armed,
            "probes_hit": self.hit,
            "hits": sum(p.hits for p in self.probes),
            "oracle_hits": sum(p.oracle_hits for p in self.probes),
            "mismatches": len(self.mismatches),
            "mismatch_lines": self.mismatches[:MISMATCHES_SHOWN],
            "oops": self.oops,
            "workload_identical": self.workload_identical,
            "workload_diff": self.workload_diff,
            "windows": self.windows,
            "rearmed": self.rearmed,
            "kinds": kinds,
            "kinds_not_hit": [k for k, v in kinds.items() if not v["hit"]],
            "interrupts_in_trampolines": int(self.module_info.get("samples_in_tramp", "0")),
            "timer_samples": int(self.module_info.get("samples", "0")),
            "vm": {"status": b.status if b else None, "end": b.end if b else None,
                   "run_dir": str(b.run_dir) if b else None, "timings": b.timings if b else {},
                   "failed": list(b.failed) if b else []},
            "capture_boot": None if s.capture is None else {"status": s.capture.status,
                                                              "run_dir": str(s.capture.run_dir)},
            "seconds": {k: round(v, 2) for k, v in s.seconds.items()},
            "module": str(s.module) if s.module else None,
            "kernel_rules": s.rules_line,
            "notes": s.notes,
            "errors": self.errors,
        }

    def text(self) -> str:
        d = self.summary()
        g = self.session.guest
        assert g is not None
        lines = [
            f"vm-test linux ({d['kernel']}): {d['functions_requested']} names, {d['functions']} functions "
            f"({d['functions_of_target']} of the target module), {d['functions_tabled']} tabled; "
            f"{d['refusals']} refusals ({d['functions_refused_by_kernel']} "
            f"functions by the kernel's rules, {d['sites_refused']} instructions at kernel sites), "
            f"prologue rule '{d['prologue_rule']}'",
            f"kernel rules: {d['kernel_rules']}",
            f"probes: {d['probes']} in the table, {d['probes_armed']} armed, {d['probes_hit']} hit; "
            f"hits {d['hits']}, QEMU plugin {d['oracle_hits']}; {d['windows']} arm windows "
            f"({d['rearmed']} re-armed during the workload)",
            "kinds (armed/hit/hits): " + ", ".join(f"{k} {v['armed']}/{v['hit']}/{v['hits']}"
                                                   for k, v in d["kinds"].items()),
        ]
        if "samples" in self.module_info:
            lines.append(f"interrupts taken inside a trampoline: {d['interrupts_in_trampolines']} of "
                         f"{d['timer_samples']} timer samples")
        if self.mismatches:
            lines.append(f"MISMATCH on {len(self.mismatches)} probes:")
            lines += [f"  {m}" for m in self.mismatches[:MISMATCHES_SHOWN]]
        else:
            lines.append(f"every probe's hits equal QEMU's count ({len(self.probes)} compared)" if not self.errors
                         else "hits not compared (see the errors below)")
        lines.append("workload output identical to the unprobed boot's" if self.workload_identical
                     else f"workload output DIFFERS from the unprobed boot's: {self.workload_diff}")
        lines.append("no oops, BUG or WARN on the console" if not self.oops
                     else f"{len(self.oops)} oops/BUG/WARN console lines, first: {self.oops[0]}")
        b = self.session.probe
        if b is not None:
            lines.append(f"probe boot: {b.status} ({b.end}); timings " +
                         ", ".join(f"{k} {v}" for k, v in b.timings.items() if v is not None) +
                         f"; run directory {b.run_dir}")
            lines += [f"  failed: {f}" for f in b.failed]
        lines += [f"error: {e}" for e in self.errors]
        lines += [f"note: {n}" for n in self.session.notes]
        lines.append("PASS" if self.ok else "FAIL")
        return "\n".join(lines) + "\n"


def read_hits(path: Path, entries: int) -> List[List[int]]:
    """/proc/kinst/hits as the guest saved it: [index, address, hits, state] per table probe."""
    if not path.is_file():
        raise UserError(f"{path}: the guest saved no hits (the run ended before the disarm)")
    rows = []
    for line in path.read_text().splitlines():
        w = line.split()
        if len(w) == 4:
            rows.append([int(w[0]), int(w[1], 16), int(w[2]), int(w[3])])
    if len(rows) != entries or any(r[0] != i for i, r in enumerate(rows)):
        raise UserError(f"{path}: {len(rows)} probes, the table has {entries}")
    return rows


def read_info(path: Path) -> Dict[str, str]:
    out: Dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k not in out:
                out[k] = v
    return out


def oops_lines(console: Path) -> List[str]:
    """The kernel's own lines of trouble on the console (the guest script's lines start with "| ")."""
    if not console.is_file():
        return []
    out = []
    for line in console.read_text(errors="replace").splitlines():
        if not line.startswith("| ") and OOPS.search(line):
            out.append(line.strip())
    return out


def trampoline_of(oops: Sequence[str], info: Dict[str, str], tramp_size: int, entries: int) -> Optional[int]:
    """The table probe whose trampoline the first oops stopped in, or None.  The kernel names the module's
    trampoline array with an offset; a bare address is placed with /proc/kinst/info's (``info``)."""
    words = info.get("tramps", "").split()
    base = int(words[0], 16) if len(words) == 2 else None
    for line in oops:
        m = RIP.search(line)
        if m is None:
            continue
        if m.group(1):
            off = int(m.group(1), 16)
        elif base is not None:
            off = int(m.group(2), 16) - base
        else:
            continue
        if 0 <= off < entries * tramp_size:
            return off // tramp_size
    return None


def _first_diff(a: str, b: str) -> str:
    al, bl = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(al, bl)):
        if x != y:
            return f"line {i + 1}: unprobed {x!r}, probed {y!r}"
    return f"unprobed {len(al)} lines, probed {len(bl)}"


def compare(s: Session, probes: Sequence[TableProbe], addrs: Sequence[int], counts_file: Path,
            reference: Path) -> Report:
    """The report of a finished probe boot (see the module docstring)."""
    b, g = s.probe, s.guest
    assert b is not None and g is not None
    errors: List[str] = []
    n = len(probes)
    try:
        rows: Optional[List[List[int]]] = read_hits(b.out / "hits.txt", n)
    except UserError as e:
        rows, _ = None, errors.append(str(e))
    try:
        counts: Optional[oracle.Counts] = oracle.read_counts(counts_file, n)
    except UserError as e:
        counts, _ = None, errors.append(str(e))
    info = read_info(b.out / "info-after.out")
    lines: List[ProbeLine] = []
    mismatches: List[str] = []
    for i, p in enumerate(probes):
        hits = rows[i][2] if rows else 0
        state = MODULE_STATES[rows[i][3]] if rows and rows[i][3] < len(MODULE_STATES) else "unknown"
        inside = counts.inside[i] if counts else 0
        other = counts.other[i] if counts else 0
        stray = counts.stray[i] if counts else 0
        line = ProbeLine(i, g.plan.funcs[p.func].qualified, p.offset, addrs[i], p.kind, state, hits, inside,
                         other, stray)
        lines.append(line)
        if rows is None or counts is None:
            continue
        name = f"{line.function}:{line.offset} ({line.kind}, {addrs[i]:#x})"
        if rows[i][1] != addrs[i]:
            mismatches.append(f"{name}: the module placed it at {rows[i][1]:#x}")
        elif hits != inside:
            mismatches.append(f"{name}: module {hits} hits, QEMU {inside} breakpoint executions")
        elif state == "armed" and other:
            mismatches.append(f"{name}: QEMU ran its original instruction {other} times while it was armed")
        elif stray:
            mismatches.append(f"{name}: QEMU ran a breakpoint there {stray} times while nothing was armed")
    rearmed_file = b.out / "rearmed"
    rearmed = int(rearmed_file.read_text().strip() or 0) if rearmed_file.is_file() else 0
    windows = counts.windows if counts else 0
    if counts is not None:
        if g.target_tabled and counts.anchors != 1:
            errors.append(f"the plugin saw the target module's anchor at {counts.anchors} places, not 1: it "
                          "cannot have counted the target's probes where they ran")
        if counts.unpaired or counts.open:
            errors.append(f"the plugin saw markers out of turn ({counts.unpaired}) or a window left open "
                          f"({counts.open})")
        if rows is not None and windows != rearmed + 1:
            errors.append(f"the plugin saw {windows} arm windows, the guest armed {rearmed + 1} times")
    got = (b.out / "workload.out").read_text(errors="replace") if (b.out / "workload.out").is_file() else ""
    want = reference.read_text(errors="replace")
    identical = bool(want) and got == want
    oops = oops_lines(b.console_log)
    at = trampoline_of(oops, read_info(b.out / "info.out"), isa_registry.by_name(g.plan.arch).tramp_size, n)
    if at is not None:
        p = lines[at]
        mismatches.insert(0, f"{p.function}:{p.offset} ({p.kind}, {p.address:#x}): the kernel oopsed in its "
                             "trampoline")
    elif oops and counts is not None:
        for cpu, i in sorted(counts.last.items()):
            p = lines[i]
            mismatches.append(f"{p.function}:{p.offset} ({p.kind}, {p.address:#x}): the last breakpoint vCPU "
                              f"{cpu} ran before the oops")
    return Report(s, lines, mismatches, oops, identical, "" if identical else _first_diff(want, got), windows,
                  rearmed, info, errors)
