"""``harness``: run real code with every table probe placed, and prove the counts.

The generated core (``kinst_core.c``) and table (``kinst_table.c``) that go
into kinst.ko are rendered again for a user-space target ELF and compiled with
``templates/harness/kinst_harness.c.j2`` into an rtld audit library.  Loaded
with ``LD_AUDIT``, it patches int3 over every probe of the target as soon as
rtld maps it (at startup or on dlopen), resumes through static per-probe
trampolines or call emulation from its SIGTRAP handler, and writes per-probe
hit counts at exit.

The runner runs the command twice, plain and probed, and the run passes only
when stdout, stderr and the exit status are identical.  With ``verify`` the
same command also runs under callgrind (``generator/callgrind.py``), with the
audit library in ``locate`` mode (no probes), and every probe's hit count
must equal callgrind's execution count of that instruction.

Layout: ``build/harness/<key>/`` holds the rendered sources, ``commands.sh``
and ``libkinst_harness.so``; the key hashes everything the library depends
on, so an unchanged table is not compiled twice.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .errors import UserError
from .render import REPO, TEMPLATE_DIR, Input, render_tree, write_all

BUILD_DIR = REPO / "build" / "harness"
LIB_NAME = "libkinst_harness.so"
ENV_OUT = "KINST_HARNESS_OUT"
ENV_MODE = "KINST_HARNESS_MODE"
DEFAULT_TIMEOUT = 600.0

# The preload library: position-independent, everything hidden except the
# rtld-audit entry points (so the handler's calls into the core are direct,
# never through a PLT that rtld would resolve lazily), no stack protector (no
# __stack_chk_fail in probe context), and no loop idioms turned into
# memset/memcpy calls.
CFLAGS = (
    "-std=gnu99", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-fno-stack-protector",
    "-fno-tree-loop-distribute-patterns", "-fno-builtin", "-Wall", "-Wextra", "-Werror",
    "-Wl,-z,now", "-Wl,-z,noexecstack",
)
SOURCES = ("kinst_core.c", "kinst_table.c", "kinst_harness.c")

# PF_* -> PROT_* (PF_X = 1 -> PROT_EXEC = 4, PF_W = 2 -> 2, PF_R = 4 -> 1).
_PROT = {1: 4, 2: 2, 4: 1}


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise UserError("gcc not found: the harness compiles its preload library with gcc (apt-get install gcc)")
    return gcc


# -- the target's layout ---------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """What the glue needs of the target beyond the table: its segments and build-id."""

    e_type: str
    segments: Tuple[Tuple[int, int, int], ...]  # (vaddr, memsz, PROT_*) of each PT_LOAD
    build_id_vaddr: int  # link address of the build-id descriptor, 0 if none
    build_id: bytes


def layout(path: str) -> Layout:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        e_type = elf["e_type"]
        segs = []
        bid_vaddr, bid = 0, b""
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD":
                prot = sum(v for k, v in _PROT.items() if seg["p_flags"] & k)
                segs.append((seg["p_vaddr"], seg["p_memsz"], prot))
            elif seg["p_type"] == "PT_NOTE" and not bid:
                bid_vaddr, bid = _build_id_note(f, seg)
    if e_type not in ("ET_DYN", "ET_EXEC"):
        raise UserError(f"{path}: ELF type {e_type} cannot be loaded in user space; the harness needs a program or shared library")
    if not segs:
        raise UserError(f"{path}: no PT_LOAD segments; the harness needs a loadable program or shared library")
    return Layout(e_type, tuple(segs), bid_vaddr, bid)


def _build_id_note(f, seg) -> Tuple[int, bytes]:
    """(vaddr, bytes) of an NT_GNU_BUILD_ID descriptor in this PT_NOTE, or (0, b"")."""
    f.seek(seg["p_offset"])
    data = f.read(seg["p_filesz"])
    off = 0
    align = max(4, seg["p_align"] or 4)
    while off + 12 <= len(data):
        namesz, descsz, ntype = (int.from_bytes(data[off + i : off + i + 4], "little") for i in (0, 4, 8))
        name_off = off + 12
        desc_off = name_off + ((namesz + align - 1) & ~(align - 1))
        if ntype == 3 and data[name_off : name_off + namesz] == b"GNU\0":
            return seg["p_vaddr"] + desc_off, bytes(data[desc_off : desc_off + descsz])
        off = desc_off + ((descsz + align - 1) & ~(align - 1))
    return 0, b""


# -- building the library ------------------------------------------------------


@dataclass(frozen=True)
class Build:
    dir: Path
    lib: Path
    plan: object  # generator.plan.ProbePlan
    layout: Layout

    def probe_name(self, idx: int) -> str:
        e = self.plan.entries[idx]
        return f"{self.plan.funcs[e.func].qualified}:{e.offset}"

    def link_address(self, idx: int) -> int:
        e = self.plan.entries[idx]
        return self.plan.funcs[e.func].address + e.offset


def command_line(elf: str, functions: Sequence[str], all_functions: bool) -> str:
    words = ["python", "-m", "generator", "harness", "--elf", elf]
    words += ["--all"] if all_functions else [w for f in functions for w in ("--function", f)]
    return " ".join(shlex.quote(w) for w in words)


def glue_context(elf: str, lay: Layout) -> Dict[str, object]:
    lo = min(v for v, _, _ in lay.segments)
    hi = max(v + m for v, m, _ in lay.segments)
    return {
        "target": os.path.abspath(elf).replace("\\", "\\\\").replace('"', '\\"'),
        "segments": [{"vaddr": f"{v:#x}", "memsz": f"{m:#x}", "prot": p} for v, m, p in lay.segments],
        "image_lo": f"{lo:#x}",
        "image_hi": f"{hi:#x}",
        "build_id_vaddr": f"{lay.build_id_vaddr:#x}" if lay.build_id else "",
        "build_id_len": len(lay.build_id),
        "build_id_bytes": "{ " + ", ".join(f"{b:#04x}" for b in lay.build_id) + " }",
    }


def build(elf: str, functions: Sequence[str] = (), all_functions: bool = False, plan=None) -> Build:
    """Render and compile the audit library for ``elf`` (cached by content)."""
    from .kinst_gen import CORE_TEMPLATES, build_plan, render_plan

    if not elf:
        raise UserError("--elf is required: the program or shared library to probe")
    if not os.path.exists(elf):
        raise UserError(f"{elf}: no such file; pass --elf PATH of a program or shared library")
    if not functions and not all_functions and plan is None:
        raise UserError("name the probes: --function F (repeatable) or --all")
    gcc = _gcc()
    lay = layout(elf)
    given = plan
    if plan is None:
        plan = build_plan(elf, functions, all_functions)
    command = command_line(elf, functions, all_functions) + ("" if given is None else " (table supplied by the caller)")
    ctx = glue_context(elf, lay)
    h = hashlib.sha256()
    for part in (repr(plan), repr(lay), repr(sorted(ctx.items())), command, " ".join(CFLAGS), gcc):
        h.update(part.encode() + b"\0")
    for t in sorted((TEMPLATE_DIR / "kinst").glob("*.j2")) + sorted((TEMPLATE_DIR / "harness").glob("*.j2")):
        h.update(t.read_bytes())
    out = BUILD_DIR / h.hexdigest()[:16]
    lib = out / LIB_NAME
    if not lib.exists():
        inputs = [Input(plan.image, plan.build_id, plan.sha256)]
        render_plan(plan, out, command, only=CORE_TEMPLATES)
        render_tree("harness", out, ctx, inputs, command, only=("kinst_harness.c.j2",))
        tmp = out / f".{LIB_NAME}.{os.getpid()}"
        cmd = [gcc, *CFLAGS, "-o", str(tmp.name), *SOURCES]
        shown = " ".join(shlex.quote(w) for w in [gcc, *CFLAGS, "-o", LIB_NAME, *SOURCES])
        (out / "commands.sh").write_text(f'#!/bin/sh\nset -e\ncd "$(dirname "$0")"\n{shown}\n')
        proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["(no output)"])[0]
            raise UserError(f"compiling the harness library failed in {out}: {first}")
        os.replace(tmp, lib)
    return Build(out, lib, plan, lay)


# -- running ----------------------------------------------------------------------


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


@dataclass
class Result:
    """What one harness run found; ``to_json()`` is the ``--json`` object."""

    elf: str
    command: List[str]
    library: str
    tabled: int  # probes in the table
    functions: int
    not_tabled: int  # refusals from the analysis (kinst_refused.txt)
    placed: int
    processes: int  # processes that mapped the target
    instances: List[Dict[str, int]]  # per mapped copy: pid, bias, tramp (trampoline block), placed
    refused: List[Dict[str, str]]  # refused at run time
    notes: List[str]
    hits: List[int]  # per table entry, summed over processes
    kinds: List[str]  # per table entry
    plain: Run
    probed: Run
    differences: List[str]
    verify: Optional[dict] = None
    errors: List[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences

    @property
    def ok(self) -> bool:
        return self.identical and not self.errors and (self.verify is None or self.verify["equal"])

    def hits_by_kind(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for k, n in zip(self.kinds, self.hits):
            out[k] = out.get(k, 0) + n
        return out

    def to_json(self) -> dict:
        from .records import TABLE_KINDS

        by_kind = self.hits_by_kind()
        obj = {
            "elf": self.elf,
            "command": self.command,
            "functions": self.functions,
            "probes": self.tabled,
            "placed": self.placed,
            "processes": self.processes,
            "instances": [{k: (hex(v) if k in ("bias", "tramp") else v) for k, v in i.items()} for i in self.instances],
            "hits": sum(self.hits),
            "probes_hit": sum(1 for n in self.hits if n),
            "hits_by_kind": {k: by_kind.get(k, 0) for k, _, _ in TABLE_KINDS},
            "kinds_hit": [k for k, _, _ in TABLE_KINDS if by_kind.get(k, 0)],
            "refused": self.refused,
            "refused_by_analysis": self.not_tabled,
            "notes": self.notes,
            "identical": self.identical,
            "differences": self.differences,
            "exit_status": {"plain": self.plain.status, "probed": self.probed.status},
            "seconds": {"plain": round(self.plain.seconds, 3), "probed": round(self.probed.seconds, 3)},
            "errors": self.errors,
            "library": self.library,
        }
        if self.verify is not None:
            v = {k: x for k, x in self.verify.items() if k not in ("per_entry", "jcc")}
            v["jcc_both_ways"] = sum(1 for j in self.verify["jcc"].values() if 0 < j["taken"] < j["executed"])
            obj["callgrind"] = v
        obj["ok"] = self.ok
        return obj


def _differences(a: Run, b: Run) -> List[str]:
    out = []
    for name, x, y in (("stdout", a.stdout, b.stdout), ("stderr", a.stderr, b.stderr)):
        if x != y:
            out.append(f"{name} differs: {_first_diff(x, y)}")
    if a.status != b.status:
        out.append(f"exit status differs: plain {a.status}, probed {b.status}")
    if b.timed_out:
        out.append("the probed run timed out")
    if a.timed_out:
        out.append("the plain run timed out")
    return out


def _first_diff(x: bytes, y: bytes) -> str:
    n = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    return f"first at byte {n} (plain {x[n:n + 40]!r}, probed {y[n:n + 40]!r})"


def run_harness(
    elf: str,
    command: Sequence[str],
    functions: Sequence[str] = (),
    all_functions: bool = False,
    plan=None,
    verify: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> Result:
    """Build, run plain and probed, compare; with ``verify`` also against callgrind."""
    if not command:
        raise UserError("no command to run: give it after --, e.g. harness --elf LIB --all -- python3 -c '...'")
    if verify:
        from .callgrind import require_valgrind

        require_valgrind()
    b = build(elf, functions, all_functions, plan)
    with tempfile.TemporaryDirectory(prefix="kinst-harness-") as tmp:
        prefix = Path(tmp) / "hits"
        plain = run_command(command, dict(os.environ), timeout)
        probed = run_command(command, audit_env(b.lib, prefix, "probe"), timeout)
        dumps = [d for d in read_dumps(prefix) if d.mode == "probe"]
        hits, problems = read_hits(prefix, len(b.plan.entries))
        res = _result(b, elf, command, plain, probed, dumps, hits, problems)
        if verify:
            from .callgrind import compare

            res.verify = compare(b, command, res.hits, Path(tmp), timeout)
    return res


def _result(
    b: Build, elf: str, command: Sequence[str], plain: Run, probed: Run, dumps: List[Dump], hits: List[int],
    problems: List[str],
) -> Result:
    n = len(b.plan.entries)
    errors = list(problems)
    refused: Dict[Tuple[int, str], None] = {}
    placed = 0
    notes: List[str] = []
    instances: List[Dict[str, int]] = []
    for d in dumps:
        if not d.complete:
            errors.append(f"process {d.pid}: its report is truncated")
        if d.entries != n:
            errors.append(f"process {d.pid}: table has {d.entries} entries, expected {n}")
            continue
        for i, _, why in d.refused:
            refused[(i, why)] = None
        placed = max([placed] + [inst["placed"] for inst in d.instances])
        instances += [dict(inst, pid=d.pid) for inst in d.instances]
        notes += [f"process {d.pid}: {x}" for x in d.notes]
    if not dumps and probed.status is not None and probed.status < 0:
        errors.append(f"the probed process died of signal {-probed.status} before it mapped {elf}")
    elif not dumps:
        errors.append(f"{elf} was never mapped by the command (no process loaded it), so no probe was placed")
    return Result(
        elf=elf,
        command=list(command),
        library=str(b.lib),
        tabled=n,
        functions=len(b.plan.funcs),
        not_tabled=len(b.plan.refused),
        placed=placed,
        processes=len(dumps),
        instances=instances,
        refused=[{"probe": b.probe_name(i), "reason": why} for i, why in refused],
        notes=notes,
        hits=hits,
        kinds=[e.kind for e in b.plan.entries],
        plain=plain,
        probed=probed,
        differences=_differences(plain, probed),
        errors=errors,
    )


# -- the command line ----------------------------------------------------------------


def add_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "harness",
        help="run a command twice, plain and with every table probe of an ELF placed; compare",
        description=(
            "Render the kinst core and table for ELF with a user-space glue, compile it into an LD_AUDIT "
            "library, run COMMAND plain and probed, and fail unless stdout, stderr and the exit status are "
            "identical."
        ),
    )
    p.add_argument("--elf", required=True, help="the program or shared library to probe")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--function", action="append", default=[], help="a function to probe (repeatable)")
    which.add_argument("--all", action="store_true", help="every eligible instruction of every function")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--verify", action="store_true",
        help="also run COMMAND under valgrind --tool=callgrind and require every probe's hits to equal its count",
    )
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per run (default: 600)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    p.set_defaults(run=cmd_harness)


def cmd_harness(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not args.function and not args.all:
        raise UserError("name the probes: --function F (repeatable) or --all")
    res = run_harness(args.elf, command, args.function, args.all, verify=args.verify, timeout=args.timeout)
    if args.json:
        sys.stdout.write(json.dumps(res.to_json(), indent=None, sort_keys=False) + "\n")
    else:
        sys.stdout.write(text_report(res))
    return 0 if res.ok else 1


def text_report(res: Result) -> str:
    by_kind = res.hits_by_kind()
    lines = [
        f"harness: {res.elf}: {res.tabled} probes in {res.functions} functions "
        f"({res.not_tabled} refused by the analysis, see kinst_refused.txt in {Path(res.library).parent})",
        f"placed {res.placed} probes in {res.processes} process(es); {len(res.refused)} refused at run time",
    ]
    for r in res.refused[:20]:
        lines.append(f"  refused {r['probe']}: {r['reason']}")
    if len(res.refused) > 20:
        lines.append(f"  ... {len(res.refused) - 20} more (--json lists them all)")
    lines.append(
        f"hits {sum(res.hits)} on {sum(1 for n in res.hits if n)} probes: "
        + (", ".join(f"{k} {n}" for k, n in sorted(by_kind.items()) if n) or "none")
    )
    for n in res.notes:
        lines.append(f"note: {n}")
    for e in res.errors:
        lines.append(f"error: {e}")
    if res.identical:
        lines.append(
            f"runs identical: stdout, stderr and exit status {res.plain.status} "
            f"(plain {res.plain.seconds:.2f} s, probed {res.probed.seconds:.2f} s)"
        )
    else:
        lines.append("runs DIFFER:")
        lines += [f"  {d}" for d in res.differences]
    if res.verify is not None:
        v = res.verify
        if v["equal"]:
            lines.append(f"callgrind: all {v['compared']} probes equal ({v['executed']} executed, {v['instructions']} executions)")
        else:
            lines.append(f"callgrind: {len(v['mismatches'])} of {v['compared']} probes DIFFER, e.g.:")
            for m in v["mismatches"][:10]:
                lines.append(f"  {m['probe']}: harness {m['harness']}, callgrind {m['callgrind']}")
    lines.append("PASS" if res.ok else "FAIL")
    return "\n".join(lines) + "\n"


# -- benchmark ------------------------------------------------------------------------

BENCH_SRC = REPO / "bench" / "harness"


def bench_harness(out_dir: Path = REPO / "bench" / "results", calls: int = 100_000, repeat: int = 3) -> dict:
    """Hits per second of the harness against a bare SIGTRAP + trampoline round trip.

    Both are measured in this call, on this machine, interleaved ``repeat``
    times (the median is reported): ``bench/harness/trap_floor.c`` is the
    floor (int3 over one instruction; a handler that checks %rip, counts and
    sets %rip to a trampoline; nothing else).  The harness side probes every
    instruction of a function of ``bench/harness/hot.c`` with the generated
    core and the real audit library, and ``hot_main`` times the same loop
    plain and probed; cost per hit = (probed - plain) / hits.  Results go to
    ``harness.json`` and ``harness.md`` in ``out_dir``.
    """
    import statistics

    gcc = _gcc()
    out_dir = Path(out_dir)
    work = BUILD_DIR / "bench"
    work.mkdir(parents=True, exist_ok=True)
    flags = ["-O2", "-fno-omit-frame-pointer", "-mno-red-zone", "-Wall", "-Werror"]
    steps = [
        [gcc, *flags, "-o", str(work / "trap_floor"), str(BENCH_SRC / "trap_floor.c")],
        [gcc, *flags, "-fPIC", "-shared", "-o", str(work / "libhot.so"), str(BENCH_SRC / "hot.c")],
        [gcc, *flags, "-o", str(work / "hot_main"), str(BENCH_SRC / "hot_main.c"), f"-L{work}", "-lhot",
         f"-Wl,-rpath,{work}"],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["(no output)"])[0]
            raise UserError(f"bench build failed: {Path(cmd[-1]).name}: {first}")
    lib = str(work / "libhot.so")
    functions = (("hot_lea", "trampoline only"), ("hot_call", "with call emulation"))
    builds = {fn: build(lib, [fn]) for fn, _ in functions}
    floor_runs: List[float] = []
    samples: Dict[str, List[dict]] = {fn: [] for fn, _ in functions}
    for _ in range(repeat):
        hits_per_call = 5
        f = _bench_out(run_command([str(work / "trap_floor"), str(calls * hits_per_call)], dict(os.environ)),
                       "trap_floor")
        floor_runs.append(f["ns_per_hit"])
        for fn, _ in functions:
            plain = _bench_out(run_command([str(work / "hot_main"), fn, str(calls)], dict(os.environ)), "hot_main")
            with tempfile.TemporaryDirectory(prefix="kinst-bench-") as tmp:
                prefix = Path(tmp) / "hits"
                r = run_command([str(work / "hot_main"), fn, str(calls)], audit_env(builds[fn].lib, prefix, "probe"))
                probed = _bench_out(r, "hot_main " + fn + " (probed)")
                hits = sum(read_hits(prefix, len(builds[fn].plan.entries))[0])
            if probed.get("sum") != plain.get("sum"):
                raise UserError(f"bench: {fn} computed a different result under the harness")
            samples[fn].append({
                "plain": plain["ns_per_call"], "probed": probed["ns_per_call"], "hits": hits,
                "ns_per_hit": (probed["ns_per_call"] - plain["ns_per_call"]) * calls / max(hits, 1),
            })
    floor_ns = statistics.median(floor_runs)
    harness = {}
    for fn, what in functions:
        ns = statistics.median(s["ns_per_hit"] for s in samples[fn])
        harness[fn] = {
            "what": what,
            "probes": len(builds[fn].plan.entries),
            "calls": calls,
            "hits": samples[fn][0]["hits"],
            "hits_per_call": samples[fn][0]["hits"] / calls,
            "ns_per_call_plain": statistics.median(s["plain"] for s in samples[fn]),
            "ns_per_call_probed": statistics.median(s["probed"] for s in samples[fn]),
            "us_per_hit": round(ns / 1000.0, 3),
            "hits_per_second": round(1e9 / ns) if ns > 0 else None,
            "runs_us_per_hit": [round(s["ns_per_hit"] / 1000.0, 3) for s in samples[fn]],
        }
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
        "calls": calls,
        "repeat": repeat,
        "floor": {
            "program": "bench/harness/trap_floor.c",
            "hits": calls * 5,
            "us_per_hit": round(floor_ns / 1000.0, 3),
            "hits_per_second": round(1e9 / floor_ns),
            "runs_us_per_hit": [round(x / 1000.0, 3) for x in floor_runs],
        },
        "harness": harness,
        "ratio": {fn: round(v["us_per_hit"] * 1000.0 / floor_ns, 3) for fn, v in harness.items()},
        "goal": "<= 2.0 x the bare trap (issue #3)",
    }
    _write_bench(out_dir, result)
    return result


def _bench_out(run: Run, what: str) -> dict:
    if run.status != 0:
        raise UserError(f"bench: {what} failed with status {run.status}: {run.stderr.decode(errors='replace').strip()[:200]}")
    out = {}
    for word in run.stdout.decode(errors="replace").split():
        k, sep, v = word.partition("=")
        if sep:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def _write_bench(out_dir: Path, result: dict) -> None:
    f = result["floor"]
    md = [
        "# Harness benchmark: probe hits per second",
        "",
        f"Made by `generator.harness.bench_harness()` (`invoke bench`) on {result['date']}, "
        f"{result['cpus']} CPUs; median of {result['repeat']} interleaved runs.",
        "",
        "The floor is `bench/harness/trap_floor.c`: int3 over one instruction, a SIGTRAP handler that",
        "checks `%rip`, counts and sets `%rip` to a trampoline that runs the instruction and jumps back.",
        "The harness rows probe every instruction of a function in `bench/harness/hot.c` with the",
        "generated core and the real audit library; cost per hit = (probed - plain loop time) / hits.",
        "",
        "| run | hits/call | us per hit | hits per second | x floor |",
        "|---|---|---|---|---|",
        f"| bare SIGTRAP + trampoline round trip (`trap_floor`) | 1 | {f['us_per_hit']:.3f} | {f['hits_per_second']:,.0f} | 1.00 |",
    ]
    for k, v in result["harness"].items():
        md.append(
            f"| harness, `{k}` ({v['what']}) | {v['hits_per_call']:.0f} | {v['us_per_hit']:.3f} | "
            f"{v['hits_per_second']:,.0f} | {result['ratio'][k]:.2f} |"
        )
    md += ["", f"Goal: {result['goal']}.", ""]
    write_all([(out_dir / "harness.json", json.dumps(result, indent=2) + "\n"), (out_dir / "harness.md", "\n".join(md))])
