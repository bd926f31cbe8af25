"""The ring-0 run's verdict: per probe, the module's hits against the QEMU plugin's count, and the rest.

The run passes only when every check holds:

- both boots passed vm-test's own checks (boot, module load, arm, workload,
  disarm, unload, power-off, teardown);
- for every armed probe the module's hits equal the plugin's int3
  executions there inside the arm windows (a jump probe: its int3 and
  ``jmp rel32`` executions together, the jump being placed from and removed
  through a breakpoint), and the plugin saw nothing else executed at an
  armed address inside a window; nothing at all executed at an address a
  jump displaces while armed; for every probe, no int3 executed there
  outside the windows, and at a jump probe's head no ``jmp rel32`` where
  the original instruction is none (none left behind by a disarm or the
  unload; elsewhere the kernel runs jumps of its own outside the windows:
  its unpatched text early in the boot, jump labels); the windows came in
  pairs, as many as the module armed;
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
from .jumps import states as planned_states
from .records import Session

# Console lines of a kernel in trouble (the kernel's own wording: oops, BUG(), WARN(), die(), panic()).
OOPS = re.compile(r"Oops|BUG:|WARNING:|kernel BUG at|general protection fault|invalid opcode|"
                  r"\bint3: 0000|Kernel panic|double fault|stack guard page|RIP: 00[0-9a-f]{2}:")
# The module's own reasons, by the number /proc/kinst/hits gives (sys/modules/kinst/linux/kinst_linux.c).
MODULE_STATES = ("armed", "digest", "derive", "range", "byte", "place", "displaced")
JMP32 = 0xE9  # the opcode of jmp rel32: what the plugin reports apart
MISMATCHES_SHOWN = 20
# Where the kernel says it stopped: a symbol and offset (kallsyms knows the module's trampoline array) or
# an address.
RIP = re.compile(r"RIP: 0010:(?:kinst_linux_tramps\+(0x[0-9a-f]+)|(?:0x)?([0-9a-f]{16})\b)")
DETOUR = re.compile(r"RIP: 0010:(?:kinst_linux_detours\+(0x[0-9a-f]+)|(?:0x)?([0-9a-f]{16})\b)")


@dataclass
class ProbeLine:
    """One probe of the table, as both counters saw it."""

    index: int
    function: str  # qualified name
    offset: int
    address: int
    kind: str
    mode: str  # "trap" (a breakpoint), "jump" (a jump probe's head) or "displaced" (under a head's jump)
    state: str  # "armed", or the module's reason for not arming it
    hits: int  # the module's
    oracle_hits: int  # the plugin's int3 executions inside the windows
    oracle_other: int  # other executions at the address inside the windows
    oracle_stray: int  # int3 executions outside the windows
    oracle_jumps: int = 0  # jmp rel32 executions at the address inside the windows
    oracle_jumps_out: int = 0  # jmp rel32 executions there outside them

    @property
    def counted(self) -> int:
        """What the plugin counted that the module's hits must equal: a breakpoint's int3 executions, a jump
        probe's int3 and jmp executions together."""
        return self.oracle_hits + (self.oracle_jumps if self.mode == "jump" else 0)

    def to_json(self) -> Dict[str, object]:
        return {"probe": self.index, "function": self.function, "offset": self.offset,
                "address": f"{self.address:#x}", "kind": self.kind, "probe_kind": self.mode, "state": self.state,
                "hits": self.hits, "oracle_hits": self.counted, "oracle_traps": self.oracle_hits,
                "oracle_jumps": self.oracle_jumps, "oracle_other": self.oracle_other,
                "oracle_stray": self.oracle_stray, "oracle_jumps_out": self.oracle_jumps_out}


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

    def jump_summary(self) -> Dict[str, object]:
        """The jump probes: planned by the host, armed and hit as the module says, and what the module's
        /proc/kinst/info says of the protocol and of an unwind from a detour."""
        j = self.session.jumps
        heads = [p for p in self.probes if p.mode == "jump" and p.state == "armed"]
        traps = [p for p in self.probes if p.mode == "trap" and p.state == "armed"]
        unwind = [int(w) for w in self.module_info.get("jump_unwind", "").split()]
        return {
            "planned_heads": j.heads, "planned_displaced": j.displaced, "planned_traps": j.traps,
            "jump_probes_armed": len(heads), "jump_probes_hit": sum(1 for p in heads if p.hits),
            "jump_hits": sum(p.hits for p in heads), "oracle_jump_executions": sum(p.oracle_jumps for p in heads),
            "trap_probes_armed": len(traps), "trap_probes_hit": sum(1 for p in traps if p.hits),
            "displaced": sum(1 for p in self.probes if p.mode == "displaced"),
            "module": {k[len("jump_"):]: v for k, v in self.module_info.items() if k.startswith("jump_")},
            "preempt": self.module_info.get("preempt", ""),
            "unwind": None if len(unwind) != 3 else {"frames": unwind[0], "in_kernel_text": unwind[1],
                                                       "error": bool(unwind[2])},
        }

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
            "oracle_hits": sum(p.counted for p in self.probes),
            "mismatches": len(self.mismatches),
            "mismatch_lines": self.mismatches[:MISMATCHES_SHOWN],
            "oops": self.oops,
            "workload_identical": self.workload_identical,
            "workload_diff": self.workload_diff,
            "windows": self.windows,
            "rearmed": self.rearmed,
            "kinds": kinds,
            "kinds_not_hit": [k for k, v in kinds.items() if not v["hit"]],
            "jump": self.jump_summary() if self.session.request.jump else None,
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
        if d["jump"] is not None:
            j = d["jump"]
            u = j["unwind"]
            lines.append(f"jump probes: {j['jump_probes_armed']} armed, {j['jump_probes_hit']} hit, "
                         f"{j['jump_hits']} hits ({j['oracle_jump_executions']} through the jump), displacing "
                         f"{j['displaced']}; breakpoints {j['trap_probes_armed']} armed, {j['trap_probes_hit']} hit; "
                         f"planned {j['planned_heads']} heads, breakpoints by reason {j['planned_traps']}")
            lines.append(f"jump protocol: {j['module']}; preemption model {j['preempt'] or '?'}; unwind from a "
                         "detour: " + ("none taken" if u is None else f"{u['frames']} frames, {u['in_kernel_text']} "
                                       f"in the kernel's text, error {u['error']}"))
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
    """/proc/kinst/hits as the guest saved it: [index, address, hits, state, jump] per table probe."""
    if not path.is_file():
        raise UserError(f"{path}: the guest saved no hits (the run ended before the disarm)")
    rows = []
    for line in path.read_text().splitlines():
        w = line.split()
        if len(w) == 5:
            rows.append([int(w[0]), int(w[1], 16), int(w[2]), int(w[3]), int(w[4])])
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


def _rip_offset(oops: Sequence[str], pattern: "re.Pattern[str]", base: Optional[int], size: int) -> Optional[int]:
    """The offset in the module's array ``pattern`` names (by symbol, or by a bare address from ``base``) at
    which the first oops that stopped there stopped, or None."""
    for line in oops:
        m = pattern.search(line)
        if m is None:
            continue
        if m.group(1):
            off = int(m.group(1), 16)
        elif base is not None:
            off = int(m.group(2), 16) - base
        else:
            continue
        if 0 <= off < size:
            return off
    return None


def _base(info: Dict[str, str], key: str) -> Optional[int]:
    words = info.get(key, "").split()
    return int(words[0], 16) if len(words) >= 2 else None


def trampoline_of(oops: Sequence[str], info: Dict[str, str], tramp_size: int, entries: int) -> Optional[int]:
    """The table probe whose trampoline the first oops stopped in, or None.  The kernel names the module's
    trampoline array with an offset; a bare address is placed with /proc/kinst/info's (``info``)."""
    off = _rip_offset(oops, RIP, _base(info, "tramps"), entries * tramp_size)
    return None if off is None else off // tramp_size


def detour_of(oops: Sequence[str], info: Dict[str, str], fires: Sequence[int]) -> Optional[int]:
    """The jump probe's head whose detour the first oops stopped in, or None: its chunks are at the slots that
    follow from ``fires`` in table order (kinst_linux.c's kinst_linux_jump_prepare()), each as many bytes as
    /proc/kinst/info's ``detours`` line says (the core's KINST_JUMP_CHUNK)."""
    words = info.get("detours", "").split()
    if len(words) != 3 or not int(words[2]):
        return None
    chunk = int(words[2])
    off = _rip_offset(oops, DETOUR, _base(info, "detours"), sum(fires) * chunk)
    if off is None:
        return None
    slot = 0
    for i, n in enumerate(fires):
        if slot <= off // chunk < slot + n:
            return i
        slot += n
    return None


def _first_diff(a: str, b: str) -> str:
    al, bl = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(al, bl)):
        if x != y:
            return f"line {i + 1}: unprobed {x!r}, probed {y!r}"
    return f"unprobed {len(al)} lines, probed {len(bl)}"


def _mismatch(line: ProbeLine, row: Optional[List[int]], first: int) -> str:
    """Why ``line`` disagrees with the plugin (its module row ``row``, None when the guest saved none;
    ``first`` the original first byte at its address), or ""."""
    if line.mode == "displaced":
        ran = line.oracle_hits + line.oracle_other + line.oracle_jumps
        if ran:
            return f"QEMU ran {ran} instructions at this displaced address while its jump was armed"
    elif row is not None:
        if row[1] != line.address:
            return f"the module placed it at {row[1]:#x}"
        if line.hits != line.counted:
            what = "breakpoint and jump executions" if line.mode == "jump" else "breakpoint executions"
            return f"module {line.hits} hits, QEMU {line.counted} {what}"
        other = line.oracle_other + (line.oracle_jumps if line.mode == "trap" else 0)
        if line.state == "armed" and other:
            return f"QEMU ran its original instruction {other} times while it was armed"
    if line.oracle_stray:
        return f"QEMU ran a breakpoint there {line.oracle_stray} times while nothing was armed"
    if line.mode == "jump" and line.oracle_jumps_out and first != JMP32:
        return f"QEMU ran a jump there {line.oracle_jumps_out} times while nothing was armed"
    return ""


def compare(s: Session, probes: Sequence[TableProbe], addrs: Sequence[int], counts_file: Path,
            reference: Path, firsts: Sequence[int] = ()) -> Report:
    """The report of a finished probe boot (see the module docstring); ``firsts``: each probe's original first
    byte (for the jumps the plugin saw outside the windows)."""
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
    planned = planned_states(s.jumps) if s.jumps.fires else ("trap",) * n
    lines: List[ProbeLine] = []
    mismatches: List[str] = []
    for i, p in enumerate(probes):
        row = rows[i] if rows else None
        state = MODULE_STATES[row[3]] if row and row[3] < len(MODULE_STATES) else "unknown"
        mode = planned[i] if row is None else "displaced" if state == "displaced" else "jump" if row[4] else "trap"
        c = counts
        line = ProbeLine(i, g.plan.funcs[p.func].qualified, p.offset, addrs[i], p.kind, mode, state,
                         row[2] if row else 0, c.inside[i] if c else 0, c.other[i] if c else 0,
                         c.stray[i] if c else 0, c.jumps[i] if c else 0, c.jumps_out[i] if c else 0)
        lines.append(line)
        why = _mismatch(line, row, firsts[i] if firsts else -1) if counts is not None else ""
        if why:
            mismatches.append(f"{line.function}:{line.offset} ({line.kind}, {addrs[i]:#x}): {why}")
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
    before = read_info(b.out / "info.out")
    at = trampoline_of(oops, before, isa_registry.by_name(g.plan.arch).tramp_size, n)
    head = detour_of(oops, before, s.jumps.fires) if at is None and s.jumps.heads else None
    if at is not None or head is not None:
        p = lines[at if at is not None else head]
        mismatches.insert(0, f"{p.function}:{p.offset} ({p.kind}, {p.address:#x}): the kernel oopsed in its "
                             + ("trampoline" if at is not None else "detour"))
    elif oops and counts is not None:
        for cpu, i in sorted(counts.last.items()):
            p = lines[i]
            mismatches.append(f"{p.function}:{p.offset} ({p.kind}, {p.address:#x}): the last breakpoint vCPU "
                              f"{cpu} ran before the oops")
    return Report(s, lines, mismatches, oops, identical, "" if identical else _first_diff(want, got), windows,
                  rearmed, info, errors)
