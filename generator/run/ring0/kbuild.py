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
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Dict, List

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
from .packages import GUEST_ISA
from .kernel import KernelAssets

BUILD_DIR = CACHE / "ring0" / "module"
MODULE = "kinst.ko"
CORE = SYS_MODULES / "kinst"
GLUE = CORE / "linux"
ANCHOR = "vmap"  # an exported function the glue links against: its live address gives the bias
KERNEL_CC = "gcc-12"  # what Debian's 6.1 headers build with (linux-compiler-gcc-12-x86)


def sources() -> List[Path]:
    """The hand-written files the module is built from: the guest ISA's portable core, as the harness
    and kinst.ko compile it, and the Linux glue."""
    return [*core_sources(GUEST_ISA), GLUE / "kinst_linux.c", GLUE / "Kbuild"]


def target_context(vmlinux: KernelImage, plan: ProbePlan) -> Dict[str, object]:
    """What ``kinst_linux_target.h`` says of the kernel, from its vmlinux, and the plugin's markers."""
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
    }


def command_line(names: List[str]) -> str:
    """The command the generated headers name (inputs only)."""
    words = ["python", "-m", "generator", "vm-test", "--guest", "linux"]
    return " ".join(shlex.quote(w) for w in words + [w for n in names for w in ("--function", n)][:40])


def build_module(assets: KernelAssets, vmlinux: KernelImage, plan: ProbePlan, command: str) -> Path:
    """Render, copy and kbuild the module for ``plan``; the built ``kinst.ko`` (cached by content)."""
    for tool in ("make", KERNEL_CC):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} not found: the guest's module is built with the kernel's kbuild "
                            f"(apt-get install make gcc-12)")
    ctx = target_context(vmlinux, plan)
    files = sources()
    parts = [repr(plan), repr(sorted(ctx.items())), command, str(assets.headers), tool_version(KERNEL_CC)]
    parts += kinst.core_key_parts(files, "kinst_linux")

    def make(out: Path) -> None:
        kinst.stage_core(plan, out, command, files)
        render_tree("kinst_linux", out, ctx, [Input(plan.image, plan.build_id, plan.sha256)], command)
        head = ["make", "-j2", "-C", str(assets.headers), "-f", str(assets.headers_common / "Makefile")]
        argv = head + [f"M={out}", "modules"]
        (out / "commands.sh").write_text(f'#!/bin/sh\nset -e\n{shlex.join(head)} M="$(cd "$(dirname "$0")" && pwd)" '
                                         'modules\n')
        env = dict(os.environ, LC_ALL="C")
        checked(run_tool, argv, "building the guest's kinst module with kbuild", out, env)

    return compile_cached(BUILD_DIR, content_key(parts), make, marker=MODULE) / MODULE
