"""Building the ring-0 guest's module: the same core and table as kinst.ko, with the Linux glue, by kbuild.

One directory holds the hand-written files (``sys/modules/kinst/kinst_funcs.[ch]``,
``amd64/kinst_core.[ch]``, ``linux/kinst_linux.c`` and ``linux/Kbuild``),
the table rendered from the plan by the kinst templates (``kinst_table.c``,
``kinst_encoding.h``, ``kinst_refused.txt``) and the kernel's facts rendered
by ``templates/kinst_linux/`` (``kinst_linux_target.h``); then

    make -C <headers> -f <headers-common>/Makefile M=<that directory> modules

with the pinned kernel's headers (Debian's headers Makefile includes the
common tree by an absolute /usr/src path, hence ``-f``).  The directory is
``<cache>/ring0/module/<key>/``, the key hashing everything the module
depends on, so an unchanged table is not built twice.

``BREAKS`` are the glue's deliberate breakages (``kinst_linux.c``): a
name there, handed to ``build_module``, becomes ``KINST_LINUX_BREAK`` on
make's command line and a define in ``Kbuild``; no committed file changes,
and a normal build passes none.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Dict, List, Mapping, Sequence

from ...analysis.plan import ProbePlan
from ...common.ccache import compile_cached, content_key
from ...common.errors import UserError
from ...common.paths import CACHE, SYS_MODULES
from ...common.tools import checked, run_tool, tool_version
from ...image.elf import KernelImage
from ...providers.kinst import generate as kinst
from ...render import Input, render_tree
from ..harness import core_sources
from . import oracle
from .jumps import NO_JUMPS, GuestJumps
from .packages import GUEST_ISA
from .kernel import KernelAssets

BUILD_DIR = CACHE / "ring0" / "module"
MODULE = "kinst.ko"
CORE = SYS_MODULES / "kinst"
GLUE = CORE / "linux"
# The symbol the target module (target.py) exports, [start, end) of its probed code: what the glue checks
# a table function outside the kernel's text against.
MODULE_TEXT = "kk_target_text"
ANCHOR = "vmap"  # an exported function the glue links against: its live address gives the bias
KERNEL_CC = "gcc-12"  # what Debian's 6.1 headers build with (linux-compiler-gcc-12-x86)
# The glue's deliberate breakages: name -> the KINST_LINUX_BREAK_<name> define's effect (kinst_linux.c).
BREAKS: Mapping[str, str] = {
    "NO_CALL_EMULATION": "a missing call emulation: a call resumes in its trampoline, which nothing fills",
    "WRONG_DISPLACEMENT": "a wrong displacement: a %rip-relative trampoline is filled as if it ran 1 GiB away",
    "JUMP_SKIPS_HANDLER": "a detour that skips its handler: a jump probe's head never counts its hits",
    "JUMP_RESUMES_SHORT": "a detour that returns one instruction short: it resumes at its last displaced "
                          "instruction's own address, inside the jump",
    # Not a breakage: a planted fault the quiescence check must catch, the run passing.
    "JUMP_STALE_WORD": "a word inside the first head's jump planted on the switching CPU's stack: the "
                       "quiescence check must keep that head a breakpoint",
    "JUMP_STALE_TRAMP_WORD": "a word inside a head's trampoline planted on the switching CPU's stack: the "
                             "quiescence check must keep that head a breakpoint",
}


# The breakages of a jump probe's detour; and what needs jump probes to mean anything.
JUMP_BREAKS = frozenset({"JUMP_SKIPS_HANDLER", "JUMP_RESUMES_SHORT"})
STALE_WORD = "JUMP_STALE_WORD"
STALE_WORDS = frozenset({STALE_WORD, "JUMP_STALE_TRAMP_WORD"})  # planted faults the run must catch, passing
NEEDS_JUMPS = JUMP_BREAKS | STALE_WORDS


def sources() -> List[Path]:
    """The hand-written files the module is built from: the guest ISA's portable core, as the harness
    and kinst.ko compile it, and the Linux glue."""
    return [*core_sources(GUEST_ISA), GLUE / "kinst_linux.c", GLUE / "kinst_linux_text.c", GLUE / "Kbuild"]


def target_context(vmlinux: KernelImage, plan: ProbePlan, module_start: int,
                   jumps: GuestJumps = NO_JUMPS) -> Dict[str, object]:
    """What ``kinst_linux_target.h`` says of the kernel, from its vmlinux, the plugin's markers, and where the
    target module's probed range starts in its .ko (``module_start``); and ``kinst_linux_jump.h``, how many detour
    chunks the jump probes take (``jumps``; none by default; which probes are heads, the table says: ``kt_jump``)."""
    want = (ANCHOR, "_stext", "_etext")
    sym = {s.name: s.value for s in vmlinux.symbols() if s.name in want and s.value}
    missing = [n for n in want if n not in sym]
    if missing:
        raise UserError(f"{vmlinux.path}: no symbol {', '.join(missing)}")
    return {
        "anchor": ANCHOR,
        "anchor_addr": f"{sym[ANCHOR]:#x}",
        "text_start": f"{sym['_stext']:#x}",
        "text_end": f"{sym['_etext']:#x}",
        "ntramp": plan.nprobes,
        "mark_arm": f"{oracle.MARK_ARM:#x}",
        "mark_disarm": f"{oracle.MARK_DISARM:#x}",
        "module_text": MODULE_TEXT,
        "module_start": f"{module_start:#x}",
        "jump_heads": jumps.heads,
        "jump_slots": sum(jumps.fires),
    }


def command_line(names: List[str]) -> str:
    """The command the generated headers name (inputs only)."""
    words = ["python", "-m", "generator", "vm-test", "--guest", "linux"]
    return " ".join(shlex.quote(w) for w in words + [w for n in names for w in ("--function", n)][:40])


def require_tools() -> None:
    """make and the kernel's compiler, or a UserError naming what to install."""
    for tool in ("make", KERNEL_CC):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} not found: the guest's modules are built with the kernel's kbuild "
                            f"(apt-get install make gcc-12)")


def kbuild(assets: KernelAssets, out: Path, what: str, variables: Sequence[str] = ()) -> None:
    """``make ... M=out modules`` with the pinned headers (``variables``: ``NAME=value`` for make), and a
    ``commands.sh`` beside the sources that repeats it."""
    head = ["make", "-j2", "-C", str(assets.headers), "-f", str(assets.headers_common / "Makefile")]
    tail = [*variables, "modules"]
    (out / "commands.sh").write_text(f'#!/bin/sh\nset -e\n{shlex.join(head)} M="$(cd "$(dirname "$0")" && pwd)" '
                                     f'{shlex.join(tail)}\n')
    env = dict(os.environ, LC_ALL="C")
    checked(run_tool, head + [f"M={out}", *tail], f"building {what} with kbuild", out, env)


def build_module(assets: KernelAssets, vmlinux: KernelImage, plan: ProbePlan, command: str,
                 target_ko: KernelImage, module_start: int, breakage: str = "",
                 jumps: GuestJumps = NO_JUMPS) -> Path:
    """Render, copy and kbuild the module for ``plan``; the built ``kinst.ko`` (cached by content).
    ``target_ko``: the target module whose functions the table may hold, from ``module_start`` on (an input
    the generated header names); ``breakage``: a name of ``BREAKS``, only for the tests that break the glue
    on purpose; ``jumps``: the jump probes (``jumps.choose()``)."""
    require_tools()
    if breakage and breakage not in BREAKS:
        raise UserError(f"unknown breakage {breakage!r}: one of {', '.join(BREAKS)}")
    if breakage in NEEDS_JUMPS and not jumps.heads:
        raise UserError(f"breakage {breakage} breaks a jump probe's detour: it needs jump probes (--jump)")
    if jumps.fires and len(jumps.fires) != plan.nprobes:
        raise UserError(f"the jump placement has {len(jumps.fires)} probes, the table {plan.nprobes}")
    ctx = target_context(vmlinux, plan, module_start, jumps)
    files = sources()
    parts = [repr(plan), repr(sorted(ctx.items())), command, str(assets.headers), tool_version(KERNEL_CC), breakage,
             target_ko.sha256(), repr(jumps.fires)]  # the heads: the table's kt_jump, not in ctx
    parts += kinst.core_key_parts(files, "kinst_linux")

    def make(out: Path) -> None:
        kinst.stage_core(plan, out, command, files, jumps.as_choice())
        inputs = [Input(plan.image, plan.build_id, plan.sha256),
                  Input(target_ko.path, target_ko.build_id or "", target_ko.sha256())]
        render_tree("kinst_linux", out, ctx, inputs, command)
        kbuild(assets, out, "the guest's kinst module", [f"KINST_LINUX_BREAK={breakage}"] if breakage else [])

    return compile_cached(BUILD_DIR, content_key(parts), make, marker=MODULE) / MODULE
