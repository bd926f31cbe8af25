"""``harness``: run real code with every table probe placed, and prove the counts.

The portable core that goes into kinst.ko (hand-written,
``sys/modules/kinst/<arch>/kinst_core.c``, with ``dbp/kinst_core_dbp.c`` on
arm64 and riscv) is compiled, with a table (``kinst_table.c``) and encodings
(``kinst_encoding.h``) rendered for a user-space target ELF, and with the
hand-written user-space glue, shaped like ``sys/modules/kinst`` (one
machine-independent ``harness_c/kinst_harness.c``, its interface to the ISA
part ``kh_isa.h``, and ``harness_c/<arch>/kh_isa_<arch>.c``, with
``harness_c/dbp/`` on arm64 and riscv; the target's path, segments and
build-id are rendered into ``kinst_harness_target.c``), into an rtld audit
library.  Loaded with ``LD_AUDIT``, it patches int3 over every probe of the
target as soon as rtld maps it (at startup or on dlopen), resumes through
static per-probe trampolines or call emulation from its SIGTRAP handler, and
writes per-probe hit counts at exit.

The runner runs the command twice, plain and probed, and the run passes only
when stdout, stderr and the exit status are identical.  With ``verify`` the
same command also runs under callgrind (``generator/callgrind.py``), with the
audit library in ``locate`` mode (no probes), and every probe's hit count
must equal callgrind's execution count of that instruction.

Layout: ``<cache>/harness/<key>/`` holds the rendered sources, ``commands.sh``
and ``libkinst_harness.so``; the key hashes everything the library depends
on (the plan, the templates and the hand-written C), so an unchanged table
is not compiled twice.
"""

from __future__ import annotations

import os
import struct
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .. import isa as isa_registry
from ..analysis import jumpplan
from ..analysis.plan import ProbePlan, TableProbe
from ..common.cstring import c_blob
from ..common.ccache import compile_cached, content_key
from ..common.defaults import DEFAULT_PROLOGUE_RULE
from ..common.errors import UserError
from ..common.paths import CACHE, SYS_MODULES
from ..common.tools import checked, run_tool
from ..image.elf import KernelImage
from ..providers.kinst import generate as kinst
from ..render import Input, render_tree
from . import callgrind, qemu
from .audit import ENV_PAD, LIB_NAME, PAD_ROOM, Dump, audit_env, read_dumps, read_hits
from .process import DEFAULT_TIMEOUT, Run, run_command
from ..image import open_image

BUILD_DIR = CACHE / "harness"

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
# The hand-written C, by ISA: the module's portable core and the harness's own glue.
CORE_DIR = SYS_MODULES / "kinst"  # <arch>/kinst_core.[ch]
GLUE_DIR = Path(__file__).resolve().parent / "harness_c"  # kinst_harness.c, kh_*.h; <folder>/*.c
JUMP_GLUE = "jump"  # the optional folder of harness_c/ that places jump probes (harness --jump)
TARGET_C = "kinst_harness_target.c"  # the target's path, segments, build-id: rendered from templates/harness/

# PF_* -> PROT_* (PF_X = 1 -> PROT_EXEC = 4, PF_W = 2 -> 2, PF_R = 4 -> 1).
_PROT = {1: 4, 2: 2, 4: 1}


def gcc(arch: str = "") -> str:
    """The C compiler that builds the library for ``arch``'s programs: the host's gcc, or the ISA's cross gcc."""
    prefix = isa_registry.by_name(arch).oracle.cross_prefix if arch else ""
    path = shutil.which(prefix + "gcc")
    if path is None:
        package = f"gcc-{prefix[:-1]}" if prefix else "gcc"
        raise UserError(f"{prefix}gcc not found: the harness compiles its preload library with it "
                        f"(apt-get install {package})")
    return path


# -- the target's layout ---------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """What the glue needs of the target beyond the table: its segments and build-id."""

    e_type: str
    segments: Tuple[Tuple[int, int, int], ...]  # (vaddr, memsz, PROT_*) of each PT_LOAD
    build_id_vaddr: int  # link address of the build-id descriptor, 0 if none
    build_id: bytes


def layout(img: KernelImage) -> Layout:
    """Where the target's segments and build-id are, from the image the run opened."""
    path = img.path
    if img.e_type not in ("ET_DYN", "ET_EXEC"):
        raise UserError(f"{path}: ELF type {img.e_type} cannot be loaded in user space; the harness needs a program or shared library")
    segs = tuple((g.vaddr, g.memsz, sum(v for k, v in _PROT.items() if g.flags & k)) for g in img.segments())
    if not segs:
        raise UserError(f"{path}: no PT_LOAD segments; the harness needs a loadable program or shared library")
    bid_vaddr, bid = img.build_id_note()
    return Layout(img.e_type, segs, bid_vaddr, bid)


# -- building the library ------------------------------------------------------


@dataclass(frozen=True)
class Build:
    elf: str  # the program or library probed
    dir: Path
    lib: Path
    plan: ProbePlan
    layout: Layout
    probes: Tuple[TableProbe, ...]  # the table's probes, in table order
    target_addr: Tuple[int, ...]  # per plan function: its link address in the target, 0 if absent
    notes: Tuple[str, ...]  # table functions that could not be placed in the target, and why
    jump: Optional["jumpplan.JumpChoice"] = None  # harness --jump: the jumps chosen from the proof

    def probe_name(self, idx: int) -> str:
        return self.plan.probe_name(self.probes[idx])

    def link_address(self, idx: int) -> int:
        """Where probe ``idx`` is in the target (which --table-from may make another build of the code)."""
        p = self.probes[idx]
        return self.target_addr[p.func] + p.offset


def command_line(elf: str, functions: Sequence[str], all_functions: bool, table_from: Optional[str] = None,
                 rule: str = DEFAULT_PROLOGUE_RULE, jump: bool = False) -> str:
    words = ["python", "-m", "generator", "harness", "--elf", elf]
    words += ["--table-from", table_from] if table_from else []
    words += ["--jump"] if jump else []
    words += ["--all"] if all_functions else [w for f in functions for w in ("--function", f)]
    words += ["--prologue-rule", rule] if rule != DEFAULT_PROLOGUE_RULE else []
    return " ".join(shlex.quote(w) for w in words)


def resolve_functions(plan: ProbePlan, img: KernelImage) -> Tuple[Tuple[int, ...], List[str]]:
    """Each table function's link address in ``img``, found by name and size the way the module glue
    finds a table's functions in a linker file; 0 and a note for one it cannot place.

    Same-named functions of the same size pair up in address order: the k-th
    copy in the table with the k-th copy in the target.
    """
    if plan.image == img.path:
        return tuple(f.address for f in plan.funcs), []
    target: Dict[Tuple[str, int], List[int]] = {}
    for f in img.functions():
        for name in (f.name, *f.aliases):
            target.setdefault((name, f.size), []).append(f.address)
    seen: Dict[Tuple[str, int], int] = {}
    out, notes = [], []
    for f in plan.funcs:
        key = (f.name, f.size)
        k = seen.get(key, 0)
        seen[key] = k + 1
        cands = sorted(target.get(key, []))
        copies = sum(1 for g in plan.funcs if (g.name, g.size) == key)
        if k < len(cands) and len(cands) == copies:
            out.append(cands[k])
            continue
        out.append(0)
        why = ("absent from the target" if not cands else
               f"{len(cands)} functions of that name and size in the target, {copies} in the table")
        notes.append(f"{f.qualified} ({f.size} bytes): {why}; its probes are not placed")
    return tuple(out), notes


def glue_context(elf: str, lay: Layout, target_addr: Sequence[int]) -> Dict[str, object]:
    lo = min(v for v, _, _ in lay.segments)
    hi = max(v + m for v, m, _ in lay.segments)
    return {
        "target": os.path.abspath(elf),
        "segments": [{"vaddr": f"{v:#x}", "memsz": f"{m:#x}", "prot": p} for v, m, p in lay.segments],
        "image_lo": f"{lo:#x}",
        "image_hi": f"{hi:#x}",
        "build_id_vaddr": f"{lay.build_id_vaddr:#x}" if lay.build_id else "0",
        "build_id_len": len(lay.build_id),
        "build_id_size": max(1, len(lay.build_id)),  # C has no empty array
        "build_id_bytes": "{ " + (", ".join(f"{b:#04x}" for b in lay.build_id) or "0") + " }",
        "func_addr_blob": c_blob(struct.pack(f"<{len(target_addr)}Q", *target_addr)),
        "func_addr_size": 8 * len(target_addr),
    }


def c_folders(arch: str) -> Tuple[str, ...]:
    """The folders of ``arch``'s C, its own first (``Isa.kmod.kinst_dirs``): the same names under
    ``sys/modules/kinst/`` (the module's portable core) and ``harness_c/`` (the harness glue); ``dbp`` is
    what arm64 and riscv share."""
    return isa_registry.by_name(arch).kmod.kinst_dirs


def core_sources(arch: str) -> List[Path]:
    """The module's portable core for ``arch``, hand-written: ``kinst_funcs.[ch]`` and each C folder's
    ``kinst_core*.[ch]`` (the ISA's own, and ``dbp/kinst_core_dbp.[ch]`` on arm64 and riscv)."""
    out = [CORE_DIR / n for n in ("kinst_funcs.c", "kinst_funcs.h")]
    for d in c_folders(arch):
        found = sorted((CORE_DIR / d).glob("kinst_core*.[ch]"))
        if not found:
            raise UserError(f"{CORE_DIR / d}: no hand-written kinst core for {arch}")
        out += found
    return out


def glue_sources(arch: str) -> List[Path]:
    """The harness glue, hand-written, shaped like ``sys/modules/kinst``: the machine-independent
    ``kinst_harness.c`` and its interfaces ``kh_isa.h`` (to the ISA part) and ``kh_target.h`` (to the
    generated target data), then each C folder's files (``<arch>/kh_isa_<arch>.c``; ``dbp/`` on arm64 and
    riscv, the breakpoint handler both share)."""
    out = sorted(p for p in GLUE_DIR.iterdir() if p.suffix in (".c", ".h"))
    for d in c_folders(arch):
        found = sorted(p for p in (GLUE_DIR / d).glob("*") if p.suffix in (".c", ".h"))
        if not found:
            raise UserError(f"{GLUE_DIR / d}: no hand-written harness glue for {arch}")
        out += found
    return out


def plain_sources(arch: str) -> List[Path]:
    """The hand-written C the library is built from: the module's portable core and the harness glue."""
    return core_sources(arch) + glue_sources(arch)


def optional_sources(folders: Sequence[str]) -> List[Path]:
    """The C of optional parts of the glue (``harness_c/<folder>/``), which only some builds compile in."""
    out: List[Path] = []
    for d in folders:
        found = sorted(p for p in (GLUE_DIR / d).glob("*") if p.suffix in (".c", ".h"))
        if not found:
            raise UserError(f"{GLUE_DIR / d}: no optional harness glue there")
        out += found
    return out


def build(elf: str, functions: Sequence[str] = (), all_functions: bool = False, plan: Optional[ProbePlan] = None,
          table_from: Optional[str] = None, rule: str = DEFAULT_PROLOGUE_RULE,
          generated: Sequence[Tuple[str, str]] = (), optional: Sequence[str] = (), jump: bool = False) -> Build:
    """Render and compile the audit library for ``elf`` (cached by content).

    The table is made from ``elf`` itself, or from ``table_from`` (another
    build of the same code, such as a ``.ko``-style ``ld -r`` object) and
    placed in ``elf`` function by function.  ``optional`` names folders of
    ``harness_c/`` whose C is compiled in besides the glue, and ``generated``
    the (file name, text) headers another stage rendered for them: the
    variable readings of ``generator.run.varsprobe`` (``vars/kh_vars.c``
    and its ``kinst_harness_vars.h``), whose ``kh_hit()`` replaces the
    glue's empty one the trap handler calls.  ``jump`` places jump
    probes where the proof allows: the table carries
    ``analysis/jumpplan.py``'s choice (``kt_jump``, as ``generate --jump``'s
    does) and the ``jump/`` part places them.
    """
    if not elf:
        raise UserError("--elf is required: the program or shared library to probe")
    if not os.path.exists(elf):
        raise UserError(f"{elf}: no such file; pass --elf PATH of a program or shared library")
    if not functions and not all_functions and plan is None:
        raise UserError("name the probes: --function F (repeatable) or --all")
    if jump and table_from:
        raise UserError("--jump with --table-from: the jump proof reads the image the probes are placed in; "
                        "drop one of them")
    img = open_image(elf)
    lay = layout(img)
    given = plan
    if plan is None:
        plan = kinst.build_plan(open_image(table_from) if table_from else img, functions, all_functions, rule)
    cc = gcc(plan.arch)
    target_addr, notes = resolve_functions(plan, img)
    command = command_line(elf, functions, all_functions, table_from, rule, jump)
    command += "" if given is None else " (table supplied by the caller)"
    choice = None
    if jump:
        choice = jumpplan.choose(plan, img, rule)
        optional = [*optional, JUMP_GLUE]
    ctx = glue_context(elf, lay, target_addr)
    plain = plain_sources(plan.arch) + optional_sources(optional)
    sources = sorted(p.name for p in plain if p.suffix == ".c") + ["kinst_table.c", TARGET_C]
    parts = [repr(plan), repr(lay), repr(sorted(ctx.items())), command, " ".join(CFLAGS), cc, " ".join(sources)]
    parts += kinst.core_key_parts(plain, "harness")
    parts += [name.encode() + b"\0" + text.encode() for name, text in generated]
    parts += [] if choice is None else [b"kt_jump\0" + bytes(choice.fires)]

    def make(out: Path) -> None:
        kinst.stage_core(plan, out, command, plain, jump=choice)
        for name, text in generated:
            (out / name).write_text(text)
        render_tree("harness", out, ctx, [Input(plan.image, plan.build_id, plan.sha256)], command,
                    only=(TARGET_C + ".j2",))
        argv = [cc, *CFLAGS, "-I.", "-o", LIB_NAME, *sources]
        (out / "commands.sh").write_text(f'#!/bin/sh\nset -e\ncd "$(dirname "$0")"\n{shlex.join(argv)}\n')
        checked(run_tool, argv, "compiling the harness library", out)

    out = compile_cached(BUILD_DIR, content_key(parts), make, marker=LIB_NAME)
    lib = out / LIB_NAME
    return Build(elf, out, lib, plan, lay, tuple(plan.probes()), target_addr, tuple(notes), choice)


# -- running ----------------------------------------------------------------------


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
    table_kinds: List[str]  # every kind the ISA's tables hold, in C enum order
    plain: Run
    probed: Run
    differences: List[str]
    verify: Optional[dict] = None
    errors: List[str] = field(default_factory=list)
    jump: Optional[dict] = None  # harness --jump: the placement chosen and the jumps placed (jump_report())

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
            "hits_by_kind": {k: by_kind.get(k, 0) for k in self.table_kinds},
            "kinds_hit": [k for k in self.table_kinds if by_kind.get(k, 0)],
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
            obj[self.verify.get("counter", "callgrind")] = v
        if self.jump is not None:
            obj.update(self.jump)
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
    table_from: Optional[str] = None,
    rule: str = DEFAULT_PROLOGUE_RULE,
    jump: bool = False,
) -> Result:
    """Build, run plain and probed, compare; with ``verify`` also against callgrind."""
    if not command:
        raise UserError("no command to run: give it after --, e.g. harness --elf LIB --all -- python3 -c '...'")
    target = open_image(elf).isa if elf and os.path.exists(elf) else None
    if target is not None and target.oracle.qemu:  # checked before anything is built
        qemu.check_program(target.oracle, target.name, target.e_machine, command[0])
    b = build(elf, functions, all_functions, plan, table_from, rule, jump=jump)
    quirks = isa_registry.by_name(b.plan.arch).oracle
    if quirks.qemu:  # a foreign program: both runs under the ISA's qemu-user, QEMU counts
        emulator = qemu.wrap(quirks, command)
    else:
        emulator = list(command)
        if verify:
            callgrind.require_valgrind()
    with tempfile.TemporaryDirectory(prefix="kinst-harness-") as tmp:
        prefix = Path(tmp) / "hits"
        plain = run_command(emulator, dict(os.environ), timeout)
        probed_env = audit_env(b.lib, prefix, "probe")
        if quirks.qemu:  # room for QEMU's counting runs to take the same stack layout (audit.padded_like)
            probed_env[ENV_PAD] = "x" * PAD_ROOM
        probed = run_command(emulator, probed_env, timeout)
        dumps = [d for d in read_dumps(prefix) if d.mode == "probe"]
        hits, problems = read_hits(prefix, len(b.probes))
        res = _result(b, elf, command, plain, probed, dumps, hits, problems)
        res.jump = None if b.jump is None else jump_report(b.jump, dumps, res.placed)
        if verify and not res.processes:
            res.verify = _not_compared(len(b.probes), f"{elf} was never mapped, so there is nothing to count")
        elif verify and quirks.qemu:
            res.verify = qemu.compare(b, command, res.hits, Path(tmp), timeout, probed_env)
        elif verify:
            res.verify = callgrind.compare(b, command, res.hits, Path(tmp), timeout)
    return res


def _not_compared(entries: int, why: str) -> dict:
    """The callgrind verdict when there is nothing to compare: not a comparison whose every count is 0."""
    return {"equal": False, "not_run": why, "compared": 0, "executed": 0, "instructions": 0, "mismatches": [],
            "function_names_differ": [], "errors": [why], "per_entry": [0] * entries, "jcc": {}}


def _result(
    b: Build, elf: str, command: Sequence[str], plain: Run, probed: Run, dumps: List[Dump], hits: List[int],
    problems: List[str],
) -> Result:
    n = len(b.probes)
    errors = list(problems)
    refused: Dict[Tuple[int, str], None] = {}
    placed = 0
    notes: List[str] = list(b.notes)
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
        errors.append(f"{elf} was never mapped by the command: no process loaded it (a statically linked program "
                      "never does), so nothing was probed")
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
        kinds=[p.kind for p in b.probes],
        table_kinds=[k.kind for k in isa_registry.by_name(b.plan.arch).table_kinds],
        plain=plain,
        probed=probed,
        differences=_differences(plain, probed),
        errors=errors,
    )


def jump_report(choice: "jumpplan.JumpChoice", dumps: List[Dump], placed: int) -> dict:
    """The ``--json`` fields of a ``--jump`` run: jumps and breakpoints placed (the most any copy placed, as
    ``placed``), and the placement the proof allowed, with every breakpoint's reason counted."""
    sites = max([0] + [s for d in dumps for s, _ in d.jumps.values()])
    fired = max([0] + [n for d in dumps for _, n in d.jumps.values()])
    return {"jump_sites": sites, "jump_probes": fired, "trap_probes": placed - fired,
            "jump_plan": {"sites": choice.heads, "probes": choice.jumped, "trap_reasons": choice.traps}}


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
    if res.jump is not None:
        j = res.jump
        why = ", ".join(f"{k} {n}" for k, n in j["jump_plan"]["trap_reasons"].items()) or "none"
        lines.append(f"jump probes {j['jump_probes']} ({j['jump_sites']} jumps), breakpoints {j['trap_probes']}; "
                     f"breakpoints by reason: {why}")
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
        counter = v.get("counter", "callgrind")
        if v.get("not_run"):
            lines.append(f"{counter}: not run: {v['not_run']}")
        elif v["equal"]:
            lines.append(f"{counter}: all {v['compared']} probes equal ({v['executed']} executed, {v['instructions']} executions)")
        elif v["mismatches"]:
            lines.append(f"{counter}: {len(v['mismatches'])} of {v['compared']} probes DIFFER, e.g.:")
            for m in v["mismatches"][:10]:
                lines.append(f"  {m['probe']}: harness {m['harness']}, {counter} {m[counter]}")
            for e in v.get("errors", [])[:5]:
                lines.append(f"  {counter}: {e}")
        else:
            lines += [f"{counter}: {e}" for e in v["errors"]]
    if res.ok:
        lines.append("PASS")
    elif not res.processes:
        lines.append(f"FAIL: {res.elf} was never mapped by the command; run a program that loads it")
    else:
        lines.append("FAIL")
    return "\n".join(lines) + "\n"


